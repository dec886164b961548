//! Appending chunks to a data file as data arrives.

use std::io::{self, Write};

use crate::codec;
use crate::format;
use crate::model::{Event, OsEventBlock, Record, Sample, ThreadKey};
use crate::packing::{Packer, Packing};

/// Writes a data file chunk by chunk. Each call writes one complete,
/// self-checking chunk, so whatever was written before a crash stays readable.
/// Callers batch events (a few thousand per chunk) and call [`flush`] at least
/// every 100 ms while recording.
///
/// [`flush`]: DataWriter::flush
pub struct DataWriter<W: Write> {
    out: W,
    scratch: Vec<u8>,
    bytes_written: u64,
    packer: Packer,
    /// How event chunks are compressed (zstd unless [`Self::events_lz4`]).
    events: Packing,
}

impl<W: Write> DataWriter<W> {
    /// Writes the file header.
    pub fn new(mut out: W) -> io::Result<Self> {
        out.write_all(&format::file_header())?;
        Ok(DataWriter {
            out,
            scratch: Vec::new(),
            bytes_written: format::FILE_HEADER_LEN as u64,
            packer: Packer::new()?,
            events: Packing::Zstd,
        })
    }

    /// A writer of chunks alone, without the file header: for chunks made
    /// in one place (a recorder's worker thread, into a `Vec<u8>`) and
    /// appended to the file in another ([`Self::write_chunks`]).
    pub fn chunks_only(out: W) -> io::Result<Self> {
        Ok(DataWriter {
            out,
            scratch: Vec::new(),
            bytes_written: 0,
            packer: Packer::new()?,
            events: Packing::Zstd,
        })
    }

    /// Compresses event chunks with LZ4 instead of zstd: a third of the
    /// time for up to twice the bytes (see [`crate::packing`]). The recorder's
    /// choice; every other chunk stays zstd.
    pub fn events_lz4(mut self) -> Self {
        self.events = Packing::Lz4;
        self
    }

    /// Appends whole chunks made by a [`Self::chunks_only`] writer.
    pub fn write_chunks(&mut self, chunks: &[u8]) -> io::Result<()> {
        self.out.write_all(chunks)?;
        self.bytes_written += chunks.len() as u64;
        Ok(())
    }

    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    /// Writes one record; a table too large for one chunk goes out as several
    /// records (the reader merges them).
    ///
    /// Off-CPU periods of threads with a serial above 0 go out as one record
    /// for each serial, after the others (a file without such threads is as
    /// it was before serials).
    pub fn write_record(&mut self, record: &Record) -> io::Result<()> {
        if let Record::OffCpu(periods) = record {
            if periods.iter().any(|p| p.serial != periods[0].serial) {
                let mut serials: Vec<u16> = periods.iter().map(|p| p.serial).collect();
                serials.sort_unstable();
                serials.dedup();
                for serial in serials {
                    let part = periods.iter().filter(|p| p.serial == serial);
                    self.write_record(&Record::OffCpu(part.copied().collect()))?;
                }
                return Ok(());
            }
        }
        let bytes = postcard::to_stdvec(&*record.as_written()).map_err(io::Error::other)?;
        if bytes.len() > format::MAX_RECORD_RAW as usize {
            return match split(record) {
                Some((a, b)) => {
                    self.write_record(&a)?;
                    self.write_record(&b)
                }
                None => Err(io::Error::other(format!(
                    "a record of {} bytes is larger than the data format allows ({} bytes)",
                    bytes.len(),
                    format::MAX_RECORD_RAW
                ))),
            };
        }
        if bytes.len() > 4096 {
            let packed = self.packer.pack(Packing::Zstd, &bytes)?;
            // Beyond this expansion the reader takes the chunk for a zstd bomb.
            let expansion = format::MAX_RECORD_EXPANSION as usize;
            if packed.len().saturating_mul(expansion) >= bytes.len() {
                return put_chunk(
                    (&mut self.out, &mut self.bytes_written),
                    (format::TAG_RECORD, 0),
                    format::FLAG_ZSTD,
                    &[],
                    packed,
                    bytes.len(),
                );
            }
        }
        self.write_chunk((format::TAG_RECORD, 0), 0, &[], &bytes, bytes.len())
    }

    /// Writes `events` of thread (`pid`, `tid`), in time order, in chunks of
    /// at most [`format::MAX_CHUNK_EVENTS`].
    pub fn write_events(&mut self, pid: u32, tid: u32, events: &[Event]) -> io::Result<()> {
        self.write_thread_events(ThreadKey::new(pid, tid), events)
    }

    /// Writes `events` of `thread` (which may be a later use of its id), in
    /// time order, in chunks of at most [`format::MAX_CHUNK_EVENTS`].
    pub fn write_thread_events(&mut self, thread: ThreadKey, events: &[Event]) -> io::Result<()> {
        for part in events.chunks(format::MAX_CHUNK_EVENTS as usize) {
            let mut raw = std::mem::take(&mut self.scratch);
            raw.clear();
            codec::encode_events(part, &mut raw);
            let r = self.write_event_bytes(thread, part.len(), &raw);
            self.scratch = raw;
            r?;
        }
        Ok(())
    }

    /// Writes events a [`codec::EventEncoder`] encoded.
    pub fn write_encoded_events(
        &mut self,
        thread: ThreadKey,
        events: &codec::EventEncoder,
    ) -> io::Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        if events.len() > format::MAX_CHUNK_EVENTS as usize {
            // Rare (a deep stack closed at once): re-encode in parts.
            return self.write_thread_events(thread, &events.events());
        }
        let mut raw = std::mem::take(&mut self.scratch);
        raw.clear();
        events.write_to(&mut raw);
        let r = self.write_event_bytes(thread, events.len(), &raw);
        self.scratch = raw;
        r
    }

    /// Writes an event chunk of `count` events encoded in columns.
    fn write_event_bytes(&mut self, thread: ThreadKey, count: usize, raw: &[u8]) -> io::Result<()> {
        let count = u32::try_from(count).map_err(io::Error::other)?;
        let prefix = format::event_prefix(thread.pid, thread.tid, count);
        let kind = (format::TAG_EVENTS, thread.serial);
        self.write_stream(kind, format::FLAG_COLUMNS, &prefix, raw)
    }

    /// Writes an event or sample chunk (`kind`: its tag and serial, with
    /// `flags` besides compression), compressed unless that would expand
    /// more than the reader accepts.
    fn write_stream(
        &mut self,
        kind: (u8, u16),
        flags: u8,
        prefix: &[u8],
        raw: &[u8],
    ) -> io::Result<()> {
        let packing = if kind.0 == format::TAG_EVENTS {
            self.events
        } else {
            Packing::Zstd
        };
        let packed = self.packer.pack(packing, raw)?;
        let expansion = format::MAX_STREAM_EXPANSION as usize;
        let (body, flags) = if packed.len().saturating_mul(expansion) >= raw.len() {
            (packed, flags | packing.flag())
        } else {
            (raw, flags)
        };
        let out = (&mut self.out, &mut self.bytes_written);
        put_chunk(out, kind, flags, prefix, body, raw.len())
    }

    /// Writes `samples` in chunks of at most [`format::MAX_CHUNK_SAMPLES`].
    /// A chunk holds the samples of threads of one serial, in its header:
    /// those of threads with a serial above 0 go in chunks of their own,
    /// after the others (a file without such threads is as it was before
    /// serials).
    pub fn write_samples(&mut self, samples: &[Sample]) -> io::Result<()> {
        if samples.iter().all(|s| s.serial == 0) {
            return self.write_sample_chunks(0, samples);
        }
        let mut serials: Vec<u16> = samples.iter().map(|s| s.serial).collect();
        serials.sort_unstable();
        serials.dedup();
        for serial in serials {
            let part: Vec<Sample> = samples
                .iter()
                .filter(|s| s.serial == serial)
                .copied()
                .collect();
            self.write_sample_chunks(serial, &part)?;
        }
        Ok(())
    }

    fn write_sample_chunks(&mut self, serial: u16, samples: &[Sample]) -> io::Result<()> {
        for part in samples.chunks(format::MAX_CHUNK_SAMPLES as usize) {
            let mut raw = std::mem::take(&mut self.scratch);
            raw.clear();
            codec::encode_samples(part, &mut raw);
            let r = self.write_stream((format::TAG_SAMPLES, serial), 0, &[], &raw);
            self.scratch = raw;
            r?;
        }
        Ok(())
    }

    fn write_chunk(
        &mut self,
        kind: (u8, u16),
        flags: u8,
        prefix: &[u8],
        body: &[u8],
        raw_len: usize,
    ) -> io::Result<()> {
        let out = (&mut self.out, &mut self.bytes_written);
        put_chunk(out, kind, flags, prefix, body, raw_len)
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

impl DataWriter<Vec<u8>> {
    /// The chunks written so far, taken out (the writer starts empty again).
    pub fn take_chunks(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }
}

/// A table record cut in two halves, in order; `None` for a record that is
/// not a table or holds a single entry.
fn split(record: &Record) -> Option<(Record, Record)> {
    fn halves<T: Clone>(v: &[T]) -> Option<(Vec<T>, Vec<T>)> {
        (v.len() > 1).then(|| {
            let (a, b) = v.split_at(v.len() / 2);
            (a.to_vec(), b.to_vec())
        })
    }
    Some(match record {
        Record::Functions(v) => {
            let (a, b) = halves(v)?;
            (Record::Functions(a), Record::Functions(b))
        }
        Record::Frames(v) => {
            let (a, b) = halves(v)?;
            (Record::Frames(a), Record::Frames(b))
        }
        Record::Stacks(v) => {
            let (a, b) = halves(v)?;
            (Record::Stacks(a), Record::Stacks(b))
        }
        Record::OsEvents(block) => {
            let (a, b) = halves(&block.events)?;
            let part = |events| {
                Record::OsEvents(OsEventBlock {
                    pid: block.pid,
                    tid: block.tid,
                    serial: block.serial,
                    events,
                })
            };
            (part(a), part(b))
        }
        Record::OffCpu(v) => {
            let (a, b) = halves(v)?;
            (Record::OffCpu(a), Record::OffCpu(b))
        }
        Record::Dropped(v) => {
            let (a, b) = halves(v)?;
            (Record::Dropped(a), Record::Dropped(b))
        }
        _ => return None,
    })
}

/// Writes one chunk to `out` and counts its bytes in `written` (the
/// writer's fields apart, so a body can be borrowed from its packer).
fn put_chunk<W: Write>(
    (out, written): (&mut W, &mut u64),
    (tag, serial): (u8, u16),
    flags: u8,
    prefix: &[u8],
    body: &[u8],
    raw_len: usize,
) -> io::Result<()> {
    let stored_len = prefix.len() + body.len();
    if stored_len > format::MAX_CHUNK_STORED as usize || raw_len > format::MAX_CHUNK_RAW as usize {
        return Err(io::Error::other("chunk too large; write smaller batches"));
    }
    // One write per chunk where possible, so a concurrent reader or a crash
    // sees whole chunks far more often than torn ones.
    let buf = format::encode_thread_chunk(tag, flags, serial, prefix, body, raw_len as u32);
    out.write_all(&buf)?;
    *written += buf.len() as u64;
    Ok(())
}
