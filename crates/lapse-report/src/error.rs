//! What can stop a report.

use lapse_data::DataError;

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Data(#[from] DataError),
    #[error("--{flag}: {what}")]
    Option { flag: &'static str, what: String },
    #[error("{0}")]
    Other(String),
    /// `lapse diff` was asked to compare what cannot be compared.
    #[error("{0}")]
    Diff(String),
}
