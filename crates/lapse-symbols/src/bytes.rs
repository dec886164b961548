//! Cheap-to-clone views into a module's bytes.
//!
//! A module file is mapped once; every section (DWARF, `.eh_frame`, ...) is a
//! [`SectionData`] pointing into that one mapping, so reading a 100 MB debug
//! file costs address space, not a copy. Compressed sections are the only
//! ones that get their own heap buffer.

use std::ops::{Deref, Range};
use std::sync::Arc;

/// Who owns the underlying bytes.
enum Owner {
    Map(memmap2::Mmap),
    Heap(Vec<u8>),
}

impl Owner {
    fn as_slice(&self) -> &[u8] {
        match self {
            Owner::Map(m) => m,
            Owner::Heap(v) => v,
        }
    }
}

/// A byte range of an owned buffer; dereferences to the bytes.
#[derive(Clone)]
pub struct SectionData {
    owner: Arc<Owner>,
    range: Range<usize>,
}

impl SectionData {
    pub(crate) fn from_map(map: memmap2::Mmap) -> Self {
        let len = map.len();
        SectionData {
            owner: Arc::new(Owner::Map(map)),
            range: 0..len,
        }
    }

    pub fn from_vec(bytes: Vec<u8>) -> Self {
        let len = bytes.len();
        SectionData {
            owner: Arc::new(Owner::Heap(bytes)),
            range: 0..len,
        }
    }

    /// A view of `part`, which must be a sub-slice of `self`; a copy when it is not
    /// (decompressed data lives elsewhere).
    pub(crate) fn sub_slice(&self, part: &[u8]) -> SectionData {
        let whole: &[u8] = self;
        let base = whole.as_ptr() as usize;
        let start = part.as_ptr() as usize;
        if start >= base && start + part.len() <= base + whole.len() {
            let offset = self.range.start + (start - base);
            SectionData {
                owner: Arc::clone(&self.owner),
                range: offset..offset + part.len(),
            }
        } else {
            SectionData::from_vec(part.to_vec())
        }
    }
}

impl Default for SectionData {
    /// No bytes.
    fn default() -> Self {
        SectionData::from_vec(Vec::new())
    }
}

impl Deref for SectionData {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // The range was checked against the owner when the view was made.
        self.owner
            .as_slice()
            .get(self.range.clone())
            .unwrap_or_default()
    }
}

impl std::fmt::Debug for SectionData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SectionData({} bytes)", self.range.len())
    }
}

// SAFETY: the bytes live in an `Arc`'d mapping or heap buffer that never moves
// or changes while any view exists, so the deref target is stable across
// moves and clones of the view.
unsafe impl stable_deref_trait::StableDeref for SectionData {}
// SAFETY: clones share the same `Arc` and range, hence the same address.
unsafe impl stable_deref_trait::CloneStableDeref for SectionData {}

/// A `PT_LOAD` segment: where file bytes land in the module's address space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadSegment {
    pub vaddr: u64,
    pub memsz: u64,
    pub offset: u64,
    pub filesz: u64,
    pub executable: bool,
}

/// A section's bytes and the module-relative address (SVMA) they start at.
#[derive(Clone, Debug)]
pub struct Section {
    pub svma: u64,
    pub data: SectionData,
}
