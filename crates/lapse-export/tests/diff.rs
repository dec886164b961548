//! `lapse diff` on two small traces with hand-checked changes.
//!
//! base: main [0, 100 µs] calls work [10, 40] and helper [50, 60].
//! new:  main [0, 100 µs] calls work [10, 70] and fresh [80, 85].
//! Elapsed exclusive: work 30 → 60 µs (+100 %), main 60 → 35 (−41.7 %),
//! helper 10 → gone (−100 %), fresh new (5 µs, no base).

mod common;

use std::path::Path;

use lapse_data::DataFile;
use lapse_export::diff::{self, DiffOptions};
use lapse_report::{analyze, Format, Query, View};
use serde_json::Value;

fn trace_file(name: &str, trace: &str) -> DataFile {
    let imported = lapse_import::import(trace.as_bytes(), name).unwrap();
    let mut bytes = Vec::new();
    imported.write(&mut bytes).unwrap();
    DataFile::from_bytes(Path::new(name), bytes).unwrap()
}

const BASE: &str = r#"[
 {"ph":"X","name":"main","cat":"app","pid":1,"tid":1,"ts":0,"dur":100},
 {"ph":"X","name":"work","cat":"app","pid":1,"tid":1,"ts":10,"dur":30},
 {"ph":"X","name":"helper","cat":"app","pid":1,"tid":1,"ts":50,"dur":10}]"#;
const NEW: &str = r#"[
 {"ph":"X","name":"main","cat":"app","pid":7,"tid":7,"ts":0,"dur":100},
 {"ph":"X","name":"work","cat":"app","pid":7,"tid":7,"ts":10,"dur":60},
 {"ph":"X","name":"fresh","cat":"app","pid":7,"tid":7,"ts":80,"dur":5}]"#;

fn json(view: View, threshold: f64) -> Value {
    let (b, n) = (trace_file("base.json", BASE), trace_file("new.json", NEW));
    let (ba, na) = (
        analyze(&b, &Query::default()).unwrap(),
        analyze(&n, &Query::default()).unwrap(),
    );
    let opts = DiffOptions {
        view,
        threshold_pct: threshold,
        metric: None,
    };
    let d = diff::diff((&b, &ba), (&n, &na), &opts).unwrap();
    let mut out = Vec::new();
    diff::render(&mut out, &d, Format::Json).unwrap();
    serde_json::from_slice(&out).unwrap()
}

#[test]
fn functions_are_matched_by_name_and_ordered_by_change() {
    let doc = json(View::Functions, 0.0);
    assert_eq!(doc["schema"], "lapse-report/1");
    assert_eq!(doc["view"], "functions");
    let rows = doc["rows"].as_array().unwrap();
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["function"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["work", "main", "helper", "fresh"]);
    let work = &rows[0];
    assert_eq!(work["module"], "app");
    assert_eq!(work["base"]["elapsed_exclusive_ns"], 30_000);
    assert_eq!(work["new"]["elapsed_exclusive_ns"], 60_000);
    assert_eq!(work["delta"]["elapsed_exclusive_ns"], 30_000);
    assert_eq!(work["delta"]["calls"], 0);
    assert_eq!(work["change_pct"], 100.0);
    let main = &rows[1];
    assert_eq!(main["delta"]["elapsed_exclusive_ns"], -25_000);
    assert_eq!(main["delta"]["elapsed_inclusive_ns"], 0);
    let helper = &rows[2];
    assert!(helper["new"].is_null());
    assert_eq!(helper["delta"]["elapsed_exclusive_ns"], -10_000);
    assert_eq!(helper["change_pct"], -100.0);
    let fresh = &rows[3];
    assert!(fresh["base"].is_null());
    assert!(fresh["change_pct"].is_null());
}

#[test]
fn threshold_hides_small_relative_changes() {
    let doc = json(View::Functions, 50.0);
    let names: Vec<&str> = doc["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["function"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["work", "helper", "fresh"]);
}

#[test]
fn threads_match_across_runs_despite_new_pids() {
    let doc = json(View::Threads, 0.0);
    let rows = doc["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{doc}");
    assert_eq!(rows[0]["pid"], 7);
    assert_eq!(rows[0]["delta"]["elapsed_inclusive_ns"], 0);
}

#[test]
fn table_and_csv_show_the_same_rows() {
    let (b, n) = (trace_file("base.json", BASE), trace_file("new.json", NEW));
    let (ba, na) = (
        analyze(&b, &Query::default()).unwrap(),
        analyze(&n, &Query::default()).unwrap(),
    );
    let opts = DiffOptions {
        view: View::Functions,
        threshold_pct: 0.0,
        metric: None,
    };
    let d = diff::diff((&b, &ba), (&n, &na), &opts).unwrap();
    let mut table = Vec::new();
    diff::render(&mut table, &d, Format::Table).unwrap();
    let table = String::from_utf8(table).unwrap();
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].contains("base elapsed excl"), "{table}");
    assert!(
        lines[1].starts_with("work")
            && lines[1].contains("+30.0 µs")
            && lines[1].ends_with("+100.0%"),
        "{table}"
    );
    assert!(
        lines[4].starts_with("fresh") && lines[4].ends_with("new"),
        "{table}"
    );
    let mut csv = Vec::new();
    diff::render(&mut csv, &d, Format::Csv).unwrap();
    let csv = String::from_utf8(csv).unwrap();
    let head: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    assert!(head.contains(&"delta_elapsed_exclusive_ns"));
    let col = head
        .iter()
        .position(|h| *h == "delta_elapsed_exclusive_ns")
        .unwrap();
    let second: Vec<&str> = csv.lines().nth(2).unwrap().split(',').collect();
    assert_eq!(second[0], "main");
    assert_eq!(second[col], "-25000");
}

#[test]
fn refuses_to_compare_instrumentation_with_sampling() {
    let (i, s) = (common::instr_file(), common::sample_file());
    let err = diff::check_methods(&i, &s).unwrap_err().to_string();
    assert!(
        err.contains("cannot compare an instrumentation profile (instr.data) with a sampling profile (sample.data)"),
        "{err}"
    );
    assert!(!err.contains('\n'));
}
