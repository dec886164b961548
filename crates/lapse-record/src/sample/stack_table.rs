//! Sampling: frames and stacks interned as they are unwound.
//!
//! A frame is one (module, module-relative address); a stack is a node of a
//! prefix tree (parent stack, frame), outermost frame at the root. Both get
//! dense ids in order of first appearance, so a node's parent id is always
//! smaller than its own and the tables can be written incrementally: the
//! recorder flushes what is new since the last flush ([`StackTable::take_new`]).

use std::collections::HashMap;

use lapse_data::{FrameId, FrameInfo, ModuleId, StackId, StackNode};

#[derive(Default)]
pub(crate) struct StackTable {
    frame_ids: HashMap<(ModuleId, u64), FrameId>,
    frames: Vec<(ModuleId, u64)>,
    node_ids: HashMap<(Option<StackId>, FrameId), StackId>,
    nodes: Vec<StackNode>,
    frames_flushed: usize,
    nodes_flushed: usize,
}

impl StackTable {
    pub(crate) fn frame(&mut self, module: ModuleId, address: u64) -> FrameId {
        if let Some(&id) = self.frame_ids.get(&(module, address)) {
            return id;
        }
        let id = FrameId(self.frames.len() as u32);
        self.frames.push((module, address));
        self.frame_ids.insert((module, address), id);
        id
    }

    /// Interns a stack given its frames outermost first; `None` when empty.
    pub(crate) fn stack(
        &mut self,
        outermost_first: impl IntoIterator<Item = FrameId>,
    ) -> Option<StackId> {
        let mut parent = None;
        for frame in outermost_first {
            let id = match self.node_ids.get(&(parent, frame)) {
                Some(&id) => id,
                None => {
                    let id = StackId(self.nodes.len() as u32);
                    self.nodes.push(StackNode { id, parent, frame });
                    self.node_ids.insert((parent, frame), id);
                    id
                }
            };
            parent = Some(id);
        }
        parent
    }

    /// Frames (unsymbolized) and stack nodes added since the last call.
    pub(crate) fn take_new(&mut self) -> (Vec<FrameInfo>, Vec<StackNode>) {
        let frames = self.frames[self.frames_flushed..]
            .iter()
            .enumerate()
            .map(|(i, &(module, address))| FrameInfo {
                id: FrameId((self.frames_flushed + i) as u32),
                module,
                address,
                functions: Vec::new(),
            })
            .collect();
        let nodes = self.nodes[self.nodes_flushed..].to_vec();
        self.frames_flushed = self.frames.len();
        self.nodes_flushed = self.nodes.len();
        (frames, nodes)
    }

    /// Every frame so far: (id, module, module-relative address).
    pub(crate) fn frames(&self) -> impl Iterator<Item = (FrameId, ModuleId, u64)> + '_ {
        self.frames
            .iter()
            .enumerate()
            .map(|(i, &(m, a))| (FrameId(i as u32), m, a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_prefixes_share_nodes_and_parents_come_first() {
        let mut t = StackTable::default();
        let main = t.frame(ModuleId(0), 0x10);
        let a = t.frame(ModuleId(0), 0x20);
        let b = t.frame(ModuleId(1), 0x30);
        assert_eq!(t.frame(ModuleId(0), 0x20), a);
        let s1 = t.stack([main, a]);
        let s2 = t.stack([main, b]);
        let s3 = t.stack([main, a]);
        assert_eq!(s1, s3);
        assert_ne!(s1, s2);
        assert_eq!(t.stack([]), None);
        let (frames, nodes) = t.take_new();
        assert_eq!(frames.len(), 3);
        assert_eq!(nodes.len(), 3);
        for n in &nodes {
            assert!(n.parent.is_none_or(|p| p < n.id));
        }
        let (frames, nodes) = t.take_new();
        assert!(frames.is_empty() && nodes.is_empty());
        t.stack([main, a, b]);
        let (_, nodes) = t.take_new();
        assert_eq!(nodes.len(), 1);
        assert_eq!(nodes[0].parent, s1);
    }
}
