//! The DWARF sections of one file, each decompressed on first request.
//!
//! A distribution debug file compresses its sections; decompressing all of
//! them costs more than the C library's whole line table. Each lookup path
//! asks only for the sections it reads, and a section decompressed for one
//! path is shared (not copied) with the other.

use std::borrow::Cow;
use std::cell::RefCell;

use gimli::SectionId;
use object::{Object, ObjectSection};

use super::Reader;
use crate::bytes::SectionData;

pub(super) struct Sections {
    /// The whole mapped file holding `.debug_info`.
    file: SectionData,
    endian: gimli::RunTimeEndian,
    /// Sections asked for so far (a handful: a list beats a map).
    loaded: RefCell<Vec<(SectionId, SectionData)>>,
}

impl Sections {
    pub(super) fn new(file: SectionData, endian: gimli::RunTimeEndian) -> Sections {
        Sections {
            file,
            endian,
            loaded: RefCell::new(Vec::new()),
        }
    }

    /// Section `id`, decompressed on the first request and kept; empty when
    /// the file lacks it or it cannot be decompressed.
    pub(super) fn reader(&self, id: SectionId) -> Reader {
        let known = self
            .loaded
            .borrow()
            .iter()
            .find(|(have, _)| *have == id)
            .map(|(_, data)| data.clone());
        let data = known.unwrap_or_else(|| {
            let data = self.load(id);
            self.loaded.borrow_mut().push((id, data.clone()));
            data
        });
        gimli::EndianReader::new(data, self.endian)
    }

    /// A `gimli::Dwarf` whose sections in `wanted` are loaded; every other
    /// section is empty (and never decompressed).
    pub(super) fn dwarf(&self, wanted: &[SectionId]) -> gimli::Dwarf<Reader> {
        let load = |id: SectionId| -> Result<Reader, std::convert::Infallible> {
            Ok(if wanted.contains(&id) {
                self.reader(id)
            } else {
                gimli::EndianReader::new(SectionData::default(), self.endian)
            })
        };
        let Ok(dwarf) = gimli::Dwarf::load(load);
        dwarf
    }

    fn load(&self, id: SectionId) -> SectionData {
        // The object was parsed when the module was opened; parsing its
        // headers again is cheaper than keeping a self-referential view.
        let Ok(file) = object::File::parse(&*self.file) else {
            return SectionData::default();
        };
        let Some(section) = file.section_by_name(id.name()) else {
            return SectionData::default();
        };
        match section.uncompressed_data() {
            Ok(Cow::Borrowed(raw)) => self.file.sub_slice(raw),
            Ok(Cow::Owned(raw)) => SectionData::from_vec(raw),
            Err(_) => SectionData::default(),
        }
    }
}

#[cfg(test)]
impl Sections {
    /// The sections decompressed or mapped so far.
    pub(super) fn loaded(&self) -> Vec<SectionId> {
        self.loaded.borrow().iter().map(|(id, _)| *id).collect()
    }
}
