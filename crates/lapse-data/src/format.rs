//! Byte layout of the file: a 16-byte file header, then chunks.
//!
//! ```text
//! file header: b"LAPSEDAT" | u16 version | u16 flags (0) | u32 reserved (0)
//! chunk:       u8 tag | u8 flags | u16 reserved | u32 stored_len | u32 raw_len | u32 crc32(stored)
//!              then stored_len bytes
//! ```
//! All integers little-endian. `raw_len` is the payload size after
//! decompression (equal to `stored_len` when not compressed). Event chunks
//! start their stored bytes with an uncompressed 12-byte prefix
//! (`u32 pid | u32 tid | u32 count`) so a reader can index them without
//! decompressing.

pub const MAGIC: &[u8; 8] = b"LAPSEDAT";
pub const VERSION: u16 = 1;
pub const FILE_HEADER_LEN: usize = 16;
pub const CHUNK_HEADER_LEN: usize = 16;

/// No chunk may be larger than this on disk.
pub const MAX_CHUNK_STORED: u32 = 64 << 20;
/// No chunk may decompress to more than this.
pub const MAX_CHUNK_RAW: u32 = 256 << 20;

pub const TAG_RECORD: u8 = 1;
pub const TAG_EVENTS: u8 = 2;
pub const TAG_SAMPLES: u8 = 3;

pub const FLAG_ZSTD: u8 = 1;

pub const EVENT_PREFIX_LEN: usize = 12;

/// zstd level used for event and sample chunks. The recorder compresses on
/// the core the target does not use, and on call-heavy programs that core is
/// the limit: a fast (negative) level keeps it ahead. Sizes stay far inside
/// the 4 bytes per call budget (calls.c: 0.47; random-delta synthetic
/// stream: 0.95 per event), and decompression is no slower than at level 3.
pub const ZSTD_LEVEL: i32 = -3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    pub tag: u8,
    pub flags: u8,
    pub stored_len: u32,
    pub raw_len: u32,
    pub crc: u32,
}

impl ChunkHeader {
    pub fn encode(&self) -> [u8; CHUNK_HEADER_LEN] {
        let mut b = [0u8; CHUNK_HEADER_LEN];
        b[0] = self.tag;
        b[1] = self.flags;
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
            stored_len: u32_at(4),
            raw_len: u32_at(8),
            crc: u32_at(12),
        }
    }
}

pub fn file_header() -> [u8; FILE_HEADER_LEN] {
    let mut b = [0u8; FILE_HEADER_LEN];
    b[..8].copy_from_slice(MAGIC);
    b[8..10].copy_from_slice(&VERSION.to_le_bytes());
    b
}
