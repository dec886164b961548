//! Flame graph SVG, drawn by inferno from the folded stacks, so it looks and
//! behaves like Brendan Gregg's flamegraph.pl (search, zoom, tooltips).

use std::io::Write;

use inferno::flamegraph::{self, Options};
use lapse_data::{DataFile, Method};
use lapse_report::Analysis;

use crate::collapsed;
use crate::{ExportError, Format};

/// Renders the flame graph of the folded `lines` into `out`.
pub fn svg(file: &DataFile, lines: &[String], out: &mut dyn Write) -> Result<(), ExportError> {
    if lines.is_empty() {
        return Err(ExportError::Unsupported {
            format: Format::Flamegraph.name(),
            what: "the recording holds no time in any function (nothing to draw)".into(),
        });
    }
    let mut opts = Options::default();
    let command = file.session.command.join(" ");
    opts.title = format!("lapse: {command}");
    opts.subtitle = Some(match file.session.method {
        Method::Instrumentation => {
            "instrumentation: a frame's width is its elapsed inclusive time".into()
        }
        Method::Sampling => format!(
            "sampling: a frame's width is its inclusive samples of {}",
            file.session.sample_event.as_deref().unwrap_or("?")
        ),
    });
    opts.count_name = match file.session.method {
        Method::Instrumentation => "ns".into(),
        Method::Sampling => "samples".into(),
    };
    flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), out)
        .map_err(ExportError::write(Format::Flamegraph))
}

pub fn write(file: &DataFile, analysis: &Analysis, out: &mut dyn Write) -> Result<(), ExportError> {
    let lines = collapsed::tree_lines(file, analysis, Format::Flamegraph)?;
    svg(file, &lines, out)
}
