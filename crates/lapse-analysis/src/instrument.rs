//! The interval engine of SPEC section 2.1.
//!
//! Every value is kept in O(1) per event with running clocks instead of
//! walking the stack per interval:
//! - `clock` holds the thread's cumulative elapsed, application and
//!   probe-cost time (only counted by default, removed from the values
//!   with `--compensate`, so that rows can be flagged `probe_dominated`
//!   either way); a call's inclusive values are the clock's advance
//!   between its enter and its exit.
//! - A function's inclusive values are taken only from its *outermost* frame
//!   on the stack (the stack counts each function's open frames), which is exactly "each
//!   distinct function once per interval".
//! - A call's exclusive values are the intervals during which *its own
//!   frame* is on top, summed in the frame while it is (so under recursion
//!   an outer call's exclusive time does not hold its inner calls', and per
//!   function the calls' exclusive values add up to the function's). A
//!   function's (and a call-tree node's) exclusive values are its frames'
//!   own values, added when each frame closes.
//!
//! Calls nest through the one [`CallStack`]; OS events come from the
//! thread's merged off-CPU periods ([`OffCpu`]).

use lapse_data::{
    Event, EventKind, FunctionId, ModuleId, OsEvent, OsEventKind, Paused, ThreadKey, Timestamp,
};

use crate::fine::Fine;
use crate::nesting::{CallStack, Closed, Exit, StackFrame};
use crate::offcpu::OffCpu;
use crate::tree::{CallTree, FrameKey, NodeId};
use crate::values::{FunctionStats, ModuleStats, ThreadStats, TimeValue, TimeValues};

/// Which part of an interval is application time (SPEC 2.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ApplicationRule {
    /// The interval's length less the time its thread spent in OS events.
    #[default]
    Exact,
    /// Nothing when the interval has an OS event, else all of it (the
    /// Visual Studio rule).
    Interval,
}

impl ApplicationRule {
    pub const ALL: [(&'static str, ApplicationRule); 2] = [
        ("exact", ApplicationRule::Exact),
        ("interval", ApplicationRule::Interval),
    ];

    pub const fn name(self) -> &'static str {
        match self {
            ApplicationRule::Exact => "exact",
            ApplicationRule::Interval => "interval",
        }
    }
}

/// How to turn intervals into values.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Cost of one probe, removed from every interval delimited by two probes.
    pub probe_cost_ns: f64,
    /// `true` for `--compensate` (off by default: raw values).
    pub compensate: bool,
    /// `--from`/`--to`: only the parts of intervals inside this window count.
    pub window: Option<(Timestamp, Timestamp)>,
    /// Build the call tree (for `calltree`, `callers`, `callees`).
    pub call_tree: bool,
    pub application: ApplicationRule,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            probe_cost_ns: 0.0,
            compensate: false,
            window: None,
            call_tree: false,
            application: ApplicationRule::default(),
        }
    }
}

/// One thread's call tree.
#[derive(Clone, Debug)]
pub struct ThreadTree {
    pub pid: u32,
    pub tid: u32,
    /// Which thread with this id ([`lapse_data::ThreadKey::serial`]).
    pub serial: u16,
    pub tree: CallTree<FunctionStats>,
}

impl ThreadTree {
    pub fn key(&self) -> lapse_data::ThreadKey {
        lapse_data::ThreadKey::reused(self.pid, self.tid, self.serial)
    }
}

/// One worker's results: dense per-function and per-module tables plus one
/// row per thread it processed.
#[derive(Clone, Debug, Default)]
pub struct Accumulator {
    pub functions: Vec<FunctionStats>,
    pub modules: Vec<ModuleStats>,
    pub threads: Vec<ThreadStats>,
    pub trees: Vec<ThreadTree>,
    /// Frames of each module currently on the stack of the running thread.
    mod_depth: Vec<u32>,
    /// The running thread's stack, kept (empty) for the next thread: it
    /// counts each function's open frames.
    stack: CallStack<Frame>,
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
            // (sized when a thread first runs on it: the empty accumulators
            // a parallel fold starts and reduces with cost nothing, which
            // matters with a million functions)
            functions: Vec::new(),
            modules: vec![ModuleStats::default(); modules],
            threads: Vec::new(),
            trees: Vec::new(),
            mod_depth: vec![0; modules],
            stack: CallStack::default(),
        }
    }

    /// Derives module exclusive values and calls: the sums of their
    /// functions' (the top frame's function, and the entered function, is
    /// in exactly one module). Call once, after all threads and merges.
    pub fn finish(&mut self, module_of: &[ModuleId]) {
        self.size_for(module_of);
        for m in &mut self.modules {
            m.calls = 0;
            m.time[TimeValue::ElapsedExclusive] = Fine::ZERO;
            m.time[TimeValue::ApplicationExclusive] = Fine::ZERO;
        }
        for (f, m) in self.functions.iter().zip(module_of) {
            if let Some(m) = self.modules.get_mut(m.0 as usize) {
                m.calls += f.calls;
                m.time[TimeValue::ElapsedExclusive] += f.time[TimeValue::ElapsedExclusive];
                m.time[TimeValue::ApplicationExclusive] += f.time[TimeValue::ApplicationExclusive];
            }
        }
    }

    /// Gives the function table its full size (once a thread runs on it).
    fn size_for(&mut self, module_of: &[ModuleId]) {
        if self.functions.len() < module_of.len() {
            self.functions
                .resize(module_of.len(), FunctionStats::default());
        }
    }

    /// Adds another worker's results (tables of the same sizes, or empty).
    pub fn merge(&mut self, mut other: Accumulator) {
        if self.functions.is_empty() {
            std::mem::swap(&mut self.functions, &mut other.functions);
        } else {
            for (a, b) in self.functions.iter_mut().zip(&other.functions) {
                a.merge(b);
            }
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
    node: NodeId,
    at_enter: Clock,
    /// Elapsed and application time while this frame was on top.
    own: [Fine; 2],
}

impl StackFrame for Frame {
    #[inline(always)]
    fn function(&self) -> FunctionId {
        self.function
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Clock {
    elapsed: Fine,
    application: Fine,
    removed: Fine,
    /// Off-CPU time while runnable (preempted).
    preempted: Fine,
}

/// The running state of a thread. [`ThreadRun::feed`] copies it into locals
/// for the length of a batch, so the compiler keeps it in registers instead
/// of reloading it after every store into the shared tables, which it cannot
/// prove do not alias it.
#[derive(Clone, Copy, Debug)]
struct State {
    clock: Clock,
    last: Option<Timestamp>,
    /// The previous boundary was a probe (so the next interval may be compensated).
    last_was_probe: bool,
    /// Enters still to come that are inherited frames, not calls.
    inherited: u32,
    /// Where the next paused stretch starts (`Timestamp` max: none), and
    /// its index in [`ThreadRun::paused`].
    next_pause: Timestamp,
    pause_at: usize,
}

/// The analysis of one thread, fed its events in time order.
pub struct ThreadRun<'a> {
    acc: &'a mut Accumulator,
    module_of: &'a [ModuleId],
    config: Config,
    cost: Fine,
    off_cpu: OffCpu,
    /// The thread's preempted periods alone (a part of `off_cpu`'s).
    preempted: OffCpu,
    state: State,
    stack: CallStack<Frame>,
    stats: ThreadStats,
    tree: Option<CallTree<FunctionStats>>,
    /// The session's paused stretches, in time order.
    paused: &'a [Paused],
}

/// What one batch works on: the call stack, and everything a closing frame
/// updates (apart, so a frame can be closed while the stack is borrowed).
struct Step<'r> {
    stack: CallStack<Frame>,
    sink: Sink<'r>,
}

/// The thread's state as locals plus borrows of the shared tables.
struct Sink<'r> {
    st: State,
    stats: ThreadStats,
    /// The accumulator's tables as separate slices: their pointers and
    /// lengths then stay in registers too.
    functions: &'r mut [FunctionStats],
    modules: &'r mut [ModuleStats],
    mod_depth: &'r mut [u32],
    module_of: &'r [ModuleId],
    window: Option<(Timestamp, Timestamp)>,
    rule: ApplicationRule,
    cost: Fine,
    /// Not `--compensate` (the default): the probe cost is counted, not removed.
    keep_cost: bool,
    off_cpu: &'r mut OffCpu,
    preempted: &'r mut OffCpu,
    tree: Option<&'r mut CallTree<FunctionStats>>,
    paused: &'r [Paused],
}

impl<'a> ThreadRun<'a> {
    /// Starts a thread. `start` is when the thread began (its first interval,
    /// empty-stack, runs from there to the first event); `off_cpu` are its OS
    /// events.
    pub fn new(
        acc: &'a mut Accumulator,
        module_of: &'a [ModuleId],
        config: Config,
        thread: ThreadKey,
        start: Option<Timestamp>,
        off_cpu: &[OsEvent],
    ) -> ThreadRun<'a> {
        let cost = Fine::from_nanos_f64(config.probe_cost_ns);
        acc.size_for(module_of);
        // (the last thread's stack, empty: its counts stay allocated)
        let stack = std::mem::take(&mut acc.stack);
        ThreadRun {
            acc,
            module_of,
            config,
            cost,
            off_cpu: OffCpu::new(off_cpu),
            preempted: OffCpu::new(
                &off_cpu
                    .iter()
                    .filter(|e| e.kind == OsEventKind::Preempt)
                    .copied()
                    .collect::<Vec<_>>(),
            ),
            state: State {
                clock: Clock::default(),
                last: start,
                last_was_probe: false,
                inherited: 0,
                next_pause: Timestamp::from_nanos(u64::MAX),
                pause_at: 0,
            },
            stack,
            stats: ThreadStats {
                pid: thread.pid,
                tid: thread.tid,
                serial: thread.serial,
                ..ThreadStats::default()
            },
            tree: config.call_tree.then(CallTree::new),
            paused: &[],
        }
    }

    /// The session's paused stretches (in time order): nothing of the
    /// thread counts inside them, and the calls open when one begins are
    /// closed there, as at the thread's end (their exits after it match
    /// nothing).
    pub fn paused(mut self, paused: &'a [Paused]) -> Self {
        self.paused = paused;
        self.state.next_pause = paused
            .first()
            .map_or(Timestamp::from_nanos(u64::MAX), |p| p.from);
        self
    }

    /// The thread's first `frames` enters are frames it inherited (a fork
    /// child starts inside its parent's open calls): on the stack like any
    /// frame, but not calls (SPEC 2.1: calls count entries).
    pub fn inherited(mut self, frames: u32) -> Self {
        self.state.inherited = frames;
        self
    }

    /// Runs `f` on the thread's state moved into a [`Step`], then moves it back.
    #[inline(always)]
    fn step<R>(&mut self, f: impl FnOnce(&mut Step<'_>) -> R) -> R {
        let acc = &mut *self.acc;
        let mut step = Step {
            stack: std::mem::take(&mut self.stack),
            sink: Sink {
                st: self.state,
                stats: self.stats,
                functions: &mut acc.functions,
                modules: &mut acc.modules,
                mod_depth: &mut acc.mod_depth,
                module_of: self.module_of,
                window: self.config.window,
                rule: self.config.application,
                cost: self.cost,
                keep_cost: !self.config.compensate,
                off_cpu: &mut self.off_cpu,
                preempted: &mut self.preempted,
                tree: self.tree.as_mut(),
                paused: self.paused,
            },
        };
        let r = f(&mut step);
        self.state = step.sink.st;
        self.stats = step.sink.stats;
        self.stack = step.stack;
        r
    }

    pub fn feed(&mut self, events: &[Event]) {
        self.step(|s| {
            s.sink.stats.events += events.len() as u64;
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
            s.sink.stats.events += n;
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
                if end >= s.sink.st.next_pause {
                    s.pause_until(end);
                }
                if s.sink.st.last.is_none_or(|last| end >= last) {
                    s.sink.advance(s.stack.top_mut(), end, false);
                }
            }
            let sink = &mut s.sink;
            s.stack.close_all(|frame, how| sink.close(frame, how));
        });
        self.acc.stack = std::mem::take(&mut self.stack);
        let clock = self.state.clock;
        self.stats.probe_overhead = clock.removed;
        self.stats.preempted = clock.preempted;
        self.stats.time[TimeValue::ElapsedInclusive] = clock.elapsed;
        self.stats.time[TimeValue::ApplicationInclusive] = clock.application;
        let stats = self.stats;
        if let Some(tree) = self.tree.take() {
            self.acc.trees.push(ThreadTree {
                pid: stats.pid,
                tid: stats.tid,
                serial: stats.serial,
                tree,
            });
        }
        self.acc.threads.push(stats);
        stats
    }
}

impl Step<'_> {
    #[inline(always)]
    fn event(&mut self, e: &Event) {
        if e.function.0 as usize >= self.sink.module_of.len() {
            self.sink.stats.invalid_events += 1;
            return;
        }
        // (one compare per event when nothing was paused)
        if e.ts >= self.sink.st.next_pause && self.pause_until(e.ts) {
            return;
        }
        self.sink.advance(self.stack.top_mut(), e.ts, true);
        match e.kind {
            EventKind::Enter => {
                let parent = self.stack.top().map_or(NodeId::ROOT, |p| p.node);
                let sink = &mut self.sink;
                self.stack.push_new(e.function, |open| {
                    sink.enter(parent, e.function, e.ts, open == 0)
                });
            }
            EventKind::Exit => {
                let sink = &mut self.sink;
                match self
                    .stack
                    .exit(e.function, |frame, how| sink.close(frame, how))
                {
                    Exit::Returned | Exit::Repaired(_) => {}
                    Exit::Unmatched => sink.stats.unmatched_exits += 1,
                }
            }
            EventKind::Unwind => {
                let sink = &mut self.sink;
                if self
                    .stack
                    .unwind(e.function, |frame, how| sink.close(frame, how))
                    == Exit::Unmatched
                {
                    sink.stats.unmatched_exits += 1;
                }
            }
        }
    }
}

impl Step<'_> {
    /// Applies the paused stretches that begin at or before `ts`: the time
    /// up to each one's start counts, the calls open then close there, and
    /// the thread's next interval starts at its end. True when `ts` lies
    /// inside one (its event is left out).
    #[cold]
    fn pause_until(&mut self, ts: Timestamp) -> bool {
        let none = Timestamp::from_nanos(u64::MAX);
        loop {
            let Some(&p) = self.sink.paused.get(self.sink.st.pause_at) else {
                self.sink.st.next_pause = none;
                return false;
            };
            if ts < p.from {
                self.sink.st.next_pause = p.from;
                return false;
            }
            if self.sink.st.last.is_some_and(|last| last < p.from) {
                self.sink.advance(self.stack.top_mut(), p.from, false);
            }
            let sink = &mut self.sink;
            self.stack.close_all(|frame, how| sink.close(frame, how));
            let st = &mut self.sink.st;
            st.last = Some(st.last.map_or(p.to, |last| last.max(p.to)));
            st.last_was_probe = false;
            // (inherited frames still to come would be a fork child's in
            // the stretch: its calls after the resume are calls)
            st.inherited = 0;
            if ts < p.to {
                return true;
            }
            st.pause_at += 1;
        }
    }
}

impl Sink<'_> {
    /// Accounts the interval from the previous boundary to `ts` to the
    /// stack whose top frame is `top`.
    #[inline(always)]
    fn advance(&mut self, top: Option<&mut Frame>, ts: Timestamp, is_probe: bool) {
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
        let (from, to) = match self.window {
            None => (last, ts),
            Some((lo, hi)) => (last.max(lo), ts.min(hi)),
        };
        let ns = to.since(from);
        self.st.last = Some(ts);
        let probe_bounded = is_probe && self.st.last_was_probe;
        self.st.last_was_probe = is_probe;
        let raw = Fine::from_nanos(ns);
        // (a zero-length interval has nothing to remove: min gives 0)
        let removed = if probe_bounded {
            raw.min(self.cost)
        } else {
            Fine::ZERO
        };
        let d = if self.keep_cost { raw } else { raw - removed };
        let (app, off) = match self.rule {
            ApplicationRule::Interval => {
                if self.off_cpu.touches(last, ts) {
                    (Fine::ZERO, true)
                } else {
                    (d, false)
                }
            }
            ApplicationRule::Exact => {
                let off = self.off_cpu.covered(from, to);
                (d.saturating_sub(Fine::from_nanos(off)), off > 0)
            }
        };
        let clock = &mut self.st.clock;
        clock.elapsed += d;
        clock.removed += removed;
        clock.application += app;
        // (only intervals with time off the CPU can hold preempted time:
        // the second cursor is walked for those alone)
        if off {
            clock.preempted += Fine::from_nanos(self.preempted.covered(from, to));
        }
        // Thread inclusive values are the clock itself (taken in `finish`);
        // module exclusive values are sums of their functions' (taken in
        // `Accumulator::finish`): neither needs work per interval.
        match top {
            None => {
                self.stats.time[TimeValue::ElapsedExclusive] += d;
                self.stats.time[TimeValue::ApplicationExclusive] += app;
            }
            Some(top) => {
                top.own[0] += d;
                top.own[1] += app;
            }
        }
    }

    /// A new frame of `function`, entered at `ts` under the call-tree node
    /// `parent`; `first_of_function`: no frame of the function is open.
    #[inline(always)]
    fn enter(
        &mut self,
        parent: NodeId,
        function: FunctionId,
        ts: Timestamp,
        first_of_function: bool,
    ) -> Frame {
        let f = function.0 as usize;
        let module = self.module_of[f];
        let mut counted = self.window.is_none_or(|(from, to)| ts >= from && ts <= to);
        if self.st.inherited > 0 {
            self.st.inherited -= 1;
            counted = false;
        }
        let first_of_module = self.mod_depth[module.0 as usize] == 0;
        self.mod_depth[module.0 as usize] += 1;
        if counted {
            // (module calls are the sums of their functions', in `Accumulator::finish`)
            self.functions[f].calls += 1;
            self.stats.calls += 1;
        }
        let node = match &mut self.tree {
            Some(tree) => {
                let node = tree.child(parent, FrameKey::Function(function));
                if counted {
                    tree.weight_mut(node).calls += 1;
                }
                node
            }
            None => NodeId::ROOT,
        };
        Frame {
            function,
            module,
            first_of_function,
            first_of_module,
            counted,
            node,
            at_enter: self.st.clock,
            own: [Fine::ZERO; 2],
        }
    }

    /// Closes `frame` at the current clock.
    #[inline(always)]
    fn close(&mut self, frame: Frame, how: Closed) {
        match how {
            Closed::Returned => {}
            Closed::Skipped | Closed::Unwound => self.stats.repaired_exits += 1,
            Closed::ThreadEnd => {
                self.stats.open_calls += 1;
                self.functions[frame.function.0 as usize].open_calls += 1;
            }
        }
        let f = frame.function.0 as usize;
        let m = frame.module.0 as usize;
        self.mod_depth[m] -= 1;
        let clock = self.st.clock;
        let inc_e = clock.elapsed - frame.at_enter.elapsed;
        let inc_a = clock.application - frame.at_enter.application;
        let removed = clock.removed - frame.at_enter.removed;
        let preempted = clock.preempted - frame.at_enter.preempted;
        let [exc_e, exc_a] = frame.own;
        let call = call_values(inc_e, exc_e, inc_a, exc_a);
        let stats = &mut self.functions[f];
        stats.time[TimeValue::ElapsedExclusive] += exc_e;
        stats.time[TimeValue::ApplicationExclusive] += exc_a;
        if frame.counted {
            stats.per_call.add_call(call);
        }
        if frame.first_of_function {
            stats.time[TimeValue::ElapsedInclusive] += inc_e;
            stats.time[TimeValue::ApplicationInclusive] += inc_a;
            stats.probe_overhead += removed;
            stats.preempted += preempted;
        }
        if frame.first_of_module {
            let module = &mut self.modules[m];
            module.time[TimeValue::ElapsedInclusive] += inc_e;
            module.time[TimeValue::ApplicationInclusive] += inc_a;
            module.probe_overhead += removed;
            module.preempted += preempted;
        }
        if let Some(tree) = &mut self.tree {
            let s = tree.weight_mut(frame.node);
            s.time[TimeValue::ElapsedInclusive] += inc_e;
            s.time[TimeValue::ApplicationInclusive] += inc_a;
            s.time[TimeValue::ElapsedExclusive] += exc_e;
            s.time[TimeValue::ApplicationExclusive] += exc_a;
            s.probe_overhead += removed;
            s.preempted += preempted;
            if how == Closed::ThreadEnd {
                s.open_calls += 1;
            }
            if frame.counted {
                s.per_call.add_call(call);
            }
        }
    }
}

fn call_values(inc_e: Fine, exc_e: Fine, inc_a: Fine, exc_a: Fine) -> TimeValues {
    let mut v = TimeValues::default();
    v[TimeValue::ElapsedInclusive] = inc_e;
    v[TimeValue::ElapsedExclusive] = exc_e;
    v[TimeValue::ApplicationInclusive] = inc_a;
    v[TimeValue::ApplicationExclusive] = exc_a;
    v
}
