//! How a chunk's body is compressed: its flags say ([`format::FLAG_ZSTD`],
//! [`format::FLAG_LZ4`]).
//!
//! zstd (level [`format::ZSTD_LEVEL`]) everywhere, except in the event
//! chunks of a recording (`DataWriter::events_lz4`): there LZ4 block
//! compression takes about a third of zstd's time for up to twice the
//! bytes (`mt`'s chunks: 8-10 × instead of 17-22 ×; calls.c: 0.56 instead
//! of 0.49 bytes a call; SPEC 7 allows 1).
//! The recorder compresses while the target runs, on a core the target
//! may want; tools that write files afterwards keep zstd's size.

use crate::format;

/// A chunk body's compression.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packing {
    Stored,
    Zstd,
    Lz4,
}

impl Packing {
    /// What a chunk's flags say; `None` for both codecs at once (no writer
    /// sets both).
    pub fn of_flags(flags: u8) -> Option<Packing> {
        match (
            flags & format::FLAG_ZSTD != 0,
            flags & format::FLAG_LZ4 != 0,
        ) {
            (false, false) => Some(Packing::Stored),
            (true, false) => Some(Packing::Zstd),
            (false, true) => Some(Packing::Lz4),
            (true, true) => None,
        }
    }

    /// The chunk flag that says it.
    pub fn flag(self) -> u8 {
        match self {
            Packing::Stored => 0,
            Packing::Zstd => format::FLAG_ZSTD,
            Packing::Lz4 => format::FLAG_LZ4,
        }
    }

    pub fn is_compressed(self) -> bool {
        self != Packing::Stored
    }

    /// Decompresses `body` into `out`, which must be exactly as long as the
    /// chunk says its payload is: `Some` only when the body decodes to
    /// exactly that many bytes (neither codec writes past `out`).
    pub fn unpack_into(self, body: &[u8], out: &mut [u8]) -> Option<()> {
        let written = match self {
            Packing::Stored => {
                if body.len() != out.len() {
                    return None;
                }
                out.copy_from_slice(body);
                body.len()
            }
            Packing::Zstd => {
                // One decompression context per thread, reused: creating
                // one per chunk costs more than decompressing a small chunk.
                thread_local! {
                    static DCTX: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
                        const { std::cell::RefCell::new(None) };
                }
                DCTX.with(|cell| {
                    let mut slot = cell.borrow_mut();
                    if slot.is_none() {
                        *slot = zstd::bulk::Decompressor::new().ok();
                    }
                    match slot.as_mut() {
                        Some(d) => d.decompress_to_buffer(body, &mut *out).ok(),
                        None => zstd::bulk::decompress_to_buffer(body, &mut *out).ok(),
                    }
                })?
            }
            Packing::Lz4 => lz4_flex::block::decompress_into(body, out).ok()?,
        };
        (written == out.len()).then_some(())
    }
}

/// The writer's compressors, kept for the file's life: a context (zstd's,
/// LZ4's hash table) made per chunk costs about as much as compressing a
/// small chunk.
pub struct Packer {
    zstd: zstd::bulk::Compressor<'static>,
    lz4: lz4_flex::block::CompressTable,
    out: Vec<u8>,
}

impl Packer {
    pub fn new() -> std::io::Result<Packer> {
        Ok(Packer {
            zstd: zstd::bulk::Compressor::new(format::ZSTD_LEVEL)?,
            lz4: lz4_flex::block::CompressTable::large(),
            out: Vec::new(),
        })
    }

    /// `raw` compressed with `packing` (`raw` itself for
    /// [`Packing::Stored`]); the bytes are the packer's until the next call.
    pub fn pack<'a>(&'a mut self, packing: Packing, raw: &'a [u8]) -> std::io::Result<&'a [u8]> {
        match packing {
            Packing::Stored => Ok(raw),
            Packing::Zstd => {
                self.out.clear();
                self.out.reserve(zstd::zstd_safe::compress_bound(raw.len()));
                self.zstd.compress_to_buffer(raw, &mut self.out)?;
                Ok(&self.out)
            }
            Packing::Lz4 => {
                self.out
                    .resize(lz4_flex::block::get_maximum_output_size(raw.len()), 0);
                let n =
                    lz4_flex::block::compress_into_with_table(raw, &mut self.out, &mut self.lz4)
                        .map_err(std::io::Error::other)?;
                Ok(&self.out[..n])
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_codecs_round_trip_and_refuse_a_wrong_size() {
        let raw: Vec<u8> = (0..40_000u32).map(|i| (i % 7 + i / 5000) as u8).collect();
        let mut packer = Packer::new().unwrap();
        for packing in [Packing::Zstd, Packing::Lz4, Packing::Stored] {
            let packed = packer.pack(packing, &raw).unwrap().to_vec();
            if packing.is_compressed() {
                assert!(
                    packed.len() * 8 < raw.len(),
                    "{packing:?}: {}",
                    packed.len()
                );
            }
            let mut back = vec![0; raw.len()];
            assert_eq!(packing.unpack_into(&packed, &mut back), Some(()));
            assert_eq!(back, raw, "{packing:?}");
            // a chunk that says one byte more or less than its body holds
            for wrong in [raw.len() - 1, raw.len() + 1] {
                let mut out = vec![0; wrong];
                assert_eq!(packing.unpack_into(&packed, &mut out), None, "{packing:?}");
            }
            assert_eq!(Packing::of_flags(packing.flag()), Some(packing));
        }
        assert_eq!(
            Packing::of_flags(format::FLAG_ZSTD | format::FLAG_LZ4),
            None
        );
        // bytes that are no LZ4 block
        let mut out = vec![0; 100];
        assert_eq!(Packing::Lz4.unpack_into(&[0xff; 20], &mut out), None);
    }
}
