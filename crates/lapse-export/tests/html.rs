//! The HTML page's data: one self-contained file whose embedded document
//! holds the report's own values (functions exactly, per thread and for
//! all), flat call trees whatever the depth, a timeline summary a person
//! can check by hand, and a size that does not grow with the recording.
//! (`html_browser.rs` drives the page itself in Chromium.)

mod common;
mod html_recording;

use std::collections::BTreeMap;

use lapse_export::Format;
use lapse_report::View;
use serde_json::Value;

fn page_of(file: &lapse_data::DataFile) -> String {
    String::from_utf8(common::export(file, Format::Html)).unwrap()
}

/// The embedded document (parsed with serde_json's default recursion
/// limit: it is flat).
fn embedded(page: &str) -> Value {
    let open = r#"<script type="application/json" id="lapse-data">"#;
    let start = page.find(open).expect("data element") + open.len();
    let len = page[start..].find("</script>").expect("end of data");
    serde_json::from_str(&page[start..start + len]).expect("JSON data")
}

fn nums(v: &Value) -> Vec<i64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect()
}

fn names(data: &Value) -> Vec<String> {
    data["frames"]["name"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_owned())
        .collect()
}

fn columns(data: &Value, key: &str) -> Vec<String> {
    data[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_owned())
        .collect()
}

/// Rows of a flat table, each a map of column → value, keyed by frame name.
fn function_rows(data: &Value, flat: &Value) -> BTreeMap<String, BTreeMap<String, i64>> {
    let cols = columns(data, "function_columns");
    let names = names(data);
    nums(flat)
        .chunks(cols.len())
        .map(|r| {
            let row = cols.iter().cloned().zip(r.iter().copied()).collect();
            (names[r[0] as usize].clone(), row)
        })
        .collect()
}

fn thread(data: &Value, tid: u64) -> &Value {
    data["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tid"] == tid)
        .unwrap()
}

/// The page's session object is the JSON report's, key for key.
#[test]
fn the_page_has_the_reports_session() {
    for file in [common::instr_file(), common::sample_file()] {
        let data = embedded(&page_of(&file));
        let report = common::report_json(&file, View::Threads, false);
        assert_eq!(data["session"], report["session"]);
    }
}

#[test]
fn the_page_is_one_file_and_asks_for_nothing_on_the_network() {
    let page = page_of(&common::instr_file());
    assert!(page.starts_with("<!DOCTYPE html>"));
    for remote in [
        "http:",
        "https:",
        "//cdn",
        "src=",
        "href=",
        "fetch(",
        "XMLHttpRequest",
        "@import",
        "url(",
    ] {
        assert!(!page.contains(remote), "page refers to {remote}");
    }
    let data = embedded(&page);
    assert_eq!(data["schema"], "lapse-html/1");
    assert_eq!(data["method"], "instrumentation");
    assert_eq!(data["session"]["elapsed_inclusive_ns"], 150_000);
    assert_eq!(data["threads"].as_array().unwrap().len(), 2);
}

/// The functions view of `lapse report --format json`, by function name.
fn report_functions(file: &lapse_data::DataFile) -> BTreeMap<String, Value> {
    let doc = common::report_json(file, View::Functions, false);
    doc["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["function"].as_str().unwrap().to_owned(), r.clone()))
        .collect()
}

#[test]
fn function_rows_are_the_report_s_for_all_threads_and_add_up_per_thread() {
    let file = html_recording::program(30);
    let data = embedded(&page_of(&file));
    let report = report_functions(&file);
    let all = function_rows(&data, &data["all_functions"]);
    assert_eq!(all.len(), report.len());
    let pairs = [
        ("calls", "calls"),
        ("ei", "elapsed_inclusive_ns"),
        ("ee", "elapsed_exclusive_ns"),
        ("ai", "application_inclusive_ns"),
        ("ae", "application_exclusive_ns"),
        ("po", "probe_overhead_ns"),
        ("min_ei", "min_elapsed_inclusive_ns"),
        ("max_ee", "max_elapsed_exclusive_ns"),
        ("min_ai", "min_application_inclusive_ns"),
        ("max_ae", "max_application_exclusive_ns"),
    ];
    for (name, row) in &all {
        let r = &report[name];
        for (ours, theirs) in pairs {
            assert_eq!(row[ours], r[theirs].as_i64().unwrap(), "{name} {theirs}");
        }
        // The page shows sum / calls; the report divides before rounding.
        let avg = (row["sum_ei"] as f64 / row["calls"] as f64).round() as i64;
        let theirs = r["avg_elapsed_inclusive_ns"].as_i64().unwrap();
        assert!((avg - theirs).abs() <= 1, "{name} avg {avg} vs {theirs}");
    }
    // The threads' rows add up to the whole (within a nanosecond of
    // rounding per thread), and min/max combine.
    let mut sum: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
    for t in data["threads"].as_array().unwrap() {
        for (name, row) in function_rows(&data, &t["functions"]) {
            let s = sum.entry(name).or_default();
            for (k, v) in row {
                match s.get_mut(&k) {
                    None => {
                        s.insert(k, v);
                    }
                    Some(e) if k.starts_with("min_") => *e = (*e).min(v),
                    Some(e) if k.starts_with("max_") => *e = (*e).max(v),
                    Some(e) => *e += v,
                }
            }
        }
    }
    let threads = data["threads"].as_array().unwrap().len() as i64;
    for (name, row) in &all {
        for (k, v) in row.iter().filter(|(k, _)| *k != "frame") {
            let s = sum[name][k];
            let slack = if k.starts_with("min_") || k.starts_with("max_") {
                0
            } else {
                threads
            };
            assert!(
                (s - v).abs() <= slack,
                "{name} {k}: threads add up to {s}, all {v}"
            );
        }
    }
}

#[test]
fn sampled_functions_and_lines_add_up_to_the_report_s() {
    let file = common::sample_file();
    let data = embedded(&page_of(&file));
    assert!(data["all_functions"].is_null());
    assert_eq!(data["period_ns"], 1_000_000);
    let mut sum: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for t in data["threads"].as_array().unwrap() {
        for (name, row) in function_rows(&data, &t["functions"]) {
            let s = sum.entry(name).or_default();
            s.0 += row["incl"];
            s.1 += row["excl"];
        }
    }
    for (name, r) in report_functions(&file) {
        let theirs = (
            r["inclusive_samples"].as_i64().unwrap(),
            r["exclusive_samples"].as_i64().unwrap(),
        );
        assert_eq!(sum[&name], theirs, "{name}");
    }
    // Frames without a function are rows too.
    assert_eq!(sum["[app+0x999]"], (1, 1));
    assert_eq!(sum["[unknown]"], (1, 1));
    // Lines: (function, file, line) rows; per line they add up to the
    // report's lines view.
    let files = data["frames"]["files"].clone();
    let mut lines: BTreeMap<(String, i64), (i64, i64)> = BTreeMap::new();
    for t in data["threads"].as_array().unwrap() {
        for r in nums(&t["lines"]).chunks(5) {
            let key = (files[r[1] as usize].as_str().unwrap().to_owned(), r[2]);
            let s = lines.entry(key).or_default();
            s.0 += r[3];
            s.1 += r[4];
        }
    }
    let doc = common::report_json(&file, View::Lines, false);
    // (The report's row of no line, for frames without line information,
    // has no counterpart among the page's lines.)
    let rows: Vec<&serde_json::Value> = doc["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| !r["source_file"].is_null())
        .collect();
    assert_eq!(rows.len(), lines.len());
    for r in rows {
        let key = (
            r["source_file"].as_str().unwrap().to_owned(),
            r["line"].as_i64().unwrap(),
        );
        let theirs = (
            r["inclusive_samples"].as_i64().unwrap(),
            r["exclusive_samples"].as_i64().unwrap(),
        );
        assert_eq!(lines[&key], theirs, "{key:?}");
    }
}

/// Thread `tid`'s node table: (parent, frame name, values by column).
fn nodes(data: &Value, tid: u64) -> Vec<(i64, String, BTreeMap<String, i64>)> {
    let cols = columns(data, "node_columns");
    let names = names(data);
    nums(&thread(data, tid)["nodes"])
        .chunks(cols.len())
        .map(|r| {
            let name = if r[1] < 0 {
                "(thread)".into()
            } else {
                names[r[1] as usize].clone()
            };
            (
                r[0],
                name,
                cols[2..]
                    .iter()
                    .cloned()
                    .zip(r[2..].iter().copied())
                    .collect(),
            )
        })
        .collect()
}

#[test]
fn each_thread_s_call_tree_is_a_flat_node_table() {
    let data = embedded(&page_of(&common::instr_file()));
    // Thread 1: main [10, 90] > work [20, 50] > work [30, 40], main > helper [60, 70].
    let t1 = nodes(&data, 1);
    let shape: Vec<(i64, &str, i64, i64)> = t1
        .iter()
        .map(|(p, n, v)| (*p, n.as_str(), v["ei"] / 1000, v["ee"] / 1000))
        .collect();
    assert_eq!(
        shape,
        [
            (-1, "(thread)", 100, 20),
            (0, "main", 80, 40),
            (1, "work", 30, 20),
            (2, "work", 10, 10),
            (1, "helper", 10, 10),
        ]
    );
    // The 2 µs off the CPU are in work's interval [20, 30].
    assert_eq!(t1[2].2["ai"], 28_000);
    assert_eq!(data["nodes_kept"], data["nodes_total"]);
}

#[test]
fn the_timeline_summary_says_what_ran_in_each_bucket() {
    let data = embedded(&page_of(&common::instr_file()));
    let t1 = thread(&data, 1);
    let tl = &t1["timeline"];
    let n = lapse_export::html::buckets_per_thread(2);
    assert_eq!(tl["node"].as_array().unwrap().len(), n);
    // Thread 1 runs 0-100 µs after the origin (the session's start).
    assert_eq!(
        (tl["start"].as_u64(), tl["end"].as_u64()),
        (Some(0), Some(100_000))
    );
    let node = nums(&tl["node"]);
    let names: Vec<String> = nodes(&data, 1).into_iter().map(|(_, n, _)| n).collect();
    let at = |us: usize| names[node[us * 1000 * n / 100_000] as usize].clone();
    assert_eq!(at(5), "(thread)", "before main");
    assert_eq!(at(15), "main");
    assert_eq!(at(25), "work");
    assert_eq!(at(35), "work");
    assert_eq!(at(65), "helper");
    assert_eq!(at(95), "(thread)", "after main");
    // Off the CPU during [25, 27] µs, and nowhere else.
    let off = nums(&tl["off"]);
    let full: Vec<i64> = off
        .chunks(2)
        .filter(|p| p[1] >= 900) // (buckets are 6.1 ns: 6 of them is 983 ‰)
        .map(|p| p[0])
        .collect();
    let bucket = 100_000.0 / n as f64;
    let from = full[0] as f64 * bucket;
    let to = (full[full.len() - 1] + 1) as f64 * bucket;
    assert!(
        (from - 25_000.0).abs() <= bucket && (to - 27_000.0).abs() <= bucket,
        "off the CPU {from}-{to} ns"
    );
    // Any bucket partly off the CPU is next to the full ones.
    assert!(off
        .chunks(2)
        .all(|p| p[1] >= 900 || full.contains(&(p[0] - 1)) || full.contains(&(p[0] + 1))));
}

#[test]
fn each_off_cpu_bucket_says_what_the_thread_waited_in() {
    // (#34 item 2) Idle 299-349 ms of 401: blocked in eval > read_socket
    // for 30 ms, then preempted in parse for 20 ms.
    let data = embedded(&page_of(&html_recording::sampled_off_cpu(400, 20)));
    let tl = &thread(&data, 7)["timeline"];
    let off = nums(&tl["off"]);
    let why = nums(&tl["off_stack"]);
    assert_eq!(why.len(), off.len() / 2 * 3, "a triple per off-CPU bucket");
    let names: Vec<String> = nodes(&data, 7).into_iter().map(|(_, n, _)| n).collect();
    let parents: Vec<i64> = nodes(&data, 7).into_iter().map(|(p, _, _)| p).collect();
    let (start, end) = (tl["start"].as_u64().unwrap(), tl["end"].as_u64().unwrap());
    let n = tl["node"].as_array().unwrap().len() as f64;
    let bucket = (end - start) as f64 / n;
    let mut seen = BTreeMap::new();
    for (pair, w) in off.chunks(2).zip(why.chunks(3)) {
        let at_ms = (pair[0] as f64 + 0.5) * bucket / 1e6;
        let (row, preempted, ns) = (w[0] as usize, w[1], w[2]);
        let what = (
            names[row].clone(),
            names[parents[row] as usize].clone(),
            preempted,
            ns,
        );
        if pair[1] == 1000 {
            let want = if at_ms < 329.0 {
                ("read_socket".to_owned(), "eval".to_owned(), 0, 30_000_000)
            } else {
                (
                    "parse".to_owned(),
                    "luaV_execute_19".to_owned(),
                    1,
                    20_000_000,
                )
            };
            assert_eq!(what, want, "bucket at {at_ms:.3} ms");
        }
        *seen.entry((what.0, what.2)).or_insert(0) += 1;
    }
    assert_eq!(
        seen.keys().cloned().collect::<Vec<_>>(),
        [("parse".to_owned(), 1), ("read_socket".to_owned(), 0)]
    );
    // Without --off-cpu periods there is nothing to say.
    let plain = embedded(&page_of(&html_recording::sampled_deep(400, 20)));
    assert!(thread(&plain, 7)["timeline"].get("off_stack").is_none());
}

#[test]
fn a_20000_deep_recursion_makes_a_flat_page() {
    let file = html_recording::deep_recursion(20_000);
    let data = embedded(&page_of(&file));
    let table = nodes(&data, 1);
    assert_eq!(table.len(), 20_002, "the thread, main, 20,000 rec");
    let mut depth = vec![0usize; table.len()];
    for (i, (p, _, _)) in table.iter().enumerate().skip(1) {
        depth[i] = depth[*p as usize] + 1;
    }
    assert_eq!(depth.iter().max(), Some(&20_001));
    let rec = &function_rows(&data, &thread(&data, 1)["functions"])["rec"];
    assert_eq!(rec["calls"], 20_000);
    // Inclusive once: the outermost call's span (1 µs to 59,999 µs).
    assert_eq!(rec["ei"], 59_998_000);
}

#[test]
fn names_cannot_end_or_comment_out_the_script() {
    let page = page_of(&html_recording::program(3));
    // The three script elements end where they should, and nothing opens a comment.
    assert_eq!(page.matches("</script>").count(), 3);
    assert!(!page.contains("<!--"));
    let data = embedded(&page);
    let names = names(&data);
    assert!(names.contains(&"</script><!--evil".to_owned()), "{names:?}");
    assert!(names.contains(&"std::vector<int>::push_back".to_owned()));
    let title = "<title>lapse: ./app --jobs 3</title>";
    assert!(page.contains(title));
}

#[test]
fn the_page_does_not_grow_with_the_number_of_events() {
    let sizes: Vec<(u64, usize)> = [20, 2_000]
        .into_iter()
        .map(|rounds| {
            let file = html_recording::program(rounds);
            (file.total_events(), page_of(&file).len())
        })
        .collect();
    let [(small_events, small), (big_events, big)] = sizes[..] else {
        unreachable!()
    };
    assert!(big_events > 90 * small_events, "{sizes:?}");
    // The same functions, paths and buckets: only numbers get longer, and
    // more buckets see off-CPU time.
    assert!(big < small * 3 / 2, "{sizes:?}");
}

/// The names of the functions the page's own script (model.js, run by
/// node with the embedded data) marks probe-dominated: for all threads
/// (the report's rows) and for the threads' rows added up in the page.
fn page_dominated(page: &str, case: &str) -> Option<(Vec<String>, Vec<String>)> {
    let node = lapse_testkit::tool("node")?;
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("html-dominated")
        .join(case);
    std::fs::create_dir_all(&dir).unwrap();
    let open = r#"<script type="application/json" id="lapse-data">"#;
    let start = page.find(open).unwrap() + open.len();
    let len = page[start..].find("</script>").unwrap();
    std::fs::write(dir.join("data.json"), &page[start..start + len]).unwrap();
    let script = r#"
const fs = require("fs");
const [model, data] = process.argv.slice(2);
global.document = { getElementById: () => ({ textContent: fs.readFileSync(data, "utf8") }) };
new Function(fs.readFileSync(model, "utf8") + `
  function names(rows) {
    return rows.filter(function (r) { return probeDominated(r.v); })
      .map(function (r) { return frameName(r.f); }).sort();
  }
  var every = D.threads.map(function (_, i) { return i; });
  console.log(JSON.stringify([names(functionRows(every, true)), names(functionRows(every, false))]));
`)();
"#;
    std::fs::write(dir.join("run.js"), script).unwrap();
    let model = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/html/model.js");
    let out = std::process::Command::new(node)
        .arg(dir.join("run.js"))
        .arg(model)
        .arg(dir.join("data.json"))
        .output()
        .expect("run node");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(serde_json::from_slice(&out.stdout).expect("JSON from node"))
}

#[test]
fn the_page_marks_the_rows_the_report_flags_probe_dominated() {
    // A probe cost of 3 µs against intervals of 10 µs and more: main (7
    // intervals in 80 µs) and work (3 in 32) are mostly probe, helper (2 in
    // 50) is not; raw (the default) and compensated.
    let file = common::instr_file_costing(3_000.0);
    for compensate in [false, true] {
        let q = lapse_analysis::Query {
            compensate,
            ..lapse_export::needs()
        };
        let a = lapse_analysis::analyze(&file, &q).unwrap();
        let mut bytes = Vec::new();
        lapse_export::export(&file, &a, Format::Html, &mut bytes).unwrap();
        let page = String::from_utf8(bytes).unwrap();
        assert_eq!(embedded(&page)["session"]["compensated"], compensate);
        assert!(page.contains("~ before a name: probe-dominated"));
        let report = common::report_json(&file, View::Functions, compensate);
        let rows = report["rows"].as_array().unwrap();
        let mut flagged: Vec<String> = rows
            .iter()
            .filter(|r| r["probe_dominated"] == true)
            .map(|r| r["function"].as_str().unwrap().to_owned())
            .collect();
        flagged.sort();
        assert_eq!(flagged, ["main", "work"], "compensate {compensate}");
        let Some((all, added)) = page_dominated(&page, &format!("c{compensate}")) else {
            return;
        };
        assert_eq!(all, flagged, "compensate {compensate}: all threads");
        assert_eq!(added, flagged, "compensate {compensate}: threads added up");
    }
}
