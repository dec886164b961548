use std::path::PathBuf;

/// Everything that can go wrong reading or writing a data file.
/// Each variant names the file so the binary can print one line.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: is {what}, not a regular file")]
    NotRegular { path: PathBuf, what: &'static str },
    #[error("{path}: file is empty (no lapse data was written)")]
    Empty { path: PathBuf },
    #[error("{path}: not a lapse data file (bad magic bytes)")]
    Foreign { path: PathBuf },
    #[error("{path}: lapse data format version {found} is not supported (this lapse reads versions {oldest} to {newest})")]
    Version {
        path: PathBuf,
        found: u16,
        oldest: u16,
        newest: u16,
    },
    #[error("{path}: no intact data after the file header (damaged at byte {offset}: {what})")]
    NothingIntact {
        path: PathBuf,
        offset: u64,
        what: String,
    },
    #[error("{path}: corrupted chunk at byte {offset}: {what}")]
    Corrupt {
        path: PathBuf,
        offset: u64,
        what: String,
    },
    #[error("{path}: the file holds no session header")]
    NoSession { path: PathBuf },
}
