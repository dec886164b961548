//! `lapse export` and `lapse diff`: flags mapped onto `lapse-export`.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use anyhow::{bail, Context, Result};
use lapse_export::diff::{self, DiffOptions};
use lapse_export::Format as ExportFormat;
use lapse_report::{Format, Query, View};

use crate::progress::analyze_with_progress;

use crate::cli::{DiffArgs, ExportArgs, ExportFormatArg, FormatArg, ViewArg};
use crate::commands::open;

fn format_of(f: ExportFormatArg) -> ExportFormat {
    match f {
        ExportFormatArg::Collapsed => ExportFormat::Collapsed,
        ExportFormatArg::Flamegraph => ExportFormat::Flamegraph,
        ExportFormatArg::Speedscope => ExportFormat::Speedscope,
        ExportFormatArg::Chrome => ExportFormat::Chrome,
        ExportFormatArg::Pprof => ExportFormat::Pprof,
        ExportFormatArg::Callgrind => ExportFormat::Callgrind,
        ExportFormatArg::Firefox => ExportFormat::Firefox,
        ExportFormatArg::Html => ExportFormat::Html,
    }
}

pub fn export(a: ExportArgs) -> Result<u8> {
    let path = a.file.unwrap_or_else(|| "lapse.data".into());
    let file = open(&path)?;
    let (analysis, _) = analyze_with_progress(&file, lapse_export::needs())?;
    let format = format_of(a.format);
    if a.output == Path::new("-") {
        let mut w = BufWriter::new(io::stdout().lock());
        lapse_export::export(&file, &analysis, format, &mut w)?;
        return Ok(0);
    }
    let out = File::create(&a.output)
        .with_context(|| format!("{}: cannot create", a.output.display()))?;
    let mut w = BufWriter::new(out);
    let written = lapse_export::export(&file, &analysis, format, &mut w).and_then(|()| {
        w.into_inner()
            .map_err(|e| e.into_error())
            .and_then(|f| f.sync_all())
            .map_err(|source| lapse_export::ExportError::Write {
                format: format.name(),
                source,
            })
    });
    if let Err(e) = written {
        // Leave no half-written export behind.
        let _ = std::fs::remove_file(&a.output);
        return Err(e).with_context(|| a.output.display().to_string());
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
        ViewArg::Functions => View::Functions,
        ViewArg::Modules => View::Modules,
        ViewArg::Threads => View::Threads,
        ViewArg::Processes => View::Processes,
        ViewArg::Lines => View::Lines,
        ViewArg::Instructions => View::Instructions,
        other => bail!(
            "--view: lapse diff compares functions, modules, threads, processes, lines or instructions, not {}",
            format!("{other:?}").to_lowercase()
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
    let (base_analysis, _) = analyze_with_progress(&base, Query::default())?;
    let (new_analysis, _) = analyze_with_progress(&new, Query::default())?;
    let opts = DiffOptions {
        view,
        threshold_pct: a.threshold,
    };
    let d = diff::diff((&base, &base_analysis), (&new, &new_analysis), &opts)?;
    let format = match a.format {
        FormatArg::Table => Format::Table,
        FormatArg::Csv => Format::Csv,
        FormatArg::Json => Format::Json,
    };
    let mut w = BufWriter::new(io::stdout().lock());
    diff::render(&mut w, &d, format)?;
    w.flush()?;
    Ok(0)
}
