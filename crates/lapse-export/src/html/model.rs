//! What the page knows about the recording's calls, per thread, all of it
//! flat: a table of frames (names, modules, source lines), and for each
//! thread its call tree as a node table in which a parent comes before its
//! children (parent indices, like the Firefox Profiler's stack table), its
//! functions' exact values, and (sampling) its source lines.
//!
//! Nothing here or in the page is nested by call depth, so a 20,000-deep
//! recursion is 20,000 rows, not 20,000 levels of anything. The node tables
//! together hold at most [`NODE_BUDGET`] nodes (the lightest call paths go
//! first); the function and line rows are computed from the whole trees,
//! so they stay exact whatever is left out of the node tables.

use std::collections::HashMap;

use lapse_analysis::sample::{expand, Counts, SampleAnalysis};
use lapse_analysis::tree::{CallTree, FrameKey, NodeId, Weight};
use lapse_analysis::values::{FunctionStats, ThreadStats, TimeValue};
use lapse_data::{DataFile, FunctionId, StackId, ThreadKey};
use serde::Serialize;

/// Most call-tree nodes the page holds, over all threads.
pub const NODE_BUDGET: usize = 100_000;

/// Interned strings (source file paths), index = position.
#[derive(Default)]
pub(crate) struct Strings {
    index: HashMap<String, u32>,
    list: Vec<String>,
}

impl Strings {
    pub fn of(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.list.len() as u32;
        self.list.push(s.to_owned());
        self.index.insert(s.to_owned(), i);
        i
    }
}

/// Every frame the page names, once; its index is its id in the page.
#[derive(Default)]
pub(crate) struct Frames {
    index: HashMap<FrameKey, u32>,
    keys: Vec<FrameKey>,
}

impl Frames {
    pub fn of(&mut self, key: FrameKey) -> u32 {
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        let i = self.keys.len() as u32;
        self.keys.push(key);
        self.index.insert(key, i);
        i
    }

    /// The frame table as the page holds it (columns, not objects).
    pub fn table(&self, file: &DataFile, files: &mut Strings) -> FrameTable {
        let mut t = FrameTable {
            name: Vec::with_capacity(self.keys.len()),
            module: Vec::with_capacity(self.keys.len()),
            file: Vec::with_capacity(self.keys.len()),
            line: Vec::with_capacity(self.keys.len()),
            modules: file.modules.iter().map(|m| m.name().to_owned()).collect(),
            files: Vec::new(),
        };
        for &key in &self.keys {
            t.name.push(key.label(file));
            t.module.push(
                key.module(file)
                    .filter(|m| (m.0 as usize) < file.modules.len())
                    .map_or(-1, |m| i64::from(m.0)),
            );
            let info = key
                .function()
                .and_then(|f| file.functions.get(f.0 as usize));
            t.file.push(
                info.and_then(|i| i.source_file.as_deref())
                    .map_or(-1, |s| i64::from(files.of(s))),
            );
            t.line.push(info.and_then(|i| i.line).unwrap_or(0));
        }
        t.files = files.list.clone();
        t
    }
}

/// Frames as columns: `name[i]`, `module[i]` (index into `modules`, -1
/// unknown), `file[i]` (index into `files`, -1 unknown), `line[i]` (0 unknown).
#[derive(Serialize)]
pub(crate) struct FrameTable {
    name: Vec<String>,
    module: Vec<i64>,
    file: Vec<i64>,
    line: Vec<u32>,
    modules: Vec<String>,
    files: Vec<String>,
}

/// The values a page row shows, per method.
pub(crate) trait PageWeight: Weight {
    /// The values of a node row, after `parent` and `frame`.
    const NODE_COLUMNS: &'static [&'static str];
    /// The values of a function row, after `frame`.
    const FUNCTION_COLUMNS: &'static [&'static str];
    fn node_values(&self, out: &mut Vec<i64>);
    fn function_values(&self, out: &mut Vec<u64>);
}

fn ns(f: lapse_analysis::Fine) -> u64 {
    f.to_nanos()
}

impl PageWeight for FunctionStats {
    const NODE_COLUMNS: &'static [&'static str] = &["calls", "ei", "ee", "ai", "ae"];
    const FUNCTION_COLUMNS: &'static [&'static str] = &[
        "calls", "open", "ei", "ee", "ai", "ae", "po", "sum_ei", "sum_ee", "sum_ai", "sum_ae",
        "min_ei", "min_ee", "min_ai", "min_ae", "max_ei", "max_ee", "max_ai", "max_ae",
    ];

    fn node_values(&self, out: &mut Vec<i64>) {
        out.push(self.calls as i64);
        out.extend(TimeValue::ALL.map(|k| ns(self.time[k]) as i64));
    }

    fn function_values(&self, out: &mut Vec<u64>) {
        out.extend([self.calls, self.open_calls]);
        out.extend(TimeValue::ALL.map(|k| ns(self.time[k])));
        out.push(ns(self.probe_overhead));
        let p = &self.per_call;
        let called = self.closed_calls() > 0;
        out.extend(TimeValue::ALL.map(|k| ns(p.sum[k])));
        out.extend(TimeValue::ALL.map(|k| if called { ns(p.min[k]) } else { 0 }));
        out.extend(TimeValue::ALL.map(|k| ns(p.max[k])));
    }
}

impl PageWeight for Counts {
    const NODE_COLUMNS: &'static [&'static str] = &["incl", "excl"];
    const FUNCTION_COLUMNS: &'static [&'static str] = &["incl", "excl"];

    fn node_values(&self, out: &mut Vec<i64>) {
        out.extend([self.inclusive as i64, self.exclusive as i64]);
    }

    fn function_values(&self, out: &mut Vec<u64>) {
        out.extend([self.inclusive, self.exclusive]);
    }
}

/// A thread's call tree as the page holds it, and where each of the
/// tree's nodes went.
pub(crate) struct NodeTable {
    /// Rows of `parent, frame, values...`; row 0 is the thread itself
    /// (parent -1, frame -1, the thread's totals).
    pub rows: Vec<i64>,
    /// For each node of the whole tree: its row, or its nearest kept
    /// ancestor's when it was left out.
    pub row_of: Vec<u32>,
}

/// Which nodes of `trees` to keep so that at most `budget` nodes remain
/// over all of them: the heaviest relative to their thread's `total`, and
/// always every ancestor of a kept node.
pub(crate) fn keep<W: Weight>(trees: &[(&CallTree<W>, u64)], budget: usize) -> Vec<Vec<bool>> {
    let share = |t: &CallTree<W>, total: u64, n: NodeId| {
        t.weight(n).inclusive() as f64 / total.max(1) as f64
    };
    let count: usize = trees.iter().map(|(t, _)| t.len() - 1).sum();
    let threshold = if count <= budget {
        None
    } else {
        let mut all: Vec<f64> = trees
            .iter()
            .flat_map(|&(t, total)| t.nodes().skip(1).map(move |n| share(t, total, n)))
            .collect();
        let (_, nth, _) = all.select_nth_unstable_by(budget, |a, b| b.total_cmp(a));
        Some(*nth)
    };
    trees
        .iter()
        .map(|&(t, total)| {
            let mut kept = vec![true; t.len()];
            if let Some(min) = threshold {
                for n in t.nodes().skip(1) {
                    let p = t.parent(n).unwrap_or(NodeId::ROOT);
                    kept[n.index()] = kept[p.index()] && share(t, total, n) > min;
                }
            }
            kept
        })
        .collect()
}

/// The node table of `tree` with the nodes `kept` says; row 0 holds `totals`.
pub(crate) fn node_table<W: PageWeight>(
    tree: &CallTree<W>,
    kept: &[bool],
    totals: &W,
    frames: &mut Frames,
) -> NodeTable {
    let stride = 2 + W::NODE_COLUMNS.len();
    let mut rows = Vec::with_capacity(stride * kept.iter().filter(|&&k| k).count());
    rows.extend([-1, -1]);
    totals.node_values(&mut rows);
    let mut row_of = vec![0u32; tree.len()];
    let mut next = 1u32;
    for n in tree.nodes().skip(1) {
        let parent = tree.parent(n).unwrap_or(NodeId::ROOT);
        if !kept[n.index()] {
            row_of[n.index()] = row_of[parent.index()];
            continue;
        }
        let Some(key) = tree.key(n) else { continue };
        row_of[n.index()] = next;
        next += 1;
        rows.push(i64::from(row_of[parent.index()]));
        rows.push(i64::from(frames.of(key)));
        tree.weight(n).node_values(&mut rows);
    }
    NodeTable { rows, row_of }
}

/// Each frame's values over the whole of `tree`, as SPEC 2.1/2.2 count a
/// function: a path that recurs into a frame already on it adds its calls,
/// exclusive and per-call values but not its inclusive ones again.
/// Sorted by frame; rows of `frame, values...`.
pub(crate) fn function_rows<W: PageWeight>(tree: &CallTree<W>, frames: &mut Frames) -> Vec<u64> {
    let mut by_key: HashMap<FrameKey, W> = HashMap::new();
    let mut on_path: HashMap<FrameKey, u32> = HashMap::new();
    let mut path: Vec<FrameKey> = Vec::new();
    for (node, depth) in tree.pre_order() {
        while path.len() > depth {
            if let Some(k) = path.pop() {
                if let Some(c) = on_path.get_mut(&k) {
                    *c -= 1;
                    if *c == 0 {
                        // (only what is on the path: a million distinct
                        // functions are not all kept here)
                        on_path.remove(&k);
                    }
                }
            }
        }
        let Some(key) = tree.key(node) else { continue };
        let seen = on_path.entry(key).or_default();
        let w = tree.weight(node);
        let entry = by_key.entry(key).or_default();
        if *seen > 0 {
            entry.merge(&w.nested());
        } else {
            entry.merge(w);
        }
        *seen += 1;
        path.push(key);
    }
    // (in a fixed order: frames are numbered as they come, and the same
    // recording makes the same page)
    let mut by_key: Vec<(FrameKey, W)> = by_key.into_iter().collect();
    by_key.sort_unstable_by_key(|(k, _)| *k);
    rows(by_key, frames)
}

/// Rows of `frame, values...` sorted by frame.
pub(crate) fn rows<W: PageWeight>(
    values: impl IntoIterator<Item = (FrameKey, W)>,
    frames: &mut Frames,
) -> Vec<u64> {
    let mut keyed: Vec<(u32, W)> = values.into_iter().map(|(k, w)| (frames.of(k), w)).collect();
    keyed.sort_by_key(|(f, _)| *f);
    let mut out = Vec::with_capacity(keyed.len() * (1 + W::FUNCTION_COLUMNS.len()));
    for (f, w) in keyed {
        out.push(u64::from(f));
        w.function_values(&mut out);
    }
    out
}

/// The whole recording's function rows, exactly as the report has them.
pub(crate) fn all_functions(functions: &[FunctionStats], frames: &mut Frames) -> Vec<u64> {
    rows(
        functions
            .iter()
            .enumerate()
            .filter(|(_, f)| f.is_used())
            .map(|(i, f)| (FrameKey::Function(FunctionId(i as u32)), *f)),
        frames,
    )
}

/// A thread's totals as a node row's values (row 0 of its node table).
pub(crate) fn thread_totals(t: &ThreadStats) -> FunctionStats {
    FunctionStats {
        calls: t.calls,
        time: t.time,
        probe_overhead: t.probe_overhead,
        ..FunctionStats::default()
    }
}

/// What a sampled stack adds to its thread's tree and lines.
struct StackInfo {
    keys: Vec<FrameKey>,
    /// Distinct (function, file, line) on the stack.
    lines: Vec<(FrameKey, String, u32)>,
    top_line: Option<(FrameKey, String, u32)>,
}

fn stack_info(file: &DataFile, stack: StackId) -> StackInfo {
    let e = expand(&file.stacks, &file.frames, stack);
    let line_of = |f: &lapse_analysis::sample::ExpandedFrame| {
        let (src, line) = f.line.clone()?;
        Some((FrameKey::Function(f.function?), src, line))
    };
    let mut lines: Vec<(FrameKey, String, u32)> = e.iter().filter_map(line_of).collect();
    lines.sort();
    lines.dedup();
    StackInfo {
        keys: lapse_analysis::sample::frame_keys(&file.stacks, &file.frames, stack),
        top_line: e.last().and_then(line_of),
        lines,
    }
}

/// One sampled thread: its call tree (as `SampleAnalysis::call_tree`
/// builds it for one thread) and its lines' counts.
pub(crate) struct SampledThread {
    pub tree: CallTree<Counts>,
    pub lines: HashMap<(FrameKey, String, u32), Counts>,
}

/// Every sampled thread's tree and lines, in one pass over the counted stacks.
pub(crate) fn sampled_threads(
    file: &DataFile,
    a: &SampleAnalysis,
) -> HashMap<ThreadKey, SampledThread> {
    let mut per: Vec<(&(StackId, ThreadKey), &u64)> = a.per_stack.iter().collect();
    per.sort_by_key(|(k, _)| **k);
    let mut cache: HashMap<StackId, StackInfo> = HashMap::new();
    let mut out: HashMap<ThreadKey, SampledThread> = HashMap::new();
    let new = || SampledThread {
        tree: CallTree::new(),
        lines: HashMap::new(),
    };
    for (&(stack, thread), &n) in per {
        let info = cache
            .entry(stack)
            .or_insert_with(|| stack_info(file, stack));
        if info.keys.is_empty() {
            continue; // the thread's unresolved samples, added below
        }
        let t = out.entry(thread).or_insert_with(new);
        let mut node = NodeId::ROOT;
        for &k in &info.keys {
            node = t.tree.child(node, k);
            t.tree.weight_mut(node).inclusive += n;
        }
        t.tree.weight_mut(node).exclusive += n;
        for l in &info.lines {
            t.lines.entry(l.clone()).or_default().inclusive += n;
        }
        if let Some(l) = &info.top_line {
            t.lines.entry(l.clone()).or_default().exclusive += n;
        }
    }
    // The paths of off-CPU periods (`--off-cpu`) too, with no samples of
    // their own: the timeline names the stack a thread waited in by its row.
    let mut waited: Vec<&(StackId, ThreadKey)> = a.off_cpu_per_stack.keys().collect();
    waited.sort_unstable();
    for &(stack, thread) in waited {
        let info = cache
            .entry(stack)
            .or_insert_with(|| stack_info(file, stack));
        let t = out.entry(thread).or_insert_with(new);
        let mut node = NodeId::ROOT;
        for &k in &info.keys {
            node = t.tree.child(node, k);
        }
    }
    for (&key, c) in &a.threads {
        let t = out.entry(key).or_insert_with(new);
        if c.exclusive > 0 {
            let node = t.tree.child(NodeId::ROOT, FrameKey::Unknown);
            let w = t.tree.weight_mut(node);
            w.inclusive += c.exclusive;
            w.exclusive += c.exclusive;
        }
        t.tree.weight_mut(NodeId::ROOT).inclusive = c.inclusive;
    }
    out
}

/// A sampled thread's line rows: `frame, file, line, incl, excl`, sorted.
pub(crate) fn line_rows(
    lines: &HashMap<(FrameKey, String, u32), Counts>,
    frames: &mut Frames,
    files: &mut Strings,
) -> Vec<u64> {
    let mut keyed: Vec<[u64; 5]> = lines
        .iter()
        .map(|((k, src, line), c)| {
            [
                u64::from(frames.of(*k)),
                u64::from(files.of(src)),
                u64::from(*line),
                c.inclusive,
                c.exclusive,
            ]
        })
        .collect();
    keyed.sort_unstable();
    keyed.concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(n: u32) -> FrameKey {
        FrameKey::Function(FunctionId(n))
    }

    /// main(100) > {a(60) > b(50), c(10)}
    fn tree() -> CallTree<Counts> {
        let mut t: CallTree<Counts> = CallTree::new();
        for (path, incl) in [
            (&[0][..], 100),
            (&[0, 1][..], 60),
            (&[0, 1, 2][..], 50),
            (&[0, 3][..], 10),
        ] {
            let n = t.path_node(path.iter().map(|&i| f(i)));
            t.weight_mut(n).inclusive = incl;
        }
        t
    }

    #[test]
    fn the_budget_keeps_the_heaviest_paths_and_their_callers() {
        let (a, b) = (tree(), tree());
        let all = keep(&[(&a, 100), (&b, 100)], 8);
        assert!(
            all.iter().flatten().all(|&k| k),
            "under the budget: everything"
        );
        // Three nodes of eight: the first tree's main, a and b (shares 1.0,
        // 0.6, 0.5); the second tree's total is larger, so its shares are
        // smaller (main 0.4).
        let cut = keep(&[(&a, 100), (&b, 250)], 3);
        assert_eq!(cut[0], [true, true, true, true, false]);
        assert_eq!(cut[1], [true, false, false, false, false]);
        // Ties at the cut are left out (never more than the budget).
        let tied = keep(&[(&a, 100), (&b, 200)], 3);
        assert_eq!(tied[0], [true, true, true, false, false]);
    }

    #[test]
    fn a_left_out_node_maps_to_its_nearest_kept_caller() {
        let t = tree();
        let mut frames = Frames::default();
        let table = node_table(
            &t,
            &[true, true, true, false, false],
            &Counts::default(),
            &mut frames,
        );
        assert_eq!(table.row_of, [0, 1, 2, 2, 1]);
        assert_eq!(
            table.rows.len(),
            3 * 4,
            "three rows of parent, frame, incl, excl"
        );
    }
}
