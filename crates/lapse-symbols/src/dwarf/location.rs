//! Source lines without the whole DWARF: one unit's line table at a time.
//!
//! `addr2line::Context` parses every unit (and its abbreviations) before
//! the first lookup: 15 MB for the C library, to name a handful of
//! functions. Here a small address index says which unit holds an address;
//! only that unit and its line program are parsed, and the rows of the few
//! most recently used units are kept (a Rust binary's big unit is asked for
//! thousands of functions in a row).
//!
//! When `.debug_aranges` names the units and `.debug_info` is compressed
//! (a distribution's debug file), the index starts as `.debug_aranges`
//! alone and `.debug_info` is inflated only through the units asked for
//! ([`UnitStream`]). An address that no listed unit answers for completes
//! the index the whole way (every unit walked, as without `.debug_aranges`)
//! and is asked again.

use std::cell::RefCell;

use gimli::{DebugInfoOffset, SectionId};

use super::lines::UnitLines;
use super::sections::{Sections, UnitStream};
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
    state: RefCell<State>,
}

struct State {
    /// The line sections; `.debug_info` is the whole section, or (with
    /// `stream`) the chunk of the unit parsed last.
    dwarf: gimli::Dwarf<Reader>,
    /// `.debug_info` unit by unit, while `index` is `.debug_aranges` alone.
    stream: Option<UnitStream>,
    index: UnitIndex,
    recent: Vec<(DebugInfoOffset<usize>, UnitLines)>,
}

impl LineLookup {
    /// Loads the line sections and builds the unit index (from
    /// `.debug_aranges` alone when `.debug_info` can be read unit by unit).
    pub(super) fn new(sections: &Sections) -> LineLookup {
        let listed = sections
            .unit_stream()
            .and_then(|stream| Some((stream, UnitIndex::from_aranges(sections)?)));
        let (dwarf, stream, index) = match listed {
            Some((stream, index)) => {
                let around: Vec<SectionId> = LINE_SECTIONS
                    .iter()
                    .copied()
                    .filter(|&id| id != SectionId::DebugInfo)
                    .collect();
                (sections.dwarf(&around), Some(stream), index)
            }
            None => {
                let dwarf = sections.dwarf(LINE_SECTIONS);
                let index = UnitIndex::build(sections, &dwarf);
                (dwarf, None, index)
            }
        };
        LineLookup {
            state: RefCell::new(State {
                dwarf,
                stream,
                index,
                recent: Vec::new(),
            }),
        }
    }

    /// File and line of `addr`: the first unit holding it whose line table
    /// has a row for it answers, as with `addr2line::Context::find_location`.
    pub(super) fn location(&self, sections: &Sections, addr: u64) -> (Option<String>, Option<u32>) {
        let mut state = self.state.borrow_mut();
        if let Some(found) = state.find(addr) {
            return found;
        }
        if state.stream.is_some() {
            // (no unit `.debug_aranges` lists has it: perhaps one it leaves out)
            state.complete(sections);
            if let Some(found) = state.find(addr) {
                return found;
            }
        }
        (None, None)
    }

    #[cfg(test)]
    pub(super) fn recent_units(&self) -> usize {
        self.state.borrow().recent.len()
    }

    #[cfg(test)]
    pub(super) fn index_len(&self) -> usize {
        self.state.borrow().index.len()
    }

    /// Bytes of `.debug_info` inflated so far and its size, while it is read
    /// unit by unit.
    #[cfg(test)]
    pub(super) fn inflated(&self) -> Option<(usize, usize)> {
        self.state
            .borrow()
            .stream
            .as_ref()
            .map(UnitStream::inflated)
    }
}

impl State {
    /// The answer of the first unit holding `addr` with a row for it.
    fn find(&mut self, addr: u64) -> Option<(Option<String>, Option<u32>)> {
        let State {
            dwarf,
            stream,
            index,
            recent,
        } = self;
        for unit in index.find(addr) {
            let lines = unit_lines(dwarf, stream, recent, unit);
            if let Some(found) = lines.find(dwarf, addr) {
                return Some(found);
            }
        }
        None
    }

    /// The whole `.debug_info` and the index of every unit, as without
    /// `.debug_aranges`. Units parsed so far stay (their offsets are the
    /// section's).
    fn complete(&mut self, sections: &Sections) {
        self.stream = None;
        self.dwarf.debug_info = gimli::DebugInfo::from(sections.reader(SectionId::DebugInfo));
        self.index = UnitIndex::build(sections, &self.dwarf);
    }
}

/// The rows of `unit`, parsed now unless recently used. A unit that cannot
/// be parsed is kept as empty, so it is not tried again soon.
fn unit_lines<'r>(
    dwarf: &mut gimli::Dwarf<Reader>,
    stream: &mut Option<UnitStream>,
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
            let lines = parse(dwarf, stream, unit).unwrap_or_default();
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

/// Parses `unit`: from the whole `.debug_info`, or from the chunk of the
/// stream that holds it (offsets in the chunk are the section's less the
/// chunk's start; nothing a line table needs is a `.debug_info` offset).
fn parse(
    dwarf: &mut gimli::Dwarf<Reader>,
    stream: &mut Option<UnitStream>,
    unit: DebugInfoOffset<usize>,
) -> Option<UnitLines> {
    let at = match stream {
        Some(stream) => {
            let (start, chunk) = stream.unit(unit.0)?;
            dwarf.debug_info = gimli::DebugInfo::from(chunk);
            DebugInfoOffset(unit.0 - start)
        }
        None => unit,
    };
    let header = dwarf.debug_info.header_from_offset(at).ok()?;
    UnitLines::parse(dwarf.unit(header).ok()?).ok()
}
