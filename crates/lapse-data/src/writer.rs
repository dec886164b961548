//! Appending chunks to a data file as data arrives.

use std::io::{self, Write};

use crate::codec;
use crate::format::{self, ChunkHeader};
use crate::model::{Event, Record, Sample};

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
    /// One compression context for the file's life: creating one per chunk
    /// costs about as much as compressing a small chunk.
    zstd: zstd::bulk::Compressor<'static>,
}

impl<W: Write> DataWriter<W> {
    /// Writes the file header.
    pub fn new(mut out: W) -> io::Result<Self> {
        out.write_all(&format::file_header())?;
        Ok(DataWriter {
            out,
            scratch: Vec::new(),
            bytes_written: format::FILE_HEADER_LEN as u64,
            zstd: zstd::bulk::Compressor::new(format::ZSTD_LEVEL)?,
        })
    }

    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    pub fn write_record(&mut self, record: &Record) -> io::Result<()> {
        let bytes = postcard::to_stdvec(record).map_err(io::Error::other)?;
        if bytes.len() > 4096 {
            let packed = self.zstd.compress(&bytes)?;
            self.write_chunk(
                format::TAG_RECORD,
                format::FLAG_ZSTD,
                &[],
                &packed,
                bytes.len(),
            )
        } else {
            self.write_chunk(format::TAG_RECORD, 0, &[], &bytes, bytes.len())
        }
    }

    /// Writes one chunk holding `events` of thread (`pid`, `tid`), in time order.
    pub fn write_events(&mut self, pid: u32, tid: u32, events: &[Event]) -> io::Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        let mut raw = std::mem::take(&mut self.scratch);
        raw.clear();
        codec::encode_events(events, &mut raw);
        let r = self.write_event_bytes(pid, tid, events.len(), &raw);
        self.scratch = raw;
        r
    }

    /// Writes events a [`codec::EventEncoder`] encoded.
    pub fn write_encoded_events(
        &mut self,
        pid: u32,
        tid: u32,
        events: &codec::EventEncoder,
    ) -> io::Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        self.write_event_bytes(pid, tid, events.len(), events.bytes())
    }

    fn write_event_bytes(
        &mut self,
        pid: u32,
        tid: u32,
        count: usize,
        raw: &[u8],
    ) -> io::Result<()> {
        let count = u32::try_from(count).map_err(io::Error::other)?;
        let packed = self.zstd.compress(raw)?;
        let mut prefix = [0u8; format::EVENT_PREFIX_LEN];
        prefix[0..4].copy_from_slice(&pid.to_le_bytes());
        prefix[4..8].copy_from_slice(&tid.to_le_bytes());
        prefix[8..12].copy_from_slice(&count.to_le_bytes());
        self.write_chunk(
            format::TAG_EVENTS,
            format::FLAG_ZSTD,
            &prefix,
            &packed,
            raw.len(),
        )
    }

    pub fn write_samples(&mut self, samples: &[Sample]) -> io::Result<()> {
        if samples.is_empty() {
            return Ok(());
        }
        let mut raw = std::mem::take(&mut self.scratch);
        raw.clear();
        codec::encode_samples(samples, &mut raw);
        let packed = self.zstd.compress(&raw)?;
        let raw_len = raw.len();
        self.scratch = raw;
        self.write_chunk(
            format::TAG_SAMPLES,
            format::FLAG_ZSTD,
            &[],
            &packed,
            raw_len,
        )
    }

    fn write_chunk(
        &mut self,
        tag: u8,
        flags: u8,
        prefix: &[u8],
        body: &[u8],
        raw_len: usize,
    ) -> io::Result<()> {
        let stored_len = prefix.len() + body.len();
        if stored_len > format::MAX_CHUNK_STORED as usize
            || raw_len > format::MAX_CHUNK_RAW as usize
        {
            return Err(io::Error::other("chunk too large; write smaller batches"));
        }
        let mut crc = crc32fast::Hasher::new();
        crc.update(prefix);
        crc.update(body);
        let header = ChunkHeader {
            tag,
            flags,
            stored_len: stored_len as u32,
            raw_len: raw_len as u32,
            crc: crc.finalize(),
        };
        // One write per chunk where possible, so a concurrent reader or a crash
        // sees whole chunks far more often than torn ones.
        let mut buf = Vec::with_capacity(format::CHUNK_HEADER_LEN + stored_len);
        buf.extend_from_slice(&header.encode());
        buf.extend_from_slice(prefix);
        buf.extend_from_slice(body);
        self.out.write_all(&buf)?;
        self.bytes_written += buf.len() as u64;
        Ok(())
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}
