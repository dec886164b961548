//! Source lines without the whole DWARF: one unit's line table at a time.
//!
//! `addr2line::Context` parses every unit (and its abbreviations) before
//! the first lookup: 15 MB for the C library, to name a handful of
//! functions. Here a small address index says which unit holds an address;
//! only that unit and its line program are parsed, and the rows of the few
//! most recently used units are kept (a Rust binary's big unit is asked for
//! thousands of functions in a row).

use std::cell::RefCell;

use gimli::{DebugInfoOffset, SectionId};

use super::lines::UnitLines;
use super::sections::Sections;
use super::unit_index::UnitIndex;
use super::Reader;

/// What a line lookup reads (`.debug_addr` for DWARF 5 `addrx` forms in a
/// unit's root DIE).
const LINE_SECTIONS: &[SectionId] = &[
    SectionId::DebugInfo,
    SectionId::DebugAbbrev,
    SectionId::DebugLine,
    SectionId::DebugStr,
    SectionId::DebugLineStr,
    SectionId::DebugStrOffsets,
    SectionId::DebugAddr,
];

/// Parsed units kept, most recent first: at most this many...
pub(super) const RECENT_UNITS: usize = 16;
/// ...and, beyond the most recent one, at most this many rows (16 bytes
/// each) between them.
const RECENT_ROWS: usize = 1 << 19;

pub(super) struct LineLookup {
    dwarf: gimli::Dwarf<Reader>,
    index: UnitIndex,
    recent: RefCell<Vec<(DebugInfoOffset<usize>, UnitLines)>>,
}

impl LineLookup {
    /// Loads the line sections and builds the unit index.
    pub(super) fn new(sections: &Sections) -> LineLookup {
        let dwarf = sections.dwarf(LINE_SECTIONS);
        let index = UnitIndex::build(sections, &dwarf);
        LineLookup {
            dwarf,
            index,
            recent: RefCell::new(Vec::new()),
        }
    }

    /// File and line of `addr`: the first unit holding it whose line table
    /// has a row for it answers, as with `addr2line::Context::find_location`.
    pub(super) fn location(&self, addr: u64) -> (Option<String>, Option<u32>) {
        let mut recent = self.recent.borrow_mut();
        for unit in self.index.find(addr) {
            let lines = self.unit_lines(&mut recent, unit);
            if let Some(found) = lines.find(&self.dwarf, addr) {
                return found;
            }
        }
        (None, None)
    }

    /// The rows of `unit`, parsed now unless recently used. A unit that
    /// cannot be parsed is kept as empty, so it is not tried again soon.
    fn unit_lines<'r>(
        &self,
        recent: &'r mut Vec<(DebugInfoOffset<usize>, UnitLines)>,
        unit: DebugInfoOffset<usize>,
    ) -> &'r UnitLines {
        match recent.iter().position(|(offset, _)| *offset == unit) {
            Some(0) => {}
            Some(i) => {
                let hit = recent.remove(i);
                recent.insert(0, hit);
            }
            None => {
                let lines = self.parse(unit).unwrap_or_default();
                recent.insert(0, (unit, lines));
                let mut rows: usize = recent.iter().map(|(_, l)| l.row_count()).sum();
                while recent.len() > RECENT_UNITS || (recent.len() > 1 && rows > RECENT_ROWS) {
                    if let Some((_, dropped)) = recent.pop() {
                        rows -= dropped.row_count();
                    }
                }
            }
        }
        &recent[0].1
    }

    fn parse(&self, unit: DebugInfoOffset<usize>) -> Result<UnitLines, gimli::Error> {
        let header = self.dwarf.debug_info.header_from_offset(unit)?;
        UnitLines::parse(self.dwarf.unit(header)?)
    }

    #[cfg(test)]
    pub(super) fn recent_units(&self) -> usize {
        self.recent.borrow().len()
    }

    #[cfg(test)]
    pub(super) fn index_len(&self) -> usize {
        self.index.len()
    }
}
