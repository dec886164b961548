//! The one pass over a file's chunks when it is opened: each chunk is checked
//! against the format's bounds ([`format`]) and its CRC, records are decoded
//! and merged into tables, event and sample chunks are indexed.
//!
//! What this pass guarantees, whatever the bytes: work and memory linear in
//! the file's size. No chunk decodes to more than its kind allows, none
//! expands more than [`format::MAX_RECORD_EXPANSION`] (records) or
//! [`format::MAX_STREAM_EXPANSION`] (events, samples) times, and a table
//! holds at most [`MAX_TABLE_HOLES`] placeholders beyond the entries
//! read (an id is justified by entries present, not by its value).

use std::collections::HashMap;

use crate::codec::EventLayout;
use crate::format::{self, ChunkHeader};
use crate::model::*;
use crate::packing::Packing;

/// An event chunk, indexed but not yet decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventChunkRef {
    pub pid: u32,
    pub tid: u32,
    /// Which thread with this id ([`ThreadKey::serial`]).
    pub serial: u16,
    pub count: u32,
    /// Offset of the chunk header in the file.
    pub offset: u64,
    pub(crate) body_start: usize,
    pub(crate) body_len: usize,
    pub(crate) raw_len: u32,
    pub(crate) packing: Packing,
    /// How its events are laid out (the chunk's flags say).
    pub layout: EventLayout,
}

impl EventChunkRef {
    /// The thread whose events these are.
    pub fn key(&self) -> ThreadKey {
        ThreadKey::reused(self.pid, self.tid, self.serial)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleChunkRef {
    /// The serial of the threads whose samples these are
    /// ([`ThreadKey::serial`]).
    pub serial: u16,
    pub offset: u64,
    pub(crate) body_start: usize,
    pub(crate) body_len: usize,
    pub(crate) raw_len: u32,
    pub(crate) packing: Packing,
}

/// Most placeholders a table may hold for ids the file skipped.
pub(crate) const MAX_TABLE_HOLES: usize = 1024;

/// A table indexed by id, and how many entries the file gave for it.
pub(crate) struct Table<T> {
    pub items: Vec<T>,
    read: usize,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table {
            items: Vec::new(),
            read: 0,
        }
    }
}

impl<T> Table<T> {
    /// Puts `item` at index `id`, filling holes with `filler`. The table
    /// never grows past the entries read plus [`MAX_TABLE_HOLES`].
    fn place(
        &mut self,
        what: &str,
        id: u32,
        item: T,
        filler: impl Fn(u32) -> T,
    ) -> Result<(), String> {
        self.read += 1;
        let i = id as usize;
        if i >= self.read.saturating_add(MAX_TABLE_HOLES) {
            return Err(format!(
                "{what} id {id} out of range: the file holds {} {what} entries so far",
                self.read
            ));
        }
        while self.items.len() <= i {
            let next = self.items.len() as u32;
            self.items.push(filler(next));
        }
        self.items[i] = item;
        Ok(())
    }
}

#[derive(Default)]
pub(crate) struct Scan {
    pub session: Option<SessionHeader>,
    pub processes: Vec<ProcessInfo>,
    pub threads: Vec<ThreadInfo>,
    pub modules: Table<ModuleInfo>,
    pub mappings: Vec<MappingInfo>,
    pub functions: Table<FunctionInfo>,
    pub frames: Table<FrameInfo>,
    pub stacks: Table<StackNode>,
    pub os_events: HashMap<ThreadKey, Vec<OsEvent>>,
    pub off_cpu: Vec<OffCpuPeriod>,
    pub inherited: HashMap<ThreadKey, u32>,
    pub dropped_calls: HashMap<FunctionId, u64>,
    /// Pauses (true) and resumes (false), as the file gives them.
    pub toggles: Vec<(Timestamp, bool)>,
    pub marks: Vec<Mark>,
    pub footer: Option<Footer>,
    pub event_chunks: Vec<EventChunkRef>,
    pub sample_chunks: Vec<SampleChunkRef>,
    pub skipped: u64,
    /// Where each process and thread is in `processes` and `threads`: a
    /// record for one already seen is merged without a search.
    process_at: HashMap<u32, usize>,
    thread_at: HashMap<ThreadKey, usize>,
}

impl Scan {
    /// Checks and takes in the chunk at `pos`; returns the offset of the next one.
    pub fn chunk(&mut self, data: &[u8], pos: usize) -> Result<usize, String> {
        let Some(head) = data.get(pos..pos + format::CHUNK_HEADER_LEN) else {
            return Err(format!(
                "file ends inside a chunk header ({} bytes left): truncated",
                data.len() - pos
            ));
        };
        let head = ChunkHeader::decode(head.try_into().expect("slice of header length"));
        if head.stored_len > format::MAX_CHUNK_STORED || head.raw_len > format::MAX_CHUNK_RAW {
            return Err(format!(
                "chunk length {} (decoded {}) out of range",
                head.stored_len, head.raw_len
            ));
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
        let Some(packing) = Packing::of_flags(head.flags) else {
            return Err("chunk flags name two compressions".into());
        };
        let compressed = packing.is_compressed();
        match head.tag {
            format::TAG_RECORD => self.record(&head, packing, body)?,
            format::TAG_EVENTS => {
                let Some((prefix, payload)) =
                    body.split_first_chunk::<{ format::EVENT_PREFIX_LEN }>()
                else {
                    return Err("event chunk shorter than its prefix".into());
                };
                let u32_at = |i: usize| {
                    u32::from_le_bytes([prefix[i], prefix[i + 1], prefix[i + 2], prefix[i + 3]])
                };
                let count = u32_at(8);
                check_events(count, head.raw_len)?;
                check_stored(compressed, payload.len(), head.raw_len)?;
                check_expansion(
                    "event chunk",
                    compressed,
                    payload.len(),
                    head.raw_len,
                    format::MAX_STREAM_EXPANSION,
                )?;
                self.event_chunks.push(EventChunkRef {
                    pid: u32_at(0),
                    tid: u32_at(4),
                    serial: head.serial,
                    count,
                    offset: pos as u64,
                    body_start: body_start + format::EVENT_PREFIX_LEN,
                    body_len: payload.len(),
                    raw_len: head.raw_len,
                    packing,
                    layout: if head.flags & format::FLAG_COLUMNS != 0 {
                        EventLayout::Columns
                    } else {
                        EventLayout::Interleaved
                    },
                });
            }
            format::TAG_SAMPLES => {
                if head.raw_len > format::MAX_SAMPLES_RAW {
                    return Err(format!(
                        "sample chunk of {} bytes decoded (a chunk of {} samples takes at most {})",
                        head.raw_len,
                        format::MAX_CHUNK_SAMPLES,
                        format::MAX_SAMPLES_RAW
                    ));
                }
                check_stored(compressed, body_len, head.raw_len)?;
                check_expansion(
                    "sample chunk",
                    compressed,
                    body_len,
                    head.raw_len,
                    format::MAX_STREAM_EXPANSION,
                )?;
                self.sample_chunks.push(SampleChunkRef {
                    serial: head.serial,
                    offset: pos as u64,
                    body_start,
                    body_len,
                    raw_len: head.raw_len,
                    packing,
                });
            }
            // A chunk kind from a newer writer: skip it, it is framed and checked.
            _ => self.skipped += 1,
        }
        Ok(next)
    }

    /// Decodes and takes in a record chunk.
    fn record(&mut self, head: &ChunkHeader, packing: Packing, body: &[u8]) -> Result<(), String> {
        let compressed = packing.is_compressed();
        check_stored(compressed, body.len(), head.raw_len)?;
        check_expansion(
            "record",
            compressed,
            body.len(),
            head.raw_len,
            format::MAX_RECORD_EXPANSION,
        )?;
        let raw;
        let bytes = if compressed {
            // Exactly raw_len bytes come out (bounded above): more or fewer
            // is an error, not an allocation.
            raw = {
                let mut out = vec![0; head.raw_len as usize];
                packing
                    .unpack_into(body, &mut out)
                    .ok_or("record does not decompress to its stated size")?;
                out
            };
            &raw[..]
        } else {
            body
        };
        match postcard::from_bytes::<Record>(bytes) {
            Ok(record) => self.take(record),
            // A record kind from a newer writer.
            Err(_) => {
                self.skipped += 1;
                Ok(())
            }
        }
    }

    fn take(&mut self, record: Record) -> Result<(), String> {
        match record {
            Record::Session(s) => self.session = Some(s),
            Record::Process(p) => match self.process_at.get(&p.pid) {
                Some(&i) => self.processes[i].merge(p),
                None => {
                    self.process_at.insert(p.pid, self.processes.len());
                    self.processes.push(p);
                }
            },
            Record::Thread(t) => match self.thread_at.get(&t.key()) {
                Some(&i) => self.threads[i].merge(t),
                None => {
                    self.thread_at.insert(t.key(), self.threads.len());
                    self.threads.push(t);
                }
            },
            Record::Module(m) => {
                let id = m.id.0;
                self.modules.place("module", id, m, |i| ModuleInfo {
                    id: ModuleId(i),
                    path: format!("[module {i}]"),
                    build_id: None,
                })?
            }
            Record::Mapping(m) => self.mappings.push(m),
            Record::Functions(fs) => {
                for f in fs {
                    let id = f.id.0;
                    self.functions.place("function", id, f, |i| FunctionInfo {
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
                .entry(block.key())
                .or_default()
                .extend(block.events),
            Record::Frames(fs) => {
                for f in fs {
                    let id = f.id.0;
                    self.frames.place("frame", id, f, |i| FrameInfo {
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
                    self.stacks.place("stack", id, n, |i| StackNode {
                        id: StackId(i),
                        parent: None,
                        frame: FrameId(0),
                    })?;
                }
            }
            Record::Footer(f) => self.footer = Some(f),
            Record::OffCpu(periods) => self.off_cpu.extend(periods),
            Record::Inherited(i) => {
                self.inherited.insert(i.key(), i.frames);
            }
            Record::ThreadAgain { serial, record } => self.take(record.with_serial(serial))?,
            Record::Dropped(d) => {
                for c in d {
                    *self.dropped_calls.entry(c.function).or_default() += c.calls;
                }
            }
            Record::Control(ControlEvent::Pause(t)) => self.toggles.push((t.at, true)),
            Record::Control(ControlEvent::Resume(t)) => self.toggles.push((t.at, false)),
            Record::Control(ControlEvent::Mark(m)) => self.marks.push(m),
        }
        Ok(())
    }
}

/// An event chunk's count and decoded size must agree, within what the
/// writer produces: 1 to [`format::MAX_CHUNK_EVENTS`] events of 2 to 20
/// bytes after a base timestamp of 1 to 10.
fn check_events(count: u32, raw_len: u32) -> Result<(), String> {
    if count == 0 || count > format::MAX_CHUNK_EVENTS {
        return Err(format!(
            "event chunk announces {count} events (a chunk holds 1 to {})",
            format::MAX_CHUNK_EVENTS
        ));
    }
    let least = 1 + u64::from(count) * u64::from(format::MIN_EVENT_BYTES);
    if u64::from(raw_len) < least || u64::from(raw_len) > format::max_event_raw(count) {
        return Err(format!(
            "event chunk of {raw_len} bytes decoded cannot hold the {count} events it announces"
        ));
    }
    Ok(())
}

/// A compressed payload may expand at most `most` times (a zstd bomb would
/// expand thousands of times; the writer stores such data uncompressed).
fn check_expansion(
    what: &str,
    compressed: bool,
    stored: usize,
    raw_len: u32,
    most: u32,
) -> Result<(), String> {
    if compressed && u64::from(raw_len) > (stored as u64).saturating_mul(u64::from(most)) {
        return Err(format!(
            "{what} of {stored} bytes expands to {raw_len} (more than {most}x): not written by lapse"
        ));
    }
    Ok(())
}

/// An uncompressed payload is its own decoded form: the sizes must agree.
fn check_stored(compressed: bool, stored: usize, raw_len: u32) -> Result<(), String> {
    if !compressed && stored != raw_len as usize {
        return Err(format!(
            "uncompressed chunk of {stored} bytes announces {raw_len} decoded"
        ));
    }
    Ok(())
}
