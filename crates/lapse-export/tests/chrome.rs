//! Chrome traces: the instrumentation export imported again with
//! `lapse_import` (the code behind `lapse import`) must report the same
//! values; the sampling export must attach every sample's stack.

mod common;

use std::path::Path;

use lapse_data::DataFile;
use lapse_export::Format;
use lapse_report::View;
use serde_json::Value;

fn round_trip(file: &DataFile) -> DataFile {
    let trace = common::export(file, Format::Chrome);
    let imported = lapse_import::import(&trace, "export.json").unwrap();
    assert_eq!(imported.unmatched_ends, 0);
    let mut bytes = Vec::new();
    imported.write(&mut bytes).unwrap();
    DataFile::from_bytes(Path::new("imported.data"), bytes).unwrap()
}

/// Values that survive a trace: everything but addresses and source lines,
/// which a Chrome trace does not carry.
fn comparable(c: &str) -> bool {
    !matches!(c, "address" | "source_file" | "line")
}

#[test]
fn instrumentation_round_trips_through_import_with_equal_values() {
    let file = common::instr_file();
    let back = round_trip(&file);
    for (view, key) in [
        (View::Functions, &["function", "module"][..]),
        (View::Modules, &["module"][..]),
        (View::Threads, &["pid", "tid"][..]),
    ] {
        let want = common::report_json(&file, view, false);
        let got = common::report_json(&back, view, false);
        let (want_rows, got_rows) = (
            common::rows_by(&want, key, &comparable),
            common::rows_by(&got, key, &comparable),
        );
        assert!(!want_rows.is_empty());
        for (k, w) in &want_rows {
            let g = got_rows
                .get(k)
                .unwrap_or_else(|| panic!("{view:?}: no row {k}"));
            for (col, v) in w {
                if view == View::Modules && col == "build_id" {
                    continue;
                }
                assert_eq!(g.get(col), Some(v), "{view:?} {k} {col}");
            }
        }
        assert_eq!(want_rows.len(), got_rows.len(), "{view:?}");
        for total in ["elapsed_inclusive_ns", "application_inclusive_ns"] {
            assert_eq!(want["session"][total], got["session"][total], "{total}");
        }
    }
    // The hand-checked numbers, to be sure the comparison compared something.
    let got = common::report_json(&back, View::Functions, false);
    let rows = common::rows_by(&got, &["function"], &comparable);
    assert_eq!(rows["\"main\""]["application_inclusive_ns"], 78_000);
    assert_eq!(rows["\"work\""]["open_calls"], 1);
    assert_eq!(got["session"]["elapsed_inclusive_ns"], 150_000);
}

#[test]
fn instrumentation_trace_is_a_nested_timeline_with_off_cpu_instants() {
    let file = common::instr_file();
    let doc: Value = serde_json::from_slice(&common::export(&file, Format::Chrome)).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let of = |tid: u64, ph: &str| -> Vec<&Value> {
        events
            .iter()
            .filter(|e| e["tid"] == tid && e["ph"] == ph)
            .collect()
    };
    // Thread 1: 4 calls, each B with its E; thread 2: 2 calls, the open one has no E.
    assert_eq!((of(1, "B").len(), of(1, "E").len()), (4, 4));
    assert_eq!((of(2, "B").len(), of(2, "E").len()), (2, 1));
    let first = of(1, "B")[0];
    assert_eq!(first["name"], "main");
    assert_eq!(first["cat"], "/usr/bin/app");
    assert_eq!(first["ts"], 10.0);
    let outs: Vec<f64> = of(1, "i")
        .iter()
        .filter(|e| e["name"] == "lapse:switch_out")
        .map(|e| e["ts"].as_f64().unwrap())
        .collect();
    assert_eq!(outs, [0.0, 25.0, 100.0]);
    let names: Vec<&Value> = events.iter().filter(|e| e["ph"] == "M").collect();
    assert!(names.iter().any(|e| e["args"]["name"] == "worker"));
}

#[test]
fn sampling_trace_attaches_a_stack_to_every_sample() {
    let file = common::sample_file();
    let doc: Value = serde_json::from_slice(&common::export(&file, Format::Chrome)).unwrap();
    let samples: Vec<&Value> = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "sample")
        .collect();
    assert_eq!(samples.len(), 14);
    let frames = doc["stackFrames"].as_object().unwrap();
    // Walk a sample's stack through the parents.
    let stack_of = |e: &Value| -> Vec<String> {
        let mut out = Vec::new();
        let mut id = e["sf"].to_string();
        while let Some(f) = frames.get(&id) {
            out.push(f["name"].as_str().unwrap().to_owned());
            match f.get("parent") {
                Some(p) => id = p.as_str().unwrap().to_owned(),
                None => break,
            }
        }
        out.reverse();
        out
    };
    assert_eq!(stack_of(samples[0]), ["main", "hot"]);
    assert_eq!(samples[0]["name"], "hot");
    let inl = samples.iter().filter(|e| e["name"] == "inl").count();
    assert_eq!(inl, 2);
    let unknown: Vec<&&Value> = samples
        .iter()
        .filter(|e| e["name"] == "[unknown]")
        .collect();
    assert_eq!(unknown.len(), 1);
    assert_eq!(stack_of(unknown[0]), ["[unknown]"]);
}
