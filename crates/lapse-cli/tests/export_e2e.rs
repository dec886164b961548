//! End to end through the `lapse` binary: a C program built during the test
//! is recorded (instrumentation and sampling), exported in every format and
//! compared; the Chrome export is imported again and must report the same
//! values; `lapse diff` compares recordings and refuses mixed methods.
//! Tests skip (with a message) when gcc is missing or perf events are refused.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use lapse_testkit::{compile, skip, WorkDir};
use serde_json::Value;

const PROGRAM: &str = r#"
#include <pthread.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#define NOINLINE __attribute__((noinline))
volatile uint64_t sink;
NOINLINE double cpu_ms(void) {
    struct timespec ts; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
NOINLINE void spin(double ms) {
    uint64_t x = 88172645463325252ULL; double end = cpu_ms() + ms;
    while (cpu_ms() < end) for (int i = 0; i < 20000; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; }
    sink = x;
}
NOINLINE void nap(void) { usleep(20000); }
NOINLINE int rec(int n) { return n <= 0 ? 0 : 1 + rec(n - 1); }
NOINLINE void *worker(void *arg) { (void)arg; spin(10); return 0; }
int main(void) {
    pthread_t t; pthread_create(&t, 0, worker, 0);
    spin(30); nap(); sink = rec(6);
    pthread_join(t, 0);
    return 0;
}
"#;

const FORMATS: [&str; 9] = [
    "collapsed",
    "flamegraph",
    "speedscope",
    "chrome",
    "pprof",
    "callgrind",
    "firefox",
    "html",
    "perfetto",
];

fn work_dir(name: &str) -> WorkDir {
    WorkDir::new(env!("CARGO_TARGET_TMPDIR"), &format!("export_e2e-{name}"))
}

fn lapse(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lapse"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .output()
        .expect("run lapse")
}

fn ok(out: &Output) -> &Output {
    assert!(
        out.status.success(),
        "lapse failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Builds the program and records it with `method` into DIR/NAME.data.
fn record(dir: &Path, method: &str, name: &str) -> Option<PathBuf> {
    if !dir.join("prog").exists() {
        compile(
            dir,
            "gcc",
            "prog",
            PROGRAM,
            &["-finstrument-functions", "-O1", "-g", "-pthread"],
        )?;
    }
    let data = format!("{name}.data");
    let out = lapse(
        dir,
        &["record", "--method", method, "-o", &data, "--", "./prog"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !dir.join(&data).exists()
        && (stderr.contains("perf_event_open") || stderr.contains("not available"))
    {
        return skip(format!("perf events are not available here: {stderr}"));
    }
    assert!(out.status.success(), "lapse record failed: {stderr}");
    Some(dir.join(data))
}

fn report(dir: &Path, data: &str, view: &str, extra: &[&str]) -> Value {
    let mut args = vec!["report", data, "--view", view, "--format", "json"];
    args.extend_from_slice(extra);
    serde_json::from_slice(&ok(&lapse(dir, &args)).stdout).expect("report JSON")
}

/// Exports `data` in every format and checks each file is what its tool reads.
fn export_all(dir: &Path, data: &str) {
    for format in FORMATS {
        let out_name = format!("{data}.{format}");
        let out = lapse(dir, &["export", data, "--format", format, "-o", &out_name]);
        ok(&out);
        let bytes = std::fs::read(dir.join(&out_name)).expect("export written");
        assert!(!bytes.is_empty(), "{format}: empty");
        let text = String::from_utf8_lossy(&bytes);
        match format {
            "collapsed" => assert!(text.lines().all(|l| l
                .rsplit_once(' ')
                .is_some_and(|(_, n)| n.parse::<u64>().is_ok()))),
            "flamegraph" => assert!(text.starts_with("<?xml") && text.contains("<svg")),
            "speedscope" => {
                let v: Value = serde_json::from_slice(&bytes).unwrap();
                assert_eq!(
                    v["$schema"],
                    "https://www.speedscope.app/file-format-schema.json"
                );
            }
            "chrome" => {
                let v: Value = serde_json::from_slice(&bytes).unwrap();
                assert!(v["traceEvents"].as_array().is_some_and(|e| !e.is_empty()));
            }
            "pprof" => {
                let mut raw = Vec::new();
                flate2::read::GzDecoder::new(&bytes[..])
                    .read_to_end(&mut raw)
                    .expect("gzip");
                assert!(!raw.is_empty());
            }
            "callgrind" => assert!(text.starts_with("# callgrind format")),
            "firefox" => {
                let v: Value = serde_json::from_slice(&bytes).unwrap();
                assert!(v["meta"]["version"].is_number() && v["threads"].is_array());
            }
            "html" => assert!(text.starts_with("<!DOCTYPE html>") && text.contains("lapse-data")),
            // Trace.packet (field 1, length-delimited) again and again.
            "perfetto" => assert_eq!(bytes[0], 0x0a),
            _ => unreachable!(),
        }
    }
}

/// Values a Chrome trace carries (no addresses or source lines).
fn values(doc: &Value, keys: &[&str]) -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = doc["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let id: Vec<String> = keys.iter().map(|k| r[*k].to_string()).collect();
            let mut r = r.clone();
            // (nor the probe cost: raw values count it, a trace has none)
            for k in [
                "address",
                "source_file",
                "line",
                "module_path",
                "build_id",
                "probe_overhead_ns",
                "probe_dominated",
            ] {
                if let Some(o) = r.as_object_mut() {
                    o.remove(k);
                }
            }
            (id.join("/"), r)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn instrumentation_exports_and_chrome_round_trip() {
    let dir = work_dir("instr");
    let Some(_) = record(&dir, "instrument", "instr") else {
        return;
    };
    export_all(&dir, "instr.data");
    // The raw timeline (a trace has no probe cost) imports as the raw values.
    ok(&lapse(
        &dir,
        &[
            "export",
            "instr.data",
            "--format",
            "chrome",
            "--no-compensation",
            "-o",
            "raw.chrome",
        ],
    ));
    ok(&lapse(&dir, &["import", "raw.chrome", "-o", "back.data"]));
    for (view, keys) in [
        ("functions", &["function", "module"][..]),
        ("threads", &["pid", "tid"][..]),
        ("modules", &["module"][..]),
    ] {
        // A trace has no probe cost: compare with the raw values.
        let want = report(&dir, "instr.data", view, &["--no-compensation"]);
        let got = report(&dir, "back.data", view, &[]);
        assert_eq!(values(&want, keys), values(&got, keys), "{view}");
        for total in ["elapsed_inclusive_ns", "application_inclusive_ns"] {
            assert_eq!(want["session"][total], got["session"][total], "{total}");
        }
    }
    // The comparison compared real work: rec recursed, nap slept off the CPU.
    let got = report(&dir, "back.data", "functions", &[]);
    let row = |name: &str| {
        got["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["function"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name}"))
    };
    assert_eq!(row("rec")["calls"], 7);
    let nap = row("nap");
    assert!(nap["elapsed_inclusive_ns"].as_u64().unwrap() >= 15_000_000);
    assert!(nap["application_inclusive_ns"].as_u64().unwrap() < 5_000_000);

    // Folded stacks add up to the functions' elapsed exclusive times.
    let folded = std::fs::read_to_string(dir.join("instr.data.collapsed")).unwrap();
    let total: u64 = folded
        .lines()
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum();
    let compensated = report(&dir, "instr.data", "functions", &[]);
    let exclusive: u64 = compensated["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["elapsed_exclusive_ns"].as_u64().unwrap())
        .sum();
    let slack = 2 * folded.lines().count() as u64; // rounding per path
    assert!(total.abs_diff(exclusive) <= slack, "{total} vs {exclusive}");
}

#[test]
fn sampling_exports() {
    let dir = work_dir("sample");
    let Some(_) = record(&dir, "sample", "sample") else {
        return;
    };
    export_all(&dir, "sample.data");
    let folded = std::fs::read_to_string(dir.join("sample.data.collapsed")).unwrap();
    let total: u64 = folded
        .lines()
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum();
    let summary = report(&dir, "sample.data", "functions", &[]);
    assert_eq!(total, summary["session"]["samples"].as_u64().unwrap());
    assert!(folded.contains("spin"), "{folded}");
}

#[test]
fn diff_compares_recordings_and_refuses_mixed_methods() {
    let dir = work_dir("diff");
    let Some(_) = record(&dir, "instrument", "a") else {
        return;
    };
    let Some(_) = record(&dir, "instrument", "b") else {
        return;
    };
    let out = ok(&lapse(
        &dir,
        &["diff", "a.data", "b.data", "--format", "json"],
    ))
    .clone();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["view"], "functions");
    let rows = doc["rows"].as_array().unwrap();
    let rec = rows
        .iter()
        .find(|r| r["function"] == "rec")
        .expect("rec row");
    assert_eq!(rec["base"]["calls"], 7);
    assert_eq!(rec["delta"]["calls"], 0);
    // Largest absolute change of elapsed exclusive time first.
    let changes: Vec<u64> = rows
        .iter()
        .map(|r| {
            r["delta"]["elapsed_exclusive_ns"]
                .as_i64()
                .unwrap()
                .unsigned_abs()
        })
        .collect();
    assert!(changes.windows(2).all(|w| w[0] >= w[1]), "{changes:?}");
    // A huge threshold hides every row that exists in both.
    let out = ok(&lapse(
        &dir,
        &[
            "diff",
            "a.data",
            "b.data",
            "--format",
            "csv",
            "--threshold",
            "1000000",
        ],
    ))
    .clone();
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
    let table = ok(&lapse(
        &dir,
        &["diff", "a.data", "b.data", "--view", "threads"],
    ))
    .clone();
    assert!(String::from_utf8_lossy(&table.stdout).contains("change %"));

    let Some(_) = record(&dir, "sample", "s") else {
        return;
    };
    let out = lapse(&dir, &["diff", "a.data", "s.data"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(
            "cannot compare an instrumentation profile (a.data) with a sampling profile (s.data)"
        ),
        "{err}"
    );
}

#[test]
fn export_errors_are_one_line() {
    let dir = work_dir("errors");
    for args in [
        &["export", "missing.data", "--format", "collapsed", "-o", "x"][..],
        &["export", "missing.data", "--format", "svg", "-o", "x"][..],
        &["diff", "missing.data", "other.data"][..],
    ] {
        let out = lapse(&dir, args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // An unwritable output: one line, and no file left behind.
    let trace = r#"[{"ph":"X","name":"f","pid":1,"tid":1,"ts":0,"dur":5}]"#;
    std::fs::write(dir.join("t.json"), trace).unwrap();
    ok(&lapse(&dir, &["import", "t.json", "-o", "t.data"]));
    let out = lapse(
        &dir,
        &[
            "export",
            "t.data",
            "--format",
            "html",
            "-o",
            "no/such/dir/page.html",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no/such/dir/page.html"), "{err}");
    // To standard output with `-o -`.
    let out = ok(&lapse(
        &dir,
        &["export", "t.data", "--format", "collapsed", "-o", "-"],
    ))
    .clone();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "f 5000\n");
}
