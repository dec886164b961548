//! Sampling's per-thread stream (`timeline::for_each_thread`), which the
//! timeline exports read one thread at a time: every sample comes back on
//! its own thread, none lost, in time order, with equal timestamps in file
//! order, even when threads are interleaved across chunks and a thread's
//! chunks are out of time order.

mod common;

use std::convert::Infallible;
use std::path::Path;

use lapse_data::*;
use lapse_export::select::Selection;
use lapse_export::timeline::{self, SampleIndex};
use lapse_export::Format;

/// Threads and how many samples each has.
const THREADS: [(ThreadKey, u64); 4] = [
    (ThreadKey::new(2, 1), 7),
    (ThreadKey::new(1, 2), 500),
    (ThreadKey::new(1, 3), 30_000),
    (ThreadKey::new(1, 1), 1_000),
];

/// Threads from (pid, tid) pairs, to write orders briefly.
fn keys(pairs: &[(u32, u32)]) -> Vec<ThreadKey> {
    pairs
        .iter()
        .map(|&(pid, tid)| ThreadKey::new(pid, tid))
        .collect()
}

/// Group sizes to read with: the default (every thread here in one group);
/// 1,600 samples, so 1.1 and 1.2 are read together and 1.3 alone (larger
/// than a group); and 1, every thread alone.
const GROUPS: [Option<u64>; 3] = [None, Some(1_600), Some(1)];

/// The recording: every chunk mixes all threads; chunks go back in time
/// (the last chunk holds each thread's earliest samples), and each thread
/// has runs of equal timestamps that span chunks. A sample's `weight` is its
/// position in the file, so order can be checked exactly.
fn recording(threads: &[(ThreadKey, u64)]) -> (DataFile, Vec<Sample>) {
    let mut per_thread: Vec<Vec<Sample>> = threads
        .iter()
        .map(|&(ThreadKey { pid, tid, .. }, n)| {
            (0..n)
                .map(|i| Sample {
                    pid,
                    tid,
                    serial: 0,
                    // Descending, three samples per timestamp.
                    ts: Timestamp::from_nanos(1_000_000 + (n - i) / 3 * 1000),
                    cpu: tid,
                    stack: None,
                    weight: 0,
                })
                .collect()
        })
        .collect();
    // Round robin over the threads, so every chunk holds some of each.
    let mut file_order = Vec::new();
    while per_thread.iter().any(|t| !t.is_empty()) {
        for t in &mut per_thread {
            let take = t.len().min(1 + t.len() / 50);
            file_order.extend(t.drain(..take));
        }
    }
    for (i, s) in file_order.iter_mut().enumerate() {
        s.weight = i as u64;
    }
    let mut bytes = Vec::new();
    let mut w = DataWriter::new(&mut bytes).unwrap();
    w.write_record(&Record::Session(SessionHeader {
        command: vec!["./app".into()],
        start_unix_ns: 0,
        start: Timestamp::from_nanos(0),
        clock: "monotonic".into(),
        host: "test".into(),
        method: Method::Sampling,
        probe_cost_ns: 0.0,
        os_events: vec![],
        sample_event: Some("cpu-clock".into()),
        sample_period: Some(1_000_000),
        sample_period_is_time: true,
        lapse_version: "test".into(),
        notes: vec![],
        tsc: None,
    }))
    .unwrap();
    for chunk in file_order.chunks(512) {
        w.write_samples(chunk).unwrap();
    }
    drop(w);
    let file = DataFile::from_bytes(Path::new("threads.data"), bytes).unwrap();
    assert!(file.sample_chunks.len() > 4, "{}", file.sample_chunks.len());
    (file, file_order)
}

/// What a thread should get: its samples in file order, stably sorted by time.
fn expected(all: &[Sample], thread: ThreadKey) -> Vec<Sample> {
    let mut v: Vec<Sample> = all.iter().filter(|s| s.key() == thread).copied().collect();
    v.sort_by_key(|s| s.ts);
    v
}

#[test]
fn each_thread_gets_all_its_samples_in_time_order() {
    let (file, all) = recording(&THREADS);
    let mut seen: Vec<ThreadKey> = Vec::new();
    let Ok(()) = timeline::for_each_thread(
        &file,
        &Selection::all(),
        |thread, run| -> Result<(), Infallible> {
            assert_eq!(run, expected(&all, thread), "thread {thread}");
            // Equal timestamps keep file order, so (ts, position) ascends strictly.
            assert!(run
                .windows(2)
                .all(|p| (p[0].ts, p[0].weight) < (p[1].ts, p[1].weight)));
            seen.push(thread);
            Ok(())
        },
    );
    assert_eq!(
        seen,
        keys(&[(1, 1), (1, 2), (1, 3), (2, 1)]),
        "(pid, tid) order"
    );
}

#[test]
fn any_group_size_and_thread_order_and_threads_without_samples() {
    let (file, all) = recording(&THREADS);
    for group in GROUPS {
        let mut index = SampleIndex::new(&file, &Selection::all());
        if let Some(n) = group {
            index = index.group_samples(n);
        }
        let sorted: Vec<ThreadKey> = index.threads().collect();
        assert_eq!(sorted, keys(&[(1, 1), (1, 2), (1, 3), (2, 1)]));
        for order in [
            sorted.clone(),
            keys(&[(2, 1), (9, 9), (1, 3), (1, 1), (1, 2)]),
            keys(&[(1, 2), (1, 1)]),
        ] {
            let mut seen = Vec::new();
            let Ok(()) =
                index.for_each_thread(&file, &order, |thread, run| -> Result<(), Infallible> {
                    assert_eq!(run, expected(&all, thread), "{group:?}: {thread}");
                    seen.push(thread);
                    Ok(())
                });
            assert_eq!(seen, order, "group {group:?}");
        }
    }
}

#[test]
fn an_instrumentation_recording_has_no_samples() {
    let file = common::instr_file();
    let mut calls = 0;
    let Ok(()) =
        timeline::for_each_thread(&file, &Selection::all(), |_, _| -> Result<(), Infallible> {
            calls += 1;
            Ok(())
        });
    assert_eq!(calls, 0);
}

#[test]
fn timeline_exports_keep_every_sample_on_its_thread() {
    let (file, _) = recording(&THREADS);
    let doc: serde_json::Value =
        serde_json::from_slice(&common::export(&file, Format::Speedscope)).unwrap();
    let counts: Vec<(String, usize)> = doc["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let n = p["samples"].as_array().unwrap().len();
            assert_eq!(p["weights"].as_array().unwrap().len(), n);
            assert_eq!(p["endValue"], n as u64 * 1_000_000, "1 ms a sample");
            (p["name"].as_str().unwrap().to_string(), n)
        })
        .collect();
    let want: Vec<(String, usize)> = [(1, 1, 1_000), (1, 2, 500), (1, 3, 30_000), (2, 1, 7)]
        .iter()
        .map(|&(pid, tid, n)| (format!("thread {tid} (pid {pid})"), n))
        .collect();
    assert_eq!(counts, want);

    let doc: serde_json::Value =
        serde_json::from_slice(&common::export(&file, Format::Chrome)).unwrap();
    let mut last: Option<(u64, u64, f64)> = None;
    let mut n = 0;
    for e in doc["traceEvents"].as_array().unwrap() {
        if e["cat"] != "sample" {
            continue;
        }
        let key = (
            e["pid"].as_u64().unwrap(),
            e["tid"].as_u64().unwrap(),
            e["ts"].as_f64().unwrap(),
        );
        // Samples grouped by thread in (pid, tid) order, each in time order.
        assert!(last.is_none_or(|l| l <= key), "{last:?} then {key:?}");
        last = Some(key);
        n += 1;
    }
    assert_eq!(n, 31_507);
}
