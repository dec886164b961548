//! What the fuzz targets share: making mutated data files get past the
//! checksums (so the fuzzer reaches the decoders), and walking everything a
//! data file holds as `lapse report` would.

use std::path::Path;

use lapse_data::format::{self, ChunkHeader};
use lapse_data::{codec, DataFile};

/// Rewrites each chunk's CRC (and, for an uncompressed chunk, its decoded
/// size) to match the bytes that follow, as far as the chunk framing goes.
/// Random mutations almost never keep a CRC-32 right; this lets them reach
/// the record, event and sample decoders.
pub fn fix_checksums(bytes: &mut [u8]) {
    let mut pos = format::FILE_HEADER_LEN;
    while let Some(head) = bytes.get(pos..pos + format::CHUNK_HEADER_LEN) {
        let mut h = ChunkHeader::decode(head.try_into().expect("header length"));
        let start = pos + format::CHUNK_HEADER_LEN;
        let Some(body) = bytes.get(start..start + h.stored_len as usize) else {
            return;
        };
        h.crc = crc32fast::hash(body);
        if h.flags & format::FLAG_ZSTD == 0 {
            let prefix = if h.tag == format::TAG_EVENTS {
                format::EVENT_PREFIX_LEN as u32
            } else {
                0
            };
            h.raw_len = h.stored_len.saturating_sub(prefix);
        }
        bytes[pos..start].copy_from_slice(&h.encode());
        pos = start + h.stored_len as usize;
    }
}

/// Reads every chunk and table of `bytes` as a data file and checks the
/// reader's promises: no panic, tables no longer than the file's contents
/// justify, chunks that decode to exactly what they announce.
pub fn exercise_data_file(bytes: &[u8]) {
    let Ok(f) = DataFile::from_bytes(Path::new("fuzz.data"), bytes.to_vec()) else {
        return;
    };
    // Each entry takes at least 3 decoded bytes, and records expand at most
    // MAX_RECORD_EXPANSION times: a table is never longer than that allows.
    let most = bytes.len() * format::MAX_RECORD_EXPANSION as usize / 3 + 1024;
    for (what, len) in [
        ("modules", f.modules.len()),
        ("functions", f.functions.len()),
        ("frames", f.frames.len()),
        ("stacks", f.stacks.len()),
    ] {
        assert!(len <= most, "{len} {what} from {} bytes", bytes.len());
    }
    // An event takes at least 2 decoded bytes and a compressed chunk expands
    // at most MAX_STREAM_EXPANSION times: the events a file announces are
    // bounded by its size (a zstd bomb is refused).
    let most_events = bytes.len() as u64 * u64::from(format::MAX_STREAM_EXPANSION) / 2;
    assert!(
        f.total_events() <= most_events,
        "{} events announced in {} bytes",
        f.total_events(),
        bytes.len()
    );
    let mut events = Vec::new();
    let mut raw = Vec::new();
    for t in f.all_threads() {
        for c in f.thread_chunks(t.key()) {
            assert!(c.count <= format::MAX_CHUNK_EVENTS);
            if f.read_events(c, &mut events).is_ok() {
                assert_eq!(events.len(), c.count as usize);
            }
            // The engine's path: raw bytes, decoded one event at a time.
            if f.read_event_bytes(c, &mut raw).is_ok() {
                assert!(raw.len() as u64 <= format::max_event_raw(c.count));
                if let Some(mut d) = codec::EventDecoder::new(&raw, c.layout, c.count as usize) {
                    let n = d.by_ref().count();
                    assert!(n <= c.count as usize);
                    let _ = d.finish();
                }
            }
        }
    }
    let mut samples = Vec::new();
    for c in &f.sample_chunks {
        if f.read_samples(c, &mut samples).is_ok() {
            assert!(samples.len() <= format::MAX_CHUNK_SAMPLES as usize);
        }
    }
    for func in &f.functions {
        let _ = f.module(func.module);
    }
    let _ = (f.total_events(), f.is_complete());
}
