//! The value columns of SPEC section 2, as accumulated per row.

use std::ops::{Index, IndexMut};

use crate::fine::Fine;

/// One of the four time values of SPEC 2.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimeValue {
    ElapsedInclusive,
    ElapsedExclusive,
    ApplicationInclusive,
    ApplicationExclusive,
}

impl TimeValue {
    /// In the order reports list them.
    pub const ALL: [TimeValue; 4] = [
        TimeValue::ElapsedInclusive,
        TimeValue::ElapsedExclusive,
        TimeValue::ApplicationInclusive,
        TimeValue::ApplicationExclusive,
    ];

    /// `elapsed_inclusive` ... as the JSON keys spell them (before `_ns`, `_pct`).
    pub const fn key(self) -> &'static str {
        match self {
            TimeValue::ElapsedInclusive => "elapsed_inclusive",
            TimeValue::ElapsedExclusive => "elapsed_exclusive",
            TimeValue::ApplicationInclusive => "application_inclusive",
            TimeValue::ApplicationExclusive => "application_exclusive",
        }
    }

    pub const fn is_inclusive(self) -> bool {
        matches!(
            self,
            TimeValue::ElapsedInclusive | TimeValue::ApplicationInclusive
        )
    }

    pub const fn is_application(self) -> bool {
        matches!(
            self,
            TimeValue::ApplicationInclusive | TimeValue::ApplicationExclusive
        )
    }
}

/// The four time values of SPEC 2.1, in [`Fine`] units while accumulating,
/// indexed by [`TimeValue`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeValues([Fine; 4]);

impl TimeValues {
    pub const fn splat(v: Fine) -> TimeValues {
        TimeValues([v; 4])
    }

    /// The values in [`TimeValue::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (TimeValue, Fine)> + '_ {
        TimeValue::ALL.into_iter().map(|k| (k, self[k]))
    }

    pub fn add(&mut self, o: &TimeValues) {
        for (a, b) in self.0.iter_mut().zip(o.0) {
            *a += b;
        }
    }
}

impl Index<TimeValue> for TimeValues {
    type Output = Fine;
    #[inline(always)]
    fn index(&self, k: TimeValue) -> &Fine {
        &self.0[k as usize]
    }
}

impl IndexMut<TimeValue> for TimeValues {
    #[inline(always)]
    fn index_mut(&mut self, k: TimeValue) -> &mut Fine {
        &mut self.0[k as usize]
    }
}

/// Per-call statistics of the four values: sum, min and max over calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PerCall {
    pub sum: TimeValues,
    pub min: TimeValues,
    pub max: TimeValues,
}

impl Default for PerCall {
    fn default() -> Self {
        PerCall {
            sum: TimeValues::default(),
            min: TimeValues::splat(Fine::MAX),
            max: TimeValues::default(),
        }
    }
}

impl PerCall {
    #[inline]
    pub fn add_call(&mut self, v: TimeValues) {
        for k in TimeValue::ALL {
            let x = v[k];
            self.sum[k] += x;
            // Branches, not conditional moves: after the first few calls a new
            // minimum or maximum is rare, so these are predicted and nothing
            // is stored.
            if x < self.min[k] {
                self.min[k] = x;
            }
            if x > self.max[k] {
                self.max[k] = x;
            }
        }
    }

    pub fn merge(&mut self, o: &PerCall) {
        self.sum.add(&o.sum);
        for k in TimeValue::ALL {
            self.min[k] = self.min[k].min(o.min[k]);
            self.max[k] = self.max[k].max(o.max[k]);
        }
    }
}

/// Everything SPEC 2.1 defines for one function (or one call-tree node, or
/// one caller/callee edge).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FunctionStats {
    /// `enter` events.
    pub calls: u64,
    /// Calls closed because their thread ended while they were open.
    pub open_calls: u64,
    pub time: TimeValues,
    /// Per-call values over completed (and force-closed) calls.
    pub per_call: PerCall,
    /// Probe cost in this function's elapsed inclusive time: counted and
    /// left in (the default), or removed from it with `--compensate`.
    pub probe_overhead: Fine,
    /// Of the off-CPU time in its elapsed inclusive time (the elapsed less
    /// application difference), what the thread spent runnable but
    /// preempted (the kernel's switch-out records say so); the rest is
    /// blocked (sleep, I/O, locks) or in system calls.
    pub preempted: Fine,
}

/// Whether a row's time is within the probes' own uncertainty: the probe
/// cost in its inclusive time (`overhead`) is more than a quarter of what
/// is left of it once that cost is removed. How much of a probe's cost
/// shows inside an interval depends on the code around it (measured on the
/// function-size sweep: a 1.5 ns and a 22 ns function leave the same
/// timestamps, each call about 14 ns), so such a row can be off by more
/// than 25 % either way. `on_cpu` is the row's application inclusive time
/// as reported (the probes run on the CPU; elapsed time on a busy machine
/// is mostly waiting): with the cost removed when `compensated`, with it in
/// otherwise.
pub fn probe_dominated(overhead: Fine, on_cpu: Fine, compensated: bool) -> bool {
    let without = if compensated {
        on_cpu
    } else {
        on_cpu.saturating_sub(overhead)
    };
    !overhead.is_zero() && overhead.to_nanos().saturating_mul(4) > without.to_nanos()
}

impl FunctionStats {
    pub fn merge(&mut self, o: &FunctionStats) {
        self.calls += o.calls;
        self.open_calls += o.open_calls;
        self.time.add(&o.time);
        self.per_call.merge(&o.per_call);
        self.probe_overhead += o.probe_overhead;
        self.preempted += o.preempted;
    }

    /// Number of calls the per-call values are over.
    pub fn closed_calls(&self) -> u64 {
        // Every enter is closed eventually (at its exit, a repair, or thread end),
        // except enters outside a --from/--to window, which are not counted at all.
        self.calls
    }

    /// True when the row has anything to show (a call or some time).
    pub fn is_used(&self) -> bool {
        self.calls > 0 || !self.time[TimeValue::ElapsedInclusive].is_zero()
    }
}

/// SPEC 2.3 module row: inclusive when any frame of the module is on the stack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModuleStats {
    pub calls: u64,
    pub time: TimeValues,
    pub probe_overhead: Fine,
    /// Preempted time in the inclusive time ([`FunctionStats::preempted`]).
    pub preempted: Fine,
}

impl ModuleStats {
    pub fn merge(&mut self, o: &ModuleStats) {
        self.calls += o.calls;
        self.time.add(&o.time);
        self.probe_overhead += o.probe_overhead;
        self.preempted += o.preempted;
    }
}

/// SPEC 2.3 thread row: inclusive = all intervals, exclusive = empty-stack intervals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadStats {
    pub pid: u32,
    pub tid: u32,
    /// Which thread with this id ([`lapse_data::ThreadKey::serial`]).
    pub serial: u16,
    pub calls: u64,
    pub time: TimeValues,
    pub events: u64,
    /// Frames popped without their own exit (an exit further down matched).
    pub repaired_exits: u64,
    /// Exits matching no frame on the stack (ignored).
    pub unmatched_exits: u64,
    /// Events naming a function the file's table does not hold (ignored).
    pub invalid_events: u64,
    /// Events whose timestamp was earlier than the previous one (taken as zero-length).
    pub backward_timestamps: u64,
    pub open_calls: u64,
    pub probe_overhead: Fine,
    /// Time runnable but preempted, in all its intervals.
    pub preempted: Fine,
}

impl ThreadStats {
    pub fn key(&self) -> lapse_data::ThreadKey {
        lapse_data::ThreadKey::reused(self.pid, self.tid, self.serial)
    }
}

/// Session totals: the denominators of SPEC 2.4.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionTotals {
    /// Sum of all intervals of all threads.
    pub elapsed_inclusive: Fine,
    /// The sum of the intervals' application parts.
    pub application_inclusive: Fine,
    /// Kept samples.
    pub samples: u64,
}

impl SessionTotals {
    pub fn of_threads<'a>(threads: impl IntoIterator<Item = &'a ThreadStats>) -> SessionTotals {
        let mut s = SessionTotals::default();
        for t in threads {
            s.elapsed_inclusive += t.time[TimeValue::ElapsedInclusive];
            s.application_inclusive += t.time[TimeValue::ApplicationInclusive];
        }
        s
    }

    /// The `*_pct` value of SPEC 2.4 for value `k` of `t`.
    pub fn time_pct(&self, t: &TimeValues, k: TimeValue) -> f64 {
        let whole = if k.is_application() {
            self.application_inclusive
        } else {
            self.elapsed_inclusive
        };
        pct(t[k].as_nanos_f64(), whole.as_nanos_f64())
    }

    /// `inclusive_pct`, `exclusive_pct` of SPEC 2.4.
    pub fn sample_pcts(&self, inclusive: u64, exclusive: u64) -> [f64; 2] {
        let n = self.samples as f64;
        [pct(inclusive as f64, n), pct(exclusive as f64, n)]
    }
}

/// 100 × part / whole, 0 when the whole is empty.
pub fn pct(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        100.0 * part / whole
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(n: u64) -> Fine {
        Fine::from_nanos(n)
    }

    #[test]
    fn a_row_is_probe_dominated_when_its_probes_cost_more_than_a_quarter_of_the_rest() {
        // compensated: 100 ns left, 26 ns removed -> 26 > 25: flagged
        assert!(probe_dominated(ns(26), ns(100), true));
        assert!(!probe_dominated(ns(25), ns(100), true));
        // raw: 125 ns shown of which 25 probe -> 100 left, 25 is not > 25
        assert!(!probe_dominated(ns(25), ns(125), false));
        assert!(probe_dominated(ns(26), ns(125), false));
        // no probe cost at all (an imported recording): never flagged
        assert!(!probe_dominated(ns(0), ns(0), true));
    }
}
