//! Renders a [`ViewOutput`] as an aligned terminal table, CSV, or the JSON
//! report of SPEC section 5.

use std::io::{self, Write};

use lapse_analysis::summary::busy_machine;
use lapse_analysis::{Analysis, SessionSummary};
use lapse_data::DataFile;
use serde_json::{json, Map, Value};

use crate::columns::key;
use crate::table::{Cell, Column, Kind, Table, TreeRow};
use crate::units;
use crate::views::{Focus, View, ViewOutput};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    Csv,
    Json,
}

impl Format {
    pub const ALL: [(&'static str, Format); 3] = [
        ("table", Format::Table),
        ("csv", Format::Csv),
        ("json", Format::Json),
    ];
}

#[derive(Clone, Debug)]
pub struct RenderOptions {
    pub view: View,
    pub format: Format,
    pub sort: Option<String>,
    pub limit: Option<usize>,
    /// ANSI colour in the table (only on a terminal, never with NO_COLOR).
    pub color: bool,
    /// The table's width in characters (the terminal's, or COLUMNS); `None`
    /// for no limit.
    pub width: Option<usize>,
    /// The view's columns were chosen with `--columns`: the table shows
    /// them all, whatever it would show by itself.
    pub columns_chosen: bool,
}

/// What rows are ranked by when no `--sort` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RankBy {
    Samples,
    /// Elapsed time (instrumentation).
    Elapsed,
    /// Application time: instrumentation on a busy machine, where elapsed
    /// time is mostly waiting for a CPU ([`busy_machine`]).
    Application,
}

impl RankBy {
    pub fn of(file: &DataFile, a: &Analysis) -> RankBy {
        match a {
            Analysis::Sample(_) => RankBy::Samples,
            Analysis::Instr(r) if busy_machine(file, r).is_some() => RankBy::Application,
            Analysis::Instr(_) => RankBy::Elapsed,
        }
    }
}

/// Orders rows by `--sort` (numbers descending, text ascending) or the view's
/// default, then applies `--limit`. An unknown column is an error naming the choices.
pub fn sort_rows(
    columns: &[Column],
    rows: &mut Vec<Vec<Cell>>,
    view: View,
    by: RankBy,
    sort: Option<&str>,
    limit: Option<usize>,
) -> Result<(), String> {
    let is_sampling = by == RankBy::Samples;
    let default = match (view, by) {
        (View::Threads, _) => key::TID,
        (View::Processes, _) => key::PID,
        (View::Modules, RankBy::Elapsed) => key::ELAPSED_INCLUSIVE_NS,
        (View::Modules, RankBy::Application) => key::APPLICATION_INCLUSIVE_NS,
        (View::Modules, RankBy::Samples) => key::INCLUSIVE_SAMPLES,
        (_, RankBy::Elapsed) => key::ELAPSED_EXCLUSIVE_NS,
        (_, RankBy::Application) => key::APPLICATION_EXCLUSIVE_NS,
        (_, RankBy::Samples) => key::EXCLUSIVE_SAMPLES,
    };
    // With off-CPU time, rows go by time, running or waiting: the on-CPU
    // estimate plus the off-CPU time, when no --sort says otherwise.
    let position = |k: &str| columns.iter().position(|c| c.key == k);
    let by_time = match (view, is_sampling, sort) {
        (View::Threads | View::Processes, _, _) | (_, false, _) | (_, _, Some(_)) => None,
        (View::Modules, true, None) => {
            position(key::ESTIMATED_INCLUSIVE_NS).zip(position(key::OFF_CPU_INCLUSIVE_NS))
        }
        (_, true, None) => {
            position(key::ESTIMATED_EXCLUSIVE_NS).zip(position(key::OFF_CPU_EXCLUSIVE_NS))
        }
    };
    if let Some((on, off)) = by_time {
        let time = |r: &[Cell]| {
            r.get(on).and_then(Cell::as_f64).unwrap_or(0.0)
                + r.get(off).and_then(Cell::as_f64).unwrap_or(0.0)
        };
        rows.sort_by(|a, b| time(b).total_cmp(&time(a)).then_with(|| row_order(a, b)));
        if let Some(n) = limit {
            rows.truncate(n);
        }
        return Ok(());
    }
    let sort_key = sort.unwrap_or(default);
    let Some(i) = columns.iter().position(|c| c.key == sort_key) else {
        if sort.is_none() {
            return Ok(());
        }
        let names: Vec<&str> = columns.iter().map(|c| c.key).collect();
        return Err(format!(
            "--sort: no column {sort_key} in this view (columns: {})",
            names.join(", ")
        ));
    };
    let numeric = !matches!(columns[i].kind, Kind::Text);
    let ascending = !numeric || sort_key == key::PID || sort_key == key::TID;
    rows.sort_by(|a, b| {
        let ord = match (&a[i], &b[i]) {
            (Cell::Text(x), Cell::Text(y)) => x.cmp(y),
            (x, y) => x
                .as_f64()
                .unwrap_or(f64::MIN)
                .total_cmp(&y.as_f64().unwrap_or(f64::MIN)),
        };
        let ord = if ascending { ord } else { ord.reverse() };
        ord.then_with(|| row_order(a, b))
    });
    if let Some(n) = limit {
        rows.truncate(n);
    }
    Ok(())
}

/// Ties in the sort column are ordered by the whole row, left to right, so
/// the output never depends on hash or thread order.
fn row_order(a: &[Cell], b: &[Cell]) -> std::cmp::Ordering {
    a.iter()
        .zip(b.iter())
        .map(|(x, y)| match (x, y) {
            (Cell::Text(x), Cell::Text(y)) => x.cmp(y),
            (x, y) => x
                .as_f64()
                .unwrap_or(f64::MIN)
                .total_cmp(&y.as_f64().unwrap_or(f64::MIN)),
        })
        .find(|o| o.is_ne())
        .unwrap_or(std::cmp::Ordering::Equal)
}

/// The `session` object of SPEC section 5 (the [`SessionSummary`]'s fields).
fn session_json(file: &DataFile, a: &Analysis) -> Value {
    // A struct of numbers, strings and options always serializes.
    serde_json::to_value(SessionSummary::of(file, a)).unwrap_or_default()
}

/// Writes the tree's pre-order lines as nested JSON nodes (a row plus
/// `"hot"` and `"children"`), reopening the nesting with an explicit stack:
/// no recursion, whatever the depth.
fn write_tree_json(out: &mut dyn Write, columns: &[Column], rows: &[TreeRow]) -> io::Result<()> {
    out.write_all(b"[")?;
    // One entry per open array (the roots', then each open node's
    // children): whether it holds an element yet; and the depth of each
    // open node (depths may jump where a chain's lines were left out).
    let mut open: Vec<bool> = vec![false];
    let mut depths: Vec<usize> = Vec::new();
    for r in rows {
        // Close the nodes this line is not inside of.
        while depths.last().is_some_and(|&d| d >= r.depth) {
            out.write_all(b"]}")?;
            open.pop();
            depths.pop();
        }
        if let Some(has) = open.last_mut() {
            if *has {
                out.write_all(b",")?;
            }
            *has = true;
        }
        let row = serde_json::to_string(&Value::Object(Table::row_json(columns, &r.cells)))
            .map_err(io::Error::other)?;
        // `{...}` without its closing brace, then hot and the children array.
        out.write_all(&row.as_bytes()[..row.len() - 1])?;
        if row.len() > 2 {
            out.write_all(b",")?;
        }
        if r.elided > 0 {
            write!(out, "\"elided\":{},", r.elided)?;
        }
        write!(out, "\"hot\":{},\"children\":[", r.hot)?;
        open.push(false);
        depths.push(r.depth);
    }
    for _ in 1..open.len() {
        out.write_all(b"]}")?;
    }
    out.write_all(b"]")
}

fn rows_json(columns: &[Column], rows: &[Vec<Cell>]) -> Value {
    Value::Array(
        rows.iter()
            .map(|r| Value::Object(Table::row_json(columns, r)))
            .collect(),
    )
}

pub fn render(
    out: &mut dyn Write,
    file: &DataFile,
    a: &Analysis,
    v: &ViewOutput,
    opts: &RenderOptions,
) -> io::Result<()> {
    match opts.format {
        Format::Json => {
            let mut doc = Map::new();
            doc.insert("schema".into(), json!("lapse-report/1"));
            doc.insert("view".into(), json!(opts.view.name()));
            doc.insert("method".into(), json!(file.session.method.name()));
            doc.insert("session".into(), session_json(file, a));
            if let Some(Focus {
                function: f,
                callers,
                callees,
            }) = &v.focus
            {
                doc.insert(
                    "function".into(),
                    Value::Object(Table::row_json(&v.columns, f)),
                );
                doc.insert("callers".into(), rows_json(&v.columns, callers));
                doc.insert("callees".into(), rows_json(&v.columns, callees));
            } else if v.tree.is_none() {
                doc.insert("rows".into(), rows_json(&v.columns, &v.rows));
            }
            if opts.view == View::Summary || opts.view == View::Calltree {
                doc.insert("hot_path".into(), json!(v.hot_path));
            }
            let text = serde_json::to_string(&Value::Object(doc)).map_err(io::Error::other)?;
            match &v.tree {
                // The tree goes last, streamed: `..., "roots": [...]}`.
                Some(tree) => {
                    out.write_all(&text.as_bytes()[..text.len() - 1])?;
                    out.write_all(b",\"roots\":")?;
                    write_tree_json(out, &v.columns, tree)?;
                    out.write_all(b"}")?;
                }
                None => out.write_all(text.as_bytes())?,
            }
            writeln!(out)
        }
        Format::Csv => {
            let mut columns: Vec<&str> = Vec::new();
            if v.tree.is_some() {
                columns.extend(["depth", "hot"]);
            }
            if v.focus.is_some() {
                columns.push("relation");
            }
            columns.extend(v.columns.iter().map(|c| c.key));
            // The rule behind the application columns, on every row (CSV
            // has no header but the column names).
            let rule = a.application_rule().map(|r| r.name());
            if rule.is_some() {
                columns.push("application_rule");
            }
            writeln!(out, "{}", columns.join(","))?;
            let line = |out: &mut dyn Write, prefix: &[String], r: &[Cell]| -> io::Result<()> {
                let mut fields: Vec<String> = prefix.to_vec();
                fields.extend(
                    v.columns
                        .iter()
                        .zip(r)
                        .map(|(c, cell)| csv_field(cell, c.kind)),
                );
                fields.extend(rule.map(str::to_owned));
                writeln!(out, "{}", fields.join(","))
            };
            if let Some(tree) = &v.tree {
                for r in tree {
                    line(out, &[r.depth.to_string(), r.hot.to_string()], &r.cells)?;
                }
            } else if let Some(Focus {
                function: f,
                callers,
                callees,
            }) = &v.focus
            {
                line(out, &["function".into()], f)?;
                for r in callers {
                    line(out, &["caller".into()], r)?;
                }
                for r in callees {
                    line(out, &["callee".into()], r)?;
                }
            } else {
                for r in &v.rows {
                    line(out, &[], r)?;
                }
            }
            Ok(())
        }
        Format::Table => crate::render_table::table(out, file, a, v, opts, &session_json(file, a)),
    }
}

fn csv_field(cell: &Cell, kind: Kind) -> String {
    match cell.to_json(kind) {
        Value::Null => String::new(),
        Value::String(s) => {
            if s.contains([',', '"', '\n']) {
                format!("\"{}\"", s.replace('"', "\"\""))
            } else {
                s
            }
        }
        other => other.to_string(),
    }
}

/// Human text of a cell for the terminal table.
pub fn human(cell: &Cell, kind: Kind) -> String {
    match (cell, kind) {
        (Cell::Null, _) => "-".into(),
        (Cell::Int(v), Kind::Nanos) => units::duration(*v),
        (Cell::Float(p), Kind::Percent) => units::percent(*p),
        (Cell::Int(v), Kind::Hex) => format!("{v:#x}"),
        (Cell::Text(s), _) => units::terminal_text(s).into_owned(),
        (Cell::Int(v), _) => v.to_string(),
        (Cell::Float(v), _) => format!("{v:.2}"),
        (Cell::Bool(b), _) => b.to_string(),
    }
}
