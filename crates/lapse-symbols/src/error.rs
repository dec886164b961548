//! What can go wrong while reading a module, always naming the module.

use std::path::PathBuf;

/// A module could not be read or parsed. Every variant carries the path (or
/// the name the caller gave for in-memory bytes).
#[derive(Debug, thiserror::Error)]
pub enum SymbolError {
    #[error("{path}: cannot read: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a readable ELF file: {source}")]
    Elf {
        path: PathBuf,
        #[source]
        source: object::Error,
    },
    #[error("{path}: unsupported object format (lapse reads ELF only)")]
    NotElf { path: PathBuf },
    #[error("{path}: debug file belongs to another build (build-id differs)")]
    BuildIdMismatch { path: PathBuf },
    #[error("{path}: has no DWARF debug info")]
    NoDebugInfo { path: PathBuf },
    #[error("{path}: bad DWARF debug info: {source}")]
    Dwarf {
        path: PathBuf,
        #[source]
        source: gimli::Error,
    },
}
