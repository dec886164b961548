//! Crafted tiny files (issue #13, item 12): ids and counts a file claims must
//! not decide what the reader allocates or how long it works. Each file is
//! built byte by byte with the format's own encoders; the assertions are on
//! counts (table lengths, events indexed, bytes allocated by this thread),
//! never on wall-clock time.

use std::path::Path;

use lapse_data::alloc_count::{peak_during, Counting};
use lapse_data::format::{self, encode_chunk, event_prefix, file_header};
use lapse_data::packing::{Packer, Packing};
use lapse_data::*;

#[global_allocator]
static ALLOC: Counting = Counting;

const MB: usize = 1 << 20;

fn session() -> SessionHeader {
    SessionHeader::example(Method::Instrumentation)
}

/// A file header, the session record and `records`, written by the writer.
fn with_records(records: &[Record]) -> Vec<u8> {
    let mut w = DataWriter::new(Vec::new()).unwrap();
    w.write_record(&Record::Session(session())).unwrap();
    for r in records {
        w.write_record(r).unwrap();
    }
    w.into_inner()
}

/// A record chunk compressed whatever its size (the writer would not).
fn packed_record(record: &Record) -> Vec<u8> {
    let raw = postcard::to_stdvec(record).unwrap();
    let packed = zstd::bulk::compress(&raw, 3).unwrap();
    encode_chunk(
        format::TAG_RECORD,
        format::FLAG_ZSTD,
        &[],
        &packed,
        raw.len() as u32,
    )
}

/// An event chunk announcing `count` events and `raw_len` decoded bytes,
/// whose body is `raw` compressed.
fn event_chunk(count: u32, raw: &[u8], raw_len: u32) -> Vec<u8> {
    event_chunk_packed(Packing::Zstd, count, raw, raw_len)
}

/// [`event_chunk`], compressed with `packing`.
fn event_chunk_packed(packing: Packing, count: u32, raw: &[u8], raw_len: u32) -> Vec<u8> {
    let packed = Packer::new().unwrap().pack(packing, raw).unwrap().to_vec();
    encode_chunk(
        format::TAG_EVENTS,
        packing.flag() | format::FLAG_COLUMNS,
        &event_prefix(1, 1, count),
        &packed,
        raw_len,
    )
}

fn open(bytes: Vec<u8>) -> Result<DataFile, DataError> {
    DataFile::from_bytes(Path::new("crafted.data"), bytes)
}

/// Opens the file and decodes every chunk, as `lapse report` would.
fn read_all(bytes: Vec<u8>) -> Option<(DataFile, u64)> {
    let f = open(bytes).ok()?;
    let mut decoded = 0u64;
    let mut ev = Vec::new();
    for c in &f.event_chunks {
        if f.read_events(c, &mut ev).is_ok() {
            decoded += ev.len() as u64;
        }
    }
    let mut s = Vec::new();
    for c in &f.sample_chunks {
        if f.read_samples(c, &mut s).is_ok() {
            decoded += s.len() as u64;
        }
    }
    Some((f, decoded))
}

fn function(id: u32) -> FunctionInfo {
    FunctionInfo {
        id: FunctionId(id),
        module: ModuleId(0),
        address: 0,
        name: "f".into(),
        source_file: None,
        line: None,
    }
}

#[test]
fn a_huge_function_id_in_a_tiny_file_is_refused() {
    // The 291-byte file: one function claiming id 2^26 - 1 made every
    // slot below it a formatted placeholder (24 GB).
    let bytes = with_records(&[Record::Functions(vec![function((1 << 26) - 1)])]);
    assert!(bytes.len() < 300, "{} bytes", bytes.len());
    let (f, peak) = peak_during(|| open(bytes).unwrap());
    assert!(f.functions.len() <= 1024, "{} functions", f.functions.len());
    assert!(
        f.damage.as_ref().unwrap().what.contains("out of range"),
        "{:?}",
        f.damage
    );
    assert!(peak < MB, "{peak} bytes");
}

#[test]
fn huge_module_frame_and_stack_ids_are_refused() {
    let records = [
        Record::Module(ModuleInfo {
            id: ModuleId(u32::MAX),
            path: "m".into(),
            build_id: None,
        }),
        Record::Frames(vec![FrameInfo {
            id: FrameId(50_000_000),
            module: ModuleId(0),
            address: 0,
            functions: vec![],
        }]),
        Record::Stacks(vec![StackNode {
            id: StackId(30_000_000),
            parent: None,
            frame: FrameId(0),
        }]),
    ];
    for r in records {
        let (f, peak) = peak_during(|| open(with_records(std::slice::from_ref(&r))).unwrap());
        let longest = f.modules.len().max(f.frames.len()).max(f.stacks.len());
        assert!(longest <= 1024, "{r:?}: {longest} entries");
        assert!(f.damage.is_some(), "{r:?}");
        assert!(peak < MB, "{r:?}: {peak} bytes");
    }
}

#[test]
fn a_table_is_as_long_as_its_entries_justify() {
    // Ids far apart: each entry is accepted only while the table stays within
    // the entries read plus the holes allowance.
    let fs: Vec<FunctionInfo> = (0..10_000u32).map(|i| function(i * 1000)).collect();
    let f = open(with_records(&[Record::Functions(fs)])).unwrap();
    assert!(f.functions.len() <= 2 + 1024, "{}", f.functions.len());
    assert!(f.damage.is_some());
    // Ids just within the allowance: accepted, and the table grows no further.
    let fs: Vec<FunctionInfo> = (0..10_000u32).map(|i| function(i + 1023)).collect();
    let f = open(with_records(&[Record::Functions(fs)])).unwrap();
    assert!(f.damage.is_none(), "{:?}", f.damage);
    assert_eq!(f.functions.len(), 10_000 + 1023);
    assert_eq!(f.functions[5].name, "[function 5]");
}

#[test]
fn a_chunk_claiming_a_huge_decoded_size_is_refused_before_decoding() {
    // The zstd bomb: 64 MiB of zeros in a few kilobytes, which decode
    // as 32 M calls of function 0.
    let mut bytes = with_records(&[]);
    let zeros = vec![0u8; 64 * MB];
    bytes.extend(event_chunk(32 << 20, &zeros, zeros.len() as u32));
    drop(zeros);
    assert!(bytes.len() < 16 * 1024, "{} bytes", bytes.len());
    let ((f, decoded), peak) = peak_during(|| read_all(bytes).unwrap());
    assert_eq!(f.event_chunks.len(), 0);
    assert_eq!(decoded, 0);
    assert!(
        f.damage.as_ref().unwrap().what.contains("out of range"),
        "{:?}",
        f.damage
    );
    assert!(peak < MB, "{peak} bytes");
}

#[test]
fn event_counts_and_sizes_must_be_what_the_writer_writes() {
    let zeros = vec![0u8; 1 + 2 * 100];
    for (count, raw_len, why) in [
        (0, 1, "no events"),
        (format::MAX_CHUNK_EVENTS + 1, 1 << 19, "too many events"),
        (100, 100, "too few bytes for the count"),
        (1, 10_000, "too many bytes for the count"),
    ] {
        let mut bytes = with_records(&[]);
        bytes.extend(event_chunk(count, &zeros, raw_len));
        let f = open(bytes).unwrap();
        assert_eq!(f.event_chunks.len(), 0, "{why}");
        assert!(f.damage.is_some(), "{why}");
    }
}

#[test]
fn decompression_stops_at_the_stated_size() {
    // Stated: 10 events in 21 bytes. Held: 4 MiB of zeros.
    for packing in [Packing::Zstd, Packing::Lz4] {
        let mut bytes = with_records(&[]);
        bytes.extend(event_chunk_packed(packing, 10, &vec![0u8; 4 * MB], 21));
        let f = open(bytes).unwrap();
        assert_eq!(f.event_chunks.len(), 1);
        let mut out = Vec::new();
        let mut raw = Vec::new();
        let (results, peak) = peak_during(|| {
            (
                f.read_events(&f.event_chunks[0], &mut out).is_err(),
                f.read_event_bytes(&f.event_chunks[0], &mut raw).is_err(),
            )
        });
        assert_eq!(results, (true, true), "{packing:?}");
        assert!(peak < 64 * 1024, "{packing:?}: {peak} bytes");
    }
}

#[test]
fn lz4_event_chunks_read_and_two_compressions_at_once_are_refused() {
    // two calls of function 1, 10 ns each, in columns
    let mut raw = Vec::new();
    let ev = |ts, kind| Event {
        ts: Timestamp::from_nanos(ts),
        kind,
        function: FunctionId(1),
    };
    let events = [
        ev(100, EventKind::Enter),
        ev(110, EventKind::Exit),
        ev(120, EventKind::Enter),
        ev(130, EventKind::Exit),
    ];
    lapse_data::codec::encode_events(&events, &mut raw);
    let mut bytes = with_records(&[]);
    bytes.extend(event_chunk_packed(Packing::Lz4, 4, &raw, raw.len() as u32));
    let f = open(bytes).unwrap();
    let mut out = Vec::new();
    f.read_events(&f.event_chunks[0], &mut out).unwrap();
    assert_eq!(out, events);
    let packed = Packer::new()
        .unwrap()
        .pack(Packing::Lz4, &raw)
        .unwrap()
        .to_vec();
    let both = format::FLAG_ZSTD | format::FLAG_LZ4 | format::FLAG_COLUMNS;
    let mut bytes = with_records(&[]);
    bytes.extend(encode_chunk(
        format::TAG_EVENTS,
        both,
        &event_prefix(1, 1, 4),
        &packed,
        raw.len() as u32,
    ));
    let f = open(bytes).unwrap();
    assert!(f.event_chunks.is_empty());
    let damage = f.damage.expect("damage");
    assert!(damage.what.contains("two compressions"), "{}", damage.what);
}

#[test]
fn a_file_holds_at_most_the_events_its_size_allows() {
    // Zeros decode as well-formed events (calls of function 0): a chunk of
    // the most events allowed takes about 50 bytes compressed, so 8 KiB of
    // them announced 10 M events. Compressed chunks expand at most
    // MAX_STREAM_EXPANSION times and an event takes at least 2 bytes.
    let most_per_byte = u64::from(format::MAX_STREAM_EXPANSION / format::MIN_EVENT_BYTES);
    let count = format::MAX_CHUNK_EVENTS;
    let zeros = vec![0u8; 1 + 2 * count as usize];
    let bomb = event_chunk(count, &zeros, zeros.len() as u32);
    let lz4_bomb = event_chunk_packed(Packing::Lz4, count, &zeros, zeros.len() as u32);
    // The most an uncompressed chunk can hold in 8 KiB.
    let plain = encode_chunk(
        format::TAG_EVENTS,
        0,
        &event_prefix(1, 1, 1000),
        &zeros[..2001],
        2001,
    );
    for chunk in [bomb, lz4_bomb, plain] {
        let mut bytes = with_records(&[]);
        while bytes.len() + chunk.len() <= 8192 {
            bytes.extend_from_slice(&chunk);
        }
        let len = bytes.len() as u64;
        let ((f, decoded), peak) = peak_during(|| read_all(bytes).unwrap());
        let announced = f.total_events();
        assert!(
            announced <= most_per_byte * len,
            "{announced} events in {len} bytes"
        );
        assert!(decoded <= announced);
        assert!(peak < MB, "{peak} bytes");
    }
}

#[test]
fn a_record_bomb_is_refused() {
    // A process whose command line is a million empty strings: 1 MB of
    // zeros, a few hundred bytes compressed, 24 MB as Rust strings.
    let bomb = Record::Process(ProcessInfo {
        pid: 7,
        ppid: None,
        command: vec![String::new(); 1 << 20],
        start: None,
        end: None,
        exit_status: None,
    });
    let mut bytes = with_records(&[]);
    bytes.extend(packed_record(&bomb));
    assert!(bytes.len() < 1024, "{} bytes", bytes.len());
    let (f, peak) = peak_during(|| open(bytes).unwrap());
    assert!(f.processes.is_empty());
    assert!(
        f.damage.as_ref().unwrap().what.contains("expands"),
        "{:?}",
        f.damage
    );
    assert!(peak < MB, "{peak} bytes");
}

#[test]
fn a_sample_chunk_beyond_its_limit_is_refused() {
    let zeros = vec![0u8; format::MAX_SAMPLES_RAW as usize + 1];
    let packed = zstd::bulk::compress(&zeros, 3).unwrap();
    let mut bytes = with_records(&[]);
    bytes.extend(encode_chunk(
        format::TAG_SAMPLES,
        format::FLAG_ZSTD,
        &[],
        &packed,
        zeros.len() as u32,
    ));
    let f = open(bytes).unwrap();
    assert!(f.sample_chunks.is_empty());
    assert!(f.damage.is_some());
    // A count beyond the limit inside an accepted chunk does not decode.
    let mut raw = Vec::new();
    lapse_data::varint::put(&mut raw, u64::from(format::MAX_CHUNK_SAMPLES) + 1);
    raw.resize(raw.len() + 6 * (format::MAX_CHUNK_SAMPLES as usize + 1), 0);
    assert!(codec::decode_samples(&raw, &mut Vec::new()).is_none());
}

#[test]
fn uncompressed_chunks_must_state_their_own_size() {
    let mut bytes = with_records(&[]);
    bytes.extend(encode_chunk(format::TAG_RECORD, 0, &[], &[0; 8], 1 << 20));
    let f = open(bytes).unwrap();
    assert!(
        f.damage.as_ref().unwrap().what.contains("uncompressed"),
        "{:?}",
        f.damage
    );
}

#[test]
fn file_header_alone_is_not_a_recording() {
    assert!(matches!(
        open(file_header().to_vec()),
        Err(DataError::NoSession { .. })
    ));
}

#[test]
fn versions_one_to_three_are_read_and_others_refused() {
    let bytes = with_records(&[]);
    assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), format::VERSION);
    for (version, read) in [(0u16, false), (1, true), (2, true), (3, true), (4, false)] {
        let mut b = bytes.clone();
        b[8..10].copy_from_slice(&version.to_le_bytes());
        match open(b) {
            Ok(_) => assert!(read, "version {version} was read"),
            Err(DataError::Version { found, .. }) => {
                assert!(!read, "version {version} was refused");
                assert_eq!(found, version);
            }
            Err(e) => panic!("version {version}: {e}"),
        }
    }
}
