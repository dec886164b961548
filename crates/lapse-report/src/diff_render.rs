//! A [`Diff`] as JSON (SPEC section 5), CSV or an aligned terminal table.

use std::io::{self, Write};

use serde_json::{json, Map, Value};

use crate::diff::{Delta, Diff};
use crate::spec::Format;
use crate::table::{Cell, Column, Kind, Table};

/// Writes `d` as a table, CSV or the JSON of SPEC section 5.
pub fn render(out: &mut dyn Write, d: &Diff, format: Format) -> io::Result<()> {
    match format {
        Format::Json => json(out, d),
        Format::Csv => csv(out, d),
        Format::Table => table(out, d),
    }
}

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
                format!("{sign}{}", crate::units::duration(v.unsigned_abs()))
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

fn number(v: Option<f64>) -> Value {
    v.and_then(serde_json::Number::from_f64)
        .map_or(Value::Null, Value::Number)
}

/// A total in the compared value's unit: whole nanoseconds, samples and
/// calls as integers, like the rows' own cells.
fn total_cell(v: f64, kind: Kind) -> Cell {
    match kind {
        Kind::Nanos | Kind::Int if v >= 0.0 => Cell::Int(v.round() as u64),
        _ => Cell::Float(v),
    }
}

/// The share keys of a row: each run's share in percent and the change in points.
fn share_json(m: &mut Map<String, Value>, share: Option<[f64; 2]>) {
    m.insert("base_share_pct".into(), number(share.map(|s| s[0])));
    m.insert("new_share_pct".into(), number(share.map(|s| s[1])));
    m.insert(
        "share_change_points".into(),
        number(share.map(|[b, n]| n - b)),
    );
}

/// The `totals` row: the compared value's key in `base`, `new` and `delta`
/// (raw, never normalized), its `change_pct`, and shares of 100 %.
fn totals_json(d: &Diff) -> Value {
    let (Some(t), Some(c)) = (d.totals, d.values.get(d.primary)) else {
        return Value::Null;
    };
    let one = |v: Value| Value::Object(Map::from_iter([(c.key.to_owned(), v)]));
    let (b, n) = (total_cell(t.base, c.kind), total_cell(t.new, c.kind));
    let delta = match (&b, &n) {
        (Cell::Int(x), Cell::Int(y)) => Value::from(*y as i64 - *x as i64),
        _ => number(Some(t.new - t.base)),
    };
    let mut m = Map::new();
    m.insert("base".into(), one(b.to_json(c.kind)));
    m.insert("new".into(), one(n.to_json(c.kind)));
    m.insert("delta".into(), one(delta));
    m.insert("change_pct".into(), number(t.change_pct()));
    share_json(&mut m, Some([100.0, 100.0]));
    Value::Object(m)
}

fn json(out: &mut dyn Write, d: &Diff) -> io::Result<()> {
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
            m.insert("change_pct".into(), number(r.change_pct));
            share_json(&mut m, r.share);
            Value::Object(m)
        })
        .collect();
    let doc = json!({
        "schema": "lapse-report/1",
        "view": d.view.name(),
        "method": d.method.name(),
        "compared_on": d.values.get(d.primary).map(|c| c.key),
        "normalized": d.scale.is_some(),
        "scale": number(d.scale),
        "totals": totals_json(d),
        "warning": d.warning(),
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

/// Identity columns, then `base_X,new_X,delta_X` for every value X, then
/// `change_pct` and the share keys. The rows only: the totals, the scale
/// and the warning are in the table and the JSON.
fn csv(out: &mut dyn Write, d: &Diff) -> io::Result<()> {
    let mut head: Vec<String> = d.identity.iter().map(|c| c.key.to_owned()).collect();
    for c in &d.values {
        head.extend(["base_", "new_", "delta_"].map(|p| format!("{p}{}", c.key)));
    }
    head.extend(
        [
            "change_pct",
            "base_share_pct",
            "new_share_pct",
            "share_change_points",
        ]
        .map(String::from),
    );
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
        let opt = |v: Option<f64>| v.map_or(String::new(), |p| p.to_string());
        f.push(opt(r.change_pct));
        f.push(opt(r.share.map(|s| s[0])));
        f.push(opt(r.share.map(|s| s[1])));
        f.push(opt(r.share_change_points()));
        writeln!(out, "{}", f.join(","))?;
    }
    Ok(())
}

fn share_text(s: Option<[f64; 2]>) -> [String; 3] {
    match s {
        Some([b, n]) => [
            crate::units::percent(b),
            crate::units::percent(n),
            // A change that rounds to zero is +0.00, not -0.00.
            format!(
                "{:+.2} pts",
                if (n - b).abs() < 0.005 { 0.0 } else { n - b }
            ),
        ],
        None => ["-".into(), "-".into(), "-".into()],
    }
}

/// The lines above the table: both totals, whether and by what factor NEW
/// is normalized, and the warning when the totals differ beyond noise.
fn table_header(out: &mut dyn Write, d: &Diff, value: &Column) -> io::Result<()> {
    let name = value.terminal.unwrap_or(value.key);
    let Some(t) = d.totals else {
        return writeln!(
            out,
            "compared on {name} (raw values: it is not a part of a total, so no shares)"
        );
    };
    let human_total = |v: f64| total_cell(v, value.kind).human(value.kind);
    writeln!(
        out,
        "compared on {name}: base total {}, new total {} ({})",
        human_total(t.base),
        human_total(t.new),
        change_text(t.change_pct())
    )?;
    match d.scale {
        Some(s) => writeln!(
            out,
            "normalized: changes compare base with new × {s:.3} (base total / new total), so a \
             busier machine does not look like a slower program; the base and new columns are as \
             measured (--no-normalize: raw changes)"
        )?,
        None => writeln!(out, "not normalized: changes are of raw values")?,
    }
    if let Some(w) = d.warning() {
        writeln!(out, "{w}")?;
    }
    writeln!(out)
}

/// The identity columns a terminal shows, the main value in both recordings,
/// its change and the relative change (of normalized values when
/// normalized), then its share of each run's total and the change in
/// points; a `total` row first, always raw.
fn table(out: &mut dyn Write, d: &Diff) -> io::Result<()> {
    let shown: Vec<usize> = (0..d.identity.len())
        .filter(|&i| d.identity[i].terminal.is_some())
        .collect();
    let Some(value) = d.values.get(d.primary) else {
        return writeln!(out, "(no values to compare)");
    };
    table_header(out, d, value)?;
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
    if d.totals.is_some() {
        head.extend(["base share", "new share", "share change"].map(String::from));
    }
    grid.push(head);
    if let Some(t) = d.totals {
        let mut line = vec![String::new(); shown.len()];
        if let Some(first) = line.first_mut() {
            *first = "total".into();
        }
        let (b, n) = (
            total_cell(t.base, value.kind),
            total_cell(t.new, value.kind),
        );
        let change = match (&b, &n) {
            (Cell::Int(x), Cell::Int(y)) => Delta::Int(*y as i64 - *x as i64),
            _ => Delta::Float(t.new - t.base),
        };
        line.push(b.human(value.kind));
        line.push(n.human(value.kind));
        line.push(change.text(value.kind));
        line.push(change_text(t.change_pct()));
        line.extend(share_text(Some([100.0, 100.0])));
        grid.push(line);
    }
    for r in &d.rows {
        let mut line: Vec<String> = shown
            .iter()
            .map(|&i| r.identity[i].human(d.identity[i].kind))
            .collect();
        let side = |s: &Option<Vec<Cell>>| {
            s.as_ref()
                .map_or("-".into(), |v| v[d.primary].human(value.kind))
        };
        line.push(side(&r.base));
        line.push(side(&r.new));
        line.push(r.change.text(value.kind));
        line.push(change_text(r.change_pct));
        if d.totals.is_some() {
            line.extend(share_text(r.share));
        }
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
