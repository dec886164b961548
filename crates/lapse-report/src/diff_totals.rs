//! What `lapse diff` compares rows against: each run's total of the
//! compared value, a row's share of it, the factor that normalizes NEW to
//! BASE's total, and when two totals differ by more than reruns of one
//! program do.
//!
//! Why shares: a run on a busier machine is slower everywhere (elapsed time
//! includes the time spent waiting for a CPU), so every row of it grows and
//! a diff of raw values blames the program for the machine. A row's share of
//! its own run's total, and the change of that share in percentage points,
//! is what perf diff shows (`Baseline`, `Delta`); scaling NEW by
//! base total / new total before taking changes is pprof's `-normalize` and
//! difffolded.pl's `-n`.

use lapse_analysis::values::{pct, SessionTotals};

use crate::table::Cell;
use crate::views::{View, ViewOutput};

/// Totals of two runs of the same program that differ by more than this
/// (percent of the base total) differ by more than run-to-run noise: on a
/// quiet machine reruns of a CPU-bound program agree within a few percent,
/// and the CPU time of one script varied from 135 to 165 ms (±10 %) across
/// eleven runs on a busy one (issue 33). Beyond it, the machine (or the
/// input) changed, not just the code.
pub const TOTALS_NOISE_PCT: f64 = 10.0;

/// The compared value summed over each run: the denominators of the shares.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Totals {
    pub base: f64,
    pub new: f64,
}

impl Totals {
    /// Relative change of the total, in percent; `None` when the base is zero.
    pub fn change_pct(&self) -> Option<f64> {
        (self.base > 0.0).then(|| 100.0 * (self.new - self.base) / self.base)
    }

    /// base / new: what NEW's compared value is multiplied by when
    /// normalized; `None` when either total is zero.
    pub fn scale(&self) -> Option<f64> {
        (self.base > 0.0 && self.new > 0.0).then(|| self.base / self.new)
    }

    /// True when the totals differ by more than [`TOTALS_NOISE_PCT`].
    pub fn differ(&self) -> bool {
        match self.change_pct() {
            Some(p) => p.abs() > TOTALS_NOISE_PCT,
            None => self.new > 0.0,
        }
    }

    /// `value`'s share of the base total, in percent (0 when the total is zero).
    pub fn base_share(&self, value: f64) -> f64 {
        pct(value, self.base)
    }

    /// `value`'s share of the new total, in percent (0 when the total is zero).
    pub fn new_share(&self, value: f64) -> f64 {
        pct(value, self.new)
    }
}

/// The whole that the value `key` of a row is a part of, in one run: the
/// session's elapsed or application time for the four time values (the
/// denominators of the report's `*_pct`), its kept samples for sample counts,
/// else the sum of the rows (of the exclusive value for an inclusive one,
/// whose rows nest, except in the threads and processes views, whose rows do
/// not). `None` for values that are not parts of a whole: averages, minima,
/// maxima and percentages.
pub(crate) fn total_of(
    key: &str,
    view: View,
    session: &SessionTotals,
    out: &ViewOutput,
) -> Option<f64> {
    if ["avg_", "min_", "max_"].iter().any(|p| key.starts_with(p)) || key.ends_with("_pct") {
        return None;
    }
    match key {
        "elapsed_inclusive_ns" | "elapsed_exclusive_ns" => {
            return Some(session.elapsed_inclusive.as_nanos_f64())
        }
        "application_inclusive_ns" | "application_exclusive_ns" => {
            return Some(session.application_inclusive.as_nanos_f64())
        }
        "inclusive_samples" | "exclusive_samples" => return Some(session.samples as f64),
        _ => {}
    }
    let disjoint = matches!(view, View::Threads | View::Processes);
    let summed = if disjoint {
        key.to_owned()
    } else {
        key.replace("inclusive", "exclusive")
    };
    let i = out.columns.iter().position(|c| c.key == summed)?;
    Some(
        out.table_rows()
            .iter()
            .filter_map(|r| r.get(i).and_then(Cell::as_f64))
            .sum(),
    )
}

/// The line that says the totals differ beyond noise, or `None`.
pub(crate) fn warning(t: &Totals, normalized: bool) -> Option<String> {
    if !t.differ() {
        return None;
    }
    let by = t.change_pct().map_or_else(
        || "more than the base total".into(),
        |p| format!("{p:+.1}%"),
    );
    let how = if normalized {
        "changes are of normalized values, that is of each row's share of its run's total"
    } else {
        "compare the rows' shares of each run's total (share change, in points), or use --normalize"
    };
    Some(format!(
        "warning: the totals differ by {by}, more than runs of the same program differ by \
         ({TOTALS_NOISE_PCT}%): the machine or the input changed, not only the program; {how}"
    ))
}
