//! Exports: a recording and its analysis written in the formats other
//! profiling tools read (SPEC section 6).
//!
//! This crate owns the translation from lapse's model to each foreign format,
//! one module per format. It knows nothing of a command line or of file
//! names: every exporter takes the [`DataFile`], the [`Analysis`] made from it
//! (with its call tree, see [`needs`]) and a [`Write`].
//!
//! Two sources feed the exporters:
//! - the analysis' call tree (`lapse_analysis::tree`, one for both
//!   methods): folded stacks, flame graphs, pprof, callgrind and the HTML page;
//! - the time-ordered streams ([`timeline`]: instrumentation events, and
//!   sampling's samples one thread at a time): speedscope, Chrome traces,
//!   Perfetto traces and the Firefox Profiler, which show a timeline.
//!
//! Design constraints: an export covers what its [`Selection`] keeps (the
//! whole recording by default; `lapse export`'s filters, [`select`]); an
//! instrumentation stream is repaired the way the analysis repairs it
//! (unmatched exits ignored, skipped frames closed) so that every consumer
//! sees properly nested calls; nothing here panics on a damaged file.

pub mod callgrind;
pub mod chrome;
pub mod collapsed;
pub mod firefox;
pub mod flamegraph;
pub mod html;
pub mod perfetto;
pub mod pprof;
pub mod pprof_proto;
pub mod select;
pub mod speedscope;
pub mod timeline;

use std::borrow::Cow;
use std::io::{self, Write};

use lapse_analysis::sample::{frame_keys, Counts};
use lapse_analysis::tree::{CallTree, FrameKey};
use lapse_analysis::values::FunctionStats;
use lapse_analysis::{Analysis, Query};
use lapse_data::{DataError, DataFile, StackId};

pub use select::Selection;

/// The export formats of SPEC section 6.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Collapsed,
    Flamegraph,
    Speedscope,
    Chrome,
    Pprof,
    Callgrind,
    Firefox,
    Html,
    Perfetto,
}

impl Format {
    pub const ALL: [(&'static str, Format); 9] = [
        ("collapsed", Format::Collapsed),
        ("flamegraph", Format::Flamegraph),
        ("speedscope", Format::Speedscope),
        ("chrome", Format::Chrome),
        ("pprof", Format::Pprof),
        ("callgrind", Format::Callgrind),
        ("firefox", Format::Firefox),
        ("html", Format::Html),
        ("perfetto", Format::Perfetto),
    ];

    pub fn name(self) -> &'static str {
        Format::ALL
            .iter()
            .find(|(_, f)| *f == self)
            .map_or("?", |(n, _)| n)
    }
}

/// What a sampling export weighs its call paths by (`lapse export
/// --weight`): CPU samples, off-CPU time (`record --off-cpu`), or both as
/// wall-clock nanoseconds, the off-CPU part under an `[off-cpu]` frame at
/// the end of its path. Collapsed stacks, flame graphs and speedscope
/// follow it; pprof and callgrind always carry every value (sample types,
/// events) and let their viewer choose.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SampleWeight {
    #[default]
    Cpu,
    OffCpu,
    Both,
}

impl SampleWeight {
    pub const ALL: [(&'static str, SampleWeight); 3] = [
        ("cpu", SampleWeight::Cpu),
        ("off-cpu", SampleWeight::OffCpu),
        ("both", SampleWeight::Both),
    ];

    pub fn name(self) -> &'static str {
        SampleWeight::ALL
            .iter()
            .find(|(_, w)| *w == self)
            .map_or("?", |(n, _)| n)
    }
}

/// The frame that ends the path of off-CPU time when on- and off-CPU time
/// are shown together ([`SampleWeight::Both`]).
pub const OFF_CPU_FRAME: &str = "[off-cpu]";

/// How an export is made, beyond its format.
#[derive(Clone, Debug, Default)]
pub struct ExportOptions {
    pub weight: SampleWeight,
    /// What of the recording is written (everything by default). The
    /// analysis must have been made with the same threads and window.
    pub selection: Selection,
}

/// Everything that can stop an export.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Data(#[from] DataError),
    #[error("{format} export: cannot write: {source}")]
    Write {
        format: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("{format} export: {what}")]
    Unsupported { format: &'static str, what: String },
}

impl ExportError {
    pub(crate) fn write(format: Format) -> impl Fn(io::Error) -> ExportError + Copy {
        move |source| ExportError::Write {
            format: format.name(),
            source,
        }
    }
}

/// The frames of a sampled stack, outermost first, expanded through inline
/// chains as SPEC 2.2 counts them; `[unknown]` alone when nothing unwound.
pub fn sample_keys(file: &DataFile, stack: Option<StackId>) -> Vec<FrameKey> {
    let mut keys = stack
        .map(|s| frame_keys(&file.stacks, &file.frames, s))
        .unwrap_or_default();
    if keys.is_empty() {
        keys.push(FrameKey::Unknown);
    }
    keys
}

/// The call tree of an analysis made as [`needs`] says, with its weights
/// typed by method.
/// With `--function`, the subtrees of the functions it names.
pub enum Tree<'a> {
    Time(Cow<'a, CallTree<FunctionStats>>),
    Samples(Cow<'a, CallTree<Counts>>),
}

impl<'a> Tree<'a> {
    pub fn of(
        file: &DataFile,
        analysis: &'a Analysis,
        sel: &Selection,
        format: Format,
    ) -> Result<Tree<'a>, ExportError> {
        let tree = match analysis {
            Analysis::Instr(r) => r.tree().map(|t| Tree::Time(sel.tree(file, t))),
            Analysis::Sample(r) => r.tree.as_ref().map(|t| Tree::Samples(sel.tree(file, t))),
        };
        tree.ok_or_else(|| ExportError::Unsupported {
            format: format.name(),
            what: "the analysis was made without a call tree".into(),
        })
    }
}

/// The analysis an export needs: the whole recording, with call trees.
pub fn needs() -> Query {
    Query {
        call_tree: true,
        ..Query::default()
    }
}

/// Writes `file` (analysed as [`needs`] says into `analysis`) to `out` in `format`.
pub fn export(
    file: &DataFile,
    analysis: &Analysis,
    format: Format,
    out: &mut dyn Write,
) -> Result<(), ExportError> {
    export_with(file, analysis, format, ExportOptions::default(), out)
}

/// [`export`], made as `opts` says. A weight other than CPU samples needs
/// a sampling recording with off-CPU time.
pub fn export_with(
    file: &DataFile,
    analysis: &Analysis,
    format: Format,
    opts: ExportOptions,
    out: &mut dyn Write,
) -> Result<(), ExportError> {
    check_weight(file, format, opts.weight)?;
    let weight = opts.weight;
    let sel = &opts.selection;
    match format {
        Format::Collapsed => collapsed::write(file, analysis, weight, sel, out),
        Format::Flamegraph => flamegraph::write(file, analysis, weight, sel, out),
        Format::Speedscope => speedscope::write(file, analysis, weight, sel, out),
        Format::Chrome => chrome::write(file, analysis, sel, out),
        Format::Pprof => pprof::write(file, analysis, sel, out),
        Format::Callgrind => callgrind::write(file, analysis, sel, out),
        Format::Firefox => firefox::write(file, analysis, sel, out),
        Format::Html => html::write(file, analysis, sel, out),
        Format::Perfetto => perfetto::write(file, analysis, sel, out),
    }?;
    out.flush().map_err(ExportError::write(format))
}

/// `--weight off-cpu|both` only means something for a sampling recording
/// with off-CPU periods.
fn check_weight(file: &DataFile, format: Format, weight: SampleWeight) -> Result<(), ExportError> {
    if weight == SampleWeight::Cpu {
        return Ok(());
    }
    let what = if file.session.method != lapse_data::Method::Sampling {
        "is for sampling recordings (instrumentation weighs by time already)"
    } else if file.off_cpu.is_empty() {
        "needs off-CPU time, and this recording has none (record with --off-cpu)"
    } else {
        return Ok(());
    };
    Err(ExportError::Unsupported {
        format: format.name(),
        what: format!("--weight {} {what}", weight.name()),
    })
}

/// Nanoseconds one sample stands for: the period of a time-based event.
pub(crate) fn period_ns(file: &DataFile) -> Option<u64> {
    file.session
        .sample_period
        .filter(|&p| file.session.sample_period_is_time && p > 0)
}
