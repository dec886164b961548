//! Writes the seed corpus under `corpus/<target>/`: the fixed recordings of
//! `crates/lapse-cli/tests/data`, small synthetic files and traces, and spill
//! datagrams. Run from `fuzz/`: `cargo run --example seeds`.
//!
//! Data-file seeds start with the target's mode byte (0: checksums repaired,
//! 1: as they are), and each recording also comes with its chunks stored
//! uncompressed, so that mutations reach the decoders without zstd or LZ4
//! between.

use std::fs;
use std::path::Path;

use lapse_data::format::{self, ChunkHeader};
use lapse_data::packing::Packing;
use lapse_data::*;
use lapse_rt::protocol;

fn main() {
    let data = Path::new("../crates/lapse-cli/tests/data");
    let trace = fs::read(data.join("trace.json")).expect("tests/data/trace.json");
    let mut files: Vec<(&str, Vec<u8>)> = vec![
        (
            "instr",
            fs::read(data.join("instr.lapse")).expect("instr.lapse"),
        ),
        (
            "sample",
            fs::read(data.join("sample.lapse")).expect("sample.lapse"),
        ),
        ("synthetic", synthetic()),
    ];
    let imported = lapse_import::import(&trace, "trace.json").expect("trace.json imports");
    let mut bytes = Vec::new();
    imported.write(&mut bytes).expect("write to memory");
    files.push(("trace", bytes));

    let dir = Path::new("corpus/data_file");
    fs::create_dir_all(dir).unwrap();
    for (name, bytes) in &files {
        write(dir, &format!("{name}.lapse"), &[&[0], &bytes[..]].concat());
        write(
            dir,
            &format!("{name}-raw.lapse"),
            &[&[0], &uncompressed(bytes)[..]].concat(),
        );
    }
    write(dir, "instr-crc.lapse", &[&[1], &files[0].1[..]].concat());

    let dir = Path::new("corpus/chrome_import");
    fs::create_dir_all(dir).unwrap();
    write(dir, "trace.json", &trace);
    for (name, text) in TRACES {
        write(dir, &format!("{name}.json"), text.as_bytes());
    }

    for target in ["spill", "recover"] {
        let dir = Path::new("corpus").join(target);
        fs::create_dir_all(&dir).unwrap();
        write(&dir, "session", &spill());
    }
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    fs::write(dir.join(name), bytes).unwrap();
}

/// A small file of every kind of chunk: tables, events of two threads (in
/// LZ4 chunks, as the recorder writes them), samples.
fn synthetic() -> Vec<u8> {
    let mut w = DataWriter::new(Vec::new()).unwrap().events_lz4();
    w.write_record(&Record::Session(SessionHeader {
        command: vec!["./app".into(), "1".into()],
        start_unix_ns: 1,
        start: Timestamp::from_nanos(1000),
        clock: "monotonic".into(),
        host: "h".into(),
        method: Method::Instrumentation,
        probe_cost_ns: 12.5,
        os_events: vec!["switch".into()],
        sample_event: None,
        sample_period: None,
        sample_period_is_time: false,
        lapse_version: "0".into(),
        notes: vec!["seed".into()],
        tsc: Some(TscCalibration {
            ticks_per_sec: 1e9,
            ref_ticks: 0,
            ref_ns: 0,
        }),
    }))
    .unwrap();
    w.write_record(&Record::Process(ProcessInfo {
        pid: 1,
        ppid: Some(0),
        command: vec!["./app".into()],
        start: Some(Timestamp::from_nanos(1000)),
        end: None,
        exit_status: None,
    }))
    .unwrap();
    w.write_record(&Record::Thread(ThreadInfo {
        pid: 1,
        tid: 1,
        name: "main".into(),
        start: Some(Timestamp::from_nanos(1000)),
        end: Some(Timestamp::from_nanos(9000)),
        serial: 0,
    }))
    .unwrap();
    w.write_record(&Record::Module(ModuleInfo {
        id: ModuleId(0),
        path: "/bin/app".into(),
        build_id: Some(vec![1, 2, 3]),
    }))
    .unwrap();
    w.write_record(&Record::Functions(
        (0..3)
            .map(|i| FunctionInfo {
                id: FunctionId(i),
                module: ModuleId(0),
                address: 0x1000 + 16 * u64::from(i),
                name: format!("f{i}"),
                source_file: Some("app.c".into()),
                line: Some(i + 1),
            })
            .collect(),
    ))
    .unwrap();
    w.write_record(&Record::Frames(vec![FrameInfo {
        id: FrameId(0),
        module: ModuleId(0),
        address: 0x1004,
        functions: vec![FrameFunction {
            function: FunctionId(0),
            source_file: None,
            line: Some(3),
        }],
    }]))
    .unwrap();
    w.write_record(&Record::Stacks(vec![
        StackNode {
            id: StackId(0),
            parent: None,
            frame: FrameId(0),
        },
        StackNode {
            id: StackId(1),
            parent: Some(StackId(0)),
            frame: FrameId(0),
        },
    ]))
    .unwrap();
    w.write_record(&Record::OsEvents(OsEventBlock {
        pid: 1,
        tid: 1,
        serial: 0,
        events: vec![OsEvent {
            from: Timestamp::from_nanos(3000),
            to: Timestamp::from_nanos(4000),
            kind: OsEventKind::Switch,
        }],
    }))
    .unwrap();
    let ev = |ts, kind, f| Event {
        ts: Timestamp::from_nanos(ts),
        kind,
        function: FunctionId(f),
    };
    use EventKind::{Enter, Exit};
    w.write_events(
        1,
        1,
        &[
            ev(1000, Enter, 0),
            ev(2000, Enter, 1),
            ev(5000, Exit, 1),
            ev(6000, Enter, 2),
            ev(7000, Exit, 2),
            ev(9000, Exit, 0),
        ],
    )
    .unwrap();
    w.write_events(1, 2, &[ev(1500, Enter, 2), ev(2500, Exit, 2)])
        .unwrap();
    w.write_samples(&[
        Sample {
            pid: 1,
            tid: 1,
            ts: Timestamp::from_nanos(3000),
            cpu: 0,
            stack: Some(StackId(1)),
            weight: 1000,
            serial: 0,
        },
        Sample {
            pid: 1,
            tid: 2,
            ts: Timestamp::from_nanos(2000),
            cpu: 1,
            stack: None,
            weight: 1000,
            serial: 0,
        },
    ])
    .unwrap();
    w.write_record(&Record::Footer(Footer {
        end: Timestamp::from_nanos(9000),
        lost_events: 0,
        discarded_samples: 0,
        target_exit_status: Some(0),
        events: 8,
        samples: 2,
    }))
    .unwrap();
    w.into_inner()
}

/// The same file with every compressed chunk stored decompressed.
fn uncompressed(bytes: &[u8]) -> Vec<u8> {
    let mut out = bytes[..format::FILE_HEADER_LEN].to_vec();
    let mut pos = format::FILE_HEADER_LEN;
    while let Some(head) = bytes.get(pos..pos + format::CHUNK_HEADER_LEN) {
        let h = ChunkHeader::decode(head.try_into().unwrap());
        let start = pos + format::CHUNK_HEADER_LEN;
        let body = &bytes[start..start + h.stored_len as usize];
        pos = start + h.stored_len as usize;
        let packing = Packing::of_flags(h.flags).unwrap();
        if !packing.is_compressed() {
            out.extend_from_slice(&bytes[start - format::CHUNK_HEADER_LEN..pos]);
            continue;
        }
        let prefix = if h.tag == format::TAG_EVENTS {
            &body[..format::EVENT_PREFIX_LEN]
        } else {
            &[][..]
        };
        let mut raw = vec![0; h.raw_len as usize];
        packing.unpack_into(&body[prefix.len()..], &mut raw).unwrap();
        out.extend(format::encode_chunk(
            h.tag,
            h.flags & !packing.flag(), // (the event layout stays said)
            prefix,
            &raw,
            raw.len() as u32,
        ));
    }
    out
}

/// Datagrams of a short session as the runtime spills them.
fn spill() -> Vec<u8> {
    let header = |kind: u16, flags: u16, a: u64, b: u64, c: u32, d: u32| {
        let mut m = Vec::new();
        m.extend_from_slice(&protocol::MAGIC.to_ne_bytes());
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&100u32.to_ne_bytes());
        m.extend_from_slice(&101u32.to_ne_bytes());
        m.extend_from_slice(&a.to_ne_bytes());
        m.extend_from_slice(&b.to_ne_bytes());
        m.extend_from_slice(&c.to_ne_bytes());
        m.extend_from_slice(&d.to_ne_bytes());
        m
    };
    // main, a call of 0x1040 (a leaf: its exit 10 ticks after, in its slot),
    // a call of 0x1080 in two slots, main's exit
    let leaf = protocol::LEAF_BIT | (10 << protocol::LEAF_SHIFT);
    let slots = [
        (0x1000u64, 0u64, 0x7000u64),
        (0x1040, 0, 0x6f00 | leaf),
        (0x1080, 0, 0x6f00),
        (0x1080, 1, 0x6f00),
        (0x1000, 1, 0x7000),
    ];
    let mut events = header(2, 0, 0, 0, slots.len() as u32, 0);
    for (i, (f, exit, sp)) in slots.into_iter().enumerate() {
        events.extend_from_slice(&f.to_ne_bytes());
        events.extend_from_slice(&(((1000 + 20 * i as u64) << 1) | exit).to_ne_bytes());
        events.extend_from_slice(&sp.to_ne_bytes());
    }
    let datagrams = [
        header(1, 0, 20 * 1024, 900, 1, 0),
        events,
        header(2, protocol::FLAG_DISCARD, 0, 0, 0, 0),
        header(3, 0, 0, 1100, 0, 0),
        header(4, 0, 0, 1100, 100, 101),
        header(5, 0, 0, 1200, 0, 0),
        header(7, 0, 4, 0, 16, 3),
    ];
    let mut out = Vec::new();
    for d in datagrams {
        out.extend_from_slice(&(d.len() as u32).to_ne_bytes());
        out.extend_from_slice(&d);
    }
    out
}

const TRACES: &[(&str, &str)] = &[
    (
        "nested",
        r#"{"traceEvents": [
  {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main-thread"}},
  {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "app"}},
  {"ph": "B", "name": "main", "pid": 1, "tid": 1, "ts": 0},
  {"ph": "X", "name": "worker", "cat": "lib", "pid": 1, "tid": 2, "ts": 0, "dur": 3.5},
  {"ph": "B", "name": "work", "pid": 1, "tid": 1, "ts": 1},
  {"ph": "i", "name": "lapse:switch_out", "pid": 1, "tid": 1, "ts": 2},
  {"ph": "i", "name": "lapse:switch_in", "pid": 1, "tid": 1, "ts": 4},
  {"ph": "E", "pid": 1, "tid": 1, "ts": 5},
  {"ph": "X", "name": "helper", "pid": 1, "tid": 1, "ts": 6, "dur": 2},
  {"ph": "E", "name": "main", "pid": 1, "tid": 1, "ts": 10},
  {"ph": "C", "name": "counter", "pid": 1, "tid": 1, "ts": 3, "args": {"v": 1}}
]}"#,
    ),
    (
        "array",
        r#"[{"ph":"X","name":"a","pid":"p","tid":"t","ts":1.25,"dur":0},{"ph":"X","name":"b","pid":"p","tid":"t","ts":1.25,"dur":0},{"ph":"B","name":"c","pid":2,"tid":3,"ts":7},{"ph":"E","pid":2,"tid":3,"ts":7},{"ph":"E","pid":2,"tid":3,"ts":8}]"#,
    ),
    (
        "recursion",
        r#"[{"ph":"B","name":"r","ts":0},{"ph":"B","name":"r","ts":1},{"ph":"B","name":"s","ts":2},{"ph":"E","name":"r","ts":3},{"ph":"E","name":"r","ts":4},{"ph":"I","name":"lapse:switch_out","ts":5},{"ph":"I","name":"lapse:switch_in","ts":6}]"#,
    ),
];
