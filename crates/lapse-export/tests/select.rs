//! `lapse export`'s filters on the small instrumentation recording of
//! `common` (thread 1: main [10, 90] > work [20, 50] > work [30, 40], then
//! main > helper [60, 70]; times in µs), checked step by step by hand:
//! `--min-duration` drops short calls and keeps the others' exact times,
//! `--from/--to` cut calls to the window, `--function` keeps its subtrees.

mod common;

use std::time::Duration;

use common::at;
use lapse_analysis::Query;
use lapse_data::{DataFile, FunctionId};
use lapse_export::timeline::{self, Step, Timing};
use lapse_export::{export_with, ExportOptions, Format, Selection};
use regex::Regex;

/// Thread 1's steps as (µs, "+name" / "-name" / "end"), and the sum of
/// their application nanoseconds.
fn steps(file: &DataFile, sel: &Selection) -> (Vec<(u64, String)>, u64) {
    let thread = sel
        .threads(file)
        .into_iter()
        .find(|t| t.tid == 1)
        .expect("thread 1");
    let name = |f: FunctionId| file.functions[f.0 as usize].name.clone();
    let mut out = Vec::new();
    let mut application = 0;
    let mut nesting = timeline::Nesting::default();
    let walked = timeline::walk(
        file,
        &thread,
        &mut nesting,
        true,
        Timing::default(),
        sel,
        |m, step| -> Result<(), ()> {
            let us = m.at.since(at(0)) / 1000;
            application += m.application_ns;
            out.push((
                us,
                match step {
                    Step::Open(f) => format!("+{}", name(f)),
                    Step::Close(f) => format!("-{}", name(f)),
                    Step::End => "end".into(),
                },
            ));
            Ok(())
        },
    );
    assert!(walked.is_ok());
    (out, application)
}

fn list(steps: &[(u64, &str)]) -> Vec<(u64, String)> {
    steps.iter().map(|&(t, s)| (t, s.to_owned())).collect()
}

fn query(function: Option<&str>, from_us: Option<u64>, to_us: Option<u64>) -> Query {
    Query {
        function: function.map(|f| Regex::new(f).unwrap()),
        from_s: from_us.map(|us| us as f64 / 1e6),
        to_s: to_us.map(|us| us as f64 / 1e6),
        ..Query::default()
    }
}

#[test]
fn min_duration_drops_short_calls_and_keeps_the_others_exact() {
    let file = common::instr_file();
    let (all, all_app) = steps(&file, &Selection::all());
    let sel = Selection::new(&file, &Query::default(), Some(Duration::from_micros(15)));
    let (thin, thin_app) = steps(&file, &sel);
    // work [30, 40] and helper [60, 70] last 10 µs: gone
    assert_eq!(
        thin,
        list(&[
            (10, "+main"),
            (20, "+work"),
            (50, "-work"),
            (90, "-main"),
            (100, "end")
        ])
    );
    assert_eq!(all.len(), 9);
    // The time of the dropped steps stays with the next one written.
    assert_eq!(thin_app, all_app);
    // A call exactly as long as the minimum stays.
    let sel = Selection::new(&file, &Query::default(), Some(Duration::from_micros(10)));
    assert_eq!(steps(&file, &sel).0, all);
}

#[test]
fn a_window_cuts_calls_to_it() {
    let file = common::instr_file();
    let sel = Selection::new(&file, &query(None, Some(25), Some(65)), None);
    assert_eq!(
        steps(&file, &sel).0,
        list(&[
            (25, "+main"),
            (25, "+work"),
            (30, "+work"),
            (40, "-work"),
            (50, "-work"),
            (60, "+helper"),
            (65, "-helper"),
            (65, "-main"),
        ])
    );
}

#[test]
fn function_keeps_the_subtrees_of_its_frames() {
    let file = common::instr_file();
    let sel = Selection::new(&file, &query(Some("^work$"), None, None), None);
    assert_eq!(
        steps(&file, &sel).0,
        list(&[
            (20, "+work"),
            (30, "+work"),
            (40, "-work"),
            (50, "-work"),
            (100, "end")
        ])
    );
    // The call-tree exports: work re-rooted, its call sites merged (thread
    // 1's main>work 20 µs exclusive and thread 2's open work 4 µs).
    let q = Query {
        call_tree: true,
        ..query(Some("^work$"), None, None)
    };
    let analysis = lapse_analysis::analyze(&file, &q).unwrap();
    let opts = ExportOptions {
        selection: Selection::new(&file, &q, None),
        ..ExportOptions::default()
    };
    let mut out = Vec::new();
    export_with(&file, &analysis, Format::Collapsed, opts, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text, "work 24000\nwork;work 10000\n");
}

#[test]
fn threads_and_processes_are_selected_by_id() {
    let file = common::instr_file();
    let q = Query {
        tids: vec![2],
        ..Query::default()
    };
    let sel = Selection::new(&file, &q, None);
    let tids: Vec<u32> = sel.threads(&file).iter().map(|t| t.tid).collect();
    assert_eq!(tids, [2]);
    let analysis = lapse_analysis::analyze(
        &file,
        &Query {
            call_tree: true,
            ..q.clone()
        },
    )
    .unwrap();
    let opts = ExportOptions {
        selection: sel,
        ..ExportOptions::default()
    };
    let mut out = Vec::new();
    export_with(&file, &analysis, Format::Chrome, opts, &mut out).unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    assert!(events
        .iter()
        .filter(|e| e["ph"] == "B")
        .all(|e| e["tid"] == 2));
    assert!(events.iter().any(|e| e["ph"] == "B"));
}

/// Every format of the sampling recording with `q` selecting.
fn sample_export(file: &DataFile, q: &Query, format: Format) -> Vec<u8> {
    let q = Query {
        call_tree: true,
        ..q.clone()
    };
    let analysis = lapse_analysis::analyze(file, &q).unwrap();
    let opts = ExportOptions {
        selection: Selection::new(file, &q, None),
        ..ExportOptions::default()
    };
    let mut out = Vec::new();
    export_with(file, &analysis, format, opts, &mut out).unwrap();
    out
}

#[test]
fn sampled_stacks_start_at_the_function_in_every_format() {
    let file = common::sample_file();
    let q = query(Some("^cold$"), None, None);
    let folded = String::from_utf8(sample_export(&file, &q, Format::Collapsed)).unwrap();
    assert_eq!(folded, "cold 3\ncold;inl 2\n");
    // The timelines: the 5 samples with cold on their stack, cut there.
    let chrome: serde_json::Value =
        serde_json::from_slice(&sample_export(&file, &q, Format::Chrome)).unwrap();
    let samples: Vec<&serde_json::Value> = chrome["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "sample")
        .collect();
    assert_eq!(samples.len(), 5);
    let frames = chrome["stackFrames"].as_object().unwrap();
    let roots: Vec<&serde_json::Value> = frames
        .values()
        .filter(|f| f.get("parent").is_none())
        .map(|f| &f["name"])
        .collect();
    assert_eq!(roots, ["cold"]);
    let speedscope: serde_json::Value =
        serde_json::from_slice(&sample_export(&file, &q, Format::Speedscope)).unwrap();
    let n: usize = speedscope["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["samples"].as_array().unwrap().len())
        .sum();
    assert_eq!(n, 5);
    for format in [
        Format::Firefox,
        Format::Perfetto,
        Format::Pprof,
        Format::Html,
    ] {
        let all = sample_export(&file, &Query::default(), format);
        let cut = sample_export(&file, &q, format);
        assert!(cut.len() < all.len(), "{format:?}");
    }
}
