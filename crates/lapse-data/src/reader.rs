//! Reading a data file: one pass checks every chunk and decodes the small
//! records; event and sample chunks are indexed and decoded on demand (in
//! parallel by the caller), so memory stays bounded by the metadata.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use crate::codec;
use crate::error::DataError;
use crate::format::{self, ChunkHeader};
use crate::model::*;

/// Largest id accepted in a function/frame/stack table: a corrupt or hostile
/// id must not make the reader allocate gigabytes.
const MAX_TABLE_ID: u32 = 1 << 26;

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

/// An event chunk, indexed but not yet decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventChunkRef {
    pub pid: u32,
    pub tid: u32,
    pub count: u32,
    /// Offset of the chunk header in the file.
    pub offset: u64,
    body_start: usize,
    body_len: usize,
    raw_len: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleChunkRef {
    pub offset: u64,
    body_start: usize,
    body_len: usize,
    raw_len: u32,
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
    /// Off-CPU periods per (pid, tid), in time order.
    pub os_events: HashMap<(u32, u32), Vec<OsEvent>>,
    pub footer: Option<Footer>,
    pub event_chunks: Vec<EventChunkRef>,
    pub sample_chunks: Vec<SampleChunkRef>,
    /// Damage found while reading (at most one: reading stops at a broken frame).
    pub damage: Vec<Damage>,
    /// Chunks skipped because their content did not decode (CRC was fine).
    pub skipped_chunks: u64,
    pub file_len: u64,
}

impl DataFile {
    pub fn open(path: &Path) -> Result<DataFile, DataError> {
        let io = |source| DataError::Io {
            path: path.to_owned(),
            source,
        };
        let file = File::open(path).map_err(io)?;
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

    /// True when the recording finished normally (a footer was written) and no damage was found.
    pub fn is_complete(&self) -> bool {
        self.footer.is_some() && self.damage.is_empty()
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
        if version != format::VERSION {
            return Err(DataError::Version {
                path,
                found: version,
                supported: format::VERSION,
            });
        }
        let mut scan = Scan::default();
        let mut pos = format::FILE_HEADER_LEN;
        while pos < data.len() {
            match scan.chunk(data, pos) {
                Ok(next) => pos = next,
                Err(what) => {
                    scan.damage.push(Damage {
                        offset: pos as u64,
                        what,
                    });
                    break;
                }
            }
        }
        let Some(session) = scan.session else {
            return Err(match scan.damage.first() {
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
        Ok(DataFile {
            path,
            session,
            processes: scan.processes,
            threads: scan.threads,
            modules: scan.modules,
            mappings: scan.mappings,
            functions: scan.functions,
            frames: scan.frames,
            stacks: scan.stacks,
            os_events: scan.os_events,
            footer: scan.footer,
            event_chunks: scan.event_chunks,
            sample_chunks: scan.sample_chunks,
            damage: scan.damage,
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
    ) -> Result<Vec<u8>, DataError> {
        let mut out = Vec::new();
        self.raw_body_into(body_start, body_len, raw_len, &mut out)?;
        Ok(out)
    }

    /// Decompresses a chunk body into `out` (cleared first, its allocation reused).
    fn raw_body_into(
        &self,
        body_start: usize,
        body_len: usize,
        raw_len: u32,
        out: &mut Vec<u8>,
    ) -> Result<(), DataError> {
        let data = self.bytes.get();
        let body = &data[body_start..body_start + body_len];
        // One decompression context per thread, reused: creating one per chunk
        // costs more than decompressing a small chunk.
        thread_local! {
            static DCTX: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
                const { std::cell::RefCell::new(None) };
        }
        out.clear();
        // raw_len was checked against the chunk limit when the file was opened
        out.reserve(raw_len as usize);
        let ok = DCTX.with(|cell| {
            let mut slot = cell.borrow_mut();
            if slot.is_none() {
                *slot = zstd::bulk::Decompressor::new().ok();
            }
            match slot.as_mut() {
                Some(d) => d.decompress_to_buffer(body, out).is_ok(),
                None => match zstd::bulk::decompress(body, raw_len as usize) {
                    Ok(v) => {
                        *out = v;
                        true
                    }
                    Err(_) => false,
                },
            }
        });
        if ok && out.len() == raw_len as usize {
            Ok(())
        } else {
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
        self.raw_body_into(chunk.body_start, chunk.body_len, chunk.raw_len, out)
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
        let raw = self.raw_body(chunk.body_start, chunk.body_len, chunk.raw_len)?;
        codec::decode_events(&raw, chunk.count as usize, out).ok_or_else(|| self.undecodable(chunk))
    }

    pub fn read_samples(
        &self,
        chunk: &SampleChunkRef,
        out: &mut Vec<Sample>,
    ) -> Result<(), DataError> {
        let raw = self.raw_body(chunk.body_start, chunk.body_len, chunk.raw_len)?;
        codec::decode_samples(&raw, out).ok_or_else(|| DataError::Corrupt {
            path: self.path.clone(),
            offset: chunk.offset,
            what: "sample chunk does not decode".into(),
        })
    }

    /// Event chunks of one thread, in time order.
    pub fn thread_chunks(&self, pid: u32, tid: u32) -> impl Iterator<Item = &EventChunkRef> {
        self.event_chunks
            .iter()
            .filter(move |c| c.pid == pid && c.tid == tid)
    }

    /// Every thread with a record or with events (those without a record get
    /// an empty name and no start/end), ordered by (pid, tid).
    pub fn all_threads(&self) -> Vec<ThreadInfo> {
        let mut out: Vec<ThreadInfo> = self.threads.clone();
        let mut seen: std::collections::HashSet<(u32, u32)> =
            out.iter().map(|t| (t.pid, t.tid)).collect();
        for c in &self.event_chunks {
            if seen.insert((c.pid, c.tid)) {
                out.push(ThreadInfo {
                    pid: c.pid,
                    tid: c.tid,
                    name: String::new(),
                    start: None,
                    end: None,
                });
            }
        }
        out.sort_by_key(|t| (t.pid, t.tid));
        out
    }

    pub fn total_events(&self) -> u64 {
        self.event_chunks.iter().map(|c| u64::from(c.count)).sum()
    }

    pub fn module(&self, id: ModuleId) -> Option<&ModuleInfo> {
        self.modules.get(id.0 as usize)
    }
}

#[derive(Default)]
struct Scan {
    session: Option<SessionHeader>,
    processes: Vec<ProcessInfo>,
    threads: Vec<ThreadInfo>,
    modules: Vec<ModuleInfo>,
    mappings: Vec<MappingInfo>,
    functions: Vec<FunctionInfo>,
    frames: Vec<FrameInfo>,
    stacks: Vec<StackNode>,
    os_events: HashMap<(u32, u32), Vec<OsEvent>>,
    footer: Option<Footer>,
    event_chunks: Vec<EventChunkRef>,
    sample_chunks: Vec<SampleChunkRef>,
    damage: Vec<Damage>,
    skipped: u64,
}

/// Puts `item` at index `id` of a dense table, growing it with copies of `filler`.
fn place<T: Clone>(
    table: &mut Vec<T>,
    id: u32,
    item: T,
    filler: impl Fn(u32) -> T,
) -> Result<(), String> {
    if id >= MAX_TABLE_ID {
        return Err(format!("table id {id} out of range"));
    }
    let i = id as usize;
    while table.len() <= i {
        let next = table.len() as u32;
        table.push(filler(next));
    }
    table[i] = item;
    Ok(())
}

fn merge_opt<T: Clone>(into: &mut Option<T>, from: &Option<T>) {
    if from.is_some() {
        into.clone_from(from);
    }
}

impl Scan {
    /// Checks and takes in the chunk at `pos`; returns the offset of the next one.
    fn chunk(&mut self, data: &[u8], pos: usize) -> Result<usize, String> {
        let Some(head) = data.get(pos..pos + format::CHUNK_HEADER_LEN) else {
            return Err(format!(
                "file ends inside a chunk header ({} bytes left): truncated",
                data.len() - pos
            ));
        };
        let head = ChunkHeader::decode(head.try_into().expect("slice of header length"));
        if head.stored_len > format::MAX_CHUNK_STORED || head.raw_len > format::MAX_CHUNK_RAW {
            return Err(format!("chunk length {} out of range", head.stored_len));
        }
        let body_start = pos + format::CHUNK_HEADER_LEN;
        let body_len = head.stored_len as usize;
        let Some(body) = data.get(body_start..body_start + body_len) else {
            return Err(format!(
                "file ends inside a chunk ({} of {} bytes present): truncated",
                data.len() - body_start,
                body_len
            ));
        };
        if crc32fast::hash(body) != head.crc {
            return Err("checksum mismatch".into());
        }
        let next = body_start + body_len;
        match head.tag {
            format::TAG_RECORD => {
                let raw;
                let bytes = if head.flags & format::FLAG_ZSTD != 0 {
                    raw = zstd::bulk::decompress(body, head.raw_len as usize)
                        .map_err(|e| format!("record does not decompress: {e}"))?;
                    &raw[..]
                } else {
                    body
                };
                match postcard::from_bytes::<Record>(bytes) {
                    Ok(record) => self.take(record)?,
                    Err(_) => self.skipped += 1,
                }
            }
            format::TAG_EVENTS => {
                if body_len < format::EVENT_PREFIX_LEN {
                    return Err("event chunk shorter than its prefix".into());
                }
                let u32_at =
                    |i: usize| u32::from_le_bytes([body[i], body[i + 1], body[i + 2], body[i + 3]]);
                self.event_chunks.push(EventChunkRef {
                    pid: u32_at(0),
                    tid: u32_at(4),
                    count: u32_at(8),
                    offset: pos as u64,
                    body_start: body_start + format::EVENT_PREFIX_LEN,
                    body_len: body_len - format::EVENT_PREFIX_LEN,
                    raw_len: head.raw_len,
                });
            }
            format::TAG_SAMPLES => self.sample_chunks.push(SampleChunkRef {
                offset: pos as u64,
                body_start,
                body_len,
                raw_len: head.raw_len,
            }),
            // A chunk kind from a newer writer: skip it, it is framed and checked.
            _ => self.skipped += 1,
        }
        Ok(next)
    }

    fn take(&mut self, record: Record) -> Result<(), String> {
        match record {
            Record::Session(s) => self.session = Some(s),
            Record::Process(p) => match self.processes.iter_mut().find(|q| q.pid == p.pid) {
                Some(q) => {
                    if !p.command.is_empty() {
                        q.command = p.command;
                    }
                    merge_opt(&mut q.ppid, &p.ppid);
                    merge_opt(&mut q.start, &p.start);
                    merge_opt(&mut q.end, &p.end);
                    merge_opt(&mut q.exit_status, &p.exit_status);
                }
                None => self.processes.push(p),
            },
            Record::Thread(t) => match self
                .threads
                .iter_mut()
                .find(|u| u.pid == t.pid && u.tid == t.tid)
            {
                Some(u) => {
                    if !t.name.is_empty() {
                        u.name = t.name;
                    }
                    merge_opt(&mut u.start, &t.start);
                    merge_opt(&mut u.end, &t.end);
                }
                None => self.threads.push(t),
            },
            Record::Module(m) => {
                let id = m.id.0;
                place(&mut self.modules, id, m, |i| ModuleInfo {
                    id: ModuleId(i),
                    path: format!("[module {i}]"),
                    build_id: None,
                })?
            }
            Record::Mapping(m) => self.mappings.push(m),
            Record::Functions(fs) => {
                for f in fs {
                    let id = f.id.0;
                    place(&mut self.functions, id, f, |i| FunctionInfo {
                        id: FunctionId(i),
                        module: ModuleId(0),
                        address: 0,
                        name: format!("[function {i}]"),
                        source_file: None,
                        line: None,
                    })?;
                }
            }
            Record::OsEvents(block) => self
                .os_events
                .entry((block.pid, block.tid))
                .or_default()
                .extend(block.events),
            Record::Frames(fs) => {
                for f in fs {
                    let id = f.id.0;
                    place(&mut self.frames, id, f, |i| FrameInfo {
                        id: FrameId(i),
                        module: ModuleId(0),
                        address: 0,
                        functions: Vec::new(),
                    })?;
                }
            }
            Record::Stacks(ns) => {
                for n in ns {
                    let id = n.id.0;
                    place(&mut self.stacks, id, n, |i| StackNode {
                        id: StackId(i),
                        parent: None,
                        frame: FrameId(0),
                    })?;
                }
            }
            Record::Footer(f) => self.footer = Some(f),
        }
        Ok(())
    }
}
