//! Naming the session's functions at the end of recording, from each
//! module's symbol table and line table, or from the `lapse` crate's site
//! records (via `lapse-symbols`).

use lapse_data::{FunctionId, FunctionInfo};

use super::address::AddressBook;
use crate::SymbolProgress;

/// One [`FunctionInfo`] per function id from `from` on, named `0x<addr>`
/// when no symbol holds it. Symbols are read while the modules are still
/// there, so names survive a rebuild or a recorder that is killed later.
/// `progress` counts the functions named. With `lines`, each gets its
/// source position from the module's line table; without, only names from
/// the symbol table: reading a large library's debug information (the C
/// library's, for its library calls) takes a debug build a quarter of a
/// second, during which a running recording would let the kernel's
/// context-switch records overflow.
pub fn function_table(
    book: &AddressBook,
    from: usize,
    progress: Option<&SymbolProgress>,
    lines: bool,
) -> Vec<FunctionInfo> {
    let functions = book.functions();
    let imported = book.imported_names();
    if let Some(p) = progress {
        p.add_work(functions.len().saturating_sub(from) as u64);
    }
    functions
        .iter()
        .enumerate()
        .skip(from)
        .map(|(i, &(module, address))| {
            let elf = book.elf(module);
            if let Some(p) = progress {
                p.advance();
            }
            // The lapse crate's probes name their site record: it holds
            // the name, file and line.
            if let Some(site) = elf.and_then(|e| e.site_at(address)) {
                return FunctionInfo {
                    id: FunctionId(i as u32),
                    module,
                    address,
                    name: site.name,
                    source_file: site.file,
                    line: site.line,
                };
            }
            // (stripped code: its unwind-table range, `module+0xSTART`)
            let symbol = elf.and_then(|e| e.function_or_range_at(address));
            let symbol = symbol.as_ref();
            let (source_file, line) = match (elf, symbol) {
                (Some(e), Some(s)) if lines => e.location(s.start),
                _ => (None, None),
            };
            FunctionInfo {
                id: FunctionId(i as u32),
                module,
                // (-pg's mcount knows an address inside its function, not
                // its start: the symbol says where it starts)
                address: symbol.map_or(address, |s| s.start),
                name: symbol.map_or_else(
                    || format!("{address:#x}"),
                    |s| called_name(elf, s, &imported),
                ),
                source_file,
                line,
            }
        })
        .collect()
}

/// The name of symbol `s` as the recorded modules call it: a library
/// function with aliases at its address (glibc's `fopen` and `fopen64`,
/// `signal` and `ssignal`) is named by the alias that a module imports,
/// when the name the symbol table prefers is not imported itself.
fn called_name(
    elf: Option<&lapse_symbols::ElfModule>,
    s: &lapse_symbols::FunctionSymbol,
    imported: &std::collections::HashSet<&str>,
) -> String {
    if imported.is_empty() || imported.contains(s.name.as_str()) {
        return s.name.clone();
    }
    elf.map(|e| e.aliases(s.start))
        .unwrap_or_default()
        .into_iter()
        .find(|alias| imported.contains(alias.as_str()))
        .unwrap_or_else(|| s.name.clone())
}

#[cfg(test)]
mod tests {
    use lapse_data::Timestamp;
    use lapse_symbols::ElfModule;

    use super::*;
    use crate::instrument::address::NewMapping;

    /// A site of the `lapse` crate in this test's executable.
    #[lapse::profile]
    fn profiled() -> u32 {
        7
    }

    #[test]
    fn the_lapse_crates_sites_are_named_from_their_records() {
        assert_eq!(profiled(), 7);
        let exe = std::fs::canonicalize(std::env::current_exe().unwrap()).unwrap();
        let elf = ElfModule::open(&exe).expect("this executable");
        let sites = elf.sites_range().expect("a lapse_sites section");
        let record = elf
            .site_at(sites.start)
            .expect("a record starts the section");
        let code = *elf.segments().iter().find(|s| s.executable).unwrap();
        // This executable's code, mapped at `base` in a process of an
        // offline book (so nothing is read from /proc).
        let base = 0x5555_0000_0000u64;
        let mut book = AddressBook::resume(&[], &[], &[]);
        let t = Timestamp::from_nanos(10);
        book.add_mapping(NewMapping {
            pid: 1,
            start: base + (code.vaddr & !0xfff),
            len: code.memsz + (code.vaddr & 0xfff),
            pgoff: code.offset & !0xfff,
            path: exe.to_str().unwrap(),
            build_id: None,
            time: Timestamp::from_nanos(0),
        });
        let (site, always) = book.resolve(1, 0, base + sites.start, t);
        assert!(always);
        let (inside, _) = book.resolve(1, 0, base + sites.start + 4, t);
        let (beyond, _) = book.resolve(1, 0, 0x1000, t);
        let table = function_table(&book, 0, None, false);
        let row = |f: FunctionId| &table[f.0 as usize];
        let module = row(site).module;
        assert_eq!(row(site).name, record.name);
        assert_eq!(row(site).address, sites.start);
        assert_eq!(
            (&row(site).source_file, row(site).line),
            (&record.file, record.line)
        );
        // inside the section but not at a record: an address, of the module
        let inside_name = format!("{:#x}", sites.start + 4);
        assert_eq!(
            (row(inside).module, &row(inside).name),
            (module, &inside_name)
        );
        // neither code nor sites: no module of this process
        assert_ne!(row(beyond).module, module);
    }
}
