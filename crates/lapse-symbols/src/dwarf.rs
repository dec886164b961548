//! DWARF line tables and inline chains through `addr2line`.
//!
//! The sections are [`SectionData`] views into the mapped file, so building
//! the context copies nothing; `addr2line` parses units lazily on first use
//! and keeps them, which makes repeated lookups in one module cheap.

use std::path::Path;

use object::{Object, ObjectSection};

use crate::bytes::SectionData;
use crate::SymbolError;

pub(crate) type Reader = gimli::EndianReader<gimli::RunTimeEndian, SectionData>;

/// One level of an inline chain as DWARF describes it.
#[derive(Debug)]
pub(crate) struct DwarfFrame {
    /// Raw (possibly mangled) function name.
    pub(crate) name: Option<String>,
    pub(crate) file: Option<String>,
    pub(crate) line: Option<u32>,
}

pub(crate) struct DwarfInfo {
    context: addr2line::Context<Reader>,
}

impl DwarfInfo {
    /// Builds the context when `file` has `.debug_info`; `Ok(None)` when it has none.
    pub(crate) fn load(
        path: &Path,
        file: &object::File<'_>,
        bytes: &SectionData,
    ) -> Result<Option<DwarfInfo>, SymbolError> {
        let has_info = file
            .section_by_name(".debug_info")
            .is_some_and(|s| s.size() > 0);
        if !has_info {
            return Ok(None);
        }
        let endian = if file.is_little_endian() {
            gimli::RunTimeEndian::Little
        } else {
            gimli::RunTimeEndian::Big
        };
        let load = |id: gimli::SectionId| -> Result<Reader, gimli::Error> {
            // Variable locations are never asked for; not decompressing them
            // saves a fifth of a distribution debug file.
            let unused = matches!(
                id,
                gimli::SectionId::DebugLoc | gimli::SectionId::DebugLocLists
            );
            let section = if unused {
                None
            } else {
                file.section_by_name(id.name())
            };
            let data = match section {
                Some(section) => match section.uncompressed_data() {
                    Ok(raw) => bytes.sub_slice(&raw),
                    // A section we cannot decompress is treated as absent.
                    Err(_) => SectionData::from_vec(Vec::new()),
                },
                None => SectionData::from_vec(Vec::new()),
            };
            Ok(gimli::EndianReader::new(data, endian))
        };
        let dwarf = gimli::Dwarf::load(load).map_err(|source| SymbolError::Dwarf {
            path: path.to_owned(),
            source,
        })?;
        let context =
            addr2line::Context::from_dwarf(dwarf).map_err(|source| SymbolError::Dwarf {
                path: path.to_owned(),
                source,
            })?;
        Ok(Some(DwarfInfo { context }))
    }

    /// The inline chain at `addr`, innermost first as DWARF nests it. Damaged
    /// DWARF ends the chain early instead of failing the lookup.
    pub(crate) fn frames(&self, addr: u64) -> Vec<DwarfFrame> {
        let mut out = Vec::new();
        let Ok(mut iter) = self.context.find_frames(addr).skip_all_loads() else {
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

    /// Source position of `addr` from the line table alone.
    pub(crate) fn location(&self, addr: u64) -> (Option<String>, Option<u32>) {
        match self.context.find_location(addr) {
            Ok(Some(loc)) => (loc.file.map(str::to_owned), loc.line),
            _ => (None, None),
        }
    }
}
