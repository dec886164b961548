//! How a view's rows are ordered: by `--sort`, else by what the view and
//! the recording rank by ([`RankBy`]); ties by the whole row, so output
//! never depends on hash or thread order.

use lapse_analysis::summary::busy_machine;
use lapse_analysis::Analysis;
use lapse_data::DataFile;

use crate::columns::key;
use crate::error::ReportError;
use crate::table::{Cell, Column, Kind};
use crate::views::View;

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
pub(crate) fn sort_rows(
    columns: &[Column],
    rows: &mut Vec<Vec<Cell>>,
    view: View,
    by: RankBy,
    sort: Option<&str>,
    limit: Option<usize>,
) -> Result<(), ReportError> {
    let is_sampling = by == RankBy::Samples;
    let default = match (view, by) {
        (View::Threads, _) => key::TID,
        (View::Annotate, _) => key::LINE,
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
        (View::Threads | View::Processes | View::Annotate, _, _)
        | (_, false, _)
        | (_, _, Some(_)) => None,
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
    let i = match sort_column(columns, sort_key) {
        Ok(i) => i,
        Err(_) if sort.is_none() => return Ok(()),
        Err(e) => return Err(e),
    };
    let numeric = !matches!(columns[i].kind, Kind::Text);
    let ascending = !numeric || [key::PID, key::TID, key::LINE].contains(&sort_key);
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

/// The index of the column `key`; an unknown column is an error naming
/// the choices.
pub(crate) fn sort_column(columns: &[Column], key: &str) -> Result<usize, ReportError> {
    columns.iter().position(|c| c.key == key).ok_or_else(|| {
        let names: Vec<&str> = columns.iter().map(|c| c.key).collect();
        ReportError::Option {
            flag: "sort",
            what: format!(
                "no column {key} in this view (columns: {})",
                names.join(", ")
            ),
        }
    })
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
