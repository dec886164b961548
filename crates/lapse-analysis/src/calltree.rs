//! Call tree: one node per distinct call path, per thread; and the caller /
//! callee edges derived from it.
//!
//! A path node occurs at most once on any stack, so its inclusive value is
//! simply the sum of its frames' spans; its exclusive value is the time it
//! was on top. Edges (caller G → callee F) aggregate the nodes of F whose
//! parent is G, counting inclusive time once when the same edge appears
//! several times on one path (recursion), like function rows do.

use std::collections::HashMap;

use lapse_data::FunctionId;

use crate::fine::Fine;
use crate::values::FunctionStats;

pub const ROOT: u32 = 0;

#[derive(Clone, Debug, Default)]
pub struct Node {
    pub parent: u32,
    /// `None` for the root.
    pub function: Option<FunctionId>,
    pub stats: FunctionStats,
    pub children: Vec<u32>,
}

#[derive(Clone, Debug)]
pub struct CallTree {
    /// The thread this tree belongs to (meaningless after [`CallTree::merge`]).
    pub pid: u32,
    pub tid: u32,
    pub nodes: Vec<Node>,
    index: HashMap<(u32, FunctionId), u32>,
    open: Vec<[Fine; 2]>,
}

impl CallTree {
    pub fn new(pid: u32, tid: u32) -> CallTree {
        CallTree {
            pid,
            tid,
            nodes: vec![Node::default()],
            index: HashMap::new(),
            open: Vec::new(),
        }
    }

    fn child(&mut self, parent: u32, function: FunctionId) -> u32 {
        if let Some(&id) = self.index.get(&(parent, function)) {
            return id;
        }
        let id = self.nodes.len() as u32;
        self.nodes.push(Node {
            parent,
            function: Some(function),
            ..Node::default()
        });
        self.nodes[parent as usize].children.push(id);
        self.index.insert((parent, function), id);
        id
    }

    pub(crate) fn enter(&mut self, parent: u32, function: FunctionId, counted: bool) -> u32 {
        let id = self.child(parent, function);
        let node = &mut self.nodes[id as usize];
        if counted {
            node.stats.calls += 1;
        }
        self.open.push([
            node.stats.time.elapsed_exclusive,
            node.stats.time.application_exclusive,
        ]);
        id
    }

    #[inline]
    pub(crate) fn add_exclusive(&mut self, node: u32, elapsed: Fine, application: Fine) {
        let t = &mut self.nodes[node as usize].stats.time;
        t.elapsed_exclusive.0 += elapsed.0;
        t.application_exclusive.0 += application.0;
    }

    pub(crate) fn exit(
        &mut self,
        node: u32,
        inc_e: Fine,
        inc_a: Fine,
        removed: Fine,
        counted: bool,
    ) {
        let at_enter = self.open.pop().unwrap_or_default();
        let s = &mut self.nodes[node as usize].stats;
        s.time.elapsed_inclusive.0 += inc_e.0;
        s.time.application_inclusive.0 += inc_a.0;
        s.probe_overhead.0 += removed.0;
        if counted {
            let exc_e = Fine(s.time.elapsed_exclusive.0 - at_enter[0].0);
            let exc_a = Fine(s.time.application_exclusive.0 - at_enter[1].0);
            s.per_call.add_call([inc_e, exc_e, inc_a, exc_a]);
        }
    }

    /// Merges `other` into `self` path by path (used to combine threads).
    pub fn merge(&mut self, other: &CallTree) {
        // Map other's node ids to ours, parents before children (ids grow with depth order).
        let mut map = vec![ROOT; other.nodes.len()];
        for (i, node) in other.nodes.iter().enumerate() {
            let ours = match node.function {
                None => ROOT,
                Some(f) => self.child(map[node.parent as usize], f),
            };
            map[i] = ours;
            self.nodes[ours as usize].stats.merge(&node.stats);
        }
    }

    /// Caller → callee edges with their values. The caller is `None` for
    /// calls made from a thread's root (no instrumented caller).
    pub fn edges(&self) -> HashMap<(Option<FunctionId>, FunctionId), FunctionStats> {
        let mut edges: HashMap<(Option<FunctionId>, FunctionId), FunctionStats> = HashMap::new();
        // Depth-first, keeping how often each edge is already on the path.
        let mut on_path: HashMap<(Option<FunctionId>, FunctionId), u32> = HashMap::new();
        let mut todo: Vec<(u32, bool)> = vec![(ROOT, true)];
        while let Some((id, entering)) = todo.pop() {
            let node = &self.nodes[id as usize];
            let key = node
                .function
                .map(|f| (self.nodes[node.parent as usize].function, f));
            if entering {
                if let Some(key) = key {
                    let depth = on_path.entry(key).or_default();
                    let e = edges.entry(key).or_default();
                    let mut s = node.stats;
                    if *depth > 0 {
                        // Inner occurrence of the same edge: its inclusive time is already
                        // inside the outer one's.
                        s.time.elapsed_inclusive = Fine(0);
                        s.time.application_inclusive = Fine(0);
                        s.probe_overhead = Fine(0);
                    }
                    e.merge(&s);
                    *depth += 1;
                }
                todo.push((id, false));
                todo.extend(node.children.iter().map(|&c| (c, true)));
            } else if let Some(key) = key {
                if let Some(d) = on_path.get_mut(&key) {
                    *d -= 1;
                }
            }
        }
        edges
    }
}
