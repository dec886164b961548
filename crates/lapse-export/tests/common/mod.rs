//! Two small recordings built with [`DataWriter`], with values a person can
//! check by hand, shared by the export tests.
//!
//! Instrumentation (times in µs after the session start; ns in the file):
//! thread 1.1 runs 0–100: main [10, 90] calls work [20, 50], which recurses
//! into work [30, 40], then helper [60, 70]; the thread is off the CPU during
//! [25, 27]. Thread 1.2 runs 0–50: helper [5, 45], then work entered at 46
//! and still open at the thread's end.
//! Exclusive elapsed: main 40, main>work 20, main>work>work 10,
//! main>helper 10, helper 40, work 4 (open): 124 µs on paths.
//! Functions: main 40 excl / 80 incl; work 34 / 34; helper 50 / 50.
//! Application (the exact rule): the 2 µs off the CPU are in work's
//! interval [20, 30]: work 32 / 32, main 40 / 78, 122 µs on paths.
//!
//! Sampling: frames main, hot, cold, memcpy (libc.so.6), an unresolved
//! address 0x999 and an inline frame (inl, from inl.h, inlined into cold;
//! the function table has no file for it); 14 samples:
//! main>hot ×5, main>hot>memcpy ×2, main>cold ×3, main>[app+0x999] ×1,
//! main>cold>inl ×2, and one with no stack.

#![allow(dead_code)]

use std::path::Path;

use lapse_analysis::{analyze, Analysis};
use lapse_data::*;

pub const START: u64 = 1_000_000_000;
pub const US: u64 = 1000;

pub fn at(us: u64) -> Timestamp {
    Timestamp::from_nanos(START + us * US)
}

fn header(method: Method) -> SessionHeader {
    SessionHeader {
        command: vec!["./app".into(), "arg".into()],
        start_unix_ns: 1_700_000_000_000_000_000,
        start: Timestamp::from_nanos(START),
        host: "test".into(),
        os_events: vec!["switch".into()],
        lapse_version: "test".into(),
        ..SessionHeader::example(method)
    }
}

fn function(id: u32, module: u32, name: &str, address: u64) -> FunctionInfo {
    FunctionInfo {
        id: FunctionId(id),
        module: ModuleId(module),
        address,
        name: name.into(),
        source_file: Some("app.c".into()),
        line: Some(10 + id),
    }
}

fn common(w: &mut DataWriter<&mut Vec<u8>>, method: Method, threads: &[(u32, u64, u64)]) {
    common_costing(w, method, threads, 0.0);
}

fn common_costing(
    w: &mut DataWriter<&mut Vec<u8>>,
    method: Method,
    threads: &[(u32, u64, u64)],
    probe_cost_ns: f64,
) {
    w.write_record(&Record::Session(SessionHeader {
        probe_cost_ns,
        ..header(method)
    }))
    .unwrap();
    w.write_record(&Record::Process(ProcessInfo {
        pid: 1,
        ppid: None,
        command: vec!["./app".into(), "arg".into()],
        start: Some(at(0)),
        end: Some(at(100)),
        exit_status: Some(0),
    }))
    .unwrap();
    for &(tid, from, to) in threads {
        w.write_record(&Record::Thread(ThreadInfo {
            pid: 1,
            tid,
            serial: 0,
            name: if tid == 1 {
                "app".into()
            } else {
                "worker".into()
            },
            start: Some(at(from)),
            end: Some(at(to)),
        }))
        .unwrap();
    }
    for (id, path) in [(0, "/usr/bin/app"), (1, "/lib/libc.so.6")] {
        w.write_record(&Record::Module(ModuleInfo {
            id: ModuleId(id),
            path: path.into(),
            build_id: Some(vec![0xab, id as u8]),
        }))
        .unwrap();
    }
    w.write_record(&Record::Mapping(MappingInfo {
        pid: 1,
        module: ModuleId(0),
        start: 0x55_0000_0000,
        end: 0x55_0001_0000,
        file_offset: 0,
        bias: 0x55_0000_0000,
        time: at(0),
    }))
    .unwrap();
}

fn footer(w: &mut DataWriter<&mut Vec<u8>>) {
    w.write_record(&Record::Footer(Footer {
        end: at(100),
        ..Footer::default()
    }))
    .unwrap();
}

/// The instrumentation recording described at the top.
pub fn instr_file() -> DataFile {
    instr_file_costing(0.0)
}

/// The instrumentation recording with a measured probe cost of
/// `probe_cost_ns` in its header (compensation removes it per interval).
pub fn instr_file_costing(probe_cost_ns: f64) -> DataFile {
    let mut bytes = Vec::new();
    let mut w = DataWriter::new(&mut bytes).unwrap();
    common_costing(
        &mut w,
        Method::Instrumentation,
        &[(1, 0, 100), (2, 0, 50)],
        probe_cost_ns,
    );
    w.write_record(&Record::Functions(vec![
        function(0, 0, "main", 0x1100),
        function(1, 0, "work", 0x1200),
        function(2, 1, "helper", 0x2300),
    ]))
    .unwrap();
    w.write_record(&Record::OsEvents(OsEventBlock {
        pid: 1,
        tid: 1,
        serial: 0,
        events: vec![OsEvent {
            from: at(25),
            to: at(27),
            kind: OsEventKind::Switch,
        }],
    }))
    .unwrap();
    let ev = |us, kind, f| Event {
        ts: at(us),
        kind,
        function: FunctionId(f),
    };
    use EventKind::{Enter as In, Exit as Out};
    let t1 = [
        ev(10, In, 0),
        ev(20, In, 1),
        ev(30, In, 1),
        ev(40, Out, 1),
        ev(50, Out, 1),
        ev(60, In, 2),
        ev(70, Out, 2),
        ev(90, Out, 0),
    ];
    // Two chunks, to cross a chunk boundary with an open stack.
    w.write_events(1, 1, &t1[..3]).unwrap();
    w.write_events(1, 1, &t1[3..]).unwrap();
    w.write_events(1, 2, &[ev(5, In, 2), ev(45, Out, 2), ev(46, In, 1)])
        .unwrap();
    footer(&mut w);
    drop(w);
    DataFile::from_bytes(Path::new("instr.data"), bytes).unwrap()
}

/// The sampling recording described at the top.
pub fn sample_file() -> DataFile {
    sample_file_with(&[])
}

/// The sampling recording described at the top, with these off-CPU periods
/// (`record --off-cpu`).
pub fn sample_file_with(off_cpu: &[OffCpuPeriod]) -> DataFile {
    let mut bytes = Vec::new();
    let mut w = DataWriter::new(&mut bytes).unwrap();
    common(&mut w, Method::Sampling, &[(1, 0, 100), (2, 0, 100)]);
    w.write_record(&Record::Functions(vec![
        function(0, 0, "main", 0x100),
        function(1, 0, "hot", 0x200),
        function(2, 0, "cold", 0x300),
        function(3, 1, "memcpy", 0x400),
        // Known only as inlined code: no file of its own in the table.
        FunctionInfo {
            source_file: None,
            line: None,
            ..function(4, 0, "inl", 0x500)
        },
    ]))
    .unwrap();
    let ff = |f: u32, line: u32| FrameFunction {
        function: FunctionId(f),
        source_file: Some(if f == 4 { "inl.h" } else { "app.c" }.into()),
        line: Some(line),
    };
    let frame = |id: u32, module: u32, address: u64, functions: Vec<FrameFunction>| FrameInfo {
        id: FrameId(id),
        module: ModuleId(module),
        address,
        functions,
    };
    w.write_record(&Record::Frames(vec![
        frame(0, 0, 0x110, vec![ff(0, 5)]),
        frame(1, 0, 0x210, vec![ff(1, 20)]),
        frame(2, 0, 0x310, vec![ff(2, 30)]),
        frame(3, 1, 0x410, vec![ff(3, 40)]),
        frame(4, 0, 0x999, vec![]),
        frame(5, 0, 0x510, vec![ff(2, 31), ff(4, 50)]),
    ]))
    .unwrap();
    let node = |id: u32, parent: Option<u32>, frame: u32| StackNode {
        id: StackId(id),
        parent: parent.map(StackId),
        frame: FrameId(frame),
    };
    w.write_record(&Record::Stacks(vec![
        node(0, None, 0),
        node(1, Some(0), 1),
        node(2, Some(0), 2),
        node(3, Some(1), 3),
        node(4, Some(0), 4),
        node(5, Some(0), 5),
    ]))
    .unwrap();
    let mut samples = Vec::new();
    let mut t = 0;
    let mut add = |stack: Option<u32>, n: usize, tid: u32| {
        for _ in 0..n {
            t += 5;
            samples.push(Sample {
                pid: 1,
                tid,
                serial: 0,
                ts: at(t),
                cpu: 0,
                stack: stack.map(StackId),
                weight: 1_000_000,
            });
        }
    };
    add(Some(1), 5, 1);
    add(Some(3), 2, 1);
    add(Some(2), 3, 2);
    add(Some(4), 1, 1);
    add(Some(5), 2, 2);
    add(None, 1, 1);
    w.write_samples(&samples).unwrap();
    if !off_cpu.is_empty() {
        w.write_record(&Record::OffCpu(off_cpu.to_vec())).unwrap();
    }
    footer(&mut w);
    drop(w);
    DataFile::from_bytes(Path::new("sample.data"), bytes).unwrap()
}

/// The analysis every export takes.
pub fn analysis(file: &DataFile) -> Analysis {
    analyze(file, &lapse_export::needs()).unwrap()
}

/// Runs one export into memory.
pub fn export(file: &DataFile, format: lapse_export::Format) -> Vec<u8> {
    let a = analysis(file);
    let mut out = Vec::new();
    lapse_export::export(file, &a, format, &mut out).unwrap();
    out
}

/// `lapse report FILE --view VIEW --format json [--compensate]`, in memory.
pub fn report_json(
    file: &DataFile,
    view: lapse_report::View,
    compensate: bool,
) -> serde_json::Value {
    let q = lapse_analysis::Query {
        compensate,
        call_tree: view.needs_call_tree(),
        ..lapse_analysis::Query::default()
    };
    let a = analyze(file, &q).unwrap();
    let spec = lapse_report::ViewSpec::new(view, lapse_report::Format::Json);
    let v = lapse_report::build(file, &a, &q, &spec).unwrap();
    let opts = lapse_report::RenderOptions::plain(lapse_report::Format::Json);
    let mut out = Vec::new();
    lapse_report::render(&mut out, file, &a, &v, &opts).unwrap();
    serde_json::from_slice(&out).unwrap()
}

/// Rows of a JSON report keyed by `key` columns, keeping only `keep` columns.
pub fn rows_by(
    doc: &serde_json::Value,
    key: &[&str],
    keep: &dyn Fn(&str) -> bool,
) -> std::collections::BTreeMap<String, serde_json::Map<String, serde_json::Value>> {
    doc["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let k: Vec<String> = key.iter().map(|k| r[*k].to_string()).collect();
            let m = r
                .as_object()
                .unwrap()
                .iter()
                .filter(|(c, _)| keep(c))
                .map(|(c, v)| (c.clone(), v.clone()))
                .collect();
            (k.join("/"), m)
        })
        .collect()
}
