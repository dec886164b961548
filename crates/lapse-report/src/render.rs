//! Renders a [`ViewOutput`] as an aligned terminal table, CSV, or the JSON
//! report of SPEC section 5.

use std::io::{self, Write};

use lapse_analysis::{Analysis, SessionSummary};
use lapse_data::DataFile;
use serde_json::{json, Map, Value};

use crate::spec::{Format, RenderOptions};
use crate::table::{Cell, Column, Kind, Table, TreeRow};
use crate::views::{Body, Focus, View, ViewOutput};

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
            doc.insert("view".into(), json!(v.view.name()));
            doc.insert("method".into(), json!(file.session.method.name()));
            doc.insert("session".into(), session_json(file, a));
            match &v.body {
                Body::Focus(Focus {
                    function: f,
                    callers,
                    callees,
                }) => {
                    doc.insert(
                        "function".into(),
                        Value::Object(Table::row_json(&v.columns, f)),
                    );
                    doc.insert("callers".into(), rows_json(&v.columns, callers));
                    doc.insert("callees".into(), rows_json(&v.columns, callees));
                }
                Body::Rows(rows) => {
                    doc.insert("rows".into(), rows_json(&v.columns, rows));
                }
                Body::Tree { .. } => {}
            }
            if v.view == View::Summary || v.view == View::Calltree {
                doc.insert("hot_path".into(), json!(v.hot_path));
            }
            let text = serde_json::to_string(&Value::Object(doc)).map_err(io::Error::other)?;
            match &v.body {
                // The tree goes last, streamed: `..., "roots": [...]}`.
                Body::Tree { lines, .. } => {
                    out.write_all(&text.as_bytes()[..text.len() - 1])?;
                    out.write_all(b",\"roots\":")?;
                    write_tree_json(out, &v.columns, lines)?;
                    out.write_all(b"}")?;
                }
                _ => out.write_all(text.as_bytes())?,
            }
            writeln!(out)
        }
        Format::Csv => {
            let mut columns: Vec<&str> = Vec::new();
            match &v.body {
                Body::Tree { .. } => columns.extend(["depth", "hot"]),
                Body::Focus(_) => columns.push("relation"),
                Body::Rows(_) => {}
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
            match &v.body {
                Body::Tree { lines, .. } => {
                    for r in lines {
                        line(out, &[r.depth.to_string(), r.hot.to_string()], &r.cells)?;
                    }
                }
                Body::Focus(Focus {
                    function: f,
                    callers,
                    callees,
                }) => {
                    line(out, &["function".into()], f)?;
                    for r in callers {
                        line(out, &["caller".into()], r)?;
                    }
                    for r in callees {
                        line(out, &["callee".into()], r)?;
                    }
                }
                Body::Rows(rows) => {
                    for r in rows {
                        line(out, &[], r)?;
                    }
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
