//! The value columns of each method, once: what a row of instrumentation
//! values ([`FunctionStats`], [`ModuleStats`]) or of sample counts
//! ([`Counts`]) shows, in SPEC section 5's keys and order. Views put an
//! identity (function, module, thread...) in front of them.

use lapse_analysis::run::{off_cpu_recorded, Analysis};
use lapse_analysis::sample::Counts;
use lapse_analysis::values::{FunctionStats, ModuleStats, SessionTotals, TimeValue, TimeValues};
use lapse_analysis::Fine;
use lapse_data::DataFile;

use crate::table::{col, shown, shown_unless, Cell, Column, Kind};

/// What cells need besides the row: the session's totals (percentages),
/// the sampling period when it is a time (estimated nanoseconds) and
/// whether off-CPU time was recorded.
#[derive(Clone, Copy, Debug)]
pub struct Ctx<'a> {
    pub session: &'a SessionTotals,
    pub period_ns: Option<u64>,
    pub off_cpu: bool,
    /// The probe cost was removed from the values (`--compensate`).
    pub compensated: bool,
}

impl<'a> Ctx<'a> {
    pub fn of(file: &DataFile, a: &'a Analysis) -> Ctx<'a> {
        let s = &file.session;
        Ctx {
            session: a.session(),
            period_ns: s.sample_period.filter(|_| s.sample_period_is_time),
            off_cpu: off_cpu_recorded(file),
            compensated: match a {
                Analysis::Instr(r) => r.compensated,
                _ => true,
            },
        }
    }
}

/// A row's values, as columns and cells.
pub trait Values {
    /// The columns [`Values::cells`] fills, in order.
    fn columns() -> Vec<Column>;
    fn cells(&self, ctx: &Ctx<'_>) -> Vec<Cell>;
}

/// Column keys that more than the column tables name: the default sort
/// orders and the off-CPU columns. One spelling, shared.
pub mod key {
    pub const PID: &str = "pid";
    pub const TID: &str = "tid";
    pub const LINE: &str = "line";
    pub const ELAPSED_INCLUSIVE_NS: &str = "elapsed_inclusive_ns";
    pub const ELAPSED_EXCLUSIVE_NS: &str = "elapsed_exclusive_ns";
    pub const APPLICATION_INCLUSIVE_NS: &str = "application_inclusive_ns";
    pub const APPLICATION_EXCLUSIVE_NS: &str = "application_exclusive_ns";
    pub const INCLUSIVE_SAMPLES: &str = "inclusive_samples";
    pub const EXCLUSIVE_SAMPLES: &str = "exclusive_samples";
    pub const ESTIMATED_INCLUSIVE_NS: &str = "estimated_inclusive_ns";
    pub const ESTIMATED_EXCLUSIVE_NS: &str = "estimated_exclusive_ns";
    pub const OFF_CPU_INCLUSIVE_NS: &str = "off_cpu_inclusive_ns";
    pub const OFF_CPU_EXCLUSIVE_NS: &str = "off_cpu_exclusive_ns";
    /// Of a row's off-CPU (inclusive) time, the part its thread was
    /// runnable but preempted (both methods), and the part it was blocked
    /// (sampling with --off-cpu).
    pub const PREEMPTED_NS: &str = "preempted_ns";
    pub const BLOCKED_NS: &str = "blocked_ns";
}

// `drop` (the last number) says which columns a narrow terminal gives up
// first: extras (7 and above: only when there is room, never in the
// summary) first of all, then percentages before times, application
// before elapsed. The name and the inclusive percentage (what a call tree
// is read by) are never given up.
const TIMES: [Column; 9] = [
    shown_unless("calls", Kind::Int, "calls", 4),
    shown(key::ELAPSED_INCLUSIVE_NS, Kind::Nanos, "elapsed incl"),
    shown(key::ELAPSED_EXCLUSIVE_NS, Kind::Nanos, "elapsed excl"),
    shown_unless(key::APPLICATION_INCLUSIVE_NS, Kind::Nanos, "app incl", 2),
    shown_unless(key::APPLICATION_EXCLUSIVE_NS, Kind::Nanos, "app excl", 1),
    shown("elapsed_inclusive_pct", Kind::Percent, "el incl %"),
    shown_unless("elapsed_exclusive_pct", Kind::Percent, "el excl %", 3),
    shown_unless("application_inclusive_pct", Kind::Percent, "app incl %", 8),
    shown_unless("application_exclusive_pct", Kind::Percent, "app excl %", 8),
];

const PER_CALL: [Column; 12] = [
    shown_unless("avg_elapsed_inclusive_ns", Kind::Nanos, "avg el incl", 6),
    shown_unless("min_elapsed_inclusive_ns", Kind::Nanos, "min el incl", 11),
    shown_unless("max_elapsed_inclusive_ns", Kind::Nanos, "max el incl", 10),
    shown_unless("avg_elapsed_exclusive_ns", Kind::Nanos, "avg el excl", 9),
    col("min_elapsed_exclusive_ns", Kind::Nanos),
    col("max_elapsed_exclusive_ns", Kind::Nanos),
    col("avg_application_inclusive_ns", Kind::Nanos),
    col("min_application_inclusive_ns", Kind::Nanos),
    col("max_application_inclusive_ns", Kind::Nanos),
    col("avg_application_exclusive_ns", Kind::Nanos),
    col("min_application_exclusive_ns", Kind::Nanos),
    col("max_application_exclusive_ns", Kind::Nanos),
];

const OVERHEAD: Column = shown_unless("probe_overhead_ns", Kind::Nanos, "probe cost", 12);
/// The row's time is within the probes' own uncertainty
/// ([`lapse_analysis::values::probe_dominated`]); tables mark its name.
const DOMINATED: Column = col("probe_dominated", Kind::Bool);
const OPEN_CALLS: Column = col("open_calls", Kind::Int);
/// Of the row's off-CPU time (elapsed less application), the part its
/// thread was runnable but preempted; the rest was blocked. In JSON and
/// CSV, and in a table with `--columns`.
const PREEMPTED: Column = col(key::PREEMPTED_NS, Kind::Nanos);

/// On-CPU (estimated from the samples) and off-CPU time side by side; the
/// off-CPU columns only for recordings that have them (see [`OFF_CPU_KEYS`]).
const SAMPLES: [Column; 10] = [
    shown(key::INCLUSIVE_SAMPLES, Kind::Int, "incl samples"),
    shown(key::EXCLUSIVE_SAMPLES, Kind::Int, "excl samples"),
    shown("inclusive_pct", Kind::Percent, "incl %"),
    shown_unless("exclusive_pct", Kind::Percent, "excl %", 1),
    shown_unless(key::ESTIMATED_INCLUSIVE_NS, Kind::Nanos, "est incl", 4),
    shown_unless(key::ESTIMATED_EXCLUSIVE_NS, Kind::Nanos, "est excl", 3),
    shown_unless(key::OFF_CPU_INCLUSIVE_NS, Kind::Nanos, "off-cpu incl", 4),
    shown_unless(key::OFF_CPU_EXCLUSIVE_NS, Kind::Nanos, "off-cpu excl", 3),
    shown_unless(key::PREEMPTED_NS, Kind::Nanos, "preempted", 9),
    shown_unless(key::BLOCKED_NS, Kind::Nanos, "blocked", 9),
];

/// The columns of off-CPU time, which a view leaves out when the recording
/// has none (SPEC 5: "with `--off-cpu` also ...").
pub const OFF_CPU_KEYS: [&str; 4] = [
    key::OFF_CPU_INCLUSIVE_NS,
    key::OFF_CPU_EXCLUSIVE_NS,
    key::PREEMPTED_NS,
    key::BLOCKED_NS,
];

fn dominated(overhead: Fine, t: &TimeValues, ctx: &Ctx<'_>) -> Cell {
    Cell::Bool(lapse_analysis::values::probe_dominated(
        overhead,
        t[TimeValue::ApplicationInclusive],
        ctx.compensated,
    ))
}

/// calls, the four times, the four percentages.
fn time_cells(calls: u64, t: &TimeValues, ctx: &Ctx<'_>) -> Vec<Cell> {
    let mut v = vec![Cell::Int(calls)];
    v.extend(TimeValue::ALL.map(|k| Cell::Int(t[k].to_nanos())));
    v.extend(TimeValue::ALL.map(|k| Cell::Float(ctx.session.time_pct(t, k))));
    v
}

impl Values for FunctionStats {
    fn columns() -> Vec<Column> {
        let mut c = TIMES.to_vec();
        c.extend(PER_CALL);
        c.extend([OVERHEAD, DOMINATED, PREEMPTED, OPEN_CALLS]);
        c
    }

    fn cells(&self, ctx: &Ctx<'_>) -> Vec<Cell> {
        let mut v = time_cells(self.calls, &self.time, ctx);
        let n = self.closed_calls();
        let p = &self.per_call;
        for k in TimeValue::ALL {
            match p.sum[k].checked_div(n) {
                None => v.extend([Cell::Null, Cell::Null, Cell::Null]),
                Some(avg) => v.extend([
                    Cell::Int(avg.to_nanos()),
                    Cell::Int(p.min[k].to_nanos()),
                    Cell::Int(p.max[k].to_nanos()),
                ]),
            }
        }
        v.push(Cell::Int(self.probe_overhead.to_nanos()));
        v.push(dominated(self.probe_overhead, &self.time, ctx));
        v.push(Cell::Int(self.preempted.to_nanos()));
        v.push(Cell::Int(self.open_calls));
        v
    }
}

/// Modules, threads and processes: no per-call values.
impl Values for ModuleStats {
    fn columns() -> Vec<Column> {
        let mut c = TIMES.to_vec();
        c.extend([OVERHEAD, DOMINATED, PREEMPTED]);
        c
    }

    fn cells(&self, ctx: &Ctx<'_>) -> Vec<Cell> {
        let mut v = time_cells(self.calls, &self.time, ctx);
        v.push(Cell::Int(self.probe_overhead.to_nanos()));
        v.push(dominated(self.probe_overhead, &self.time, ctx));
        v.push(Cell::Int(self.preempted.to_nanos()));
        v
    }
}

impl Values for Counts {
    fn columns() -> Vec<Column> {
        SAMPLES.to_vec()
    }

    fn cells(&self, ctx: &Ctx<'_>) -> Vec<Cell> {
        let [i, e] = ctx.session.sample_pcts(self.inclusive, self.exclusive);
        let est = |n: u64| {
            ctx.period_ns
                .map_or(Cell::Null, |p| Cell::Int(n.saturating_mul(p)))
        };
        vec![
            Cell::Int(self.inclusive),
            Cell::Int(self.exclusive),
            Cell::Float(i),
            Cell::Float(e),
            est(self.inclusive),
            est(self.exclusive),
            Cell::Int(self.off_cpu.inclusive),
            Cell::Int(self.off_cpu.exclusive),
            Cell::Int(self.preempted.inclusive),
            Cell::Int(
                self.off_cpu
                    .inclusive
                    .saturating_sub(self.preempted.inclusive),
            ),
        ]
    }
}
