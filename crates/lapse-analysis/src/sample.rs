//! SPEC section 2.2: samples to inclusive/exclusive counts.
//!
//! A sample's stack is expanded (frames to their inline chains) into a list
//! of functions, lines and addresses; every distinct key on it gets one
//! inclusive count, the top one the exclusive count. Distinctness is checked
//! with "last sample that touched this key" marks, so a sample costs
//! O(depth) with no hashing of whole stacks.

use std::collections::HashMap;

use lapse_data::{FrameId, FrameInfo, FunctionId, ModuleId, Sample, StackId, StackNode};

/// Inclusive and exclusive sample counts of one row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub inclusive: u64,
    pub exclusive: u64,
}

impl Counts {
    pub fn merge(&mut self, o: &Counts) {
        self.inclusive += o.inclusive;
        self.exclusive += o.exclusive;
    }
}

/// A source line key: (file, line) interned to an index by [`Expanded`].
pub type LineKey = u32;

/// One expanded stack: functions, lines, modules and frames, outermost first.
#[derive(Clone, Debug, Default)]
pub struct ExpandedStack {
    pub functions: Vec<FunctionId>,
    pub lines: Vec<Option<LineKey>>,
    pub frames: Vec<FrameId>,
    pub modules: Vec<ModuleId>,
}

/// Stacks expanded once each (memoized by [`StackId`]), plus the line table.
#[derive(Default)]
pub struct Expanded {
    stacks: HashMap<StackId, ExpandedStack>,
    pub lines: Vec<(String, u32)>,
    line_index: HashMap<(String, u32), LineKey>,
}

impl Expanded {
    /// Frames of `stack`, outermost first. Cycles and dangling parents in a
    /// damaged file end the walk instead of looping.
    fn frames_of(stacks: &[StackNode], stack: StackId) -> Vec<FrameId> {
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

    pub fn get(
        &mut self,
        stacks: &[StackNode],
        frames: &[FrameInfo],
        stack: StackId,
    ) -> &ExpandedStack {
        if !self.stacks.contains_key(&stack) {
            let mut e = ExpandedStack::default();
            for fid in Self::frames_of(stacks, stack) {
                let Some(frame) = frames.get(fid.0 as usize) else {
                    continue;
                };
                for ff in &frame.functions {
                    e.functions.push(ff.function);
                    let line = match (&ff.source_file, ff.line) {
                        (Some(file), Some(line)) => Some(self.intern_line(file, line)),
                        _ => None,
                    };
                    e.lines.push(line);
                    e.frames.push(fid);
                    e.modules.push(frame.module);
                }
                if frame.functions.is_empty() {
                    // Unsymbolized address: still a frame of its module.
                    e.frames.push(fid);
                    e.modules.push(frame.module);
                    e.functions.push(FunctionId(u32::MAX));
                    e.lines.push(None);
                }
            }
            self.stacks.insert(stack, e);
        }
        &self.stacks[&stack]
    }

    fn intern_line(&mut self, file: &str, line: u32) -> LineKey {
        if let Some(&k) = self.line_index.get(&(file.to_owned(), line)) {
            return k;
        }
        let k = self.lines.len() as LineKey;
        self.lines.push((file.to_owned(), line));
        self.line_index.insert((file.to_owned(), line), k);
        k
    }
}

/// Counts per key, with per-key marks for "already counted in this sample".
#[derive(Debug)]
pub struct Counter<K: Copy + Eq + std::hash::Hash> {
    pub counts: HashMap<K, Counts>,
    marks: HashMap<K, u64>,
}

impl<K: Copy + Eq + std::hash::Hash> Default for Counter<K> {
    fn default() -> Self {
        Counter {
            counts: HashMap::new(),
            marks: HashMap::new(),
        }
    }
}

impl<K: Copy + Eq + std::hash::Hash> Counter<K> {
    /// Counts one sample's keys (outermost first; the last is the top).
    pub fn add(&mut self, sample_no: u64, keys: impl Iterator<Item = K>, top: Option<K>) {
        for k in keys {
            let mark = self.marks.entry(k).or_insert(u64::MAX);
            if *mark != sample_no {
                *mark = sample_no;
                self.counts.entry(k).or_default().inclusive += 1;
            }
        }
        if let Some(t) = top {
            self.counts.entry(t).or_default().exclusive += 1;
        }
    }
}

/// All sampling aggregates of SPEC 2.2/2.3.
#[derive(Default)]
pub struct SampleAnalysis {
    pub functions: Counter<FunctionId>,
    pub lines: Counter<LineKey>,
    pub instructions: Counter<FrameId>,
    pub modules: Counter<ModuleId>,
    /// (pid, tid) → (all samples, samples with no resolvable frame).
    pub threads: HashMap<(u32, u32), Counts>,
    pub samples: u64,
    pub weight: u64,
    pub expanded: Expanded,
    sample_no: u64,
}

impl SampleAnalysis {
    pub fn add(&mut self, stacks: &[StackNode], frames: &[FrameInfo], s: &Sample) {
        self.samples += 1;
        self.weight += s.weight;
        let n = self.sample_no;
        self.sample_no += 1;
        let thread = self.threads.entry((s.pid, s.tid)).or_default();
        thread.inclusive += 1;
        let Some(stack) = s.stack else {
            thread.exclusive += 1;
            return;
        };
        let e = self.expanded.get(stacks, frames, stack);
        if e.frames.is_empty() {
            thread.exclusive += 1;
            return;
        }
        let known = |f: &&FunctionId| f.0 != u32::MAX;
        self.functions.add(
            n,
            e.functions.iter().filter(known).copied(),
            e.functions.last().filter(known).copied(),
        );
        self.lines.add(
            n,
            e.lines.iter().flatten().copied(),
            e.lines.last().copied().flatten(),
        );
        self.instructions
            .add(n, e.frames.iter().copied(), e.frames.last().copied());
        self.modules
            .add(n, e.modules.iter().copied(), e.modules.last().copied());
    }
}
