//! Aggregated call paths, the same shape for both methods: a prefix tree of
//! frames (outermost at the root) whose nodes carry their *own* (exclusive)
//! weight. Folded stacks, flame graphs, pprof, callgrind and the HTML page
//! are all written from it.
//!
//! - Instrumentation: the analysis' merged call tree; a node's weight is its
//!   elapsed exclusive time. Time with an empty stack belongs to no function
//!   and is left out, so the total is the sum of the functions' elapsed
//!   exclusive times.
//! - Sampling: every kept sample's stack expanded through inline chains (as
//!   SPEC 2.2 counts it); a frame that did not resolve to a function is shown
//!   as `[module+0xADDR]`, a sample with no stack at all as `[unknown]`, so
//!   the total is the session's sample count.

use std::collections::HashMap;

use lapse_analysis::calltree::ROOT;
use lapse_analysis::sample::expand;
use lapse_data::{DataFile, FunctionId, Method, ModuleId, StackId};
use lapse_report::Analysis;

use crate::ExportError;

/// What a path node stands for.
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

/// One node: a call path ending in `key`.
#[derive(Clone, Debug)]
pub struct PathNode {
    pub parent: u32,
    /// `None` only for the root.
    pub key: Option<FrameKey>,
    pub children: Vec<u32>,
    /// Sampling: samples whose stack is exactly this path.
    pub samples: u64,
    /// Instrumentation: `enter` events of this path's last function.
    pub calls: u64,
    /// Instrumentation: elapsed / application exclusive time of this path.
    pub elapsed_ns: u64,
    pub application_ns: u64,
    /// Instrumentation: elapsed / application inclusive time of this path.
    pub elapsed_inclusive_ns: u64,
    pub application_inclusive_ns: u64,
}

impl PathNode {
    fn new(parent: u32, key: Option<FrameKey>) -> PathNode {
        PathNode {
            parent,
            key,
            children: Vec::new(),
            samples: 0,
            calls: 0,
            elapsed_ns: 0,
            application_ns: 0,
            elapsed_inclusive_ns: 0,
            application_inclusive_ns: 0,
        }
    }
}

/// The call paths of a recording; node 0 is the root.
#[derive(Clone, Debug)]
pub struct PathTree {
    pub method: Method,
    pub nodes: Vec<PathNode>,
    index: HashMap<(u32, FrameKey), u32>,
}

impl PathTree {
    /// Builds the paths of `analysis`. Instrumentation needs the call tree
    /// (analyse with [`crate::needs`]).
    pub fn new(file: &DataFile, analysis: &Analysis) -> Result<PathTree, ExportError> {
        let mut t = PathTree::empty(file.session.method);
        match analysis {
            Analysis::Instr(r) => {
                let tree = r.tree.as_ref().ok_or_else(|| ExportError::Unsupported {
                    format: "paths",
                    what: "the analysis was made without a call tree".into(),
                })?;
                // Parents come before children in the call tree's node order.
                let mut map = vec![ROOT; tree.nodes.len()];
                for (i, n) in tree.nodes.iter().enumerate() {
                    let Some(f) = n.function else { continue };
                    let parent = map.get(n.parent as usize).copied().unwrap_or(ROOT);
                    let id = t.child(parent, FrameKey::Function(f));
                    map[i] = id;
                    let node = &mut t.nodes[id as usize];
                    node.calls += n.stats.calls;
                    node.elapsed_ns += n.stats.time.elapsed_exclusive.to_nanos();
                    node.application_ns += n.stats.time.application_exclusive.to_nanos();
                    node.elapsed_inclusive_ns += n.stats.time.elapsed_inclusive.to_nanos();
                    node.application_inclusive_ns += n.stats.time.application_inclusive.to_nanos();
                }
            }
            Analysis::Sample(r) => {
                let mut stacks: Vec<_> = r.analysis.per_stack.iter().collect();
                stacks.sort_by_key(|(k, _)| **k);
                let mut counted = 0u64;
                for (&(stack, _, _), &n) in stacks {
                    counted += n;
                    let node = t.intern(&sample_keys(file, Some(stack)));
                    t.nodes[node as usize].samples += n;
                }
                let unwound_none = r.analysis.samples.saturating_sub(counted);
                if unwound_none > 0 {
                    let node = t.child(ROOT, FrameKey::Unknown);
                    t.nodes[node as usize].samples += unwound_none;
                }
            }
        }
        Ok(t)
    }

    /// An empty tree (just the root), to be filled with [`PathTree::intern`].
    pub fn empty(method: Method) -> PathTree {
        PathTree {
            method,
            nodes: vec![PathNode::new(ROOT, None)],
            index: HashMap::new(),
        }
    }

    /// The node of the path `keys` (outermost first), created if new; the
    /// root for an empty path.
    pub fn intern(&mut self, keys: &[FrameKey]) -> u32 {
        keys.iter().fold(ROOT, |node, &k| self.child(node, k))
    }

    fn child(&mut self, parent: u32, key: FrameKey) -> u32 {
        if let Some(&id) = self.index.get(&(parent, key)) {
            return id;
        }
        let id = self.nodes.len() as u32;
        self.nodes.push(PathNode::new(parent, Some(key)));
        self.nodes[parent as usize].children.push(id);
        self.index.insert((parent, key), id);
        id
    }

    /// The node's own weight in the method's main unit: elapsed exclusive
    /// nanoseconds (instrumentation) or samples (sampling).
    pub fn weight(&self, node: u32) -> u64 {
        let n = &self.nodes[node as usize];
        match self.method {
            Method::Instrumentation => n.elapsed_ns,
            Method::Sampling => n.samples,
        }
    }

    /// Keys from the outermost frame to `node`.
    pub fn path(&self, node: u32) -> Vec<FrameKey> {
        let mut out = Vec::new();
        let mut cur = node;
        while let Some(key) = self.nodes.get(cur as usize).and_then(|n| n.key) {
            out.push(key);
            cur = self.nodes[cur as usize].parent;
        }
        out.reverse();
        out
    }

    /// Nodes other than the root, depth first, children in label order:
    /// a stable order for every writer.
    pub fn depth_first(&self, file: &DataFile) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.nodes.len());
        let mut todo = vec![ROOT];
        while let Some(n) = todo.pop() {
            if n != ROOT {
                out.push(n);
            }
            let mut kids = self.nodes[n as usize].children.clone();
            kids.sort_by_cached_key(|&c| {
                std::cmp::Reverse(self.nodes[c as usize].key.map(|k| label(file, k)))
            });
            todo.extend(kids);
        }
        out
    }
}

/// The frames of a sampled stack, outermost first, expanded through inline
/// chains as SPEC 2.2 counts them; `[unknown]` alone when nothing unwound.
pub fn sample_keys(file: &DataFile, stack: Option<StackId>) -> Vec<FrameKey> {
    let mut keys: Vec<FrameKey> = stack
        .map(|s| expand(&file.stacks, &file.frames, s))
        .unwrap_or_default()
        .iter()
        .map(|f| match f.function {
            Some(id) => FrameKey::Function(id),
            None => FrameKey::Unresolved {
                module: f.module,
                address: file
                    .frames
                    .get(f.frame.0 as usize)
                    .map_or(0, |fr| fr.address),
            },
        })
        .collect();
    if keys.is_empty() {
        keys.push(FrameKey::Unknown);
    }
    keys
}

/// The name a frame is shown by: the function's demangled name, or
/// `[module+0xADDR]`, or `[unknown]`.
pub fn label(file: &DataFile, key: FrameKey) -> String {
    match key {
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

/// The module a frame belongs to, if known.
pub fn module_of(file: &DataFile, key: FrameKey) -> Option<ModuleId> {
    match key {
        FrameKey::Function(f) => file.functions.get(f.0 as usize).map(|i| i.module),
        FrameKey::Unresolved { module, .. } => Some(module),
        FrameKey::Unknown => None,
    }
}
