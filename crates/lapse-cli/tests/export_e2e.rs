//! End to end through the `lapse` binary: a C program built during the test
//! is recorded (instrumentation and sampling), exported in every format and
//! compared; the Chrome export is imported again and must report the same
//! values; `lapse diff` compares recordings and refuses mixed methods, and
//! two runs of one program, one on a busier machine, keep their shares.
//! Tests skip (with a message) when gcc is missing or perf events are refused.

use std::io::Read;
use std::path::{Path, PathBuf};

use lapse_testkit::{compile, stderr, Hogs, Lapse, WorkDir, EXPORT_FORMATS};
use serde_json::Value;

/// (plain output: no colours)
const LAPSE: Lapse = Lapse::new(env!("CARGO_BIN_EXE_lapse")).with_env(&[("NO_COLOR", "1")]);

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

const FORMATS: [&str; 9] = EXPORT_FORMATS;

fn work_dir(name: &str) -> WorkDir {
    WorkDir::new(env!("CARGO_TARGET_TMPDIR"), &format!("export_e2e-{name}"))
}

/// Builds the program and records it with `method` into DIR/NAME.data.
fn record(dir: &Path, method: &str, name: &str) -> Option<PathBuf> {
    record_program(dir, "prog", PROGRAM, method, name)
}

/// Builds `source` into DIR/BIN (once) and records it with `method` into DIR/NAME.data.
fn record_program(
    dir: &Path,
    bin: &str,
    source: &str,
    method: &str,
    name: &str,
) -> Option<PathBuf> {
    if !dir.join(bin).exists() {
        compile(
            dir,
            "gcc",
            bin,
            source,
            &["-finstrument-functions", "-O1", "-g", "-pthread"],
        )?;
    }
    let data = format!("{name}.data");
    let exe = format!("./{bin}");
    let out = LAPSE.in_dir(dir).record(
        &["--method", method],
        Path::new(&data),
        Path::new(&exe),
        &[],
    )?;
    assert!(
        out.status.success(),
        "lapse record failed: {}",
        stderr(&out)
    );
    Some(dir.join(data))
}

/// Exports `data` in every format and checks each file is what its tool reads.
fn export_all(dir: &Path, data: &str) {
    for format in FORMATS {
        let out_name = format!("{data}.{format}");
        LAPSE
            .in_dir(dir)
            .ok(["export", data, "--format", format, "-o", &out_name]);
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
            // (nor the probe cost: raw values count it, a trace has none;
            // nor the preempted part of off-CPU time: a trace's switch
            // instants do not say whether the thread was runnable)
            for k in [
                "address",
                "source_file",
                "line",
                "module_path",
                "build_id",
                "probe_overhead_ns",
                "probe_dominated",
                "preempted_ns",
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
    // The raw timeline (the default; a trace has no probe cost) imports as
    // the raw values.
    LAPSE.in_dir(&dir).ok([
        "export",
        "instr.data",
        "--format",
        "chrome",
        "-o",
        "raw.chrome",
    ]);
    LAPSE
        .in_dir(&dir)
        .ok(["import", "raw.chrome", "-o", "back.data"]);
    for (view, keys) in [
        ("functions", &["function", "module"][..]),
        ("threads", &["pid", "tid"][..]),
        ("modules", &["module"][..]),
    ] {
        // A trace has no probe cost: compare with the raw values.
        let want = LAPSE.in_dir(&dir).report("instr.data", view, &[]);
        let got = LAPSE.in_dir(&dir).report("back.data", view, &[]);
        assert_eq!(values(&want, keys), values(&got, keys), "{view}");
        for total in ["elapsed_inclusive_ns", "application_inclusive_ns"] {
            assert_eq!(want["session"][total], got["session"][total], "{total}");
        }
    }
    // The comparison compared real work: rec recursed, nap slept off the CPU.
    let got = LAPSE.in_dir(&dir).report("back.data", "functions", &[]);
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
    let raw = LAPSE.in_dir(&dir).report("instr.data", "functions", &[]);
    let exclusive: u64 = raw["rows"]
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
    let summary = LAPSE.in_dir(&dir).report("sample.data", "functions", &[]);
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
    let out = LAPSE
        .in_dir(&dir)
        .ok(["diff", "a.data", "b.data", "--format", "json"])
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
    let out = LAPSE
        .in_dir(&dir)
        .ok([
            "diff",
            "a.data",
            "b.data",
            "--format",
            "csv",
            "--threshold",
            "1000000",
        ])
        .clone();
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
    let table = LAPSE
        .in_dir(&dir)
        .ok(["diff", "a.data", "b.data", "--view", "threads"])
        .clone();
    assert!(String::from_utf8_lossy(&table.stdout).contains("change %"));

    let Some(_) = record(&dir, "sample", "s") else {
        return;
    };
    let out = LAPSE.in_dir(&dir).run(["diff", "a.data", "s.data"]);
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
        let out = LAPSE.in_dir(&dir).run(args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // An unwritable output: one line, and no file left behind.
    let trace = r#"[{"ph":"X","name":"f","pid":1,"tid":1,"ts":0,"dur":5}]"#;
    std::fs::write(dir.join("t.json"), trace).unwrap();
    LAPSE.in_dir(&dir).ok(["import", "t.json", "-o", "t.data"]);
    let out = LAPSE.in_dir(&dir).run([
        "export",
        "t.data",
        "--format",
        "html",
        "-o",
        "no/such/dir/page.html",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no/such/dir/page.html"), "{err}");
    // To standard output with `-o -`.
    let out = LAPSE
        .in_dir(&dir)
        .ok(["export", "t.data", "--format", "collapsed", "-o", "-"])
        .clone();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "f 5000\n");
}

/// Fixed work (no clock) in three functions, 6 : 3 : 1, interleaved in many
/// rounds so that time lost to a busy machine spreads over them as their work does.
const SHARES: &str = r#"
#include <stdint.h>
#define NOINLINE __attribute__((noinline))
volatile uint64_t sink;
#define WORK(name, n) NOINLINE void name(void) { \
    uint64_t x = sink | 1; \
    for (long i = 0; i < (n); i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; } \
    sink = x; }
WORK(heavy, 600000)
WORK(medium, 300000)
WORK(light, 100000)
int main(void) {
    for (int r = 0; r < 200; r++) { heavy(); medium(); light(); }
    return 0;
}
"#;

/// Issue 33: `lapse diff` of two recordings of the same program, the second
/// made while every CPU also runs a busy loop, has a totals row, shares of
/// each run's total and normalized changes that are changes of shares; every
/// row's share changes by less than 5 points, however much the totals differ
/// (no bound on times: the machine may be busy anyway).
///
/// The 5-point bound is checked on application time: elapsed time counts
/// the time a thread waited for a CPU, which comes in slices of milliseconds
/// that land on whichever function runs, so on a loaded machine (hogs, other
/// tests, other builds) elapsed shares moved by up to 8 points in one run of
/// three, while application shares (switch events subtract the time off the
/// CPU) stayed within 0.6.
#[test]
fn diff_of_one_program_on_a_quiet_and_a_busy_machine_compares_shares() {
    let dir = work_dir("diff-shares");
    let Some(_) = record_program(&dir, "shares", SHARES, "instrument", "quiet") else {
        return;
    };
    let busy = {
        let _hogs = Hogs::everywhere();
        record_program(&dir, "shares", SHARES, "instrument", "busy")
    };
    let Some(_) = busy else {
        return;
    };
    let diff_json = |extra: &[&str]| -> Value {
        let mut args = vec!["diff", "quiet.data", "busy.data", "--format", "json"];
        args.extend_from_slice(extra);
        serde_json::from_slice(&LAPSE.in_dir(&dir).ok(&args).stdout).expect("diff JSON")
    };
    let doc = diff_json(&[]);
    let key = "elapsed_exclusive_ns";
    assert_eq!(doc["compared_on"], key);
    let t = &doc["totals"];
    let (base, new) = (
        t["base"][key].as_u64().expect("a totals row") as f64,
        t["new"][key].as_u64().expect("a totals row") as f64,
    );
    assert!(base > 0.0 && new > 0.0, "{t}");
    let change = t["change_pct"].as_f64().unwrap();
    assert!((change - 100.0 * (new - base) / base).abs() < 1e-6, "{t}");
    assert_eq!(
        doc["warning"].is_string(),
        change.abs() > 10.0,
        "a warning exactly when the totals differ by more than 10 %: {t} {}",
        doc["warning"]
    );

    let share = |r: &Value, k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k}: {r}"));
    let shares = |doc: &Value| -> String {
        let rows = doc["rows"].as_array().unwrap().iter();
        rows.map(|r| {
            format!(
                "{} {:.2} -> {:.2} ({:+.2} points)\n",
                r["function"],
                share(r, "base_share_pct"),
                share(r, "new_share_pct"),
                share(r, "share_change_points")
            )
        })
        .collect()
    };
    let table = shares(&doc);
    let switches = |data: &str| {
        LAPSE.in_dir(&dir).report(data, "summary", &[])["session"]["os_events"]
            .as_array()
            .is_some_and(|e| e.iter().any(|e| e == "switch"))
    };
    if switches("quiet.data") && switches("busy.data") {
        let app = diff_json(&["--metric", "application_exclusive_ns"]);
        assert!(
            app["totals"]["base"]["application_exclusive_ns"].is_u64(),
            "{app}"
        );
        for r in app["rows"].as_array().unwrap() {
            assert!(
                share(r, "share_change_points").abs() < 5.0,
                "a share of application time moved by 5 points or more between runs of one program:\n{}",
                shares(&app)
            );
        }
    } else {
        eprintln!("SKIP the 5-point bound: no switch events, so application time includes waiting for a CPU");
    }
    let rows = doc["rows"].as_array().unwrap();
    // The shares are of the whole run: they add up to about 100 %, and the
    // work is where the program does it.
    for side in ["base_share_pct", "new_share_pct"] {
        let sum: f64 = rows.iter().map(|r| share(r, side)).sum();
        assert!((90.0..=100.5).contains(&sum), "{side} sums to {sum}");
        let of = |f: &str| {
            rows.iter()
                .find(|r| r["function"] == f)
                .map_or(0.0, |r| share(r, side))
        };
        assert!(
            of("heavy") > of("medium") && of("medium") > of("light") && of("light") > 0.0,
            "{side}:\n{table}"
        );
    }

    // Normalized: NEW scaled by base / new total, so a row's change is the
    // change of its share; the table says so in its header.
    let norm = diff_json(&["--normalize"]);
    let scale = norm["scale"].as_f64().expect("a scale");
    assert!((scale - base / new).abs() < 1e-9, "{scale} vs {base}/{new}");
    for r in norm["rows"].as_array().unwrap() {
        let (b, n) = (share(r, "base_share_pct"), share(r, "new_share_pct"));
        if b > 0.0 {
            let want = 100.0 * (n / b - 1.0);
            let got = r["change_pct"].as_f64().unwrap();
            assert!((got - want).abs() < 1e-6 * want.abs().max(1.0), "{r}");
        }
    }
    let table = LAPSE
        .in_dir(&dir)
        .ok(["diff", "quiet.data", "busy.data"])
        .clone();
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains(&format!(
            "normalized: changes compare base with new × {scale:.3}"
        )),
        "{table}"
    );
    assert!(table.lines().any(|l| l.starts_with("total ")), "{table}");
}
