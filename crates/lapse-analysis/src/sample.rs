//! SPEC section 2.2: samples to inclusive/exclusive counts, and off-CPU
//! periods (`--off-cpu`) to inclusive/exclusive off-CPU nanoseconds.
//!
//! Samples are first counted per distinct stack; each distinct stack is then
//! expanded once (frames to their inline chains) and its count added to every
//! distinct function, line, address and module on it (inclusive) and to its
//! top (exclusive). Off-CPU periods go the same way, weighing their length
//! instead of 1. The cost is O(samples + periods) + O(distinct stacks × depth).

use std::collections::{HashMap, HashSet};

use lapse_data::{
    FrameId, FrameInfo, FunctionId, ModuleId, OffCpuPeriod, Sample, StackId, StackNode, ThreadKey,
    Timestamp,
};

use crate::tree::{CallTree, FrameKey, NodeId, Weight};

/// Inclusive and exclusive nanoseconds of one row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Nanos {
    pub inclusive: u64,
    pub exclusive: u64,
}

impl Nanos {
    fn add(&mut self, o: &Nanos) {
        self.inclusive += o.inclusive;
        self.exclusive += o.exclusive;
    }
}

/// The values of one sampling row: inclusive and exclusive sample counts,
/// and with `--off-cpu` the time off the CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub inclusive: u64,
    pub exclusive: u64,
    /// Nanoseconds the row's stacks spent switched out (`--off-cpu`).
    pub off_cpu: Nanos,
    /// The part of `off_cpu` the thread was runnable but preempted (the
    /// kernel's switch-out record says so); the rest it was blocked.
    pub preempted: Nanos,
    /// When the recording has off-CPU periods: wall-clock nanoseconds, the
    /// on-CPU estimate (samples × period) plus the off-CPU time; zero
    /// otherwise. It orders call trees then (see [`Weight`]), so a path
    /// that only waits is not taken for an empty one.
    pub wall: Nanos,
}

impl Counts {
    /// Sets [`Counts::wall`] for samples of `period_ns` nanoseconds each.
    pub fn set_wall(&mut self, period_ns: u64) {
        self.wall = Nanos {
            inclusive: self.inclusive.saturating_mul(period_ns) + self.off_cpu.inclusive,
            exclusive: self.exclusive.saturating_mul(period_ns) + self.off_cpu.exclusive,
        };
    }
}

/// A tree of counts weighs its nodes by samples, or by wall-clock time when
/// the recording has off-CPU periods (every node with a sample or an
/// off-CPU period then has a non-zero wall time, so one tree never mixes
/// the two units).
impl Weight for Counts {
    fn merge(&mut self, o: &Self) {
        self.inclusive += o.inclusive;
        self.exclusive += o.exclusive;
        self.off_cpu.add(&o.off_cpu);
        self.preempted.add(&o.preempted);
        self.wall.add(&o.wall);
    }

    fn inclusive(&self) -> u64 {
        if self.wall.inclusive > 0 {
            self.wall.inclusive
        } else {
            self.inclusive
        }
    }

    fn exclusive(&self) -> u64 {
        if self.wall.inclusive > 0 {
            self.wall.exclusive
        } else {
            self.exclusive
        }
    }

    fn nested(&self) -> Self {
        Counts {
            inclusive: 0,
            exclusive: self.exclusive,
            off_cpu: Nanos {
                inclusive: 0,
                exclusive: self.off_cpu.exclusive,
            },
            preempted: Nanos {
                inclusive: 0,
                exclusive: self.preempted.exclusive,
            },
            wall: Nanos {
                inclusive: 0,
                exclusive: self.wall.exclusive,
            },
        }
    }
}

/// A source line: (file, line).
pub type LineKey = (String, u32);

/// Frames of `stack`, outermost first. A damaged table (dangling parent,
/// parent not older than its child) ends the walk instead of looping.
pub fn frames_of(stacks: &[StackNode], stack: StackId) -> Vec<FrameId> {
    let mut out = Vec::new();
    let mut cur = Some(stack);
    while let Some(id) = cur {
        let Some(node) = stacks.get(id.0 as usize) else {
            break;
        };
        out.push(node.frame);
        cur = node.parent.filter(|p| p.0 < id.0);
    }
    out.reverse();
    out
}

/// One frame of an expanded stack: a function (inline frames are their own),
/// its line, the address and module it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpandedFrame {
    /// `None` when the address did not resolve to a function.
    pub function: Option<FunctionId>,
    pub line: Option<LineKey>,
    pub frame: FrameId,
    pub module: ModuleId,
}

/// The stack expanded through inline chains, outermost first.
pub fn expand(stacks: &[StackNode], frames: &[FrameInfo], stack: StackId) -> Vec<ExpandedFrame> {
    let mut out = Vec::new();
    for fid in frames_of(stacks, stack) {
        let Some(frame) = frames.get(fid.0 as usize) else {
            continue;
        };
        if frame.functions.is_empty() {
            out.push(ExpandedFrame {
                function: None,
                line: None,
                frame: fid,
                module: frame.module,
            });
        }
        for ff in &frame.functions {
            out.push(ExpandedFrame {
                function: Some(ff.function),
                line: ff.source_file.clone().zip(ff.line),
                frame: fid,
                module: frame.module,
            });
        }
    }
    out
}

/// The frames of `stack` as call-tree keys, outermost first, expanded
/// through inline chains as SPEC 2.2 counts them; a frame that did not
/// resolve to a function is [`FrameKey::Unresolved`]. Empty when nothing
/// of the stack is in the frame table.
pub fn frame_keys(stacks: &[StackNode], frames: &[FrameInfo], stack: StackId) -> Vec<FrameKey> {
    expand(stacks, frames, stack)
        .iter()
        .map(|f| match f.function {
            Some(id) => FrameKey::Function(id),
            None => FrameKey::Unresolved {
                module: f.module,
                address: frames.get(f.frame.0 as usize).map_or(0, |fr| fr.address),
            },
        })
        .collect()
}

/// All sampling aggregates of SPEC 2.2/2.3.
#[derive(Debug, Default)]
pub struct SampleAnalysis {
    pub functions: HashMap<FunctionId, Counts>,
    pub lines: HashMap<LineKey, Counts>,
    /// The lines row of no line: samples (and off-CPU time) with a frame
    /// that has no line information on the stack (inclusive) or on top
    /// (exclusive), as if "no line" were one more line.
    pub no_line: Counts,
    /// The function each line of `lines` belongs to (the inline frame that
    /// carries it; of several, the lowest id, so the answer is the same
    /// whatever the order samples were counted in).
    pub line_functions: HashMap<LineKey, FunctionId>,
    pub instructions: HashMap<FrameId, Counts>,
    pub modules: HashMap<ModuleId, Counts>,
    /// Per thread: (all samples, samples with no resolvable frame), and
    /// the same for off-CPU time.
    pub threads: HashMap<ThreadKey, Counts>,
    pub samples: u64,
    pub weight: u64,
    /// Samples per (stack, thread), kept for call trees.
    pub per_stack: HashMap<(StackId, ThreadKey), u64>,
    /// Off-CPU nanoseconds per (stack, thread) (`--off-cpu`).
    pub off_cpu_per_stack: HashMap<(StackId, ThreadKey), u64>,
    /// The preempted part of it, per (stack, thread).
    pub preempted_per_stack: HashMap<(StackId, ThreadKey), u64>,
    /// All off-CPU nanoseconds counted, and the periods they came from.
    pub off_cpu_ns: u64,
    pub off_cpu_periods: u64,
    /// Nanoseconds one sample stands for, when the recording has off-CPU
    /// periods: rows and tree nodes then get their wall time
    /// ([`Counts::wall`]). Set before [`SampleAnalysis::finish`].
    pub wall_period_ns: Option<u64>,
}

/// Which value of a row an amount goes to.
#[derive(Clone, Copy)]
enum Value {
    Samples,
    OffCpu,
    /// The preempted part of the off-CPU time.
    Preempted,
}

impl Value {
    fn of(self, c: &mut Counts) -> (&mut u64, &mut u64) {
        match self {
            Value::Samples => (&mut c.inclusive, &mut c.exclusive),
            Value::OffCpu => (&mut c.off_cpu.inclusive, &mut c.off_cpu.exclusive),
            Value::Preempted => (&mut c.preempted.inclusive, &mut c.preempted.exclusive),
        }
    }
}

fn bump<K: std::hash::Hash + Eq>(
    map: &mut HashMap<K, Counts>,
    keys: HashSet<K>,
    top: Option<K>,
    value: Value,
    n: u64,
) {
    for k in keys {
        *value.of(map.entry(k).or_default()).0 += n;
    }
    if let Some(t) = top {
        *value.of(map.entry(t).or_default()).1 += n;
    }
}

impl SampleAnalysis {
    pub fn add(&mut self, s: &Sample) {
        self.samples += 1;
        self.weight += s.weight;
        let thread = self.threads.entry(s.key()).or_default();
        thread.inclusive += 1;
        match s.stack {
            Some(stack) => *self.per_stack.entry((stack, s.key())).or_default() += 1,
            None => thread.exclusive += 1,
        }
    }

    /// Adds an off-CPU period, or the part of it inside `window` (from, to).
    pub fn add_off_cpu(&mut self, p: &OffCpuPeriod, window: Option<(Timestamp, Timestamp)>) {
        let (from, to) = match window {
            Some((a, b)) => (p.from.max(a), p.to.min(b)),
            None => (p.from, p.to),
        };
        let ns = to.since(from);
        if ns == 0 {
            return;
        }
        self.off_cpu_ns += ns;
        self.off_cpu_periods += 1;
        let thread = self.threads.entry(p.key()).or_default();
        thread.off_cpu.inclusive += ns;
        if p.preempted {
            thread.preempted.inclusive += ns;
        }
        match p.stack {
            Some(stack) => {
                *self.off_cpu_per_stack.entry((stack, p.key())).or_default() += ns;
                if p.preempted {
                    *self
                        .preempted_per_stack
                        .entry((stack, p.key()))
                        .or_default() += ns;
                }
            }
            None => {
                thread.off_cpu.exclusive += ns;
                if p.preempted {
                    thread.preempted.exclusive += ns;
                }
            }
        }
    }

    /// The call tree of the threads `want` accepts: every sample's stack
    /// (see [`frame_keys`]) as a path, and the samples with no resolvable
    /// frame under one `[unknown]` node at the root. The root's inclusive
    /// count is the number of those threads' samples. Call after [`SampleAnalysis::finish`].
    pub fn call_tree(
        &self,
        stacks: &[StackNode],
        frames: &[FrameInfo],
        want: impl Fn(ThreadKey) -> bool,
    ) -> CallTree<Counts> {
        let mut t: CallTree<Counts> = CallTree::new();
        let selected = |m: &HashMap<(StackId, ThreadKey), u64>| {
            let mut v: Vec<((StackId, ThreadKey), u64)> = m
                .iter()
                .filter(|((_, t), _)| want(*t))
                .map(|(k, n)| (*k, *n))
                .collect();
            v.sort_by_key(|(k, _)| *k);
            v
        };
        let runs = [
            (Value::Samples, selected(&self.per_stack)),
            (Value::OffCpu, selected(&self.off_cpu_per_stack)),
            (Value::Preempted, selected(&self.preempted_per_stack)),
        ];
        for (value, per) in runs {
            for ((stack, _), n) in per {
                let keys = frame_keys(stacks, frames, stack);
                if keys.is_empty() {
                    continue; // counted with the thread's unresolved part below
                }
                let mut node = NodeId::ROOT;
                for k in keys {
                    node = t.child(node, k);
                    *value.of(t.weight_mut(node)).0 += n;
                }
                *value.of(t.weight_mut(node)).1 += n;
            }
        }
        let mut threads: Vec<_> = self.threads.iter().filter(|(k, _)| want(**k)).collect();
        threads.sort_by_key(|(k, _)| **k);
        let mut total = Counts::default();
        for (_, c) in threads {
            total.inclusive += c.inclusive;
            total.off_cpu.inclusive += c.off_cpu.inclusive;
            total.preempted.inclusive += c.preempted.inclusive;
            if c.exclusive > 0 || c.off_cpu.exclusive > 0 {
                let node = t.child(NodeId::ROOT, FrameKey::Unknown);
                let w = t.weight_mut(node);
                w.inclusive += c.exclusive;
                w.exclusive += c.exclusive;
                w.off_cpu.inclusive += c.off_cpu.exclusive;
                w.off_cpu.exclusive += c.off_cpu.exclusive;
                w.preempted.inclusive += c.preempted.exclusive;
                w.preempted.exclusive += c.preempted.exclusive;
            }
        }
        *t.weight_mut(NodeId::ROOT) = total;
        if let Some(period) = self.wall_period_ns {
            for node in t.nodes() {
                t.weight_mut(node).set_wall(period);
            }
        }
        t
    }

    /// Expands the counted stacks. Samples (and off-CPU time) whose stack
    /// expands to nothing count as having no resolvable frame (thread
    /// exclusive).
    pub fn finish(&mut self, stacks: &[StackNode], frames: &[FrameInfo]) {
        let per_stack = std::mem::take(&mut self.per_stack);
        let off_cpu_per_stack = std::mem::take(&mut self.off_cpu_per_stack);
        let preempted_per_stack = std::mem::take(&mut self.preempted_per_stack);
        for (value, per) in [
            (Value::Samples, &per_stack),
            (Value::OffCpu, &off_cpu_per_stack),
            (Value::Preempted, &preempted_per_stack),
        ] {
            self.count(stacks, frames, value, per);
        }
        self.per_stack = per_stack;
        self.off_cpu_per_stack = off_cpu_per_stack;
        self.preempted_per_stack = preempted_per_stack;
        if let Some(period) = self.wall_period_ns {
            let rows = self
                .functions
                .values_mut()
                .chain(self.lines.values_mut())
                .chain(self.instructions.values_mut())
                .chain(self.modules.values_mut())
                .chain(self.threads.values_mut())
                .chain(std::iter::once(&mut self.no_line));
            for c in rows {
                c.set_wall(period);
            }
        }
    }

    /// Adds the amounts of `per` (by stack) to every row of SPEC 2.2/2.3.
    fn count(
        &mut self,
        stacks: &[StackNode],
        frames: &[FrameInfo],
        value: Value,
        per: &HashMap<(StackId, ThreadKey), u64>,
    ) {
        let mut by_stack: HashMap<StackId, u64> = HashMap::new();
        for (&(stack, thread), &n) in per {
            if frames_of(stacks, stack)
                .iter()
                .any(|f| (f.0 as usize) < frames.len())
            {
                *by_stack.entry(stack).or_default() += n;
            } else {
                *value.of(self.threads.entry(thread).or_default()).1 += n;
            }
        }
        for (stack, n) in by_stack {
            let e = expand(stacks, frames, stack);
            let Some(top) = e.last() else { continue };
            bump(
                &mut self.functions,
                e.iter().filter_map(|f| f.function).collect(),
                top.function,
                value,
                n,
            );
            bump(
                &mut self.lines,
                e.iter().filter_map(|f| f.line.clone()).collect(),
                top.line.clone(),
                value,
                n,
            );
            for f in &e {
                if let (Some(line), Some(function)) = (&f.line, f.function) {
                    let owner = self.line_functions.entry(line.clone()).or_insert(function);
                    *owner = (*owner).min(function);
                }
            }
            let (incl, excl) = value.of(&mut self.no_line);
            if e.iter().any(|f| f.line.is_none()) {
                *incl += n;
            }
            if top.line.is_none() {
                *excl += n;
            }
            bump(
                &mut self.instructions,
                e.iter().map(|f| f.frame).collect(),
                Some(top.frame),
                value,
                n,
            );
            bump(
                &mut self.modules,
                e.iter().map(|f| f.module).collect(),
                Some(top.module),
                value,
                n,
            );
        }
    }
}
