//! The interval engine of SPEC section 2.1.
//!
//! Every value is kept in O(1) per event with running clocks instead of
//! walking the stack per interval:
//! - `clock` holds the thread's cumulative elapsed, application and removed
//!   (probe-cost) time; a call's inclusive values are the clock's advance
//!   between its enter and its exit.
//! - A function's inclusive values are taken only from its *outermost* frame
//!   on the stack (per-function depth counters), which is exactly "each
//!   distinct function once per interval".
//! - A call's exclusive values follow the same rules restricted to the call's
//!   span: the advance of the function's own exclusive total between enter and
//!   exit (so inner recursive calls' exclusive time is inside the outer
//!   call's, just as their inclusive time is).

use lapse_data::{Event, EventKind, FunctionId, ModuleId, OsEvent, Timestamp};

use crate::calltree::CallTree;
use crate::fine::Fine;
use crate::values::{FunctionStats, ModuleStats, ThreadStats};

/// How to turn intervals into values.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Cost of one probe, removed from every interval delimited by two probes.
    pub probe_cost_ns: f64,
    /// `false` for `--no-compensation`.
    pub compensate: bool,
    /// `--from`/`--to`: only the parts of intervals inside this window count.
    pub window: Option<(Timestamp, Timestamp)>,
    /// Build the call tree (for `calltree`, `callers`, `callees`).
    pub call_tree: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            probe_cost_ns: 0.0,
            compensate: true,
            window: None,
            call_tree: false,
        }
    }
}

/// One worker's results: dense per-function and per-module tables plus one
/// row per thread it processed.
#[derive(Clone, Debug, Default)]
pub struct Accumulator {
    pub functions: Vec<FunctionStats>,
    pub modules: Vec<ModuleStats>,
    pub threads: Vec<ThreadStats>,
    pub trees: Vec<CallTree>,
    /// Exclusive (elapsed, application) per function, kept apart from
    /// `functions` while accumulating: it is touched on every interval, and a
    /// dense 16-byte-per-function table stays in L1 where the full stats do not.
    /// Folded into `functions` by [`Accumulator::finish`].
    exclusive: Vec<[u64; 2]>,
    /// Frames of each function currently on the stack of the running thread.
    fn_depth: Vec<u32>,
    mod_depth: Vec<u32>,
}

impl Accumulator {
    /// `module_of[f]` is the module of function `f`; the table's length is the
    /// number of functions.
    pub fn new(module_of: &[ModuleId], modules: usize) -> Accumulator {
        let modules = modules.max(
            module_of
                .iter()
                .map(|m| m.0 as usize + 1)
                .max()
                .unwrap_or(0),
        );
        Accumulator {
            functions: vec![FunctionStats::default(); module_of.len()],
            modules: vec![ModuleStats::default(); modules],
            threads: Vec::new(),
            trees: Vec::new(),
            exclusive: vec![[0; 2]; module_of.len()],
            fn_depth: vec![0; module_of.len()],
            mod_depth: vec![0; modules],
        }
    }

    /// Folds the exclusive values into the function rows and derives module
    /// exclusive values and calls: the sums of their functions' (the top
    /// frame's function, and the entered function, is in exactly one module). Call once, after all threads and merges.
    pub fn finish(&mut self, module_of: &[ModuleId]) {
        for (f, x) in self.functions.iter_mut().zip(&mut self.exclusive) {
            f.time.elapsed_exclusive.0 += x[0];
            f.time.application_exclusive.0 += x[1];
            *x = [0; 2];
        }
        for m in &mut self.modules {
            m.calls = 0;
            m.time.elapsed_exclusive = Fine(0);
            m.time.application_exclusive = Fine(0);
        }
        for (f, m) in self.functions.iter().zip(module_of) {
            if let Some(m) = self.modules.get_mut(m.0 as usize) {
                m.calls += f.calls;
                m.time.elapsed_exclusive.0 += f.time.elapsed_exclusive.0;
                m.time.application_exclusive.0 += f.time.application_exclusive.0;
            }
        }
    }

    /// Adds another worker's results (tables of the same sizes).
    pub fn merge(&mut self, other: Accumulator) {
        for (a, b) in self.functions.iter_mut().zip(&other.functions) {
            a.merge(b);
        }
        for (a, b) in self.exclusive.iter_mut().zip(&other.exclusive) {
            a[0] += b[0];
            a[1] += b[1];
        }
        for (a, b) in self.modules.iter_mut().zip(&other.modules) {
            a.merge(b);
        }
        self.threads.extend(other.threads);
        self.trees.extend(other.trees);
    }
}

#[derive(Clone, Copy, Debug)]
struct Frame {
    function: FunctionId,
    module: ModuleId,
    /// Outermost frame of its function: owns the function's inclusive time.
    first_of_function: bool,
    first_of_module: bool,
    /// Whether the enter fell inside the window (only those calls are counted).
    counted: bool,
    node: u32,
    at_enter: Clock,
    exclusive_at_enter: [Fine; 2],
}

#[derive(Clone, Copy, Debug, Default)]
struct Clock {
    elapsed: Fine,
    application: Fine,
    removed: Fine,
}

/// The running state of a thread. [`ThreadRun::feed`] copies it (and the
/// stack and thread row) into locals for the length of a batch, so the
/// compiler keeps it in registers instead of reloading it after every store
/// into the shared tables, which it cannot prove do not alias it.
#[derive(Clone, Copy, Debug)]
struct State {
    clock: Clock,
    last: Option<Timestamp>,
    /// The previous boundary was a probe (so the next interval may be compensated).
    last_was_probe: bool,
    next_off: usize,
    /// The off-CPU period at `next_off` (or two maximal times past the end),
    /// so the common check is two compares on registers.
    off_from: Timestamp,
    off_to: Timestamp,
}

/// The off-CPU period at `i`, or one that never comes.
fn period_at(off_cpu: &[OsEvent], i: usize) -> (Timestamp, Timestamp) {
    off_cpu.get(i).map_or(
        (
            Timestamp::from_nanos(u64::MAX),
            Timestamp::from_nanos(u64::MAX),
        ),
        |p| (p.from, p.to),
    )
}

/// The analysis of one thread, fed its events in time order.
pub struct ThreadRun<'a> {
    acc: &'a mut Accumulator,
    module_of: &'a [ModuleId],
    config: Config,
    cost: Fine,
    off_cpu: &'a [OsEvent],
    state: State,
    stack: Vec<Frame>,
    stats: ThreadStats,
    tree: Option<CallTree>,
}

/// What one batch works on: the thread's state as locals plus borrows of
/// the shared tables.
struct Step<'r> {
    st: State,
    stack: Vec<Frame>,
    stats: ThreadStats,
    /// The accumulator's tables as separate slices: their pointers and
    /// lengths then stay in registers too.
    functions: &'r mut [FunctionStats],
    modules: &'r mut [ModuleStats],
    exclusive: &'r mut [[u64; 2]],
    fn_depth: &'r mut [u32],
    mod_depth: &'r mut [u32],
    module_of: &'r [ModuleId],
    window: Option<(Timestamp, Timestamp)>,
    cost: Fine,
    off_cpu: &'r [OsEvent],
    tree: Option<&'r mut CallTree>,
}

impl<'a> ThreadRun<'a> {
    /// Starts a thread. `start` is when the thread began (its first interval,
    /// empty-stack, runs from there to the first event); `off_cpu` are its OS
    /// events in time order.
    pub fn new(
        acc: &'a mut Accumulator,
        module_of: &'a [ModuleId],
        config: Config,
        pid: u32,
        tid: u32,
        start: Option<Timestamp>,
        off_cpu: &'a [OsEvent],
    ) -> ThreadRun<'a> {
        let cost = if config.compensate {
            Fine::from_nanos_f64(config.probe_cost_ns)
        } else {
            Fine(0)
        };
        let tree = config.call_tree.then(|| CallTree::new(pid, tid));
        ThreadRun {
            acc,
            module_of,
            config,
            cost,
            off_cpu,
            state: State {
                clock: Clock::default(),
                last: start,
                last_was_probe: false,
                next_off: 0,
                off_from: period_at(off_cpu, 0).0,
                off_to: period_at(off_cpu, 0).1,
            },
            stack: Vec::new(),
            stats: ThreadStats {
                pid,
                tid,
                ..ThreadStats::default()
            },
            tree,
        }
    }

    /// Runs `f` on the thread's state moved into a [`Step`], then moves it back.
    #[inline(always)]
    fn step<R>(&mut self, f: impl FnOnce(&mut Step<'_>) -> R) -> R {
        let acc = &mut *self.acc;
        let mut step = Step {
            st: self.state,
            stack: std::mem::take(&mut self.stack),
            stats: self.stats,
            functions: &mut acc.functions,
            modules: &mut acc.modules,
            exclusive: &mut acc.exclusive,
            fn_depth: &mut acc.fn_depth,
            mod_depth: &mut acc.mod_depth,
            module_of: self.module_of,
            window: self.config.window,
            cost: self.cost,
            off_cpu: self.off_cpu,
            tree: self.tree.as_mut(),
        };
        let r = f(&mut step);
        self.state = step.st;
        self.stack = step.stack;
        self.stats = step.stats;
        r
    }

    pub fn feed(&mut self, events: &[Event]) {
        self.step(|s| {
            s.stats.events += events.len() as u64;
            for e in events {
                s.event(e);
            }
        });
    }

    /// Feeds events as an iterator yields them (e.g. straight from a decoder,
    /// so they are never stored).
    pub fn feed_iter(&mut self, events: impl Iterator<Item = Event>) {
        self.step(|s| {
            let mut n = 0u64;
            for e in events {
                s.event(&e);
                n += 1;
            }
            s.stats.events += n;
        });
    }

    pub fn event(&mut self, e: &Event) {
        self.step(|s| s.event(e));
    }

    /// Ends the thread at `end` (or at its last event when `None` or earlier):
    /// the last interval runs to `end`, calls still open are closed there.
    pub fn finish(mut self, end: Option<Timestamp>) -> ThreadStats {
        self.step(|s| {
            if let Some(end) = end {
                if s.st.last.is_none_or(|last| end >= last) {
                    s.advance(end, false);
                }
            }
            while let Some(top) = s.stack.last() {
                s.stats.open_calls += 1;
                s.functions[top.function.0 as usize].open_calls += 1;
                s.pop();
            }
        });
        self.stats.probe_overhead = self.state.clock.removed;
        self.stats.time.elapsed_inclusive = self.state.clock.elapsed;
        self.stats.time.application_inclusive = self.state.clock.application;
        let stats = self.stats;
        if let Some(tree) = self.tree.take() {
            self.acc.trees.push(tree);
        }
        self.acc.threads.push(stats);
        stats
    }
}

impl Step<'_> {
    #[inline(always)]
    fn event(&mut self, e: &Event) {
        if e.function.0 as usize >= self.module_of.len() {
            self.stats.invalid_events += 1;
            return;
        }
        self.advance(e.ts, true);
        match e.kind {
            EventKind::Enter => self.enter(e.function, e.ts),
            EventKind::Exit => self.exit(e.function),
        }
    }

    /// Accounts the interval from the previous boundary to `ts` to the current stack.
    #[inline(always)]
    fn advance(&mut self, ts: Timestamp, is_probe: bool) {
        let Some(last) = self.st.last else {
            self.st.last = Some(ts);
            self.st.last_was_probe = is_probe;
            return;
        };
        if ts < last {
            self.stats.backward_timestamps += 1;
            self.st.last_was_probe = is_probe;
            return;
        }
        let has_os_event = self.has_os_event(last, ts);
        let ns = match self.window {
            None => ts.since(last),
            Some((from, to)) => ts.min(to).since(last.max(from)),
        };
        self.st.last = Some(ts);
        let probe_bounded = is_probe && self.st.last_was_probe;
        self.st.last_was_probe = is_probe;
        let raw = Fine::from_nanos(ns);
        // (a zero-length interval has nothing to remove: min gives 0)
        let removed = if probe_bounded {
            Fine(raw.0.min(self.cost.0))
        } else {
            Fine(0)
        };
        let d = raw.0 - removed.0;
        let clock = &mut self.st.clock;
        clock.elapsed.0 += d;
        clock.removed.0 += removed.0;
        let app = if has_os_event { 0 } else { d };
        clock.application.0 += app;
        // Thread inclusive values are the clock itself (taken in `finish`);
        // module exclusive values are sums of their functions' (taken in
        // `Accumulator::finish`): neither needs work per interval.
        match self.stack.last() {
            None => {
                self.stats.time.elapsed_exclusive.0 += d;
                self.stats.time.application_exclusive.0 += app;
            }
            Some(top) => {
                let x = &mut self.exclusive[top.function.0 as usize];
                x[0] += d;
                x[1] += app;
                if let Some(tree) = &mut self.tree {
                    tree.add_exclusive(top.node, Fine(d), Fine(app));
                }
            }
        }
    }

    /// True when an off-CPU period overlaps the open interval (`from`, `to`).
    #[inline(always)]
    fn has_os_event(&mut self, from: Timestamp, to: Timestamp) -> bool {
        // (past the last period both are MAX; the length check stops the
        // loop even for a damaged file's timestamp of MAX)
        while self.st.off_to <= from && self.st.next_off < self.off_cpu.len() {
            self.st.next_off += 1;
            (self.st.off_from, self.st.off_to) = period_at(self.off_cpu, self.st.next_off);
        }
        self.st.off_from < to
    }

    #[inline(always)]
    fn enter(&mut self, function: FunctionId, ts: Timestamp) {
        let f = function.0 as usize;
        let module = self.module_of[f];
        let counted = self.window.is_none_or(|(from, to)| ts >= from && ts <= to);
        let first_of_function = self.fn_depth[f] == 0;
        self.fn_depth[f] += 1;
        let first_of_module = self.mod_depth[module.0 as usize] == 0;
        self.mod_depth[module.0 as usize] += 1;
        if counted {
            // (module calls are the sums of their functions', in `Accumulator::finish`)
            self.functions[f].calls += 1;
            self.stats.calls += 1;
        }
        let x = self.exclusive[f];
        let exclusive_at_enter = [Fine(x[0]), Fine(x[1])];
        let node = match &mut self.tree {
            Some(tree) => {
                let parent = self.stack.last().map_or(0, |f| f.node);
                tree.enter(parent, function, counted)
            }
            None => 0,
        };
        self.stack.push(Frame {
            function,
            module,
            first_of_function,
            first_of_module,
            counted,
            node,
            at_enter: self.st.clock,
            exclusive_at_enter,
        });
    }

    #[inline(always)]
    fn exit(&mut self, function: FunctionId) {
        match self.stack.last() {
            Some(top) if top.function == function => self.pop(),
            _ => self.exit_below(function),
        }
    }

    /// An exit that does not match the top frame.
    #[inline(never)]
    fn exit_below(&mut self, function: FunctionId) {
        match self.stack.iter().rposition(|f| f.function == function) {
            // A frame further down matches (longjmp, exception, lost exits):
            // close the frames above it here, then the matching one.
            Some(pos) => {
                while self.stack.len() > pos + 1 {
                    self.stats.repaired_exits += 1;
                    self.pop();
                }
                self.pop();
            }
            None => self.stats.unmatched_exits += 1,
        }
    }

    /// Closes the top frame at the current clock.
    #[inline(always)]
    fn pop(&mut self) {
        let Some(frame) = self.stack.pop() else {
            return;
        };
        let f = frame.function.0 as usize;
        let m = frame.module.0 as usize;
        self.fn_depth[f] -= 1;
        self.mod_depth[m] -= 1;
        let clock = self.st.clock;
        let inc_e = Fine(clock.elapsed.0 - frame.at_enter.elapsed.0);
        let inc_a = Fine(clock.application.0 - frame.at_enter.application.0);
        let removed = Fine(clock.removed.0 - frame.at_enter.removed.0);
        let x = self.exclusive[f];
        let exc_e = Fine(x[0] - frame.exclusive_at_enter[0].0);
        let exc_a = Fine(x[1] - frame.exclusive_at_enter[1].0);
        let stats = &mut self.functions[f];
        if frame.counted {
            stats.per_call.add_call([inc_e, exc_e, inc_a, exc_a]);
        }
        if frame.first_of_function {
            stats.time.elapsed_inclusive.0 += inc_e.0;
            stats.time.application_inclusive.0 += inc_a.0;
            stats.probe_overhead.0 += removed.0;
        }
        if frame.first_of_module {
            let module = &mut self.modules[m];
            module.time.elapsed_inclusive.0 += inc_e.0;
            module.time.application_inclusive.0 += inc_a.0;
            module.probe_overhead.0 += removed.0;
        }
        if let Some(tree) = &mut self.tree {
            tree.exit(frame.node, inc_e, inc_a, removed, frame.counted);
        }
    }
}
