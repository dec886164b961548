//! stub
use crate::ExportError;
use lapse_data::DataFile;
use lapse_report::Analysis;
use std::io::Write;
pub fn write(
    _file: &DataFile,
    _analysis: &Analysis,
    _out: &mut dyn Write,
) -> Result<(), ExportError> {
    Err(ExportError::Unsupported {
        format: "x",
        what: "not yet".into(),
    })
}
