//! `lapse export` and `lapse diff`: flags mapped onto `lapse-export`.

use std::io::{self, BufWriter, Write};

use anyhow::{bail, Context, Result};
use lapse_analysis::Query;
use lapse_data::OutputFile;
use lapse_report::diff::{self, DiffOptions};
use lapse_report::{Format, View};

use crate::progress::analyze_with_progress;

use crate::cli::{DiffArgs, ExportArgs};
use crate::commands::open;

pub fn export(a: ExportArgs) -> Result<u8> {
    let path = a.file;
    let file = open(&path)?;
    let query = Query {
        compensate: a.compensate,
        application: a.application,
        ..lapse_export::needs()
    };
    let (analysis, _) = analyze_with_progress(&file, query)?;
    let format = a.format;
    let opts = lapse_export::ExportOptions { weight: a.weight };
    // A regular file is written beside its name and put in place when
    // complete (a failure keeps the previous one); `-`, a device or a pipe
    // is written where it is.
    let (mut output, out) = OutputFile::create(&a.output, "export")
        .with_context(|| format!("{}: cannot create", a.output.display()))?;
    let in_place = output.is_in_place();
    let mut w = BufWriter::new(out);
    let written =
        lapse_export::export_with(&file, &analysis, format, opts, &mut w).and_then(|()| {
            w.into_inner()
                .map_err(|e| e.into_error())
                .and_then(|f| if in_place { Ok(()) } else { f.sync_all() })
                .and_then(|()| output.commit())
                .map_err(|source| lapse_export::ExportError::Write {
                    format: format.name(),
                    source,
                })
        });
    written.with_context(|| a.output.display().to_string())?;
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
    let (base_analysis, _) = analyze_with_progress(&base, query.clone())?;
    let (new_analysis, _) = analyze_with_progress(&new, query)?;
    let format = a.format;
    let opts = DiffOptions {
        view,
        threshold_pct: a.threshold,
        normalize: a.normalized(),
        metric: a.metric,
    };
    let d = diff::diff((&base, &base_analysis), (&new, &new_analysis), &opts)?;
    // The table shows it above the rows; JSON carries it, but programs read JSON.
    if format != Format::Table {
        if let Some(w) = d.warning() {
            eprintln!("lapse: {w}");
        }
    }
    let mut w = BufWriter::new(io::stdout().lock());
    diff::render(&mut w, &d, format)?;
    w.flush()?;
    Ok(0)
}
