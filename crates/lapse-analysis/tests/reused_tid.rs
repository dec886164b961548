//! A thread id the kernel handed out again (#31 item 16): two threads that
//! had one id at different times are two thread rows, each with its own
//! timeline, through the data file and the analysis. Times are
//! nanoseconds; the expected values are worked out in the comments.

use std::path::Path;

use lapse_analysis::run::{analyze, Analysis, Query};
use lapse_analysis::values::TimeValue;
use lapse_data::*;

fn at(ns: u64) -> Timestamp {
    Timestamp::from_nanos(ns)
}

fn call(enter: u64, exit: u64) -> [Event; 2] {
    let e = |ts, kind| Event {
        ts: at(ts),
        kind,
        function: FunctionId(0),
    };
    [e(enter, EventKind::Enter), e(exit, EventKind::Exit)]
}

/// Process 1 with thread 7 twice: its first thread from 100 to 400 with a
/// call of f from 200 to 300, then (serial 1) from 1,000 to 2,000 with a
/// call from 1,200 to 1,700, switched out 1,300 to 1,400.
fn recording() -> DataFile {
    let mut w = DataWriter::new(Vec::new()).unwrap();
    w.write_record(&Record::Session(SessionHeader::example(
        Method::Instrumentation,
    )))
    .unwrap();
    w.write_record(&Record::Module(ModuleInfo {
        id: ModuleId(0),
        path: "/app".into(),
        build_id: None,
    }))
    .unwrap();
    w.write_record(&Record::Functions(vec![FunctionInfo {
        id: FunctionId(0),
        module: ModuleId(0),
        address: 0x1000,
        name: "f".into(),
        source_file: None,
        line: None,
    }]))
    .unwrap();
    for (serial, start, end, name) in [(0, 100, 400, "first"), (1, 1_000, 2_000, "second")] {
        w.write_record(&Record::Thread(ThreadInfo {
            pid: 1,
            tid: 7,
            serial,
            name: name.into(),
            start: Some(at(start)),
            end: Some(at(end)),
        }))
        .unwrap();
    }
    w.write_thread_events(ThreadKey::new(1, 7), &call(200, 300))
        .unwrap();
    w.write_thread_events(ThreadKey::reused(1, 7, 1), &call(1_200, 1_700))
        .unwrap();
    w.write_record(&Record::OsEvents(OsEventBlock {
        pid: 1,
        tid: 7,
        serial: 1,
        events: vec![OsEvent {
            from: at(1_300),
            to: at(1_400),
            kind: OsEventKind::Switch,
        }],
    }))
    .unwrap();
    w.write_record(&Record::Footer(Footer {
        events: 4,
        ..Footer::default()
    }))
    .unwrap();
    DataFile::from_bytes(Path::new("reused.lapse"), w.into_inner()).unwrap()
}

#[test]
fn two_threads_with_one_id_are_two_rows_with_their_own_times() {
    let file = recording();
    let names: Vec<_> = file
        .threads
        .iter()
        .map(|t| (t.key(), &t.name[..]))
        .collect();
    assert_eq!(
        names,
        [
            (ThreadKey::new(1, 7), "first"),
            (ThreadKey::reused(1, 7, 1), "second")
        ]
    );
    let Ok(Analysis::Instr(r)) = analyze(&file, &Query::default()) else {
        panic!("an instrumentation analysis");
    };
    let rows: Vec<_> = r
        .acc
        .threads
        .iter()
        .map(|t| {
            let ns = |v| t.time[v].as_nanos_f64() as u64;
            (
                t.key(),
                t.calls,
                ns(TimeValue::ElapsedInclusive),
                ns(TimeValue::ApplicationInclusive),
            )
        })
        .collect();
    // The first: 100 to 400, 300 ns, all on the CPU. The second: 1,000 to
    // 2,000, 1,000 ns, of which 100 off the CPU. (One merged row would
    // have run 100 to 2,000 with two calls.)
    assert_eq!(
        rows,
        [
            (ThreadKey::new(1, 7), 1, 300, 300),
            (ThreadKey::reused(1, 7, 1), 1, 1_000, 900)
        ]
    );
}
