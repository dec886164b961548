//! The writer never writes what the reader refuses: batches beyond a chunk's
//! limits are split, big tables become several records, and records that
//! compress too well are stored as they are.

use std::path::Path;

use lapse_data::format;
use lapse_data::*;

fn session() -> SessionHeader {
    SessionHeader::example(Method::Instrumentation)
}

fn write(f: impl FnOnce(&mut DataWriter<Vec<u8>>)) -> DataFile {
    let mut w = DataWriter::new(Vec::new()).unwrap();
    w.write_record(&Record::Session(session())).unwrap();
    f(&mut w);
    let f = DataFile::from_bytes(Path::new("t.data"), w.into_inner()).unwrap();
    assert!(f.damage.is_none(), "{:?}", f.damage);
    f
}

fn calls(n: u64) -> Vec<Event> {
    (0..n)
        .map(|i| Event {
            ts: Timestamp::from_nanos(1000 + i * 7),
            kind: if i % 2 == 0 {
                EventKind::Enter
            } else {
                EventKind::Exit
            },
            function: FunctionId((i / 2 % 300) as u32),
        })
        .collect()
}

fn events_of(f: &DataFile) -> Vec<Event> {
    let mut all = Vec::new();
    let mut out = Vec::new();
    for c in f.thread_chunks(ThreadKey::new(1, 2)) {
        assert!(c.count <= format::MAX_CHUNK_EVENTS);
        f.read_events(c, &mut out).unwrap();
        all.append(&mut out);
    }
    all
}

#[test]
fn a_big_batch_of_events_is_split_into_chunks() {
    let n = 2 * u64::from(format::MAX_CHUNK_EVENTS) + 5;
    let events = calls(n);
    let f = write(|w| w.write_events(1, 2, &events).unwrap());
    assert_eq!(f.event_chunks.len(), 3);
    assert_eq!(events_of(&f), events);
    // The same from an encoder (the recorder's path).
    let mut enc = codec::EventEncoder::default();
    for e in &events {
        enc.push(e.ts, e.kind, e.function);
    }
    let f = write(|w| w.write_encoded_events(ThreadKey::new(1, 2), &enc).unwrap());
    assert_eq!(f.event_chunks.len(), 3);
    assert_eq!(events_of(&f), events);
}

#[test]
fn a_stream_that_compresses_too_well_is_stored_as_it_is() {
    // Calls of one function at exact 1 µs steps (a synthetic trace):
    // thousands of times smaller compressed, more than a chunk may expand.
    let events: Vec<Event> = (0..u64::from(format::MAX_CHUNK_EVENTS))
        .map(|i| Event {
            ts: Timestamp::from_nanos(1000 * (i / 2 + i % 2)),
            kind: if i % 2 == 0 {
                EventKind::Enter
            } else {
                EventKind::Exit
            },
            function: FunctionId(0),
        })
        .collect();
    let samples: Vec<Sample> = (0..u64::from(format::MAX_CHUNK_SAMPLES))
        .map(|i| Sample {
            pid: 1,
            tid: 2,
            serial: 0,
            ts: Timestamp::from_nanos(i * 1_000_000),
            cpu: 0,
            stack: None,
            weight: 1_000_000,
        })
        .collect();
    let f = write(|w| {
        w.write_events(1, 2, &events).unwrap();
        w.write_samples(&samples).unwrap();
    });
    assert_eq!(events_of(&f), events);
    let mut back = Vec::new();
    f.read_samples(&f.sample_chunks[0], &mut back).unwrap();
    assert_eq!(back, samples);
}

#[test]
fn a_big_batch_of_samples_is_split_into_chunks() {
    let samples: Vec<Sample> = (0..u64::from(format::MAX_CHUNK_SAMPLES) + 1)
        .map(|i| Sample {
            pid: 1,
            tid: 1,
            serial: 0,
            ts: Timestamp::from_nanos(i * 1000),
            cpu: 0,
            stack: None,
            weight: 1,
        })
        .collect();
    let f = write(|w| w.write_samples(&samples).unwrap());
    assert_eq!(f.sample_chunks.len(), 2);
    let mut all = Vec::new();
    let mut out = Vec::new();
    for c in &f.sample_chunks {
        f.read_samples(c, &mut out).unwrap();
        all.append(&mut out);
    }
    assert_eq!(all, samples);
}

#[test]
fn a_table_larger_than_a_record_is_written_as_several() {
    // 20,000 functions of 1 KiB names: 20 MB, more than one record holds.
    let functions: Vec<FunctionInfo> = (0..20_000u32)
        .map(|i| FunctionInfo {
            id: FunctionId(i),
            module: ModuleId(0),
            address: u64::from(i),
            name: format!("{i:01024}"),
            source_file: None,
            line: None,
        })
        .collect();
    let f = write(|w| {
        w.write_record(&Record::Functions(functions.clone()))
            .unwrap()
    });
    assert_eq!(f.functions, functions);
}

#[test]
fn a_record_that_compresses_too_well_is_stored_as_it_is() {
    let functions: Vec<FunctionInfo> = (0..5000u32)
        .map(|i| FunctionInfo {
            id: FunctionId(i),
            module: ModuleId(0),
            address: 0,
            name: "x".repeat(200),
            source_file: None,
            line: None,
        })
        .collect();
    let f = write(|w| {
        w.write_record(&Record::Functions(functions.clone()))
            .unwrap()
    });
    assert_eq!(f.functions, functions);
}

#[test]
fn a_record_too_large_to_split_is_an_error() {
    let mut w = DataWriter::new(Vec::new()).unwrap();
    let mut s = session();
    s.command = vec!["x".repeat(format::MAX_RECORD_RAW as usize)];
    let err = w.write_record(&Record::Session(s)).unwrap_err();
    assert!(err.to_string().contains("larger than"), "{err}");
}
