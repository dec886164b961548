//! A [`Diff`] as JSON (SPEC section 5), CSV or an aligned terminal table.

use std::io::{self, Write};

use lapse_report::render::human;
use lapse_report::table::{Cell, Column, Kind, Table};
use serde_json::{json, Map, Value};

use crate::diff::{Delta, Diff};

impl Delta {
    fn to_json(self) -> Value {
        match self {
            Delta::Null => Value::Null,
            Delta::Int(v) => Value::from(v),
            Delta::Float(v) => serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number),
        }
    }

    fn text(self, kind: Kind) -> String {
        match (self, kind) {
            (Delta::Null, _) => String::new(),
            (Delta::Int(v), Kind::Nanos) => {
                let sign = if v < 0 { "-" } else { "+" };
                format!("{sign}{}", lapse_report::units::duration(v.unsigned_abs()))
            }
            (Delta::Int(v), _) => format!("{v:+}"),
            (Delta::Float(v), Kind::Percent) => format!("{v:+.2}%"),
            (Delta::Float(v), _) => format!("{v:+}"),
        }
    }
}

fn values_json(columns: &[Column], cells: Option<&Vec<Cell>>) -> Value {
    match cells {
        Some(c) => Value::Object(Table::row_json(columns, c)),
        None => Value::Null,
    }
}

fn change_text(p: Option<f64>) -> String {
    p.map_or_else(|| "new".into(), |p| format!("{p:+.1}%"))
}

pub fn json(out: &mut dyn Write, d: &Diff) -> io::Result<()> {
    let rows: Vec<Value> = d
        .rows
        .iter()
        .map(|r| {
            let mut m: Map<String, Value> = Table::row_json(&d.identity, &r.identity);
            m.insert("base".into(), values_json(&d.values, r.base.as_ref()));
            m.insert("new".into(), values_json(&d.values, r.new.as_ref()));
            let delta: Map<String, Value> = d
                .values
                .iter()
                .zip(&r.delta)
                .map(|(c, v)| (c.key.to_owned(), v.to_json()))
                .collect();
            m.insert("delta".into(), Value::Object(delta));
            m.insert(
                "change_pct".into(),
                r.change_pct
                    .and_then(serde_json::Number::from_f64)
                    .map_or(Value::Null, Value::Number),
            );
            Value::Object(m)
        })
        .collect();
    let doc = json!({
        "schema": "lapse-report/1",
        "view": d.view.name(),
        "method": d.method.name(),
        "compared_on": d.values.get(d.primary).map(|c| c.key),
        "rows": rows,
    });
    serde_json::to_writer(&mut *out, &doc).map_err(io::Error::other)?;
    writeln!(out)
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

fn plain(c: &Cell, kind: Kind) -> String {
    match c.to_json(kind) {
        Value::Null => String::new(),
        Value::String(s) => s,
        v => v.to_string(),
    }
}

/// Identity columns, then `base_X,new_X,delta_X` for every value X, then `change_pct`.
pub fn csv(out: &mut dyn Write, d: &Diff) -> io::Result<()> {
    let mut head: Vec<String> = d.identity.iter().map(|c| c.key.to_owned()).collect();
    for c in &d.values {
        head.extend(["base_", "new_", "delta_"].map(|p| format!("{p}{}", c.key)));
    }
    head.push("change_pct".into());
    writeln!(out, "{}", head.join(","))?;
    for r in &d.rows {
        let mut f: Vec<String> = d
            .identity
            .iter()
            .zip(&r.identity)
            .map(|(c, v)| csv_field(&plain(v, c.kind)))
            .collect();
        for (i, c) in d.values.iter().enumerate() {
            let side = |s: &Option<Vec<Cell>>| {
                s.as_ref()
                    .map_or(String::new(), |v| csv_field(&plain(&v[i], c.kind)))
            };
            f.push(side(&r.base));
            f.push(side(&r.new));
            f.push(match r.delta[i] {
                Delta::Null => String::new(),
                v => v.to_json().to_string(),
            });
        }
        f.push(r.change_pct.map_or(String::new(), |p| p.to_string()));
        writeln!(out, "{}", f.join(","))?;
    }
    Ok(())
}

/// The identity columns a terminal shows, the main value in both recordings,
/// its change and the relative change.
pub fn table(out: &mut dyn Write, d: &Diff) -> io::Result<()> {
    let shown: Vec<usize> = (0..d.identity.len())
        .filter(|&i| d.identity[i].terminal.is_some())
        .collect();
    let Some(value) = d.values.get(d.primary) else {
        return writeln!(out, "(no values to compare)");
    };
    let mut grid: Vec<Vec<String>> = Vec::new();
    let mut head: Vec<String> = shown
        .iter()
        .map(|&i| {
            d.identity[i]
                .terminal
                .unwrap_or(d.identity[i].key)
                .to_owned()
        })
        .collect();
    let name = value.terminal.unwrap_or(value.key);
    head.extend([
        format!("base {name}"),
        format!("new {name}"),
        "change".into(),
        "change %".into(),
    ]);
    grid.push(head);
    for r in &d.rows {
        let mut line: Vec<String> = shown
            .iter()
            .map(|&i| human(&r.identity[i], d.identity[i].kind))
            .collect();
        let side = |s: &Option<Vec<Cell>>| {
            s.as_ref()
                .map_or("-".into(), |v| human(&v[d.primary], value.kind))
        };
        line.push(side(&r.base));
        line.push(side(&r.new));
        line.push(r.delta[d.primary].text(value.kind));
        line.push(change_text(r.change_pct));
        grid.push(line);
    }
    let cols = grid[0].len();
    let width: Vec<usize> = (0..cols)
        .map(|c| grid.iter().map(|l| l[c].chars().count()).max().unwrap_or(0))
        .collect();
    for line in &grid {
        let mut s = String::new();
        for (c, cell) in line.iter().enumerate() {
            let pad = width[c] - cell.chars().count();
            if c < shown.len() {
                s.push_str(cell);
                s.push_str(&" ".repeat(pad));
            } else {
                s.push_str(&" ".repeat(pad));
                s.push_str(cell);
            }
            s.push_str("  ");
        }
        writeln!(out, "{}", s.trim_end())?;
    }
    if d.rows.is_empty() {
        writeln!(out, "(no rows changed by at least the threshold)")?;
    }
    Ok(())
}
