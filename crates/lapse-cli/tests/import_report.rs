//! A hand-written Chrome trace with known answers, imported and reported in
//! JSON, CSV and table form; plus the errors a user meets with bad files.
//!
//! Thread 1 (pid 1): main [0, 10 µs]; work [1, 5 µs] with the thread off the
//! CPU during [2, 4 µs] (inside work's only interval); helper, an X event,
//! [6, 8 µs]. Thread 2: worker, X event [0, 3.5 µs], category "lib".
//!
//! Intervals of thread 1: [0,1] main; [1,5] main>work (2 µs off the CPU);
//! [5,6] main; [6,8] main>helper; [8,10] main.
//! main:   elapsed incl 10000, excl 1000+1000+2000 = 4000, application incl
//!         10000-2000 = 8000, excl 4000.
//! work:   elapsed 4000/4000, application 2000/2000 (the exact rule;
//!         `--application interval` gives 0/0, and main 6000).
//! helper: 2000 everywhere. worker: 3500 everywhere.
//! Session: elapsed 10000 + 3500 = 13500 ns, application 8000 + 3500 = 11500 ns.

use std::path::PathBuf;

use lapse_testkit::Lapse;
use serde_json::Value;

/// (plain output: no colours)
const LAPSE: Lapse = Lapse::new(env!("CARGO_BIN_EXE_lapse")).with_env(&[("NO_COLOR", "1")]);

const TRACE: &str = r#"{"traceEvents": [
  {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main-thread"}},
  {"ph": "B", "name": "main", "pid": 1, "tid": 1, "ts": 0},
  {"ph": "X", "name": "worker", "cat": "lib", "pid": 1, "tid": 2, "ts": 0, "dur": 3.5},
  {"ph": "B", "name": "work", "pid": 1, "tid": 1, "ts": 1},
  {"ph": "i", "name": "lapse:switch_out", "pid": 1, "tid": 1, "ts": 2},
  {"ph": "i", "name": "lapse:switch_in", "pid": 1, "tid": 1, "ts": 4},
  {"ph": "E", "pid": 1, "tid": 1, "ts": 5},
  {"ph": "X", "name": "helper", "pid": 1, "tid": 1, "ts": 6, "dur": 2},
  {"ph": "E", "name": "main", "pid": 1, "tid": 1, "ts": 10},
  {"ph": "C", "name": "counter", "pid": 1, "tid": 1, "ts": 3, "args": {"v": 1}}
]}"#;

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lapse-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn imported(name: &str, trace: &str) -> PathBuf {
    let dir = tempdir(name);
    std::fs::write(dir.join("trace.json"), trace).unwrap();
    LAPSE
        .in_dir(&dir)
        .ok(["import", "trace.json", "-o", "t.data"]);
    dir
}

fn row<'a>(doc: &'a Value, key: &str, name: &str) -> &'a Value {
    doc["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r[key] == name)
        .unwrap_or_else(|| panic!("no row {name}"))
}

fn close(v: &Value, expected: f64) {
    let got = v.as_f64().unwrap();
    assert!((got - expected).abs() < 1e-9, "{got} != {expected}");
}

#[test]
fn json_functions_view_has_the_exact_spec_values() {
    let dir = imported("json", TRACE);
    let doc = LAPSE.in_dir(&dir).json([
        "report",
        "t.data",
        "--view",
        "functions",
        "--format",
        "json",
    ]);
    assert_eq!(doc["schema"], "lapse-report/1");
    assert_eq!(doc["method"], "instrumentation");
    assert_eq!(doc["session"]["elapsed_inclusive_ns"], 13500);
    assert_eq!(doc["session"]["application_inclusive_ns"], 11500);
    assert_eq!(doc["session"]["application_rule"], "exact");
    assert_eq!(doc["session"]["threads"], 2);
    let main = row(&doc, "function", "main");
    assert_eq!(main["calls"], 1);
    assert_eq!(main["elapsed_inclusive_ns"], 10000);
    assert_eq!(main["elapsed_exclusive_ns"], 4000);
    assert_eq!(main["application_inclusive_ns"], 8000);
    assert_eq!(main["application_exclusive_ns"], 4000);
    close(&main["elapsed_inclusive_pct"], 100.0 * 10000.0 / 13500.0);
    close(&main["elapsed_exclusive_pct"], 100.0 * 4000.0 / 13500.0);
    close(&main["application_inclusive_pct"], 100.0 * 8000.0 / 11500.0);
    close(&main["application_exclusive_pct"], 100.0 * 4000.0 / 11500.0);
    assert_eq!(main["module"], "trace.json");
    let work = row(&doc, "function", "work");
    assert_eq!(
        (
            work["elapsed_inclusive_ns"].as_u64(),
            work["application_inclusive_ns"].as_u64()
        ),
        (Some(4000), Some(2000))
    );
    assert_eq!(work["max_elapsed_inclusive_ns"], 4000);
    let worker = row(&doc, "function", "worker");
    assert_eq!(worker["elapsed_exclusive_ns"], 3500);
    assert_eq!(worker["module"], "lib");
    // Default order: elapsed exclusive, largest first.
    let names: Vec<&str> = doc["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["function"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["main", "work", "worker", "helper"]);
}

#[test]
fn threads_processes_and_modules_views() {
    let dir = imported("views", TRACE);
    let doc = LAPSE
        .in_dir(&dir)
        .json(["report", "t.data", "--view", "threads", "--format", "json"]);
    let t1 = doc["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["tid"] == 1)
        .unwrap();
    assert_eq!(t1["thread_name"], "main-thread");
    assert_eq!(
        (
            t1["elapsed_inclusive_ns"].as_u64(),
            t1["application_inclusive_ns"].as_u64()
        ),
        (Some(10000), Some(8000))
    );
    let doc = LAPSE.in_dir(&dir).json([
        "report",
        "t.data",
        "--view",
        "processes",
        "--format",
        "json",
    ]);
    assert_eq!(doc["rows"][0]["elapsed_inclusive_ns"], 13500);
    let doc = LAPSE
        .in_dir(&dir)
        .json(["report", "t.data", "--view", "modules", "--format", "json"]);
    let m = row(&doc, "module", "trace.json");
    assert_eq!(
        (
            m["elapsed_inclusive_ns"].as_u64(),
            m["elapsed_exclusive_ns"].as_u64()
        ),
        (Some(10000), Some(10000))
    );
}

#[test]
fn csv_and_table_show_the_same_values() {
    let dir = imported("csv", TRACE);
    let out =
        LAPSE
            .in_dir(&dir)
            .run(["report", "t.data", "--view", "functions", "--format", "csv"]);
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(
        &header[..7],
        [
            "function",
            "module",
            "module_path",
            "address",
            "source_file",
            "line",
            "calls"
        ]
    );
    let main: Vec<&str> = lines.next().unwrap().split(',').collect();
    let at = |k: &str| main[header.iter().position(|h| *h == k).unwrap()];
    assert_eq!(
        (
            at("function"),
            at("elapsed_inclusive_ns"),
            at("application_inclusive_ns")
        ),
        ("main", "10000", "8000")
    );

    let out = LAPSE
        .in_dir(&dir)
        .run(["report", "t.data", "--view", "functions"]);
    let text = String::from_utf8(out.stdout).unwrap();
    let main = text.lines().find(|l| l.starts_with("main ")).expect(&text);
    assert!(
        main.contains("10.0 µs") && main.contains("4.00 µs") && main.contains("8.00 µs"),
        "{main}"
    );
    assert!(!text.contains('\x1b'), "no colour when not on a terminal");
}

#[test]
fn bare_array_and_unsorted_input_give_the_same_answer() {
    let events: Value = serde_json::from_str::<Value>(TRACE).unwrap()["traceEvents"].clone();
    let mut list = events.as_array().unwrap().clone();
    list.reverse();
    let dir = imported("bare", &serde_json::to_string(&list).unwrap());
    let doc = LAPSE.in_dir(&dir).json([
        "report",
        "t.data",
        "--view",
        "functions",
        "--format",
        "json",
    ]);
    assert_eq!(row(&doc, "function", "main")["elapsed_exclusive_ns"], 4000);
    assert_eq!(
        row(&doc, "function", "work")["application_inclusive_ns"],
        2000
    );
}

#[test]
fn filters_sort_and_limit() {
    let dir = imported("filters", TRACE);
    let doc = LAPSE.in_dir(&dir).json([
        "report",
        "t.data",
        "--view",
        "functions",
        "--format",
        "json",
        "--tid",
        "2",
    ]);
    assert_eq!(doc["rows"].as_array().unwrap().len(), 1);
    let doc = LAPSE.in_dir(&dir).json([
        "report",
        "t.data",
        "--view",
        "functions",
        "--format",
        "json",
        "--function",
        "^w",
    ]);
    assert_eq!(doc["rows"].as_array().unwrap().len(), 2);
    let doc = LAPSE.in_dir(&dir).json([
        "report",
        "t.data",
        "--view",
        "functions",
        "--format",
        "json",
        "--sort",
        "calls",
        "--limit",
        "1",
    ]);
    assert_eq!(doc["rows"].as_array().unwrap().len(), 1);
    let out = LAPSE
        .in_dir(&dir)
        .run(["report", "t.data", "--sort", "nope", "--view", "functions"]);
    assert!(!out.status.success());
}

#[test]
fn bad_files_give_one_clear_line_and_no_panic() {
    let dir = imported("bad", TRACE);
    let check = |args: &[&str], needle: &str| {
        let out = LAPSE.in_dir(&dir).run(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains(needle), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    };
    check(&["report", "missing.data"], "missing.data");
    check(&["report", "trace.json"], "not a lapse data file");
    std::fs::write(dir.join("empty.data"), b"").unwrap();
    check(&["report", "empty.data"], "empty");
    std::fs::write(dir.join("broken.json"), "{\"traceEvents\": [").unwrap();
    check(&["import", "broken.json"], "not valid JSON");
    std::fs::write(
        dir.join("shape.json"),
        "{\"traceEvents\": [{\"ph\": \"B\", \"name\": \"x\"}]}",
    )
    .unwrap();
    check(&["import", "shape.json"], "missing \"ts\"");
    check(&["report", "t.data", "--view", "bogus"], "bogus");

    // Truncated: the intact part is reported with a warning.
    let full = std::fs::read(dir.join("t.data")).unwrap();
    std::fs::write(dir.join("cut.data"), &full[..full.len() - 10]).unwrap();
    let out = LAPSE.in_dir(&dir).run([
        "report",
        "cut.data",
        "--view",
        "functions",
        "--format",
        "json",
    ]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("warning"));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["session"]["complete"], false);
    let out = LAPSE.in_dir(&dir).run(["info", "cut.data"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("damage:"));
}

#[test]
fn names_are_escaped_for_the_terminal_and_exact_in_json() {
    // Before: a name holding ESC ] 0 ; ... BEL retitled the user's terminal
    // window, a newline split a row, U+202E reversed what followed.
    let trace = r#"{"traceEvents": [
  {"ph": "X", "name": "evil\u001b]0;pwned\u0007\nrow\u202efdp.exe", "pid": 1, "tid": 1, "ts": 0, "dur": 5}
]}"#;
    let dir = imported("escaped", trace);
    let out = LAPSE
        .in_dir(&dir)
        .run(["report", "t.data", "--view", "functions"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains(r"evil\x1b]0;pwned\x07\x0arow\u{202e}fdp.exe"),
        "{table}"
    );
    assert!(!table.contains(['\u{1b}', '\u{7}', '\u{202e}']), "{table}");
    let doc = LAPSE.in_dir(&dir).json([
        "report",
        "t.data",
        "--view",
        "functions",
        "--format",
        "json",
    ]);
    row(
        &doc,
        "function",
        "evil\u{1b}]0;pwned\u{7}\nrow\u{202e}fdp.exe",
    );
}

#[test]
fn columns_keep_the_columns_that_name_a_row() {
    // Before: `--columns calls` printed a column of numbers with no name.
    let dir = imported("columns", TRACE);
    let csv = LAPSE.in_dir(&dir).stdout([
        "report",
        "t.data",
        "--view",
        "functions",
        "--format",
        "csv",
        "--columns",
        "calls",
    ]);
    // (CSV rows end with the session's application rule)
    assert_eq!(
        csv.lines().next(),
        Some("function,module,calls,application_rule"),
        "{csv}"
    );
    // Asked for, in the order asked.
    let csv = LAPSE.in_dir(&dir).stdout([
        "report",
        "t.data",
        "--view",
        "threads",
        "--format",
        "csv",
        "--columns",
        "calls,tid",
    ]);
    assert_eq!(
        csv.lines().next(),
        Some("pid,calls,tid,application_rule"),
        "{csv}"
    );
}

#[test]
fn info_says_the_same_in_json_as_in_lines() {
    let dir = imported("info", TRACE);
    let text = LAPSE.in_dir(&dir).stdout(["info", "t.data"]);
    let doc = LAPSE
        .in_dir(&dir)
        .json(["info", "t.data", "--format", "json"]);
    assert_eq!(doc["schema"], "lapse-info/1");
    // Two threads of one process, four functions, a finished file.
    assert!(text.contains("threads:     2\n"), "{text}");
    assert_eq!(doc["threads"], 2, "{doc}");
    assert_eq!(doc["processes"], 1, "{doc}");
    assert_eq!(doc["functions"], 4, "{doc}");
    assert!(text.contains("complete:    yes\n"), "{text}");
    assert_eq!(doc["incomplete"], Value::Null, "{doc}");
    assert_eq!(doc["method"], "instrumentation");
    // The stack repairs come from the analysis: none in this trace.
    assert!(text.contains("repaired:    0 calls"), "{text}");
    assert_eq!(doc["repaired_calls"], 0, "{doc}");
    assert!(doc["notes"].is_array(), "{doc}");
    let bytes = std::fs::metadata(dir.join("t.data")).unwrap().len();
    assert_eq!(doc["file"]["bytes"], bytes, "{doc}");
    // Every line of the table is one key of the JSON.
    let lines = text.lines().filter(|l| !l.starts_with("note:")).count();
    let keys = doc.as_object().unwrap().len() - 2; // schema, notes
    assert_eq!(lines, keys, "{text}\n{doc}");
}

/// main → run → {work (long C++ name) → a → b → c → leaf, twice; helper →
/// leaf}: a chain of calls that pass all their time on, a function called
/// from two places, names longer than a terminal.
const DEEP: &str = r#"[
  {"ph": "X", "name": "main", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
  {"ph": "X", "name": "run", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
  {"ph": "X", "name": "std::map<std::basic_string<char>, std::vector<int>>::work(int)", "pid": 1, "tid": 1, "ts": 0, "dur": 60},
  {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 60},
  {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 0, "dur": 60},
  {"ph": "X", "name": "c", "pid": 1, "tid": 1, "ts": 0, "dur": 60},
  {"ph": "X", "name": "leaf", "pid": 1, "tid": 1, "ts": 0, "dur": 60},
  {"ph": "X", "name": "helper", "pid": 1, "tid": 1, "ts": 70, "dur": 30},
  {"ph": "X", "name": "leaf", "pid": 1, "tid": 1, "ts": 75, "dur": 20}
]"#;

#[test]
fn a_call_tree_fits_80_columns_and_keeps_its_inclusive_share() {
    let dir = imported("tree80", DEEP);
    let run = |extra: &[&str]| {
        let mut args = vec!["report", "t.data", "--view", "calltree"];
        args.extend(extra);
        let out = LAPSE.in_dir(&dir).with_env(&[("COLUMNS", "80")]).ok(&args);
        String::from_utf8(out.stdout).unwrap()
    };
    let text = run(&[]);
    for l in text.lines() {
        assert!(
            l.chars().count() <= 80,
            "{} wide: {l}\n{text}",
            l.chars().count()
        );
    }
    // The inclusive share stays; the long name gives up its template
    // arguments, not its own name.
    assert!(text.contains("el incl %"), "{text}");
    assert!(text.contains("std::map<…>::work(int)"), "{text}");
    // work → a → b → c → leaf pass on all their time: a, b and c collapse.
    assert!(text.contains("…3 frames…"), "{text}");
    assert!(
        !text
            .lines()
            .any(|l| l.trim_start().trim_start_matches("* ").starts_with("b ")),
        "{text}"
    );
    let full = run(&["--no-collapse"]);
    assert!(!full.contains("frames…"), "{full}");
    assert!(
        full.lines()
            .any(|l| l.trim_start().trim_start_matches("* ").starts_with("b ")),
        "{full}"
    );
    // JSON keeps every node whatever the terminal.
    let doc = LAPSE
        .in_dir(&dir)
        .json(["report", "t.data", "--view", "calltree", "--format", "json"]);
    assert!(!doc.to_string().contains("frames…"), "{doc}");
}

#[test]
fn focus_re_roots_the_tree_and_function_shows_what_it_calls() {
    let dir = imported("focus", DEEP);
    // leaf is called under c and under helper: one root with both calls.
    let doc = LAPSE.in_dir(&dir).json([
        "report", "t.data", "--view", "calltree", "--format", "json", "--focus", "^leaf$",
    ]);
    let roots = doc["roots"].as_array().unwrap();
    assert_eq!(roots.len(), 1, "{doc}");
    assert_eq!(roots[0]["function"], "leaf");
    assert_eq!(roots[0]["calls"], 2);
    close(&roots[0]["elapsed_inclusive_ns"], 80_000.0);
    // --function helper: the path to it and what it calls.
    let doc = LAPSE.in_dir(&dir).json([
        "report",
        "t.data",
        "--view",
        "calltree",
        "--format",
        "json",
        "--function",
        "^helper$",
    ]);
    let main = &doc["roots"][0];
    assert_eq!(main["function"], "main", "{doc}");
    let helper = &main["children"][0]["children"][0];
    assert_eq!(helper["function"], "helper", "{doc}");
    assert_eq!(helper["children"][0]["function"], "leaf", "{doc}");
    assert_eq!(
        main["children"][0]["children"].as_array().unwrap().len(),
        1,
        "{doc}"
    );
    // --focus is for call trees.
    let out =
        LAPSE
            .in_dir(&dir)
            .run(["report", "t.data", "--view", "functions", "--focus", "leaf"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--focus") && err.lines().count() == 1, "{err}");
}

#[test]
fn every_command_has_its_manual_page() {
    let main = String::from_utf8(LAPSE.ok(["man"]).stdout).unwrap();
    // The pages `lapse man` names under SEE ALSO: lapse\-report(1)...
    let named: Vec<&str> = main
        .split("lapse\\-")
        .skip(1)
        .filter_map(|s| s.split_once("(1)").map(|(n, _)| n))
        .filter(|n| n.chars().all(|c| c.is_ascii_lowercase()))
        .collect();
    assert!(
        named.contains(&"report") && named.contains(&"record"),
        "{main}"
    );
    for name in named {
        let page = String::from_utf8(LAPSE.ok(["man", name]).stdout).unwrap();
        assert!(
            page.contains(&format!(".TH lapse-{name} 1")),
            "{name}: {page}"
        );
    }
    let out = LAPSE.run(["man", "nope"]);
    assert!(!out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
}
