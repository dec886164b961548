//! The one call tree, for both methods: a flat node table in which a parent
//! always comes before its children (like the Firefox Profiler's stack
//! table). A node stands for a call path and carries the weights of that
//! path: the time values of instrumentation ([`FunctionStats`]) or the
//! sample counts of sampling ([`Counts`](crate::sample::Counts)).
//!
//! Everything that walks it is iterative - pre-order, edges, hot path,
//! pruning, merging - and dropping it frees a few flat vectors, so the depth
//! of the data never becomes the depth of lapse's own stack.

use std::collections::HashMap;

use lapse_data::{DataFile, FunctionId, ModuleId};
use rustc_hash::FxHashMap;

use crate::fine::Fine;
use crate::values::{FunctionStats, TimeValue};

/// What a node stands for: the last frame of its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FrameKey {
    Function(FunctionId),
    /// A sampled address that did not resolve to a function.
    Unresolved {
        module: ModuleId,
        address: u64,
    },
    /// Samples whose stack could not be unwound at all.
    Unknown,
}

impl FrameKey {
    pub fn function(self) -> Option<FunctionId> {
        match self {
            FrameKey::Function(f) => Some(f),
            _ => None,
        }
    }

    /// The name a frame is shown by: the function's demangled name, or
    /// `[module+0xADDR]`, or `[unknown]`.
    pub fn label(self, file: &DataFile) -> String {
        match self {
            FrameKey::Function(f) => file
                .functions
                .get(f.0 as usize)
                .map_or_else(|| format!("[function #{}]", f.0), |i| i.name.clone()),
            FrameKey::Unresolved { module, address } => {
                let m = file.module(module).map_or("?", |m| m.name());
                format!("[{m}+{address:#x}]")
            }
            FrameKey::Unknown => "[unknown]".into(),
        }
    }

    /// The module the frame belongs to, if known.
    pub fn module(self, file: &DataFile) -> Option<ModuleId> {
        match self {
            FrameKey::Function(f) => file.functions.get(f.0 as usize).map(|i| i.module),
            FrameKey::Unresolved { module, .. } => Some(module),
            FrameKey::Unknown => None,
        }
    }
}

/// A node of a [`CallTree`]; only the tree makes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(u32);

impl NodeId {
    /// The root: the empty path, parent of every thread's outermost calls.
    pub const ROOT: NodeId = NodeId(0);

    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// What a node's weights must offer the tree.
pub trait Weight: Clone + Default {
    /// Adds another node's (or thread's) weights.
    fn merge(&mut self, other: &Self);
    /// The weight that orders children and decides the hot path and
    /// `--threshold`: elapsed inclusive nanoseconds, or inclusive samples.
    fn inclusive(&self) -> u64;
    /// The path's own weight (a flame graph's width of its frame): elapsed
    /// exclusive nanoseconds, or exclusive samples.
    fn exclusive(&self) -> u64;
    /// The weights without their inclusive part, for an edge that recurs on
    /// one path: its inclusive values are already inside the outer one's.
    fn nested(&self) -> Self;
}

impl Weight for FunctionStats {
    fn merge(&mut self, other: &Self) {
        FunctionStats::merge(self, other);
    }

    fn inclusive(&self) -> u64 {
        self.time[TimeValue::ElapsedInclusive].to_nanos()
    }

    fn exclusive(&self) -> u64 {
        self.time[TimeValue::ElapsedExclusive].to_nanos()
    }

    fn nested(&self) -> Self {
        let mut s = *self;
        s.time[TimeValue::ElapsedInclusive] = Fine::ZERO;
        s.time[TimeValue::ApplicationInclusive] = Fine::ZERO;
        s.probe_overhead = Fine::ZERO;
        s.preempted = Fine::ZERO;
        s
    }
}

/// One line of a shown tree: a node, its depth (outermost calls are 0) and
/// whether it is on the hot path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeLine {
    pub node: NodeId,
    pub depth: usize,
    pub hot: bool,
}

/// Call paths and their weights.
#[derive(Clone, Debug)]
pub struct CallTree<W> {
    parent: Vec<NodeId>,
    /// `None` only for the root.
    key: Vec<Option<FrameKey>>,
    weight: Vec<W>,
    /// (parent, key) → child. FxHash: the keys are small integers made by
    /// lapse itself, and interning paths is most of an export's time with
    /// the default SipHash.
    index: FxHashMap<(NodeId, FrameKey), NodeId>,
}

impl<W: Weight> Default for CallTree<W> {
    fn default() -> Self {
        CallTree::new()
    }
}

impl<W: Weight> CallTree<W> {
    /// A tree holding only the root.
    pub fn new() -> CallTree<W> {
        CallTree {
            parent: vec![NodeId::ROOT],
            key: vec![None],
            weight: vec![W::default()],
            index: FxHashMap::default(),
        }
    }

    /// Number of nodes, the root included.
    pub fn len(&self) -> usize {
        self.parent.len()
    }

    pub fn is_empty(&self) -> bool {
        self.parent.len() <= 1
    }

    /// Every node, parents before children (the root first).
    pub fn nodes(&self) -> impl Iterator<Item = NodeId> {
        (0..self.parent.len() as u32).map(NodeId)
    }

    /// The node for the path of `parent` followed by `key`, made if new.
    #[inline]
    pub fn child(&mut self, parent: NodeId, key: FrameKey) -> NodeId {
        if let Some(&id) = self.index.get(&(parent, key)) {
            return id;
        }
        let id = NodeId(self.parent.len() as u32);
        self.parent.push(parent);
        self.key.push(Some(key));
        self.weight.push(W::default());
        self.index.insert((parent, key), id);
        id
    }

    /// The node of the path `keys` (outermost first), made if new.
    pub fn path_node(&mut self, keys: impl IntoIterator<Item = FrameKey>) -> NodeId {
        keys.into_iter()
            .fold(NodeId::ROOT, |node, k| self.child(node, k))
    }

    pub fn parent(&self, node: NodeId) -> Option<NodeId> {
        (node != NodeId::ROOT).then(|| self.parent[node.index()])
    }

    /// `None` for the root.
    pub fn key(&self, node: NodeId) -> Option<FrameKey> {
        self.key[node.index()]
    }

    pub fn weight(&self, node: NodeId) -> &W {
        &self.weight[node.index()]
    }

    #[inline(always)]
    pub fn weight_mut(&mut self, node: NodeId) -> &mut W {
        &mut self.weight[node.index()]
    }

    /// Keys from the outermost frame to `node`.
    pub fn path(&self, node: NodeId) -> Vec<FrameKey> {
        let mut out = Vec::new();
        let mut cur = node;
        while let Some(key) = self.key(cur) {
            out.push(key);
            cur = self.parent[cur.index()];
        }
        out.reverse();
        out
    }

    /// Adds `other` path by path (to combine threads).
    pub fn merge(&mut self, other: &CallTree<W>) {
        let mut map = vec![NodeId::ROOT; other.len()];
        for id in other.nodes() {
            let ours = match other.key(id) {
                None => NodeId::ROOT,
                Some(k) => self.child(map[other.parent[id.index()].index()], k),
            };
            map[id.index()] = ours;
            self.weight[ours.index()].merge(&other.weight[id.index()]);
        }
    }

    /// The parts of the tree at or below a frame that `keep` accepts, each
    /// re-rooted at its outermost such frame and merged path by path (as
    /// `lapse export --function`): a path without such a frame is left
    /// out; one called from several places becomes one top-level call. The
    /// root's weight is the sum of the new top-level calls'.
    pub fn subtrees(&self, keep: impl Fn(FrameKey) -> bool) -> CallTree<W> {
        let mut out: CallTree<W> = CallTree::new();
        // Where each node of ours went, if it is kept.
        let mut map: Vec<Option<NodeId>> = vec![None; self.len()];
        let mut top = Vec::new();
        for id in self.nodes().skip(1) {
            let Some(key) = self.key(id) else { continue };
            let parent = self.parent[id.index()];
            let to = match map[parent.index()] {
                Some(p) => out.child(p, key),
                None if keep(key) => {
                    let n = out.child(NodeId::ROOT, key);
                    top.push(id);
                    n
                }
                None => continue,
            };
            map[id.index()] = Some(to);
            out.weight[to.index()].merge(&self.weight[id.index()]);
        }
        let mut root = W::default();
        for id in top {
            root.merge(&self.weight[id.index()]);
        }
        out.weight[NodeId::ROOT.index()] = root;
        out
    }

    /// Each node's children, heaviest first (ties by key), as one flat table.
    pub fn children(&self) -> Children {
        let n = self.len();
        let mut count = vec![0u32; n + 1];
        for id in 1..n {
            count[self.parent[id].index() + 1] += 1;
        }
        for i in 1..=n {
            count[i] += count[i - 1];
        }
        let start = count.clone();
        let mut ids = vec![NodeId::ROOT; n.saturating_sub(1)];
        let mut fill = count;
        for id in 1..n {
            let p = self.parent[id].index();
            ids[fill[p] as usize] = NodeId(id as u32);
            fill[p] += 1;
        }
        for p in 0..n {
            let (a, b) = (start[p] as usize, start[p + 1] as usize);
            ids[a..b].sort_by(|&x, &y| {
                self.weight[y.index()]
                    .inclusive()
                    .cmp(&self.weight[x.index()].inclusive())
                    .then_with(|| self.key[x.index()].cmp(&self.key[y.index()]))
            });
        }
        Children { start, ids }
    }

    /// Nodes other than the root in pre-order, children heaviest first.
    pub fn pre_order(&self) -> Vec<(NodeId, usize)> {
        let children = self.children();
        let mut out = Vec::with_capacity(self.len());
        let mut todo: Vec<(NodeId, usize)> = children
            .of(NodeId::ROOT)
            .iter()
            .rev()
            .map(|&c| (c, 0))
            .collect();
        while let Some((n, depth)) = todo.pop() {
            out.push((n, depth));
            todo.extend(children.of(n).iter().rev().map(|&c| (c, depth + 1)));
        }
        out
    }

    /// The hot path: from the root, the heaviest child, as long as it
    /// carries at least `min_share` of `total`.
    pub fn hot_path(&self, total: u64, min_share: f64) -> Vec<NodeId> {
        let children = self.children();
        let mut out = Vec::new();
        let mut cur = NodeId::ROOT;
        while let Some(&next) = children.of(cur).first() {
            if (self.weight[next.index()].inclusive() as f64) < min_share * total as f64 {
                break;
            }
            out.push(next);
            cur = next;
        }
        out
    }

    /// The lines of the tree as shown: pre-order, children heaviest first,
    /// without the nodes lighter than `min_weight` (with their subtrees);
    /// of the rest, the nodes `keep` accepts, the paths to them and what
    /// they call (their subtrees); the hot path (see
    /// [`CallTree::hot_path`]) is marked.
    pub fn lines(
        &self,
        min_weight: u64,
        hot: &[NodeId],
        keep: impl Fn(Option<FrameKey>) -> bool,
    ) -> Vec<TreeLine> {
        let n = self.len();
        // Parents have smaller ids than their children: a forward pass sees
        // a node's parent first (is it inside an accepted node?), a
        // backward pass every child before its parent (the paths to them).
        let mut inside = vec![false; n];
        for id in 1..n {
            inside[id] = inside[self.parent[id].index()] || keep(self.key[id]);
        }
        let mut shown = vec![false; n];
        for id in (1..n).rev() {
            if self.weight[id].inclusive() < min_weight {
                continue;
            }
            if shown[id] || inside[id] {
                shown[id] = true;
                shown[self.parent[id].index()] = true;
            }
        }
        let mut on_hot = vec![false; n];
        for h in hot {
            on_hot[h.index()] = true;
        }
        self.pre_order()
            .into_iter()
            .filter(|&(node, _)| {
                shown[node.index()] && self.weight[node.index()].inclusive() >= min_weight
            })
            .map(|(node, depth)| TreeLine {
                node,
                depth,
                hot: on_hot[node.index()],
            })
            .collect()
    }

    /// The tree re-rooted at the frames `is_focus` accepts: every outermost
    /// such frame (one with no accepted frame above it) and its subtree,
    /// merged under one root child per key whatever called it. Each call
    /// of a focus frame counts once (a recursive one's inner calls stay
    /// inside its subtree), so the new roots' weights are the frames' own
    /// totals.
    pub fn focus(&self, is_focus: impl Fn(FrameKey) -> bool) -> CallTree<W> {
        let mut out: CallTree<W> = CallTree::new();
        let mut map: Vec<Option<NodeId>> = vec![None; self.len()];
        for id in 1..self.len() {
            let Some(key) = self.key[id] else { continue };
            let ours = match map[self.parent[id].index()] {
                Some(p) => out.child(p, key),
                None if is_focus(key) => out.child(NodeId::ROOT, key),
                None => continue,
            };
            map[id] = Some(ours);
            out.weight[ours.index()].merge(&self.weight[id]);
        }
        // The root holds its children's weight, as a thread's root does.
        let mut root = W::default();
        for &c in out.children().of(NodeId::ROOT) {
            root.merge(&out.weight[c.index()]);
        }
        out.weight[0] = root;
        out
    }

    /// Caller → callee edges (caller `None`: called from a thread's root)
    /// with their weights: the callee's nodes under that caller, added up,
    /// with an edge that recurs on one path counted once inclusively.
    pub fn edges(&self) -> HashMap<(Option<FrameKey>, FrameKey), W> {
        let children = self.children();
        let mut edges: HashMap<(Option<FrameKey>, FrameKey), W> = HashMap::new();
        let mut on_path: HashMap<(Option<FrameKey>, FrameKey), u32> = HashMap::new();
        let mut todo: Vec<(NodeId, bool)> = vec![(NodeId::ROOT, true)];
        while let Some((id, entering)) = todo.pop() {
            let edge = self.key(id).map(|k| (self.key(self.parent[id.index()]), k));
            if entering {
                if let Some(edge) = edge {
                    let depth = on_path.entry(edge).or_default();
                    let w = &self.weight[id.index()];
                    let add = if *depth > 0 { w.nested() } else { w.clone() };
                    edges.entry(edge).or_default().merge(&add);
                    *depth += 1;
                }
                todo.push((id, false));
                todo.extend(children.of(id).iter().map(|&c| (c, true)));
            } else if let Some(edge) = edge {
                if let Some(d) = on_path.get_mut(&edge) {
                    *d -= 1;
                }
            }
        }
        edges
    }
}

/// Every node's children, as [`CallTree::children`] orders them.
#[derive(Clone, Debug)]
pub struct Children {
    start: Vec<u32>,
    ids: Vec<NodeId>,
}

impl Children {
    pub fn of(&self, node: NodeId) -> &[NodeId] {
        let i = node.index();
        match (self.start.get(i), self.start.get(i + 1)) {
            (Some(&a), Some(&b)) => &self.ids[a as usize..b as usize],
            _ => &[],
        }
    }
}

/// A line of a shown tree after [`elide_chains`]: a node, or the lines
/// left out of the middle of a long chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShownLine {
    Node(TreeLine),
    /// `count` lines of a chain, the first at `depth`, left out (`hot`:
    /// on the hot path).
    Elided {
        depth: usize,
        count: usize,
        hot: bool,
    },
    /// `count` lines that only pass their caller's time on, the first at
    /// `depth`, left out ([`collapse_equal`]).
    Collapsed {
        depth: usize,
        count: usize,
        hot: bool,
    },
}

/// `lines` with the middle of every run of calls that only pass their
/// time on collapsed into one [`ShownLine::Collapsed`]: a run is lines
/// each with exactly one line below, whose inclusive `weight` is the
/// first's within 0.1 % (`_start → __libc_start_main → main`, a chain of
/// wrappers). Of a run of at least four lines the first and the last stay.
/// Lines keep their real depths; beside each comes the level it is shown
/// at, where the lines below a collapsed run move up by the levels left
/// out, so deep stacks lose their indentation along with their wrappers.
pub fn collapse_equal(
    lines: &[ShownLine],
    weight: impl Fn(NodeId) -> u64,
) -> Vec<(ShownLine, usize)> {
    let depth = |l: &ShownLine| match *l {
        ShownLine::Node(t) => t.depth,
        ShownLine::Elided { depth, .. } | ShownLine::Collapsed { depth, .. } => depth,
    };
    // How many lines each line has directly below it.
    let mut below = vec![0usize; lines.len()];
    let mut open: Vec<usize> = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        while open.last().is_some_and(|&j| depth(&lines[j]) >= depth(l)) {
            open.pop();
        }
        if let Some(&parent) = open.last() {
            below[parent] += 1;
        }
        open.push(i);
    }
    let node = |i: usize| match lines[i] {
        ShownLine::Node(t) => Some(t),
        _ => None,
    };
    // (depth of a collapsed run's first line, levels the lines under its
    // last line moved up)
    let mut shifts: Vec<(usize, usize)> = Vec::new();
    let mut out = Vec::with_capacity(lines.len());
    let mut i = 0;
    while i < lines.len() {
        let d = depth(&lines[i]);
        while shifts.last().is_some_and(|&(start, _)| d <= start) {
            shifts.pop();
        }
        let shift: usize = shifts.iter().map(|s| s.1).sum();
        let mut end = i;
        if let Some(first) = node(i) {
            let w = weight(first.node);
            let tolerance = w / 1000;
            while end + 1 < lines.len()
                && below[end] == 1
                && node(end + 1).is_some_and(|t| weight(t.node).abs_diff(w) <= tolerance)
            {
                end += 1;
            }
        }
        if end - i + 1 >= 4 {
            out.push((lines[i], d - shift));
            let collapsed = ShownLine::Collapsed {
                depth: d + 1,
                count: end - i - 1,
                hot: node(i + 1).is_some_and(|t| t.hot),
            };
            out.push((collapsed, d - shift + 1));
            out.push((lines[end], d - shift + 2));
            shifts.push((d, end - i - 2));
            i = end + 1;
        } else {
            out.push((lines[i], d - shift));
            i += 1;
        }
    }
    out
}

/// `lines` (pre-order, as [`CallTree::lines`] gives them) with the middle
/// of every chain longer than `2 * keep + 1` lines replaced by one
/// [`ShownLine::Elided`]: a chain is a run of lines each of which has
/// exactly one line below it (a deep recursion, a long call path). Its
/// first and last `keep` lines stay, at their real depths. A 2-million-deep
/// recursion prints a few dozen lines instead of two million.
pub fn elide_chains(lines: &[TreeLine], keep: usize) -> Vec<ShownLine> {
    // How many lines each line has directly below it.
    let mut below = vec![0usize; lines.len()];
    let mut open: Vec<usize> = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        while open.last().is_some_and(|&j| lines[j].depth >= l.depth) {
            open.pop();
        }
        if let Some(&parent) = open.last() {
            below[parent] += 1;
        }
        open.push(i);
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        // The chain from i: lines with one line below, and that line.
        let mut end = i;
        while end + 1 < lines.len() && below[end] == 1 {
            end += 1;
        }
        let len = end - i + 1;
        if len > 2 * keep + 1 {
            out.extend(lines[i..i + keep].iter().copied().map(ShownLine::Node));
            out.push(ShownLine::Elided {
                depth: lines[i + keep].depth,
                count: len - 2 * keep,
                hot: lines[i + keep].hot,
            });
            out.extend(
                lines[end + 1 - keep..=end]
                    .iter()
                    .copied()
                    .map(ShownLine::Node),
            );
        } else {
            out.extend(lines[i..=end].iter().copied().map(ShownLine::Node));
        }
        i = end + 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Default, Debug, PartialEq)]
    struct W(u64, u64);

    impl Weight for W {
        fn merge(&mut self, o: &Self) {
            self.0 += o.0;
            self.1 += o.1;
        }
        fn inclusive(&self) -> u64 {
            self.0
        }
        fn exclusive(&self) -> u64 {
            self.1
        }
        fn nested(&self) -> Self {
            W(0, self.1)
        }
    }

    fn f(n: u32) -> FrameKey {
        FrameKey::Function(FunctionId(n))
    }

    /// main(10) > {a(6) > a(2), b(3)}
    fn sample() -> CallTree<W> {
        let mut t = CallTree::new();
        let main = t.path_node([f(0)]);
        *t.weight_mut(main) = W(10, 1);
        let a = t.path_node([f(0), f(1)]);
        *t.weight_mut(a) = W(6, 4);
        let aa = t.path_node([f(0), f(1), f(1)]);
        *t.weight_mut(aa) = W(2, 2);
        let b = t.path_node([f(0), f(2)]);
        *t.weight_mut(b) = W(3, 3);
        t
    }

    #[test]
    fn subtrees_reroot_at_the_outermost_match_and_merge_call_sites() {
        let mut t = sample();
        // a called from b too: main > b > a(1)
        let ba = t.path_node([f(0), f(2), f(1)]);
        *t.weight_mut(ba) = W(1, 1);
        let mut s = t.subtrees(|k| k == f(1));
        // a(6 + 1) > a(2); main and b are gone
        assert_eq!(s.len(), 3);
        let a = s.path_node([f(1)]);
        assert_eq!(s.weight(a), &W(7, 5));
        let aa = s.path_node([f(1), f(1)]);
        assert_eq!(s.weight(aa), &W(2, 2));
        assert_eq!(s.weight(NodeId::ROOT), &W(7, 5));
        assert!(t.subtrees(|_| false).is_empty());
    }

    #[test]
    fn pre_order_puts_the_heaviest_child_first() {
        let t = sample();
        let keys: Vec<(FrameKey, usize)> = t
            .pre_order()
            .into_iter()
            .map(|(n, d)| (t.key(n).unwrap(), d))
            .collect();
        assert_eq!(keys, [(f(0), 0), (f(1), 1), (f(1), 2), (f(2), 1)]);
    }

    #[test]
    fn recursive_edge_counts_its_inclusive_weight_once() {
        let e = sample().edges();
        assert_eq!(e[&(Some(f(1)), f(1))], W(2, 2));
        assert_eq!(e[&(Some(f(0)), f(1))], W(6, 4));
        assert_eq!(e[&(None, f(0))], W(10, 1));
    }

    #[test]
    fn lines_prune_light_branches_and_keep_paths_to_matches() {
        let t = sample();
        let hot = t.hot_path(10, 0.5);
        assert_eq!(hot.len(), 2, "main, then a (6 >= 5), not a's child (2)");
        let lines = t.lines(3, &hot, |_| true);
        assert_eq!(lines.len(), 3, "a > a (2) is below 3");
        let only_b = t.lines(0, &hot, |k| k == Some(f(2)));
        let keys: Vec<_> = only_b.iter().map(|l| t.key(l.node).unwrap()).collect();
        assert_eq!(keys, [f(0), f(2)]);
        // A match shows what it calls, too: a, and a inside a.
        let only_a = t.lines(0, &hot, |k| k == Some(f(1)));
        let keys: Vec<_> = only_a.iter().map(|l| t.key(l.node).unwrap()).collect();
        assert_eq!(keys, [f(0), f(1), f(1)]);
    }

    #[test]
    fn focus_merges_every_call_site_of_a_function_under_one_root() {
        // main(10) > {x(4) > c(3), y(5) > {c(2) > d(1), z(1)}}; c also
        // calls c: main > y > c > c(1).
        let mut t: CallTree<W> = CallTree::new();
        let mut set = |path: &[u32], w: W| {
            let n = t.path_node(path.iter().map(|&i| f(i)));
            *t.weight_mut(n) = w;
        };
        set(&[0], W(10, 0));
        set(&[0, 1], W(4, 1));
        set(&[0, 1, 3], W(3, 3));
        set(&[0, 2], W(5, 2));
        set(&[0, 2, 3], W(2, 0));
        set(&[0, 2, 3, 4], W(1, 1));
        set(&[0, 2, 3, 3], W(1, 1));
        set(&[0, 2, 5], W(1, 1));
        let c = t.focus(|k| k == f(3));
        let roots = c.children().of(NodeId::ROOT).to_vec();
        assert_eq!(roots.len(), 1, "one root: c, from both call sites");
        // 3 + 2: the inner c(1) is inside the outer call, not a new root.
        assert_eq!(c.weight(roots[0]), &W(5, 3));
        assert_eq!(c.weight(NodeId::ROOT), &W(5, 3));
        let below: Vec<_> = c
            .children()
            .of(roots[0])
            .iter()
            .map(|&n| (c.key(n).unwrap(), c.weight(n).clone()))
            .collect();
        assert_eq!(below, [(f(3), W(1, 1)), (f(4), W(1, 1))]);
        assert!(t.focus(|k| k == f(9)).is_empty());
    }

    #[test]
    fn runs_of_equal_weight_collapse_to_their_ends_and_move_up() {
        // a(10) > b(10) > c(10) > d(10) > {e(6) > f(6), g(3)}; then h(5).
        let mut t: CallTree<W> = CallTree::new();
        let mut set = |path: &[u32], w: u64| {
            let n = t.path_node(path.iter().map(|&i| f(i)));
            *t.weight_mut(n) = W(w, 0);
        };
        set(&[0], 10);
        set(&[0, 1], 10);
        set(&[0, 1, 2], 10);
        set(&[0, 1, 2, 3], 10);
        set(&[0, 1, 2, 3, 4], 6);
        set(&[0, 1, 2, 3, 4, 5], 6);
        set(&[0, 1, 2, 3, 6], 3);
        set(&[7], 5);
        let lines = t.lines(0, &[], |_| true);
        let shown: Vec<ShownLine> = lines.iter().copied().map(ShownLine::Node).collect();
        let out = collapse_equal(&shown, |n| t.weight(n).0);
        // (name, real depth, level shown at)
        let seen: Vec<(String, usize, usize)> = out
            .iter()
            .map(|&(l, at)| match l {
                ShownLine::Node(x) => (
                    format!("{}", t.key(x.node).unwrap().function().unwrap().0),
                    x.depth,
                    at,
                ),
                ShownLine::Collapsed { depth, count, .. } => (format!("…{count}"), depth, at),
                ShownLine::Elided { depth, count, .. } => (format!("elided {count}"), depth, at),
            })
            .collect();
        let want: Vec<(String, usize, usize)> = [
            ("0", 0, 0),
            ("…2", 1, 1),
            ("3", 3, 2),
            // e > f is a run of two: too short to collapse, moved up 1.
            ("4", 4, 3),
            ("5", 5, 4),
            ("6", 4, 3),
            ("7", 0, 0),
        ]
        .iter()
        .map(|&(s, d, at)| (s.to_owned(), d, at))
        .collect();
        assert_eq!(seen, want);
        // Unequal weights break a run.
        let out = collapse_equal(&shown, |n| t.weight(n).0 + n.index() as u64 * 100);
        assert_eq!(out.len(), shown.len());
    }

    #[test]
    fn merging_adds_path_by_path_and_a_deep_tree_drops_without_recursion() {
        let mut t = sample();
        t.merge(&sample());
        assert_eq!(t.len(), 5);
        assert_eq!(t.weight(t.children().of(NodeId::ROOT)[0]), &W(20, 2));
        let mut deep: CallTree<W> = CallTree::new();
        let mut node = NodeId::ROOT;
        for i in 0..200_000 {
            node = deep.child(node, f(i % 3));
        }
        assert_eq!(deep.pre_order().len(), 200_000);
        drop(deep);
    }

    fn line(node: u32, depth: usize) -> TreeLine {
        TreeLine {
            node: NodeId(node),
            depth,
            hot: false,
        }
    }

    #[test]
    fn the_middle_of_a_long_chain_is_elided_and_branches_are_kept() {
        // 0 > 1 > 2 > ... > 9, then 10 and 11 both under 9; 12 a second root.
        let mut lines: Vec<TreeLine> = (0..10).map(|d| line(d as u32, d)).collect();
        lines.push(line(10, 10));
        lines.push(line(11, 10));
        lines.push(line(12, 0));
        let shown = elide_chains(&lines, 2);
        let nodes = |s: &[ShownLine]| -> Vec<String> {
            s.iter()
                .map(|l| match l {
                    ShownLine::Node(t) => format!("{}@{}", t.node.0, t.depth),
                    ShownLine::Elided { depth, count, .. } => format!("...{count}@{depth}"),
                    ShownLine::Collapsed { depth, count, .. } => format!("…{count}@{depth}"),
                })
                .collect()
        };
        // The chain 0..=9 (each with one line below; 9 has two): 10 lines,
        // the first and last two kept, six elided from depth 2.
        assert_eq!(
            nodes(&shown),
            ["0@0", "1@1", "...6@2", "8@8", "9@9", "10@10", "11@10", "12@0"]
        );
        // Short chains stay whole.
        assert_eq!(elide_chains(&lines, 5).len(), lines.len());
        assert!(elide_chains(&[], 2).is_empty());
    }
}
