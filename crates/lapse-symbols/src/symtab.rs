//! The ELF symbol table as a sorted list of sized function symbols.
//!
//! `.symtab` and `.dynsym` are merged (stripped libraries only have the
//! latter); when both name the same address the `.symtab` entry wins. PLT
//! stubs, which no table names, are added as `foo@plt` (see [`crate::plt`]).
//! A name is demangled the first time a lookup lands on it and kept: a
//! module with 100k C++ symbols opens in milliseconds, and only the handful
//! of functions a profile hits pay for demangling.

use std::cell::OnceCell;
use std::collections::HashMap;

use object::{Object, ObjectSymbol, SymbolKind};

/// A function symbol: module-relative start (ELF virtual address), size, name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionSymbol {
    pub start: u64,
    pub size: u64,
    /// Demangled name.
    pub name: String,
}

impl FunctionSymbol {
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.start && addr - self.start < self.size
    }
}

#[derive(Debug)]
struct Entry {
    start: u64,
    size: u64,
    raw: Box<str>,
    /// Appended after demangling (`@plt` for PLT stubs).
    suffix: &'static str,
    resolved: OnceCell<FunctionSymbol>,
}

impl Entry {
    fn contains(&self, addr: u64) -> bool {
        addr >= self.start && addr - self.start < self.size
    }

    fn symbol(&self) -> &FunctionSymbol {
        self.resolved.get_or_init(|| FunctionSymbol {
            start: self.start,
            size: self.size,
            name: crate::demangle(&self.raw) + self.suffix,
        })
    }
}

#[derive(Debug, Default)]
pub(crate) struct SymbolTable {
    /// Sorted by start; at most one entry per start address.
    symbols: Vec<Entry>,
    /// Other global names by start address (only addresses that have some).
    aliases: HashMap<u64, Vec<Box<str>>>,
}

impl SymbolTable {
    pub(crate) fn from_object(file: &object::File<'_>) -> SymbolTable {
        let mut raw: Vec<(u64, u64, bool, bool, &str)> = Vec::new();
        let tables = [(file.symbols(), true), (file.dynamic_symbols(), false)];
        for (symbols, from_symtab) in tables {
            for sym in symbols {
                if sym.kind() != SymbolKind::Text || sym.is_undefined() || sym.size() == 0 {
                    continue;
                }
                if let Ok(name) = sym.name() {
                    // `.dynsym` names may carry a symbol version
                    // (`__libc_start_main@@GLIBC_2.34`): users know the bare name.
                    let name = name.split('@').next().unwrap_or(name);
                    if !name.is_empty() {
                        raw.push((
                            sym.address(),
                            sym.size(),
                            from_symtab,
                            sym.is_global(),
                            name,
                        ));
                    }
                }
            }
        }
        // Per address the .symtab entry sorts first and is the one kept;
        // among aliases a global name beats a local one (gcc's
        // `foo.localalias` shares `foo`'s address), then the name a program
        // calls (`malloc`, not glibc's `__libc_malloc`: fewer leading
        // underscores), then the first in table order.
        let underscores = |n: &str| n.len() - n.trim_start_matches('_').len();
        raw.sort_by(|a, b| {
            a.0.cmp(&b.0)
                .then(b.2.cmp(&a.2))
                .then(b.3.cmp(&a.3))
                .then(underscores(a.4).cmp(&underscores(b.4)))
        });
        // The other global names of an address (glibc's `fopen` beside the
        // `fopen64` kept, `signal` beside `ssignal`): a caller may know
        // which one a program called.
        let mut aliases: HashMap<u64, Vec<Box<str>>> = HashMap::new();
        for group in raw.chunk_by(|a, b| a.0 == b.0) {
            let kept = group[0].4;
            for other in &group[1..] {
                if other.3 && other.4 != kept {
                    let names = aliases.entry(other.0).or_default();
                    if !names.iter().any(|n| &**n == other.4) {
                        names.push(other.4.into());
                    }
                }
            }
        }
        raw.dedup_by_key(|s| s.0);
        let mut symbols: Vec<Entry> = raw
            .into_iter()
            .map(|(start, size, _, _, name)| Entry {
                start,
                size,
                raw: name.into(),
                suffix: "",
                resolved: OnceCell::new(),
            })
            .collect();
        // PLT stubs where no symbol starts (a symbol of the table wins).
        let named: std::collections::HashSet<u64> = symbols.iter().map(|e| e.start).collect();
        for stub in crate::plt::stubs(file) {
            if named.contains(&stub.start) {
                continue;
            }
            let (raw, suffix) = match stub.target {
                Some(name) => (name.into_boxed_str(), "@plt"),
                None => (format!("[{}]", stub.section).into_boxed_str(), ""),
            };
            symbols.push(Entry {
                start: stub.start,
                size: stub.size,
                raw,
                suffix,
                resolved: OnceCell::new(),
            });
        }
        symbols.sort_by_key(|e| e.start);
        SymbolTable { symbols, aliases }
    }

    /// Other global names of the symbol starting at `start` (raw, as the
    /// table has them), besides the one lookups give.
    pub(crate) fn aliases(&self, start: u64) -> &[Box<str>] {
        self.aliases.get(&start).map_or(&[], Vec::as_slice)
    }

    /// The start of the first symbol after `addr`, if any.
    pub(crate) fn next_start_after(&self, addr: u64) -> Option<u64> {
        let i = self.symbols.partition_point(|s| s.start <= addr);
        self.symbols.get(i).map(|s| s.start)
    }

    pub(crate) fn len(&self) -> usize {
        self.symbols.len()
    }

    /// The sized symbol whose range holds `addr`. Symbols may nest (a local
    /// label inside a function), so a few earlier ones are tried too.
    pub(crate) fn lookup(&self, addr: u64) -> Option<&FunctionSymbol> {
        let after = self.symbols.partition_point(|s| s.start <= addr);
        self.symbols[..after]
            .iter()
            .rev()
            .take(4)
            .find(|s| s.contains(addr))
            .map(Entry::symbol)
    }
}
