//! Byte layout of the file: a 16-byte file header, then chunks.
//!
//! ```text
//! file header: b"LAPSEDAT" | u16 version | u16 flags (0) | u32 reserved (0)
//! chunk:       u8 tag | u8 flags | u16 serial | u32 stored_len | u32 raw_len | u32 crc32(stored)
//!              then stored_len bytes
//! ```
//! All integers little-endian. `raw_len` is the payload size after
//! decompression (equal to `stored_len` when not compressed). `serial` is
//! an event chunk's thread's [`ThreadKey::serial`](crate::ThreadKey::serial),
//! or that of the threads whose samples a sample chunk holds (0 in every
//! other chunk, and in files written before serials: the bytes were
//! reserved, 0, and a reader older than them skips them). Event chunks
//! start their stored bytes with an uncompressed 12-byte prefix
//! (`u32 pid | u32 tid | u32 count`) so a reader can index them without
//! decompressing; their flags say the layout of the events ([`FLAG_COLUMNS`]).

pub const MAGIC: &[u8; 8] = b"LAPSEDAT";
/// The version this lapse writes. 2: event chunks may be in columns
/// ([`FLAG_COLUMNS`]), which a lapse that reads version 1 only would take
/// for interleaved events (garbage, millions of them) instead of refusing.
/// 3: event chunks may be LZ4-compressed ([`FLAG_LZ4`]), which a lapse that
/// reads version 2 would take for stored bytes.
pub const VERSION: u16 = 3;
/// The oldest version this lapse reads (1: every event chunk interleaved).
pub const OLDEST_VERSION: u16 = 1;
pub const FILE_HEADER_LEN: usize = 16;
pub const CHUNK_HEADER_LEN: usize = 16;

// Bounds. Each is what the writer produces (it splits anything larger), so
// the reader can refuse a chunk beyond them as not ours: no field of a
// crafted file makes the reader allocate or work more than these allow.

/// No chunk may decompress to more than this (the largest record).
pub const MAX_CHUNK_RAW: u32 = MAX_RECORD_RAW;
/// No chunk may be larger than this on disk (incompressible data grows a little).
pub const MAX_CHUNK_STORED: u32 = MAX_CHUNK_RAW + (1 << 16);

/// Most events in one event chunk. The recorder writes batches of 16,384
/// (plus at most one runtime buffer, 4,096), the importer 65,536; the writer
/// splits anything above this into several chunks (a deep stack closed at
/// once).
pub const MAX_CHUNK_EVENTS: u32 = 1 << 16;
/// Bytes an encoded event takes: two varints, each 1 to 10 bytes.
pub const MIN_EVENT_BYTES: u32 = 2;
pub const MAX_EVENT_BYTES: u32 = 20;
/// Most bytes of the base timestamp that starts an event chunk (one varint).
pub const MAX_VARINT_BYTES: u32 = 10;

/// Most samples in one sample chunk (the recorder writes 4,096).
pub const MAX_CHUNK_SAMPLES: u32 = 1 << 13;
/// Bytes an encoded sample takes: six varints.
pub const MIN_SAMPLE_BYTES: u32 = 6;
pub const MAX_SAMPLE_BYTES: u32 = 60;

/// Largest record (decoded). The writer splits tables (functions, frames,
/// stacks, OS events) whose encoding would be larger into several records;
/// a single record this large would take a 16 MiB command line.
pub const MAX_RECORD_RAW: u32 = 16 << 20;
/// Most a compressed record may grow when decompressed. Tables compressed 1x
/// to 9x at level -3 (a 58,000-function Rust binary: 8.7x); the writer
/// stores a record uncompressed rather than beyond this. It bounds the
/// records' decoded bytes, hence the memory their tables take, by a multiple
/// of the file's size (a zstd bomb is refused).
pub const MAX_RECORD_EXPANSION: u32 = 32;

/// Most a compressed event or sample chunk may grow when decompressed. The
/// recorder's chunks expand 2x to 26x (calls.c: 5.9x to 25.6x); perfectly
/// regular streams (a synthetic trace at fixed intervals) compress thousands
/// of times, and the writer stores those uncompressed (2 to 4 bytes a call)
/// rather than beyond this. It bounds what a file holds by its size: an
/// 8 KiB file has at most 256 K events, not the 10 M that zstd frames of
/// zeros could announce.
pub const MAX_STREAM_EXPANSION: u32 = 64;

/// Largest decoded size an event chunk announcing `count` events can have.
pub const fn max_event_raw(count: u32) -> u64 {
    MAX_VARINT_BYTES as u64 + count as u64 * MAX_EVENT_BYTES as u64
}

/// Largest decoded size a sample chunk can have.
pub const MAX_SAMPLES_RAW: u32 = MAX_VARINT_BYTES + MAX_CHUNK_SAMPLES * MAX_SAMPLE_BYTES;

pub const TAG_RECORD: u8 = 1;
pub const TAG_EVENTS: u8 = 2;
pub const TAG_SAMPLES: u8 = 3;

pub const FLAG_ZSTD: u8 = 1;
/// A chunk compressed as one LZ4 block (the recorder's event chunks; see
/// [`crate::packing`]).
pub const FLAG_LZ4: u8 = 4;
/// An event chunk in the column layout ([`crate::codec::EventLayout`]);
/// without it, the interleaved layout of older files.
pub const FLAG_COLUMNS: u8 = 2;

pub const EVENT_PREFIX_LEN: usize = 12;

/// zstd level used for event and sample chunks. The recorder compresses on
/// the core the target does not use, and on call-heavy programs that core is
/// the limit. On the event columns level 1 is about as fast as the negative
/// levels (which leave the literals, most of the deltas, without entropy
/// coding) and a third smaller: calls.c 0.44 bytes a call instead of 0.64
/// at -3 (SPEC 7: at most 0.5), for 0.4-2 points more of its run spent
/// waiting for the recorder in A/B runs (BENCHMARKS.md, tenth session).
/// Decompression is no slower than at -3.
pub const ZSTD_LEVEL: i32 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    pub tag: u8,
    pub flags: u8,
    /// (an event chunk's thread's serial)
    pub serial: u16,
    pub stored_len: u32,
    pub raw_len: u32,
    pub crc: u32,
}

impl ChunkHeader {
    pub fn encode(&self) -> [u8; CHUNK_HEADER_LEN] {
        let mut b = [0u8; CHUNK_HEADER_LEN];
        b[0] = self.tag;
        b[1] = self.flags;
        b[2..4].copy_from_slice(&self.serial.to_le_bytes());
        b[4..8].copy_from_slice(&self.stored_len.to_le_bytes());
        b[8..12].copy_from_slice(&self.raw_len.to_le_bytes());
        b[12..16].copy_from_slice(&self.crc.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; CHUNK_HEADER_LEN]) -> Self {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        ChunkHeader {
            tag: b[0],
            flags: b[1],
            serial: u16::from_le_bytes([b[2], b[3]]),
            stored_len: u32_at(4),
            raw_len: u32_at(8),
            crc: u32_at(12),
        }
    }
}

/// One complete chunk: header (with the CRC of `prefix` and `body`), then
/// both. `raw_len` is the payload's decoded size.
pub fn encode_chunk(tag: u8, flags: u8, prefix: &[u8], body: &[u8], raw_len: u32) -> Vec<u8> {
    encode_thread_chunk(tag, flags, 0, prefix, body, raw_len)
}

/// [`encode_chunk`] with a thread's serial in the header (an event chunk).
pub fn encode_thread_chunk(
    tag: u8,
    flags: u8,
    serial: u16,
    prefix: &[u8],
    body: &[u8],
    raw_len: u32,
) -> Vec<u8> {
    let stored_len = prefix.len() + body.len();
    let mut crc = crc32fast::Hasher::new();
    crc.update(prefix);
    crc.update(body);
    let header = ChunkHeader {
        tag,
        flags,
        serial,
        stored_len: u32::try_from(stored_len).unwrap_or(u32::MAX),
        raw_len,
        crc: crc.finalize(),
    };
    let mut buf = Vec::with_capacity(CHUNK_HEADER_LEN + stored_len);
    buf.extend_from_slice(&header.encode());
    buf.extend_from_slice(prefix);
    buf.extend_from_slice(body);
    buf
}

/// The uncompressed prefix of an event chunk.
pub fn event_prefix(pid: u32, tid: u32, count: u32) -> [u8; EVENT_PREFIX_LEN] {
    let mut prefix = [0u8; EVENT_PREFIX_LEN];
    prefix[0..4].copy_from_slice(&pid.to_le_bytes());
    prefix[4..8].copy_from_slice(&tid.to_le_bytes());
    prefix[8..12].copy_from_slice(&count.to_le_bytes());
    prefix
}

pub fn file_header() -> [u8; FILE_HEADER_LEN] {
    let mut b = [0u8; FILE_HEADER_LEN];
    b[..8].copy_from_slice(MAGIC);
    b[8..10].copy_from_slice(&VERSION.to_le_bytes());
    b
}
