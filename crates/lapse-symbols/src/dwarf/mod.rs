//! DWARF: source lines by a lean lookup of our own, inline chains through
//! `addr2line`.
//!
//! The two lookups cost very differently. [`DwarfInfo::location`] (the
//! recorder names every function it saw with it) needs one unit's line
//! table, so it parses one unit at a time ([`location`]). [`DwarfInfo::frames`]
//! needs every unit's functions, so it builds an `addr2line::Context` on its
//! first call, and only then. Sections are mapped views ([`SectionData`]);
//! compressed ones are decompressed when a path first reads them.

mod lines;
mod location;
mod sections;
#[cfg(test)]
mod tests;
mod unit_index;

use std::cell::OnceCell;

use gimli::SectionId;
use object::{Object, ObjectSection};

use crate::bytes::SectionData;
use location::LineLookup;
use sections::Sections;

pub(crate) type Reader = gimli::EndianReader<gimli::RunTimeEndian, SectionData>;

/// What `addr2line` reads: everything but variable locations and macros.
const FRAME_SECTIONS: &[SectionId] = &[
    SectionId::DebugAbbrev,
    SectionId::DebugAddr,
    SectionId::DebugAranges,
    SectionId::DebugInfo,
    SectionId::DebugLine,
    SectionId::DebugLineStr,
    SectionId::DebugStr,
    SectionId::DebugStrOffsets,
    SectionId::DebugTypes,
    SectionId::DebugRanges,
    SectionId::DebugRngLists,
];

/// One level of an inline chain as DWARF describes it.
#[derive(Debug)]
pub(crate) struct DwarfFrame {
    /// Raw (possibly mangled) function name.
    pub(crate) name: Option<String>,
    pub(crate) file: Option<String>,
    pub(crate) line: Option<u32>,
}

pub(crate) struct DwarfInfo {
    sections: Sections,
    /// Built by the first [`DwarfInfo::location`].
    lines: OnceCell<LineLookup>,
    /// Built by the first [`DwarfInfo::frames`]; `None` when the DWARF is too
    /// damaged for `addr2line`.
    context: OnceCell<Option<addr2line::Context<Reader>>>,
}

impl DwarfInfo {
    /// The DWARF of `file` (whose bytes are `bytes`); `None` when it has no
    /// `.debug_info`. Reads nothing yet: each lookup loads what it needs.
    pub(crate) fn new(file: &object::File<'_>, bytes: &SectionData) -> Option<DwarfInfo> {
        if !has_debug_info(file) {
            return None;
        }
        let endian = if file.is_little_endian() {
            gimli::RunTimeEndian::Little
        } else {
            gimli::RunTimeEndian::Big
        };
        Some(DwarfInfo {
            sections: Sections::new(bytes.clone(), endian),
            lines: OnceCell::new(),
            context: OnceCell::new(),
        })
    }

    /// The inline chain at `addr`, innermost first as DWARF nests it. Damaged
    /// DWARF ends the chain early instead of failing the lookup.
    pub(crate) fn frames(&self, addr: u64) -> Vec<DwarfFrame> {
        let mut out = Vec::new();
        let Some(context) = self.context() else {
            return out;
        };
        let Ok(mut iter) = context.find_frames(addr).skip_all_loads() else {
            return out;
        };
        while let Ok(Some(frame)) = iter.next() {
            let name = frame
                .function
                .as_ref()
                .and_then(|f| f.raw_name().ok())
                .map(|n| n.into_owned());
            let (file, line) = match &frame.location {
                Some(loc) => (loc.file.map(str::to_owned), loc.line),
                None => (None, None),
            };
            out.push(DwarfFrame { name, file, line });
            if out.len() > 256 {
                break;
            }
        }
        out
    }

    /// Source position of `addr` from the line table alone. Builds no
    /// `addr2line` context; uses one that `frames` already built.
    pub(crate) fn location(&self, addr: u64) -> (Option<String>, Option<u32>) {
        if let Some(Some(context)) = self.context.get() {
            return match context.find_location(addr) {
                Ok(Some(loc)) => (loc.file.map(str::to_owned), loc.line),
                _ => (None, None),
            };
        }
        self.lines
            .get_or_init(|| LineLookup::new(&self.sections))
            .location(&self.sections, addr)
    }

    fn context(&self) -> Option<&addr2line::Context<Reader>> {
        self.context
            .get_or_init(|| {
                let mut dwarf = self.sections.dwarf(FRAME_SECTIONS);
                // Units sharing an abbreviation table share one parsed
                // copy: rustc's units often do (symbolizing all of the
                // release lapse binary peaks 6 % lower, no slower); gcc
                // gives each unit its own, where this changes nothing.
                dwarf.populate_abbreviations_cache(gimli::AbbreviationsCacheStrategy::Duplicates);
                addr2line::Context::from_dwarf(dwarf).ok()
            })
            .as_ref()
    }
}

#[cfg(test)]
impl DwarfInfo {
    pub(crate) fn context_built(&self) -> bool {
        self.context.get().is_some()
    }

    pub(crate) fn loaded_sections(&self) -> Vec<SectionId> {
        self.sections.loaded()
    }
}

/// Whether the object has DWARF debug information of its own.
pub(crate) fn has_debug_info(file: &object::File<'_>) -> bool {
    file.section_by_name(".debug_info")
        .is_some_and(|s| s.size() > 0)
}
