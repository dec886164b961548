//! SPEC section 2.2: samples to inclusive/exclusive counts.
//!
//! Samples are first counted per distinct stack; each distinct stack is then
//! expanded once (frames to their inline chains) and its count added to every
//! distinct function, line, address and module on it (inclusive) and to its
//! top (exclusive). The cost is O(samples) + O(distinct stacks × depth).

use std::collections::{HashMap, HashSet};

use lapse_data::{FrameId, FrameInfo, FunctionId, ModuleId, Sample, StackId, StackNode};

use crate::tree::{CallTree, FrameKey, NodeId, Weight};

/// Inclusive and exclusive sample counts of one row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub inclusive: u64,
    pub exclusive: u64,
}

impl Weight for Counts {
    fn merge(&mut self, o: &Self) {
        self.inclusive += o.inclusive;
        self.exclusive += o.exclusive;
    }

    fn inclusive(&self) -> u64 {
        self.inclusive
    }

    fn exclusive(&self) -> u64 {
        self.exclusive
    }

    fn nested(&self) -> Self {
        Counts {
            inclusive: 0,
            exclusive: self.exclusive,
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
    pub instructions: HashMap<FrameId, Counts>,
    pub modules: HashMap<ModuleId, Counts>,
    /// (pid, tid) → (all samples, samples with no resolvable frame).
    pub threads: HashMap<(u32, u32), Counts>,
    pub samples: u64,
    pub weight: u64,
    /// Samples per (stack, pid, tid), kept for call trees.
    pub per_stack: HashMap<(StackId, u32, u32), u64>,
}

fn bump<K: std::hash::Hash + Eq>(
    map: &mut HashMap<K, Counts>,
    keys: HashSet<K>,
    top: Option<K>,
    n: u64,
) {
    for k in keys {
        map.entry(k).or_default().inclusive += n;
    }
    if let Some(t) = top {
        map.entry(t).or_default().exclusive += n;
    }
}

impl SampleAnalysis {
    pub fn add(&mut self, s: &Sample) {
        self.samples += 1;
        self.weight += s.weight;
        let thread = self.threads.entry((s.pid, s.tid)).or_default();
        thread.inclusive += 1;
        match s.stack {
            Some(stack) => *self.per_stack.entry((stack, s.pid, s.tid)).or_default() += 1,
            None => thread.exclusive += 1,
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
        want: impl Fn(u32, u32) -> bool,
    ) -> CallTree<Counts> {
        let mut t: CallTree<Counts> = CallTree::new();
        let mut per: Vec<_> = self
            .per_stack
            .iter()
            .filter(|((_, pid, tid), _)| want(*pid, *tid))
            .collect();
        per.sort_by_key(|(k, _)| **k);
        for (&(stack, _, _), &n) in per {
            let keys = frame_keys(stacks, frames, stack);
            if keys.is_empty() {
                continue; // counted with the thread's unresolved samples below
            }
            let mut node = NodeId::ROOT;
            for k in keys {
                node = t.child(node, k);
                t.weight_mut(node).inclusive += n;
            }
            t.weight_mut(node).exclusive += n;
        }
        let mut threads: Vec<_> = self
            .threads
            .iter()
            .filter(|((p, t), _)| want(*p, *t))
            .collect();
        threads.sort_by_key(|(k, _)| **k);
        let mut total = 0;
        for (_, c) in threads {
            total += c.inclusive;
            if c.exclusive > 0 {
                let node = t.child(NodeId::ROOT, FrameKey::Unknown);
                let w = t.weight_mut(node);
                w.inclusive += c.exclusive;
                w.exclusive += c.exclusive;
            }
        }
        t.weight_mut(NodeId::ROOT).inclusive = total;
        t
    }

    /// Expands the counted stacks. Samples whose stack expands to nothing
    /// count as having no resolvable frame (thread exclusive).
    pub fn finish(&mut self, stacks: &[StackNode], frames: &[FrameInfo]) {
        let mut by_stack: HashMap<StackId, u64> = HashMap::new();
        for (&(stack, pid, tid), &n) in &self.per_stack {
            if frames_of(stacks, stack)
                .iter()
                .any(|f| (f.0 as usize) < frames.len())
            {
                *by_stack.entry(stack).or_default() += n;
            } else {
                self.threads.entry((pid, tid)).or_default().exclusive += n;
            }
        }
        for (stack, n) in by_stack {
            let e = expand(stacks, frames, stack);
            let Some(top) = e.last() else { continue };
            bump(
                &mut self.functions,
                e.iter().filter_map(|f| f.function).collect(),
                top.function,
                n,
            );
            bump(
                &mut self.lines,
                e.iter().filter_map(|f| f.line.clone()).collect(),
                top.line.clone(),
                n,
            );
            bump(
                &mut self.instructions,
                e.iter().map(|f| f.frame).collect(),
                Some(top.frame),
                n,
            );
            bump(
                &mut self.modules,
                e.iter().map(|f| f.module).collect(),
                Some(top.module),
                n,
            );
        }
    }
}
