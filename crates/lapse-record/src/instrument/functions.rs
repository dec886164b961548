//! Naming the session's functions at the end of recording, from each
//! module's symbol table and line table (via `lapse-symbols`).

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
    if let Some(p) = progress {
        p.add_work(functions.len().saturating_sub(from) as u64);
    }
    functions
        .iter()
        .enumerate()
        .skip(from)
        .map(|(i, &(module, address))| {
            let elf = book.elf(module);
            let symbol = elf.and_then(|e| e.function_at(address));
            let (source_file, line) = match (elf, symbol) {
                (Some(e), Some(s)) if lines => e.location(s.start),
                _ => (None, None),
            };
            if let Some(p) = progress {
                p.advance();
            }
            FunctionInfo {
                id: FunctionId(i as u32),
                module,
                // (-pg's mcount knows an address inside its function, not
                // its start: the symbol says where it starts)
                address: symbol.map_or(address, |s| s.start),
                name: symbol.map_or_else(|| format!("{address:#x}"), |s| s.name.clone()),
                source_file,
                line,
            }
        })
        .collect()
}
