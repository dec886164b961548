//! `lapse export` and `lapse diff`: flags mapped onto `lapse-export`.

use std::io::{self, BufWriter, Write};

use anyhow::{bail, Context, Result};
use lapse_analysis::Query;
use lapse_data::{DataFile, OutputFile};
use lapse_export::{Format, Selection};
use lapse_report::diff::{self, DiffOptions};
use lapse_report::View;

use crate::progress::analyze_with_progress;

use crate::cli::{DiffArgs, ExportArgs, FilterArgs};
use crate::commands::{check_selected_exist, open, regex};

/// Bytes an export writes before it needs `--force`: 1 GB, more than
/// the viewers open comfortably (#34).
const SIZE_LIMIT: u64 = 1_000_000_000;

/// Tests set a smaller limit (in bytes) with this variable, so that they
/// check the guard without writing a gigabyte; it is not a user setting.
const SIZE_LIMIT_VAR: &str = "LAPSE_EXPORT_SIZE_LIMIT";

/// The formats with a timeline, which `--min-duration` thins.
const TIMELINES: [Format; 5] = [
    Format::Chrome,
    Format::Perfetto,
    Format::Firefox,
    Format::Speedscope,
    Format::Html,
];

/// `report`'s and `export`'s filters as the analysis' [`Query`], with
/// report's one-line errors (`--from` after `--to`, a `--pid`/`--tid` the
/// file does not hold, a bad regex).
pub fn query(filter: &FilterArgs, file: &DataFile) -> Result<Query> {
    let mut filter = filter.clone();
    if filter.from_mark.is_some() || filter.to_mark.is_some() {
        let (from, to) = lapse_analysis::run::mark_window(
            file,
            filter.from_mark.as_deref(),
            filter.to_mark.as_deref(),
        )?;
        filter.from = from.or(filter.from);
        filter.to = to.or(filter.to);
    }
    if let (Some(from), Some(to)) = (filter.from, filter.to) {
        if from > to {
            bail!("--from {from} is after --to {to}: nothing lies between them");
        }
    }
    check_selected_exist(file, &filter.pid, &filter.tid)?;
    Ok(Query {
        pids: filter.pid.clone(),
        tids: filter.tid.clone(),
        function: regex("function", &filter.function)?,
        from_s: filter.from,
        to_s: filter.to,
        ..Query::default()
    })
}

pub fn export(a: ExportArgs) -> Result<u8> {
    let path = a.file;
    let format = a.format;
    if a.min_duration.is_some() && !TIMELINES.contains(&format) {
        bail!(
            "--min-duration: the {} export has no timeline (it is for chrome, perfetto, firefox, speedscope and html)",
            format.name()
        );
    }
    let file = open(&path)?;
    if a.min_duration.is_some() && file.session.method != lapse_data::Method::Instrumentation {
        bail!("--min-duration: {} is a sampling recording, whose timelines have samples, not calls with durations", path.display());
    }
    // (the analysis as exports need it, of what the filters select)
    let query = Query {
        compensate: a.compensate,
        application: a.application,
        call_tree: lapse_export::needs().call_tree,
        ..query(&a.filter, &file)?
    };
    let (analysis, query) = analyze_with_progress(&file, query)?;
    let opts = lapse_export::ExportOptions {
        weight: a.weight,
        selection: Selection::new(&file, &query, a.min_duration),
    };
    let limit = if a.force { None } else { Some(size_limit()) };
    // A regular file is written beside its name and put in place when
    // complete (a failure keeps the previous one); `-`, a device or a pipe
    // is written where it is.
    let (mut output, out) = OutputFile::create(&a.output, "export")
        .with_context(|| format!("{}: cannot create", a.output.display()))?;
    let in_place = output.is_in_place();
    let mut w = BufWriter::new(Capped::new(out, limit));
    let mut over = None;
    let written =
        lapse_export::export_with(&file, &analysis, format, opts, &mut w).and_then(|()| {
            w.into_inner()
                .map_err(|e| e.into_error())
                .and_then(|capped| match capped.over() {
                    Some(bytes) => {
                        over = Some(bytes);
                        Ok(())
                    }
                    None => {
                        let f = capped.into_inner();
                        if in_place { Ok(()) } else { f.sync_all() }.and_then(|()| output.commit())
                    }
                })
                .map_err(|source| lapse_export::ExportError::Write {
                    format: format.name(),
                    source,
                })
        });
    written.with_context(|| a.output.display().to_string())?;
    if let (Some(bytes), Some(limit)) = (over, limit) {
        // (dropping `output` removes what was written beside the file)
        drop(output);
        bail!("{}", too_large(&file, format, bytes, limit));
    }
    if in_place {
        return Ok(0);
    }
    eprintln!(
        "lapse: wrote the {} export of {} to {}",
        format.name(),
        path.display(),
        a.output.display()
    );
    Ok(0)
}

/// [`SIZE_LIMIT`], or the tests' own ([`SIZE_LIMIT_VAR`]).
fn size_limit() -> u64 {
    std::env::var(SIZE_LIMIT_VAR)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(SIZE_LIMIT)
}

/// Why an export of `bytes` was not written, and what would shrink it.
fn too_large(file: &DataFile, format: Format, bytes: u64, limit: u64) -> String {
    let mut shrink = Vec::new();
    if TIMELINES.contains(&format) && file.session.method == lapse_data::Method::Instrumentation {
        shrink.push("--min-duration 10us");
    }
    shrink.push("--from/--to");
    if file.all_threads().len() > 1 {
        shrink.push("--tid");
    }
    shrink.push("--function");
    format!(
        "the {} export would be {} (more than {}): not written; {} would shrink it, --force writes it anyway",
        format.name(),
        human_bytes(bytes),
        human_bytes(limit),
        shrink.join(", ")
    )
}

/// `4.2 GB`, `821 MB`, `12 kB`, `512 bytes` (decimal units).
fn human_bytes(n: u64) -> String {
    let units = [(1e9, "GB"), (1e6, "MB"), (1e3, "kB")];
    for (scale, unit) in units {
        if n as f64 >= scale {
            let v = n as f64 / scale;
            return if v < 10.0 {
                format!("{v:.1} {unit}")
            } else {
                format!("{v:.0} {unit}")
            };
        }
    }
    format!("{n} bytes")
}

/// A writer that stops writing at a limit and only counts from there,
/// so that a refused export still says how large it would have been.
struct Capped<W> {
    inner: W,
    bytes: u64,
    limit: Option<u64>,
}

impl<W: Write> Capped<W> {
    fn new(inner: W, limit: Option<u64>) -> Capped<W> {
        Capped {
            inner,
            bytes: 0,
            limit,
        }
    }

    /// The whole size, when it went past the limit.
    fn over(&self) -> Option<u64> {
        self.limit.filter(|&l| self.bytes > l).map(|_| self.bytes)
    }

    fn into_inner(self) -> W {
        self.inner
    }
}

impl<W: Write> Write for Capped<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.bytes += buf.len() as u64;
        if self.over().is_some() {
            return Ok(buf.len());
        }
        self.inner.write_all(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.over().is_some() {
            return Ok(());
        }
        self.inner.flush()
    }
}

pub fn diff(a: DiffArgs) -> Result<u8> {
    let view = match a.view {
        v @ (View::Functions
        | View::Modules
        | View::Threads
        | View::Processes
        | View::Lines
        | View::Instructions) => v,
        other => bail!(
            "--view: lapse diff compares functions, modules, threads, processes, lines or instructions, not {}",
            other.name()
        ),
    };
    if !(a.threshold.is_finite() && a.threshold >= 0.0) {
        bail!(
            "--threshold: expected a percentage >= 0, got {}",
            a.threshold
        );
    }
    let base = open(&a.base)?;
    let new = open(&a.new)?;
    diff::check_methods(&base, &new)?;
    let query = Query {
        compensate: a.compensate,
        application: a.application,
        ..Query::default()
    };
    // (each recording's own marks bound its window)
    let marked = |file: &DataFile| -> Result<Query> {
        let (from_s, to_s) =
            lapse_analysis::run::mark_window(file, a.from_mark.as_deref(), a.to_mark.as_deref())?;
        Ok(Query {
            from_s,
            to_s,
            ..query.clone()
        })
    };
    let (base_analysis, _) = analyze_with_progress(&base, marked(&base)?)?;
    let (new_analysis, _) = analyze_with_progress(&new, marked(&new)?)?;
    let format = a.format;
    let opts = DiffOptions {
        view,
        threshold_pct: a.threshold,
        normalize: a.normalized(),
        metric: a.metric,
    };
    let d = diff::diff((&base, &base_analysis), (&new, &new_analysis), &opts)?;
    // The table shows it above the rows; JSON carries it, but programs read JSON.
    if format != lapse_report::Format::Table {
        if let Some(w) = d.warning() {
            eprintln!("lapse: {w}");
        }
    }
    let mut w = BufWriter::new(io::stdout().lock());
    lapse_report::diff_render::render(&mut w, &d, format)?;
    w.flush()?;
    Ok(0)
}
