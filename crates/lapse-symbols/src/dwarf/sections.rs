//! The DWARF sections of one file, each decompressed on first request.
//!
//! A distribution debug file compresses its sections; decompressing all of
//! them costs more than the C library's whole line table. Each lookup path
//! asks only for the sections it reads, and a section decompressed for one
//! path is shared (not copied) with the other. A line lookup reads
//! `.debug_info` one unit at a time, so a zlib-compressed `.debug_info`
//! can be inflated only as far as the units it asks for ([`UnitStream`]).

use std::borrow::Cow;
use std::cell::RefCell;

use flate2::{Decompress, FlushDecompress, Status};
use gimli::{Endianity, SectionId};
use object::{CompressionFormat, Object, ObjectSection};

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

    /// `.debug_info` inflated unit by unit, when it is compressed with zlib
    /// (what distributions ship); `None` otherwise: then it is read whole.
    pub(super) fn unit_stream(&self) -> Option<UnitStream> {
        let file = object::File::parse(&*self.file).ok()?;
        let section = file.section_by_name(SectionId::DebugInfo.name())?;
        let compressed = section.compressed_data().ok()?;
        if compressed.format != CompressionFormat::Zlib {
            return None;
        }
        Some(UnitStream {
            raw: self.file.sub_slice(compressed.data),
            inflater: Decompress::new(true),
            size: usize::try_from(compressed.uncompressed_size).ok()?,
            endian: self.endian,
            chunks: Vec::new(),
            len: 0,
            broken: false,
        })
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

/// The most a chunk grows by before the stream has filled what it has.
const INFLATE_STEP: usize = 1 << 20;

/// A compressed `.debug_info`, inflated only as far as the units asked for
/// so far. The C library's units that programs call into lie in its first
/// half or less; inflating the rest (and faulting in its pages) was most
/// of what naming a few library functions cost a recording.
///
/// A deflate stream is read from its start, so the bytes before a unit
/// asked for are inflated too; they are kept, in chunks that each end
/// where a unit ends, so that every unit lies whole in one chunk and is
/// read from it without a copy.
pub(super) struct UnitStream {
    /// The compressed bytes (after the ELF compression header).
    raw: SectionData,
    inflater: Decompress,
    /// The section's size inflated (the compression header's word).
    size: usize,
    endian: gimli::RunTimeEndian,
    /// `(offset, bytes)`, contiguous from offset 0, in order.
    chunks: Vec<(usize, SectionData)>,
    /// Bytes inflated so far: the end of the last chunk.
    len: usize,
    /// The stream failed (damage): nothing more is inflated.
    broken: bool,
}

impl UnitStream {
    /// The chunk holding the unit at `offset` (inflating up to its end if it
    /// is past what was), with the chunk's own offset in the section; `None`
    /// when `offset` is past the section's end or the stream is damaged.
    pub(super) fn unit(&mut self, offset: usize) -> Option<(usize, Reader)> {
        if offset >= self.len && !self.broken && self.inflate_through(offset).is_none() {
            self.broken = true;
            return None;
        }
        let i = self.chunks.partition_point(|(start, _)| *start <= offset);
        let (start, bytes) = self.chunks.get(i.checked_sub(1)?)?;
        Some((*start, gimli::EndianReader::new(bytes.clone(), self.endian)))
    }

    /// Bytes inflated so far, and the section's whole size.
    #[cfg(test)]
    pub(super) fn inflated(&self) -> (usize, usize) {
        (self.len, self.size)
    }

    /// Inflates one more chunk: from the end of the last one through the
    /// end of the unit at `offset`, whose length its first bytes say.
    fn inflate_through(&mut self, offset: usize) -> Option<()> {
        if offset >= self.size {
            return None;
        }
        let mut chunk = Vec::new();
        let at = offset - self.len;
        // (the initial length: 4 bytes, or 0xffffffff and 8 more)
        self.inflate_to(&mut chunk, (at + 12).min(self.size - self.len))?;
        let head = chunk.get(at..)?;
        let unit_len = match self.endian.read_u32(head.get(..4)?) {
            0xffff_ffff => self.endian.read_u64(head.get(4..12)?).checked_add(12),
            short => Some(u64::from(short) + 4),
        };
        // (a length past the section's end is damage: the chunk ends there)
        let end = unit_len
            .and_then(|n| usize::try_from(n).ok())
            .and_then(|n| offset.checked_add(n))
            .map_or(self.size, |e| e.min(self.size));
        self.inflate_to(&mut chunk, end - self.len)?;
        let start = self.len;
        self.len += chunk.len();
        self.chunks.push((start, SectionData::from_vec(chunk)));
        Some(())
    }

    /// Inflates into `chunk` until it holds `want` bytes; `None` when the
    /// stream ends or fails first. Memory grows with what the stream gives,
    /// not with what damaged sizes or offsets ask for.
    fn inflate_to(&mut self, chunk: &mut Vec<u8>, want: usize) -> Option<()> {
        while chunk.len() < want {
            // (decompress_vec fills the spare capacity only: never past `want`)
            chunk.reserve_exact((want - chunk.len()).min(INFLATE_STEP));
            let consumed = usize::try_from(self.inflater.total_in()).ok()?;
            let input = self.raw.get(consumed..)?;
            let before = chunk.len();
            let status = self
                .inflater
                .decompress_vec(input, chunk, FlushDecompress::None)
                .ok()?;
            if chunk.len() == before || status == Status::StreamEnd && chunk.len() < want {
                return None;
            }
        }
        Some(())
    }
}

#[cfg(test)]
impl Sections {
    /// The sections decompressed or mapped so far.
    pub(super) fn loaded(&self) -> Vec<SectionId> {
        self.loaded.borrow().iter().map(|(id, _)| *id).collect()
    }
}
