//! `lapse diff` on two small traces with hand-checked changes.
//!
//! base: main [0, 100 µs] calls work [10, 40] and helper [50, 60].
//! new:  main [0, 100 µs] calls work [10, 70] and fresh [80, 85].
//! Elapsed exclusive: work 30 → 60 µs (+100 %), main 60 → 35 (−41.7 %),
//! helper 10 → gone (−100 %), fresh new (5 µs, no base).
//! Both totals are 100 µs (main's inclusive time): shares are the values in
//! percent, work 30 % → 60 % (+30 points), main 60 → 35 (−25), helper
//! 10 → 0 (−10), fresh 0 → 5 (+5).
//!
//! slow: base on a machine twice as busy, every interval twice as long:
//! total 200 µs (+100 %, beyond the 10 % noise), the same shares, and with
//! normalization (× 0.5) no change at all.
//! busy: twice as busy *and* work grew: main [0, 200] calls work [20, 140]
//! and helper [150, 160]. Normalized (× 0.5): work 30 → 60 µs (+100 %),
//! main 60 → 35 (−41.7 %), helper 10 → 5 (−50 %); shares 60, 35, 5.

use std::path::Path;

use lapse_analysis::{analyze, Query};
use lapse_data::{DataFile, DataWriter, Footer, Method, Record, SessionHeader};
use lapse_report::diff::{self, DiffOptions};
use lapse_report::{Format, View};
use serde_json::Value;

fn trace_file(name: &str, trace: &str) -> DataFile {
    let imported = lapse_import::import(trace.as_bytes(), name).unwrap();
    let mut bytes = Vec::new();
    imported.write(&mut bytes).unwrap();
    DataFile::from_bytes(Path::new(name), bytes).unwrap()
}

/// A sampling recording with nothing in it but its header.
fn sampling_file(name: &str) -> DataFile {
    let mut bytes = Vec::new();
    let mut w = DataWriter::new(&mut bytes).unwrap();
    w.write_record(&Record::Session(SessionHeader::example(Method::Sampling)))
        .unwrap();
    w.write_record(&Record::Footer(Footer::default())).unwrap();
    drop(w);
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

const SLOW: &str = r#"[
 {"ph":"X","name":"main","cat":"app","pid":9,"tid":9,"ts":0,"dur":200},
 {"ph":"X","name":"work","cat":"app","pid":9,"tid":9,"ts":20,"dur":60},
 {"ph":"X","name":"helper","cat":"app","pid":9,"tid":9,"ts":100,"dur":20}]"#;
const BUSY: &str = r#"[
 {"ph":"X","name":"main","cat":"app","pid":9,"tid":9,"ts":0,"dur":200},
 {"ph":"X","name":"work","cat":"app","pid":9,"tid":9,"ts":20,"dur":120},
 {"ph":"X","name":"helper","cat":"app","pid":9,"tid":9,"ts":150,"dur":10}]"#;

fn opts(view: View, threshold_pct: f64, normalize: bool) -> DiffOptions {
    DiffOptions {
        view,
        threshold_pct,
        metric: None,
        normalize,
    }
}

fn render(base: &str, new: &str, opts: &DiffOptions, format: Format) -> String {
    let (b, n) = (trace_file("base.json", base), trace_file("new.json", new));
    let (ba, na) = (
        analyze(&b, &Query::default()).unwrap(),
        analyze(&n, &Query::default()).unwrap(),
    );
    let d = diff::diff((&b, &ba), (&n, &na), opts).unwrap();
    let mut out = Vec::new();
    lapse_report::diff_render::render(&mut out, &d, format).unwrap();
    String::from_utf8(out).unwrap()
}

fn json_of(base: &str, new: &str, opts: &DiffOptions) -> Value {
    serde_json::from_str(&render(base, new, opts, Format::Json)).unwrap()
}

fn json(view: View, threshold: f64) -> Value {
    json_of(BASE, NEW, &opts(view, threshold, false))
}

fn row<'a>(doc: &'a Value, function: &str) -> &'a Value {
    doc["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["function"] == function)
        .unwrap_or_else(|| panic!("no row {function}: {doc}"))
}

/// A table line's cells (columns are two or more spaces apart).
fn cells(line: &str) -> Vec<&str> {
    line.split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect()
}

/// The last three cells: base share, new share, share change.
fn shares(line: &str) -> Vec<&str> {
    let c = cells(line);
    c[c.len().saturating_sub(3)..].to_vec()
}

fn close(v: &Value, want: f64) -> bool {
    v.as_f64().is_some_and(|v| (v - want).abs() < 1e-9)
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
    let o = opts(View::Functions, 0.0, false);
    let table = render(BASE, NEW, &o, Format::Table);
    // Header lines, a blank line, then the grid.
    let grid: Vec<&str> = table
        .lines()
        .skip_while(|l| !l.is_empty())
        .skip(1)
        .collect();
    assert!(grid[0].contains("base elapsed excl"), "{table}");
    assert!(grid[1].starts_with("total"), "{table}");
    assert!(
        grid[2].starts_with("work")
            && grid[2].contains("+30.0 µs")
            && grid[2].contains("+100.0%")
            && shares(grid[2]) == ["30.00%", "60.00%", "+30.00 pts"],
        "{table}"
    );
    assert!(
        grid[5].starts_with("fresh")
            && cells(grid[5]).contains(&"new")
            && grid[5].ends_with("+5.00 pts"),
        "{table}"
    );
    let csv = render(BASE, NEW, &o, Format::Csv);
    let head: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    assert!(head.contains(&"delta_elapsed_exclusive_ns"));
    assert!(head.ends_with(&[
        "change_pct",
        "base_share_pct",
        "new_share_pct",
        "share_change_points"
    ]));
    let col = head
        .iter()
        .position(|h| *h == "delta_elapsed_exclusive_ns")
        .unwrap();
    let second: Vec<&str> = csv.lines().nth(2).unwrap().split(',').collect();
    assert_eq!(second[0], "main");
    assert_eq!(second[col], "-25000");
    assert_eq!(second[second.len() - 3..], ["60", "35", "-25"]);
}

#[test]
fn totals_row_and_shares_of_each_runs_total() {
    let doc = json(View::Functions, 0.0);
    assert_eq!(doc["normalized"], false);
    assert!(doc["scale"].is_null());
    assert!(doc["warning"].is_null(), "equal totals: no warning");
    let t = &doc["totals"];
    assert_eq!(t["base"]["elapsed_exclusive_ns"], 100_000);
    assert_eq!(t["new"]["elapsed_exclusive_ns"], 100_000);
    assert_eq!(t["delta"]["elapsed_exclusive_ns"], 0);
    assert_eq!(t["change_pct"], 0.0);
    assert_eq!(t["base_share_pct"], 100.0);
    assert_eq!(t["share_change_points"], 0.0);
    for (f, base, new) in [
        ("work", 30.0, 60.0),
        ("main", 60.0, 35.0),
        ("helper", 10.0, 0.0),
        ("fresh", 0.0, 5.0),
    ] {
        let r = row(&doc, f);
        assert!(close(&r["base_share_pct"], base), "{f}: {r}");
        assert!(close(&r["new_share_pct"], new), "{f}: {r}");
        assert!(close(&r["share_change_points"], new - base), "{f}: {r}");
    }
    // Threads: one thread, all of each run's total.
    let doc = json(View::Threads, 0.0);
    assert_eq!(doc["totals"]["base"]["elapsed_inclusive_ns"], 100_000);
    assert!(close(&doc["rows"][0]["new_share_pct"], 100.0), "{doc}");
}

#[test]
fn a_uniformly_slower_run_keeps_its_shares_and_normalizes_to_no_change() {
    let raw = json_of(BASE, SLOW, &opts(View::Functions, 0.0, false));
    assert_eq!(raw["totals"]["new"]["elapsed_exclusive_ns"], 200_000);
    assert_eq!(raw["totals"]["change_pct"], 100.0);
    let warning = raw["warning"].as_str().expect("totals differ by 100 %");
    assert!(
        warning.contains("the totals differ by +100.0%"),
        "{warning}"
    );
    assert!(warning.contains("--normalize"), "{warning}");
    for f in ["main", "work", "helper"] {
        let r = row(&raw, f);
        assert_eq!(r["change_pct"], 100.0, "{f}: raw values doubled");
        assert!(close(&r["share_change_points"], 0.0), "{f}: {r}");
    }
    let norm = json_of(BASE, SLOW, &opts(View::Functions, 0.0, true));
    assert_eq!(norm["normalized"], true);
    assert_eq!(norm["scale"], 0.5);
    assert!(norm["warning"].as_str().unwrap().contains("share"));
    for f in ["main", "work", "helper"] {
        assert_eq!(row(&norm, f)["change_pct"], 0.0, "{f}");
    }
    // delta stays new − base of the values as measured.
    assert_eq!(row(&norm, "work")["delta"]["elapsed_exclusive_ns"], 30_000);
    // Normalized, a threshold hides what only the machine changed.
    let doc = json_of(BASE, SLOW, &opts(View::Functions, 1.0, true));
    assert!(doc["rows"].as_array().unwrap().is_empty(), "{doc}");
    assert!(!doc["totals"].is_null(), "the totals row stays: {doc}");
}

#[test]
fn normalized_changes_are_changes_of_shares() {
    let doc = json_of(BASE, BUSY, &opts(View::Functions, 0.0, true));
    assert_eq!(doc["scale"], 0.5);
    let names: Vec<&str> = doc["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["function"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["work", "main", "helper"], "by normalized change");
    for (f, change_pct, points) in [
        ("work", 100.0, 30.0),
        ("main", 100.0 * (35.0 - 60.0) / 60.0, -25.0),
        ("helper", -50.0, -5.0),
    ] {
        let r = row(&doc, f);
        assert!(close(&r["change_pct"], change_pct), "{f}: {r}");
        assert!(close(&r["share_change_points"], points), "{f}: {r}");
        let [b, n] = ["base_share_pct", "new_share_pct"].map(|k| r[k].as_f64().unwrap());
        assert!(close(&r["change_pct"], 100.0 * (n / b - 1.0)), "{f}: {r}");
    }
}

#[test]
fn table_header_says_the_totals_the_factor_and_the_warning() {
    let table = render(BASE, SLOW, &opts(View::Functions, 0.0, true), Format::Table);
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].contains("base total 100 µs, new total 200 µs (+100.0%)"),
        "{table}"
    );
    assert!(
        lines[1].starts_with("normalized:") && lines[1].contains("× 0.500"),
        "{table}"
    );
    assert!(
        lines[2].starts_with("warning: the totals differ by +100.0%"),
        "{table}"
    );
    let total = lines.iter().find(|l| l.starts_with("total")).expect(&table);
    assert!(
        cells(total)[1..5] == ["100 µs", "200 µs", "+100 µs", "+100.0%"]
            && shares(total) == ["100.00%", "100.00%", "+0.00 pts"],
        "the totals row is raw: {table}"
    );
    let work = lines.iter().find(|l| l.starts_with("work")).expect(&table);
    assert!(
        work.contains("+0.0%") && work.ends_with("+0.00 pts"),
        "{table}"
    );

    let raw = render(
        BASE,
        SLOW,
        &opts(View::Functions, 0.0, false),
        Format::Table,
    );
    assert!(raw.contains("not normalized"), "{raw}");
    let work = raw.lines().find(|l| l.starts_with("work")).expect(&raw);
    assert!(work.contains("+100.0%"), "{raw}");
}

#[test]
fn values_that_are_not_parts_of_a_total_have_no_shares() {
    let o = DiffOptions {
        metric: Some("avg_elapsed_exclusive_ns".into()),
        ..opts(View::Functions, 0.0, true)
    };
    let doc = json_of(BASE, SLOW, &o);
    assert!(doc["totals"].is_null(), "{doc}");
    assert_eq!(doc["normalized"], false);
    assert!(row(&doc, "work")["share_change_points"].is_null());
    assert_eq!(row(&doc, "work")["change_pct"], 100.0);
}

#[test]
fn refuses_to_compare_instrumentation_with_sampling() {
    let (i, s) = (trace_file("instr.data", BASE), sampling_file("sample.data"));
    let err = diff::check_methods(&i, &s).unwrap_err().to_string();
    assert!(
        err.contains("cannot compare an instrumentation profile (instr.data) with a sampling profile (sample.data)"),
        "{err}"
    );
    assert!(!err.contains('\n'));
}
