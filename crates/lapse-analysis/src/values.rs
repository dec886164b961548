//! The value columns of SPEC section 2, as accumulated per row.

use crate::fine::Fine;

/// The four time values of SPEC 2.1, in [`Fine`] units while accumulating.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeValues {
    pub elapsed_inclusive: Fine,
    pub elapsed_exclusive: Fine,
    pub application_inclusive: Fine,
    pub application_exclusive: Fine,
}

impl TimeValues {
    pub fn as_array(&self) -> [Fine; 4] {
        [
            self.elapsed_inclusive,
            self.elapsed_exclusive,
            self.application_inclusive,
            self.application_exclusive,
        ]
    }

    pub fn from_array(a: [Fine; 4]) -> TimeValues {
        TimeValues {
            elapsed_inclusive: a[0],
            elapsed_exclusive: a[1],
            application_inclusive: a[2],
            application_exclusive: a[3],
        }
    }

    pub fn add(&mut self, o: &TimeValues) {
        self.elapsed_inclusive.0 += o.elapsed_inclusive.0;
        self.elapsed_exclusive.0 += o.elapsed_exclusive.0;
        self.application_inclusive.0 += o.application_inclusive.0;
        self.application_exclusive.0 += o.application_exclusive.0;
    }
}

/// Per-call statistics of one value: sum, min and max over calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PerCall {
    pub sum: [Fine; 4],
    pub min: [Fine; 4],
    pub max: [Fine; 4],
}

impl Default for PerCall {
    fn default() -> Self {
        PerCall {
            sum: [Fine(0); 4],
            min: [Fine(u64::MAX); 4],
            max: [Fine(0); 4],
        }
    }
}

impl PerCall {
    #[inline]
    pub fn add_call(&mut self, v: [Fine; 4]) {
        for (i, x) in v.into_iter().enumerate() {
            self.sum[i].0 += x.0;
            // Branches, not conditional moves: after the first few calls a new
            // minimum or maximum is rare, so these are predicted and nothing
            // is stored.
            if x < self.min[i] {
                self.min[i] = x;
            }
            if x > self.max[i] {
                self.max[i] = x;
            }
        }
    }

    pub fn merge(&mut self, o: &PerCall) {
        for i in 0..4 {
            self.sum[i].0 += o.sum[i].0;
            self.min[i] = self.min[i].min(o.min[i]);
            self.max[i] = self.max[i].max(o.max[i]);
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
    /// Probe cost removed from this function's elapsed inclusive time.
    pub probe_overhead: Fine,
}

impl FunctionStats {
    pub fn merge(&mut self, o: &FunctionStats) {
        self.calls += o.calls;
        self.open_calls += o.open_calls;
        self.time.add(&o.time);
        self.per_call.merge(&o.per_call);
        self.probe_overhead.0 += o.probe_overhead.0;
    }

    /// Number of calls the per-call values are over.
    pub fn closed_calls(&self) -> u64 {
        // Every enter is closed eventually (at its exit, a repair, or thread end),
        // except enters outside a --from/--to window, which are not counted at all.
        self.calls
    }
}

/// SPEC 2.3 module row: inclusive when any frame of the module is on the stack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModuleStats {
    pub calls: u64,
    pub time: TimeValues,
    pub probe_overhead: Fine,
}

impl ModuleStats {
    pub fn merge(&mut self, o: &ModuleStats) {
        self.calls += o.calls;
        self.time.add(&o.time);
        self.probe_overhead.0 += o.probe_overhead.0;
    }
}

/// SPEC 2.3 thread row: inclusive = all intervals, exclusive = empty-stack intervals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadStats {
    pub pid: u32,
    pub tid: u32,
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
}

/// Session totals: the denominators of SPEC 2.4.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionTotals {
    /// Sum of all intervals of all threads.
    pub elapsed_inclusive: Fine,
    /// Sum of the intervals with no OS event.
    pub application_inclusive: Fine,
    /// Kept samples.
    pub samples: u64,
}

impl SessionTotals {
    pub fn of_threads<'a>(threads: impl IntoIterator<Item = &'a ThreadStats>) -> SessionTotals {
        let mut s = SessionTotals::default();
        for t in threads {
            s.elapsed_inclusive.0 += t.time.elapsed_inclusive.0;
            s.application_inclusive.0 += t.time.application_inclusive.0;
        }
        s
    }

    /// The four `*_pct` values of SPEC 2.4 for `t`, in the order
    /// elapsed inclusive, elapsed exclusive, application inclusive, application exclusive.
    pub fn time_pcts(&self, t: &TimeValues) -> [f64; 4] {
        let e = self.elapsed_inclusive.0 as f64;
        let a = self.application_inclusive.0 as f64;
        [
            pct(t.elapsed_inclusive.0 as f64, e),
            pct(t.elapsed_exclusive.0 as f64, e),
            pct(t.application_inclusive.0 as f64, a),
            pct(t.application_exclusive.0 as f64, a),
        ]
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
