//! The terminal table: a short header, then aligned columns in human units.

use std::io::{self, Write};

use lapse_data::DataFile;
use serde_json::Value;

use crate::load::Analysis;
use crate::render::{human, RenderOptions};
use crate::table::{Cell, Column, Kind, TreeRow};
use crate::units;
use crate::views::{View, ViewOutput};

const BOLD: &str = "\x1b[1m";
const RESET: &str = "\x1b[0m";

fn header(
    out: &mut dyn Write,
    file: &DataFile,
    session: &Value,
    opts: &RenderOptions,
) -> io::Result<()> {
    let s = &file.session;
    let n = |k: &str| session[k].as_u64().unwrap_or(0);
    writeln!(out, "command:  {}", s.command.join(" "))?;
    write!(out, "method:   {}", s.method.name())?;
    if let Some(ev) = &s.sample_event {
        match s.sample_period {
            Some(p) => write!(out, " ({ev}, period {p})")?,
            None => write!(out, " ({ev})")?,
        }
    }
    writeln!(out)?;
    writeln!(
        out,
        "duration: {}   processes: {}   threads: {}",
        units::duration(n("duration_ns")),
        n("processes"),
        n("threads")
    )?;
    match s.method {
        lapse_data::Method::Instrumentation => {
            writeln!(
                out,
                "elapsed:  {}   application: {}   probe cost: {:.1} ns{}",
                units::duration(n("elapsed_inclusive_ns")),
                units::duration(n("application_inclusive_ns")),
                s.probe_cost_ns,
                if opts.no_compensation {
                    " (not compensated)"
                } else {
                    " (compensated)"
                }
            )?;
        }
        lapse_data::Method::Sampling => {
            writeln!(
                out,
                "samples:  {}   discarded: {}   lost events: {}",
                n("samples"),
                n("discarded_samples"),
                n("lost_events")
            )?;
        }
    }
    if !file.is_complete() {
        writeln!(out, "warning:  the data file is incomplete (recording interrupted or file damaged); showing what is intact")?;
    }
    writeln!(out)
}

fn grid(
    out: &mut dyn Write,
    columns: &[Column],
    rows: &[(String, &[Cell])],
    color: bool,
    first_header: &str,
) -> io::Result<()> {
    let shown: Vec<(usize, &Column)> = columns
        .iter()
        .enumerate()
        .filter(|(_, c)| c.terminal.is_some())
        .collect();
    let head: Vec<String> = shown
        .iter()
        .enumerate()
        .map(|(j, (_, c))| {
            if j == 0 && !first_header.is_empty() {
                first_header.to_owned()
            } else {
                c.terminal.unwrap_or(c.key).to_owned()
            }
        })
        .collect();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|(prefix, r)| {
            shown
                .iter()
                .enumerate()
                .map(|(j, (i, c))| {
                    let text = r.get(*i).map_or("-".into(), |cell| human(cell, c.kind));
                    if j == 0 {
                        format!("{prefix}{text}")
                    } else {
                        text
                    }
                })
                .collect()
        })
        .collect();
    let mut widths: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for r in &cells {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |out: &mut dyn Write, r: &[String]| -> io::Result<()> {
        let mut s = String::new();
        for (j, (text, w)) in r.iter().zip(&widths).enumerate() {
            let pad = w - text.chars().count();
            let left = matches!(shown[j].1.kind, Kind::Text);
            if j > 0 {
                s.push_str("  ");
            }
            if left {
                s.push_str(text);
                if j + 1 < r.len() {
                    s.push_str(&" ".repeat(pad));
                }
            } else {
                s.push_str(&" ".repeat(pad));
                s.push_str(text);
            }
        }
        writeln!(out, "{}", s.trim_end())
    };
    if color {
        write!(out, "{BOLD}")?;
    }
    line(out, &head)?;
    if color {
        write!(out, "{RESET}")?;
    }
    for r in &cells {
        line(out, r)?;
    }
    Ok(())
}

/// Deeper tree lines than this are not indented further: their depth is
/// written as a number instead, so a 20,000-deep recursion prints one
/// short line per node, not a triangle of spaces.
pub const MAX_INDENT: usize = 32;

/// The tree's first cell prefix: indentation by depth up to
/// [`MAX_INDENT`], then `[depth] `; `* ` marks the hot path (plain text, so
/// column widths stay right with or without colour).
fn tree_prefix(r: &TreeRow) -> String {
    let hot = if r.hot { "* " } else { "" };
    if r.depth <= MAX_INDENT {
        format!("{}{hot}", "  ".repeat(r.depth))
    } else {
        format!("{}[{}] {hot}", "  ".repeat(MAX_INDENT), r.depth)
    }
}

pub fn table(
    out: &mut dyn Write,
    file: &DataFile,
    a: &Analysis,
    v: &ViewOutput,
    opts: &RenderOptions,
    session: &Value,
) -> io::Result<()> {
    header(out, file, session, opts)?;
    if opts.view == View::Summary && !v.hot_path.is_empty() {
        writeln!(out, "hot path: {}", v.hot_path.join(" → "))?;
        writeln!(out)?;
        writeln!(
            out,
            "top functions by exclusive {}:",
            if matches!(a, Analysis::Instr(_)) {
                "time"
            } else {
                "samples"
            }
        )?;
    }
    if let Some(tree) = &v.tree {
        let rows: Vec<(String, &[Cell])> = tree
            .iter()
            .map(|r| (tree_prefix(r), &r.cells[..]))
            .collect();
        writeln!(out, "(* marks the hot path)")?;
        return grid(out, &v.columns, &rows, opts.color, "call tree");
    }
    if let Some((f, callers, callees)) = &v.focus {
        grid(
            out,
            &v.columns,
            &[(String::new(), &f[..])],
            opts.color,
            "function",
        )?;
        writeln!(out)?;
        let rows: Vec<(String, &[Cell])> =
            callers.iter().map(|r| (String::new(), &r[..])).collect();
        grid(out, &v.columns, &rows, opts.color, "callers")?;
        writeln!(out)?;
        let rows: Vec<(String, &[Cell])> =
            callees.iter().map(|r| (String::new(), &r[..])).collect();
        return grid(out, &v.columns, &rows, opts.color, "callees");
    }
    let rows: Vec<(String, &[Cell])> = v.rows.iter().map(|r| (String::new(), &r[..])).collect();
    grid(out, &v.columns, &rows, opts.color, "")
}
