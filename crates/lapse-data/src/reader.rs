//! Reading a data file: one pass checks every chunk and decodes the small
//! records; event and sample chunks are indexed and decoded on demand (in
//! parallel by the caller), so memory stays bounded by the metadata.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use crate::codec;
use crate::error::DataError;
use crate::format;
use crate::model::*;
use crate::packing::Packing;
use crate::scan::Scan;
pub use crate::scan::{EventChunkRef, SampleChunkRef};

enum Bytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Bytes {
    fn get(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// Where the reader found damage; everything before it was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    pub offset: u64,
    pub what: String,
}

/// An opened data file.
pub struct DataFile {
    path: PathBuf,
    bytes: Bytes,
    pub session: SessionHeader,
    pub processes: Vec<ProcessInfo>,
    pub threads: Vec<ThreadInfo>,
    pub modules: Vec<ModuleInfo>,
    pub mappings: Vec<MappingInfo>,
    /// Indexed by [`FunctionId`].
    pub functions: Vec<FunctionInfo>,
    /// Indexed by [`FrameId`].
    pub frames: Vec<FrameInfo>,
    /// Indexed by [`StackId`].
    pub stacks: Vec<StackNode>,
    /// Off-CPU periods per thread, in time order.
    pub os_events: HashMap<ThreadKey, Vec<OsEvent>>,
    /// Sampling with `--off-cpu`: the periods threads spent switched out,
    /// each with its stack, in the order they ended (empty otherwise).
    pub off_cpu: Vec<OffCpuPeriod>,
    /// Threads whose first enters are inherited frames (see
    /// [`InheritedFrames`]), with how many.
    pub inherited: HashMap<ThreadKey, u32>,
    /// `--min-time`: calls left out as too short, per function.
    pub dropped_calls: HashMap<FunctionId, u64>,
    /// The stretches during which the recording was paused, in time order
    /// (nothing is recorded in them; the analysis leaves them out).
    pub paused: Vec<Paused>,
    /// The program's marks, in time order (`lapse_mark`).
    pub marks: Vec<Mark>,
    pub footer: Option<Footer>,
    /// Event chunks in file order (as read: [`DataFile::thread_chunks`] relies on it).
    pub event_chunks: Vec<EventChunkRef>,
    pub sample_chunks: Vec<SampleChunkRef>,
    /// Positions in `event_chunks` of each thread's chunks.
    chunks_of_thread: HashMap<ThreadKey, Vec<usize>>,
    /// Damage found while reading (at most one: reading stops at a broken frame).
    pub damage: Option<Damage>,
    /// Chunks skipped because their content did not decode (CRC was fine).
    pub skipped_chunks: u64,
    pub file_len: u64,
}

impl DataFile {
    /// Opens and checks a data file. Anything but a regular file (a FIFO, a
    /// directory, a device) is refused without blocking.
    pub fn open(path: &Path) -> Result<DataFile, DataError> {
        let io = |source| DataError::Io {
            path: path.to_owned(),
            source,
        };
        let file = open_regular(path)?;
        let len = file.metadata().map_err(io)?.len();
        if len == 0 {
            return Err(DataError::Empty {
                path: path.to_owned(),
            });
        }
        // SAFETY: the map is read-only; a concurrent truncation by another
        // process would raise SIGBUS, which lapse does not defend against
        // (the recorder only appends).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Self::parse(path.to_owned(), Bytes::Mapped(map))
    }

    /// Parses a data file held in memory; `name` is used in messages.
    pub fn from_bytes(name: &Path, bytes: Vec<u8>) -> Result<DataFile, DataError> {
        if bytes.is_empty() {
            return Err(DataError::Empty {
                path: name.to_owned(),
            });
        }
        Self::parse(name.to_owned(), Bytes::Owned(bytes))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// When the recording ended: the footer's end, or (a file cut short,
    /// a footer without one) the last thread end the file knows.
    pub fn end(&self) -> Option<Timestamp> {
        self.footer
            .as_ref()
            .map(|f| f.end)
            .filter(|e| e.as_nanos() > 0)
            .or_else(|| self.threads.iter().filter_map(|t| t.end).max())
    }

    /// True when the recording finished normally (a footer was written),
    /// no damage was found and no event was lost: [`Self::incomplete_why`].
    pub fn is_complete(&self) -> bool {
        self.incomplete_why().is_none()
    }

    /// Why the file does not hold the whole recording, if it does not: it
    /// was cut short (no footer), is damaged, or events were lost.
    pub fn incomplete_why(&self) -> Option<String> {
        match (&self.footer, &self.damage) {
            (_, Some(_)) => Some("the file is damaged".to_owned()),
            (None, None) => Some("the recording was interrupted (no footer)".to_owned()),
            (Some(f), None) if f.lost_events > 0 => Some(format!(
                "{} events were lost (lapse info says why)",
                f.lost_events
            )),
            (Some(_), None) => None,
        }
    }

    fn parse(path: PathBuf, bytes: Bytes) -> Result<DataFile, DataError> {
        let data = bytes.get();
        if data.len() < format::FILE_HEADER_LEN {
            return if format::MAGIC.starts_with(data) {
                Err(DataError::NothingIntact {
                    path,
                    offset: 0,
                    what: "file ends inside the file header".into(),
                })
            } else {
                Err(DataError::Foreign { path })
            };
        }
        if &data[..8] != format::MAGIC {
            return Err(DataError::Foreign { path });
        }
        let version = u16::from_le_bytes([data[8], data[9]]);
        if !(format::OLDEST_VERSION..=format::VERSION).contains(&version) {
            return Err(DataError::Version {
                path,
                found: version,
                oldest: format::OLDEST_VERSION,
                newest: format::VERSION,
            });
        }
        let mut scan = Scan::default();
        let mut pos = format::FILE_HEADER_LEN;
        // Reading stops at the first damage: at most one.
        let mut damage = None;
        while pos < data.len() {
            match scan.chunk(data, pos) {
                Ok(next) => pos = next,
                Err(what) => {
                    damage = Some(Damage {
                        offset: pos as u64,
                        what,
                    });
                    break;
                }
            }
        }
        let Some(session) = scan.session else {
            return Err(match &damage {
                Some(d) => DataError::NothingIntact {
                    path,
                    offset: d.offset,
                    what: d.what.clone(),
                },
                None => DataError::NoSession { path },
            });
        };
        let file_len = data.len() as u64;
        // Blocks of one thread may come from several sources (switches,
        // system calls, faults); the analysis walks them in order of start.
        // Already sorted in the usual case, so the stable sort is one pass.
        for events in scan.os_events.values_mut() {
            events.sort_by_key(|e| e.from);
        }
        let mut marks = std::mem::take(&mut scan.marks);
        marks.sort_by_key(|m| (m.at, m.pid, m.tid));
        Ok(DataFile {
            path,
            session,
            processes: scan.processes,
            threads: scan.threads,
            modules: scan.modules.items,
            mappings: scan.mappings,
            functions: scan.functions.items,
            frames: scan.frames.items,
            stacks: scan.stacks.items,
            os_events: scan.os_events,
            off_cpu: scan.off_cpu,
            inherited: scan.inherited,
            dropped_calls: scan.dropped_calls,
            paused: paused_stretches(&scan.toggles),
            marks,
            footer: scan.footer,
            chunks_of_thread: index_threads(&scan.event_chunks),
            event_chunks: scan.event_chunks,
            sample_chunks: scan.sample_chunks,
            damage,
            skipped_chunks: scan.skipped,
            file_len,
            bytes,
        })
    }

    fn raw_body(
        &self,
        body_start: usize,
        body_len: usize,
        raw_len: u32,
        packing: Packing,
    ) -> Result<Vec<u8>, DataError> {
        let mut out = Vec::new();
        self.raw_body_into(body_start, body_len, raw_len, packing, &mut out)?;
        Ok(out)
    }

    /// Decompresses a chunk body into `out` (cleared first, its allocation
    /// reused). Decompression stops at `raw_len` (bounded when the file was
    /// opened): a body that would decode to more is an error.
    fn raw_body_into(
        &self,
        body_start: usize,
        body_len: usize,
        raw_len: u32,
        packing: Packing,
        out: &mut Vec<u8>,
    ) -> Result<(), DataError> {
        let data = self.bytes.get();
        let body = &data[body_start..body_start + body_len];
        out.clear();
        if !packing.is_compressed() {
            // (raw_len == body_len was checked when the file was opened)
            out.extend_from_slice(body);
            return Ok(());
        }
        // Exactly raw_len bytes of room: the decompressor cannot write past it.
        out.resize(raw_len as usize, 0);
        if packing.unpack_into(body, out).is_some() {
            Ok(())
        } else {
            out.clear();
            Err(DataError::Corrupt {
                path: self.path.clone(),
                offset: body_start as u64,
                what: "compressed data does not decompress to its stated size".into(),
            })
        }
    }

    /// Decompresses one event chunk into `out` without decoding it, for a
    /// consumer that decodes block by block with [`codec::EventDecoder`].
    pub fn read_event_bytes(
        &self,
        chunk: &EventChunkRef,
        out: &mut Vec<u8>,
    ) -> Result<(), DataError> {
        self.raw_body_into(
            chunk.body_start,
            chunk.body_len,
            chunk.raw_len,
            chunk.packing,
            out,
        )
    }

    /// The error for an event chunk whose bytes do not decode.
    pub fn undecodable(&self, chunk: &EventChunkRef) -> DataError {
        DataError::Corrupt {
            path: self.path.clone(),
            offset: chunk.offset,
            what: "event chunk does not hold the events it announces".into(),
        }
    }

    /// Decodes one event chunk into `out` (cleared first).
    pub fn read_events(
        &self,
        chunk: &EventChunkRef,
        out: &mut Vec<Event>,
    ) -> Result<(), DataError> {
        let raw = self.raw_body(
            chunk.body_start,
            chunk.body_len,
            chunk.raw_len,
            chunk.packing,
        )?;
        codec::decode_events(&raw, chunk.layout, chunk.count as usize, out)
            .ok_or_else(|| self.undecodable(chunk))
    }

    pub fn read_samples(
        &self,
        chunk: &SampleChunkRef,
        out: &mut Vec<Sample>,
    ) -> Result<(), DataError> {
        let raw = self.raw_body(
            chunk.body_start,
            chunk.body_len,
            chunk.raw_len,
            chunk.packing,
        )?;
        codec::decode_samples(&raw, out).ok_or_else(|| DataError::Corrupt {
            path: self.path.clone(),
            offset: chunk.offset,
            what: "sample chunk does not decode".into(),
        })?;
        if chunk.serial != 0 {
            for s in out.iter_mut() {
                s.serial = chunk.serial;
            }
        }
        Ok(())
    }

    /// Event chunks of one thread, in time order (without a pass over every
    /// chunk of the file: a file of many threads is not quadratic to read).
    pub fn thread_chunks(&self, thread: ThreadKey) -> impl Iterator<Item = &EventChunkRef> {
        self.chunks_of_thread
            .get(&thread)
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .filter_map(|&i| self.event_chunks.get(i))
            .filter(move |c| c.key() == thread)
    }

    /// Every thread with a record or with events (those without a record get
    /// an empty name and no start/end), ordered by (pid, tid, serial).
    pub fn all_threads(&self) -> Vec<ThreadInfo> {
        let mut out: Vec<ThreadInfo> = self.threads.clone();
        let mut seen: std::collections::HashSet<ThreadKey> = out.iter().map(|t| t.key()).collect();
        for c in &self.event_chunks {
            if seen.insert(c.key()) {
                out.push(ThreadInfo {
                    pid: c.pid,
                    tid: c.tid,
                    serial: c.serial,
                    name: String::new(),
                    start: None,
                    end: None,
                });
            }
        }
        out.sort_by_key(|t| t.key());
        out
    }

    pub fn total_events(&self) -> u64 {
        self.event_chunks.iter().map(|c| u64::from(c.count)).sum()
    }

    pub fn module(&self, id: ModuleId) -> Option<&ModuleInfo> {
        self.modules.get(id.0 as usize)
    }
}

/// Positions of each thread's chunks in `chunks`, in file order.
fn index_threads(chunks: &[EventChunkRef]) -> HashMap<ThreadKey, Vec<usize>> {
    let mut index: HashMap<ThreadKey, Vec<usize>> = HashMap::new();
    for (i, c) in chunks.iter().enumerate() {
        index.entry(c.key()).or_default().push(i);
    }
    index
}

/// Opens `path` for reading if it is a regular file, and refuses anything
/// else with [`DataError::NotRegular`]. The open does not wait (O_NONBLOCK):
/// opening a FIFO for reading would block until a writer came.
pub fn open_regular(path: &Path) -> Result<File, DataError> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let io = |source| DataError::Io {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(io)?;
    let kind = file.metadata().map_err(io)?.file_type();
    if kind.is_file() {
        return Ok(file);
    }
    let what = if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO (named pipe)"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else {
        "a special file"
    };
    Err(DataError::NotRegular {
        path: path.to_owned(),
        what,
    })
}
