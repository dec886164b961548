//! Flame graph SVG, drawn by inferno from the folded stacks, so it looks and
//! behaves like Brendan Gregg's flamegraph.pl (search, zoom, tooltips).

use std::io::Write;

use inferno::flamegraph::{self, Options};
use lapse_analysis::Analysis;
use lapse_data::{DataFile, Method};

use crate::collapsed;
use crate::select::Selection;
use crate::{ExportError, Format, SampleWeight};

/// The `[off-cpu]` frames' colour in a graph of both kinds of time.
pub const OFF_CPU_COLOR: inferno::flamegraph::color::Color = inferno::flamegraph::color::Color {
    r: 80,
    g: 130,
    b: 220,
};

/// Renders the flame graph of the folded `lines` (of a sampling recording,
/// weighed as `weight` says) into `out`.
pub fn svg(
    file: &DataFile,
    lines: &[String],
    weight: SampleWeight,
    out: &mut dyn Write,
) -> Result<(), ExportError> {
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
        Method::Sampling => match weight {
            SampleWeight::Cpu => format!(
                "sampling: a frame's width is its inclusive samples of {}",
                file.session.sample_event.as_deref().unwrap_or("?")
            ),
            SampleWeight::OffCpu => {
                "off-CPU: a frame's width is the time its stacks were switched out".into()
            }
            SampleWeight::Both => format!(
                "on and off the CPU: a frame's width is its time, estimated from {} samples, plus its time switched out ({})",
                file.session.sample_event.as_deref().unwrap_or("?"),
                crate::OFF_CPU_FRAME
            ),
        },
    });
    if weight == SampleWeight::OffCpu {
        // Blue, as off-CPU flame graphs usually are.
        opts.colors = inferno::flamegraph::color::Palette::Basic(
            inferno::flamegraph::color::BasicPalette::Io,
        );
    }
    // On and off the CPU in one graph: the waiting is the `[off-cpu]`
    // frames, drawn in a cold blue apart from the warm CPU palette.
    let mut cold = inferno::flamegraph::color::PaletteMap::default();
    if weight == SampleWeight::Both {
        cold.insert(crate::OFF_CPU_FRAME, OFF_CPU_COLOR);
        opts.palette_map = Some(&mut cold);
    }
    opts.count_name = match (file.session.method, weight) {
        (Method::Sampling, SampleWeight::Cpu) => "samples".into(),
        _ => "ns".into(),
    };
    flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), out)
        .map_err(ExportError::write(Format::Flamegraph))
}

pub fn write(
    file: &DataFile,
    analysis: &Analysis,
    weight: SampleWeight,
    sel: &Selection,
    out: &mut dyn Write,
) -> Result<(), ExportError> {
    let lines = collapsed::tree_lines(file, analysis, Format::Flamegraph, weight, sel)?;
    svg(file, &lines, weight, out)
}
