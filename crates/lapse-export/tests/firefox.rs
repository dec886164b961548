//! Firefox Profiler files read back as the profiler reads them: each
//! sample's stack through stackTable → frameTable → funcTable → stringArray,
//! its weight and CPU delta; the totals must be the report's values.

mod common;

use std::collections::HashMap;

use lapse_export::Format;
use serde_json::Value;

struct Thread {
    name: String,
    /// (time in ms, stack names outermost first, weight, CPU delta in µs)
    samples: Vec<(f64, Vec<String>, i64, i64)>,
}

fn threads(doc: &Value) -> Vec<Thread> {
    let meta = &doc["meta"];
    assert!(meta["version"].as_u64().unwrap() >= 24);
    assert!(meta["interval"].is_number());
    assert!(meta["categories"].as_array().unwrap().len() > 1);
    doc["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let strings: Vec<&str> = t["stringArray"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap())
                .collect();
            let func_name =
                |f: usize| strings[t["funcTable"]["name"][f].as_u64().unwrap() as usize];
            let stack_names = |mut s: Value| {
                let mut names = Vec::new();
                while let Some(i) = s.as_u64() {
                    let i = i as usize;
                    let frame = t["stackTable"]["frame"][i].as_u64().unwrap() as usize;
                    let func = t["frameTable"]["func"][frame].as_u64().unwrap() as usize;
                    names.push(func_name(func).to_owned());
                    s = t["stackTable"]["prefix"][i].clone();
                }
                names.reverse();
                names
            };
            let s = &t["samples"];
            let n = s["length"].as_u64().unwrap() as usize;
            let mut time = 0.0;
            let samples = (0..n)
                .map(|i| {
                    time += s["timeDeltas"][i].as_f64().unwrap();
                    let weight = s["weight"].get(i).and_then(Value::as_i64).unwrap_or(1);
                    let cpu = s["threadCPUDelta"]
                        .get(i)
                        .and_then(Value::as_i64)
                        .unwrap_or(0);
                    (time, stack_names(s["stack"][i].clone()), weight, cpu)
                })
                .collect();
            Thread {
                name: t["name"].as_str().unwrap().to_owned(),
                samples,
            }
        })
        .collect()
}

#[test]
fn instrumentation_intervals_weigh_their_microseconds() {
    let file = common::instr_file();
    let doc: Value = serde_json::from_slice(&common::export(&file, Format::Firefox)).unwrap();
    assert_eq!(doc["meta"]["interval"], 0.001, "1 µs in ms");
    let threads = threads(&doc);
    assert_eq!(threads.len(), 2);
    assert_eq!(threads[1].name, "worker");
    let mut own: HashMap<String, i64> = HashMap::new();
    for (i, t) in threads.iter().enumerate() {
        let total: i64 = t.samples.iter().map(|s| s.2).sum();
        assert_eq!(total, [100, 50][i], "thread {} µs", t.name);
        for (_, stack, w, _) in &t.samples {
            let leaf = stack.last().cloned().unwrap_or_else(|| "(empty)".into());
            *own.entry(leaf).or_default() += w;
        }
    }
    assert_eq!(own["main"], 40);
    assert_eq!(own["work"], 34);
    assert_eq!(own["helper"], 50);
    assert_eq!(own["(empty)"], 26);
    // Stacks are real call paths.
    let t1 = &threads[0].samples;
    assert!(t1.iter().any(|s| s.1 == ["main", "work", "work"]));
    // The sample after [20, 30] µs (off the CPU at 25–27) says 8 µs of CPU
    // were used (the exact rule); the one after [30, 40] says 10 µs were.
    let at = |ms: f64| t1.iter().find(|s| (s.0 - ms).abs() < 1e-9).unwrap();
    assert_eq!(at(0.030).3, 8);
    assert_eq!(at(0.040).3, 10);
    // The off-CPU period is an interval marker, 25–27 µs, on thread 1 only.
    let markers = &doc["threads"][0]["markers"];
    let strings = doc["threads"][0]["stringArray"].as_array().unwrap();
    assert_eq!(markers["length"], 1);
    assert_eq!(
        strings[markers["name"][0].as_u64().unwrap() as usize],
        "off-CPU"
    );
    let close = |v: &Value, ms: f64| (v.as_f64().unwrap() - ms).abs() < 1e-9;
    assert!(close(&markers["startTime"][0], 0.025) && close(&markers["endTime"][0], 0.027));
    assert_eq!(doc["threads"][1]["markers"]["length"], 0);
}

#[test]
fn sampling_keeps_every_sample_with_its_stack() {
    let file = common::sample_file();
    let doc: Value = serde_json::from_slice(&common::export(&file, Format::Firefox)).unwrap();
    assert_eq!(doc["meta"]["interval"], 1.0, "1 ms period");
    let threads = threads(&doc);
    let all: Vec<&(f64, Vec<String>, i64, i64)> =
        threads.iter().flat_map(|t| t.samples.iter()).collect();
    assert_eq!(all.len(), 14);
    let count = |path: &[&str]| all.iter().filter(|s| s.1 == path).count();
    assert_eq!(count(&["main", "hot"]), 5);
    assert_eq!(count(&["main", "hot", "memcpy"]), 2);
    assert_eq!(count(&["main", "cold", "inl"]), 2);
    assert_eq!(count(&["[unknown]"]), 1);
    assert!(all.iter().all(|s| s.3 == 1000), "1 ms of CPU per sample");
}

/// Makes the profiler's own writer's "Other" categories past the first one
/// (its category for frames with no module) the default category 0, as
/// lapse writes them.
fn fold_other_categories(doc: &mut Value) {
    let cats = doc["meta"]["categories"].as_array_mut().unwrap();
    let extra: Vec<u64> = (1..cats.len() as u64)
        .filter(|&i| cats[i as usize]["name"] == "Other")
        .collect();
    for &i in extra.iter().rev() {
        cats.remove(i as usize);
    }
    let new_index = |c: u64| {
        if extra.contains(&c) {
            0
        } else {
            c - extra.iter().filter(|&&e| e < c).count() as u64
        }
    };
    for t in doc["threads"].as_array_mut().unwrap() {
        for c in t["frameTable"]["category"].as_array_mut().unwrap() {
            *c = new_index(c.as_u64().unwrap()).into();
        }
    }
}

/// The two small recordings give, value for value (integers stay integers,
/// floats floats), the document `fxprof-processed-profile` 0.8.1 (the crate
/// samply writes with, which lapse used before writing the format itself)
/// wrote for them: `tests/data/firefox-fxprof-*.json`. (One CPU delta of the
/// instrumentation document was changed by hand from 0 to 8 µs when the
/// exact application rule became the default: the crate wrote what lapse
/// gave it.)
#[test]
fn same_document_as_the_fxprof_crate_wrote() {
    for (what, file, golden) in [
        (
            "instrumentation",
            common::instr_file(),
            include_str!("data/firefox-fxprof-instr.json"),
        ),
        (
            "sampling",
            common::sample_file(),
            include_str!("data/firefox-fxprof-sample.json"),
        ),
    ] {
        let ours: Value = serde_json::from_slice(&common::export(&file, Format::Firefox)).unwrap();
        let mut theirs: Value = serde_json::from_str(golden).unwrap();
        fold_other_categories(&mut theirs);
        assert_eq!(ours, theirs, "{what}");
    }
}

/// A recording whose columns outgrow every buffer: each thread's columns
/// have one entry per sample, and nothing of one thread leaks into the next.
#[test]
fn large_threads_keep_their_own_columns() {
    use lapse_data::*;
    let mut bytes = Vec::new();
    let mut w = DataWriter::new(&mut bytes).unwrap();
    let start = Timestamp::from_nanos(common::START);
    w.write_record(&Record::Session(SessionHeader {
        command: vec!["./big".into()],
        start_unix_ns: 0,
        start,
        clock: "monotonic".into(),
        host: String::new(),
        method: Method::Instrumentation,
        probe_cost_ns: 0.0,
        os_events: vec![],
        sample_event: None,
        sample_period: None,
        sample_period_is_time: false,
        lapse_version: "test".into(),
        notes: vec![],
        tsc: None,
    }))
    .unwrap();
    w.write_record(&Record::Module(ModuleInfo {
        id: ModuleId(0),
        path: "/big".into(),
        build_id: None,
    }))
    .unwrap();
    let functions = (0..3)
        .map(|i| FunctionInfo {
            id: FunctionId(i),
            module: ModuleId(0),
            address: 0x100 * u64::from(i),
            name: format!("f{i}"),
            source_file: None,
            line: None,
        })
        .collect();
    w.write_record(&Record::Functions(functions)).unwrap();
    // Thread t: `calls` calls of f(t % 3), each 1.5 µs, 0.5 µs apart.
    let calls = [30_000u64, 20_000];
    for (t, &n) in calls.iter().enumerate() {
        let tid = t as u32 + 1;
        let f = FunctionId(tid % 3);
        let events: Vec<Event> = (0..n)
            .flat_map(|i| {
                let ts = common::START + i * 2000;
                [
                    Event {
                        ts: Timestamp::from_nanos(ts),
                        kind: EventKind::Enter,
                        function: f,
                    },
                    Event {
                        ts: Timestamp::from_nanos(ts + 1500),
                        kind: EventKind::Exit,
                        function: f,
                    },
                ]
            })
            .collect();
        for chunk in events.chunks(4096) {
            w.write_events(1, tid, chunk).unwrap();
        }
    }
    w.write_record(&Record::Footer(Footer::default())).unwrap();
    drop(w);
    let file = DataFile::from_bytes(std::path::Path::new("big.data"), bytes).unwrap();
    let doc: Value = serde_json::from_slice(&common::export(&file, Format::Firefox)).unwrap();
    let threads = threads(&doc);
    assert_eq!(threads.len(), 2);
    for (i, (t, &n)) in threads.iter().zip(&calls).enumerate() {
        let s = &doc["threads"][i]["samples"];
        for column in ["stack", "timeDeltas", "weight", "threadCPUDelta"] {
            assert_eq!(
                s[column].as_array().unwrap().len() as u64,
                s["length"].as_u64().unwrap()
            );
        }
        // One sample per call and one per gap but the first: 2n - 1 samples,
        // weighing (n - 1) × 2 µs + 1.5 µs, rounded with a carried remainder.
        assert_eq!(t.samples.len() as u64, 2 * n - 1);
        let total: i64 = t.samples.iter().map(|s| s.2).sum();
        assert_eq!(total as u64, (n - 1) * 2 + 1);
        let name = format!("f{}", i + 1);
        assert!(t.samples.iter().step_by(2).all(|s| s.1 == [name.as_str()]));
        assert!(t.samples.iter().skip(1).step_by(2).all(|s| s.1.is_empty()));
        // Last sample: the last call, at 2(n - 1) µs.
        let last = t.samples.last().unwrap();
        assert!((last.0 - (n - 1) as f64 * 0.002).abs() < 1e-6, "{}", last.0);
    }
}
