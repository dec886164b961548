//! One parsed [`ElfModule`] per path, opened on first use and kept.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::{ElfModule, SymbolError, Symbolized};

/// Opens each module once; a module that failed to open is remembered as
/// failed, so a missing file costs one `open` however many lookups hit it.
#[derive(Default)]
pub struct SymbolCache {
    modules: HashMap<PathBuf, Result<ElfModule, SymbolError>>,
}

impl SymbolCache {
    pub fn new() -> SymbolCache {
        SymbolCache::default()
    }

    /// The module at `path`, opened now if it was not yet.
    pub fn module(&mut self, path: &Path) -> Result<&ElfModule, &SymbolError> {
        self.modules
            .entry(path.to_owned())
            .or_insert_with(|| ElfModule::open(path))
            .as_ref()
    }

    /// Adds a module parsed elsewhere (e.g. from bytes), replacing any entry.
    pub fn insert(&mut self, path: &Path, module: ElfModule) {
        self.modules.insert(path.to_owned(), Ok(module));
    }

    /// Symbolizes a module-relative address; empty when the module cannot be read.
    pub fn symbolize(&mut self, path: &Path, addr: u64) -> Symbolized {
        match self.module(path) {
            Ok(m) => m.symbolize(addr),
            Err(_) => Symbolized::default(),
        }
    }
}
