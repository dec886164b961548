//! `lapse diff`: two recordings of the same method compared row by row.
//!
//! The rows are the report's own ([`crate::build`]), so a diff shows exactly
//! the values `lapse report` shows; rows are matched by identity keys that
//! survive a rebuild and a rerun: function and module name (not the
//! address), module name, source line, thread name (pids and tids change
//! between runs, so the n-th thread of a name matches the n-th) and process
//! command. When the two recordings' programs differ only in file name
//! (`app` rebuilt as `app2`), rows of the one match rows of the other by
//! function name. The change of a row is measured on `--metric`, or the
//! view's main value (elapsed exclusive time or exclusive samples for
//! functions and lines, the inclusive one for modules, threads and processes).
//!
//! Both runs' totals of that value come with the rows ([`Totals`]), and every
//! row carries its share of its own run's total, so two runs of one program
//! on a quiet and a busy machine compare like with like; with
//! [`DiffOptions::normalize`] the changes themselves are of NEW scaled to
//! BASE's total.

use std::collections::HashMap;

use lapse_analysis::{Analysis, Query};
use lapse_data::{DataFile, Method};

pub use crate::diff_totals::{Totals, TOTALS_NOISE_PCT};
use crate::table::{Cell, Column, Kind};
use crate::views::{build_view, TreeShape, View, ViewOutput};
use crate::ReportError;

/// Keys that say *which* row it is; every other column is a value.
const IDENTITY: [&str; 11] = [
    "function",
    "module",
    "module_path",
    "address",
    "source_file",
    "line",
    "build_id",
    "pid",
    "tid",
    "thread_name",
    "command",
];

#[derive(Clone, Debug)]
pub struct DiffOptions {
    pub view: View,
    /// Rows whose relative change is below this percentage are hidden.
    pub threshold_pct: f64,
    /// The value column the change is measured on; the view's main value
    /// when `None`.
    pub metric: Option<String>,
    /// Multiply NEW's compared value by base total / new total before
    /// changes are taken (and thresholded and sorted), so a uniformly
    /// slower run shows no change; raw values and `delta` are kept.
    pub normalize: bool,
}

/// A signed difference of two cells (`new - base`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Delta {
    Null,
    Int(i64),
    Float(f64),
}

#[derive(Clone, Debug)]
pub struct DiffRow {
    pub identity: Vec<Cell>,
    /// Value cells; `None` when the row exists in only one recording.
    pub base: Option<Vec<Cell>>,
    pub new: Option<Vec<Cell>>,
    pub delta: Vec<Delta>,
    /// Change of the main value, NEW normalized when [`Diff::scale`] is set.
    pub change: Delta,
    /// Relative change of the main value in percent, NEW normalized when
    /// [`Diff::scale`] is set; `None` when the base is zero.
    pub change_pct: Option<f64>,
    /// The main value's share of each run's total in percent (0 on the side
    /// the row is missing from); `None` when the value has no total.
    pub share: Option<[f64; 2]>,
}

impl DiffRow {
    /// The change of the row's share, in percentage points.
    pub fn share_change_points(&self) -> Option<f64> {
        self.share.map(|[b, n]| n - b)
    }
}

#[derive(Clone, Debug)]
pub struct Diff {
    pub view: View,
    pub method: Method,
    pub identity: Vec<Column>,
    pub values: Vec<Column>,
    /// Index in `values` of the main value the change is measured on.
    pub primary: usize,
    /// Each run's total of the main value; `None` for values that are not
    /// parts of a whole (averages, minima, maxima, percentages).
    pub totals: Option<Totals>,
    /// The factor NEW's main value was multiplied by (base total / new
    /// total) when normalized; `None` when not.
    pub scale: Option<f64>,
    pub rows: Vec<DiffRow>,
}

impl Diff {
    /// One line when the two totals differ by more than [`TOTALS_NOISE_PCT`].
    pub fn warning(&self) -> Option<String> {
        crate::diff_totals::warning(self.totals.as_ref()?, self.scale.is_some())
    }
}

/// Refuses to compare recordings made with different methods: their values
/// have nothing in common.
pub fn check_methods(base: &DataFile, new: &DataFile) -> Result<(), ReportError> {
    if base.session.method != new.session.method {
        return Err(ReportError::Diff(format!(
            "cannot compare {} profile ({}) with {} profile ({})",
            with_article(base.session.method),
            base.path().display(),
            with_article(new.session.method),
            new.path().display()
        )));
    }
    Ok(())
}

fn with_article(m: Method) -> &'static str {
    match m {
        Method::Instrumentation => "an instrumentation",
        Method::Sampling => "a sampling",
    }
}

fn primary_key(view: View, method: Method) -> &'static str {
    let inclusive = matches!(view, View::Modules | View::Threads | View::Processes);
    match (method, inclusive) {
        (Method::Instrumentation, false) => "elapsed_exclusive_ns",
        (Method::Instrumentation, true) => "elapsed_inclusive_ns",
        (Method::Sampling, false) => "exclusive_samples",
        (Method::Sampling, true) => "inclusive_samples",
    }
}

/// The identity keys rows are matched by, per view.
fn match_keys(view: View) -> &'static [&'static str] {
    match view {
        View::Modules => &["module"],
        View::Threads => &["thread_name"],
        View::Processes => &["command"],
        View::Lines | View::Annotate => &["source_file", "line"],
        View::Instructions => &["function", "module", "address"],
        _ => &["function", "module"],
    }
}

fn text(c: &Cell) -> String {
    match c {
        Cell::Null => String::new(),
        Cell::Text(s) => s.clone(),
        Cell::Int(v) => v.to_string(),
        Cell::Float(v) => v.to_string(),
        Cell::Bool(b) => b.to_string(),
    }
}

/// The file name of the recording's program: the module the command's
/// first word names, else the module of `main`.
fn program_module(file: &DataFile) -> Option<String> {
    let command = file.session.command.first()?;
    let name = command.rsplit('/').next().unwrap_or(command);
    if let Some(m) = file.modules.iter().find(|m| m.name() == name) {
        return Some(m.name().to_owned());
    }
    let main = file.functions.iter().find(|f| f.name == "main")?;
    file.module(main.module).map(|m| m.name().to_owned())
}

/// Rows of one side by match key; repeated keys get an ordinal (the n-th
/// thread of a name), in the order of their pid/tid. A module named
/// `alias.0` is keyed as `alias.1`.
fn keyed(
    out: &ViewOutput,
    view: View,
    alias: Option<&(String, String)>,
) -> Vec<(String, Vec<Cell>)> {
    let idx: Vec<usize> = match_keys(view)
        .iter()
        .filter_map(|k| out.columns.iter().position(|c| c.key == *k))
        .collect();
    let mut rows = out.table_rows().to_vec();
    rows.sort_by(|a, b| {
        a.iter()
            .map(text)
            .collect::<Vec<_>>()
            .cmp(&b.iter().map(text).collect())
    });
    let module = out.columns.iter().position(|c| c.key == "module");
    let mut seen: HashMap<String, usize> = HashMap::new();
    rows.into_iter()
        .map(|r| {
            let base: Vec<String> = idx
                .iter()
                .map(|&i| match alias {
                    Some((from, to)) if Some(i) == module && text(&r[i]) == *from => to.clone(),
                    _ => text(&r[i]),
                })
                .collect();
            let base = base.join("\u{1f}");
            let n = seen.entry(base.clone()).or_default();
            *n += 1;
            (format!("{base}\u{1f}{n}"), r)
        })
        .collect()
}

fn delta(kind: Kind, base: Option<&Cell>, new: Option<&Cell>) -> Delta {
    let zero = Cell::Int(0);
    let (b, n) = (base.unwrap_or(&zero), new.unwrap_or(&zero));
    match (b, n, kind) {
        (Cell::Int(x), Cell::Int(y), _) => Delta::Int(*y as i64 - *x as i64),
        (x, y, Kind::Percent) | (x, y, Kind::Nanos) | (x, y, Kind::Int) => {
            match (x.as_f64(), y.as_f64()) {
                (Some(x), Some(y)) => Delta::Float(y - x),
                _ => Delta::Null,
            }
        }
        _ => Delta::Null,
    }
}

/// Compares `base` with `new` in `opts.view`; rows ordered by the largest
/// absolute change of the main value first (normalized when
/// `opts.normalize`).
pub fn diff(
    base: (&DataFile, &Analysis),
    new: (&DataFile, &Analysis),
    opts: &DiffOptions,
) -> Result<Diff, ReportError> {
    check_methods(base.0, new.0)?;
    let method = base.0.session.method;
    let build = |(file, a): (&DataFile, &Analysis)| {
        build_view(
            file,
            a,
            &Query::default(),
            opts.view,
            None,
            &TreeShape::default(),
        )
        .map_err(|e| ReportError::Diff(format!("{}: {e}", file.path().display())))
    };
    let (b, n) = (build(base)?, build(new)?);
    let is_id = |c: &Column| IDENTITY.contains(&c.key);
    let id_idx: Vec<usize> = (0..n.columns.len())
        .filter(|&i| is_id(&n.columns[i]))
        .collect();
    let val_idx: Vec<usize> = (0..n.columns.len())
        .filter(|&i| !is_id(&n.columns[i]))
        .collect();
    let values: Vec<Column> = val_idx.iter().map(|&i| n.columns[i].clone()).collect();
    let primary = match &opts.metric {
        Some(m) => values.iter().position(|c| c.key == m).ok_or_else(|| {
            let names: Vec<&str> = values.iter().map(|c| c.key).collect();
            ReportError::Diff(format!(
                "--metric: no value {m} in the {} view (values: {})",
                opts.view.name(),
                names.join(", ")
            ))
        })?,
        None => {
            let key = primary_key(opts.view, method);
            values.iter().position(|c| c.key == key).unwrap_or(0)
        }
    };
    let total =
        |key, a: &Analysis, out| crate::diff_totals::total_of(key, opts.view, a.session(), out);
    let totals = values.get(primary).and_then(|c| {
        Some(Totals {
            base: total(c.key, base.1, &b)?,
            new: total(c.key, new.1, &n)?,
        })
    });
    let scale = totals.filter(|_| opts.normalize).and_then(|t| t.scale());
    // A program rebuilt under another file name: its functions are the same ones.
    let alias = match (program_module(base.0), program_module(new.0)) {
        (Some(b), Some(n)) if b != n => Some((b, n)),
        _ => None,
    };
    let pick = |row: &[Cell], idx: &[usize]| -> Vec<Cell> {
        idx.iter()
            .map(|&i| row.get(i).cloned().unwrap_or(Cell::Null))
            .collect()
    };
    let base_rows: HashMap<String, Vec<Cell>> =
        keyed(&b, opts.view, alias.as_ref()).into_iter().collect();
    let new_rows = keyed(&n, opts.view, None);
    let matched: std::collections::HashSet<&String> = new_rows.iter().map(|(k, _)| k).collect();
    let mut rows = Vec::new();
    let mut add = |brow: Option<&Vec<Cell>>, nrow: Option<&Vec<Cell>>| {
        let Some(id_src) = nrow.or(brow) else { return };
        let bv = brow.map(|r| pick(r, &val_idx));
        let nv = nrow.map(|r| pick(r, &val_idx));
        let d: Vec<Delta> = values
            .iter()
            .enumerate()
            .map(|(i, c)| {
                delta(
                    c.kind,
                    bv.as_ref().map(|v| &v[i]),
                    nv.as_ref().map(|v| &v[i]),
                )
            })
            .collect();
        let b0 = bv.as_ref().and_then(|v| v[primary].as_f64()).unwrap_or(0.0);
        let raw_n0 = nv.as_ref().and_then(|v| v[primary].as_f64()).unwrap_or(0.0);
        let n0 = raw_n0 * scale.unwrap_or(1.0);
        let change = match (d[primary], scale) {
            (Delta::Int(_), Some(_)) => Delta::Int((n0 - b0).round() as i64),
            (Delta::Float(_), Some(_)) => Delta::Float(n0 - b0),
            (raw, _) => raw,
        };
        let share = totals.map(|t| [t.base_share(b0), t.new_share(raw_n0)]);
        let change_pct = if b0 != 0.0 {
            Some(100.0 * (n0 - b0) / b0)
        } else if n0 == 0.0 {
            Some(0.0)
        } else {
            None
        };
        rows.push(DiffRow {
            identity: pick(id_src, &id_idx),
            base: bv,
            new: nv,
            delta: d,
            change,
            change_pct,
            share,
        });
    };
    for (k, nrow) in &new_rows {
        add(base_rows.get(k), Some(nrow));
    }
    for (k, brow) in keyed(&b, opts.view, alias.as_ref()) {
        if !matched.contains(&k) {
            add(Some(&brow), None);
        }
    }
    // An unknown change (base zero) always passes the threshold.
    rows.retain(|r| r.change_pct.is_none_or(|p| p.abs() >= opts.threshold_pct));
    let size = |r: &DiffRow| match r.change {
        Delta::Int(v) => v.unsigned_abs() as f64,
        Delta::Float(v) => v.abs(),
        Delta::Null => 0.0,
    };
    rows.sort_by(|x, y| size(y).total_cmp(&size(x)));
    Ok(Diff {
        view: opts.view,
        method,
        identity: id_idx.iter().map(|&i| n.columns[i].clone()).collect(),
        values,
        primary,
        totals,
        scale,
        rows,
    })
}
