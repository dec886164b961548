//! End to end through the `lapse` binary: `lapse export` with the report's
//! filters (`--tid`, `--from/--to`, `--function`), `--min-duration` on a
//! call-heavy C program (#34 item 1: exports too big to open), and the
//! size guard that refuses an export above its limit unless `--force`.
//! Tests skip (with a message) when gcc is missing or perf events are refused.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use lapse_testkit::{compile, stderr, Lapse, WorkDir, INSTRUMENTED};
use serde_json::Value;

const LAPSE: Lapse = Lapse::new(env!("CARGO_BIN_EXE_lapse")).with_env(&[("NO_COLOR", "1")]);

/// 20 rounds of 2,500 calls of a tiny `leaf` (50,000 short calls) and one
/// `slow` call of about a millisecond's spinning, which calls nothing.
const PROGRAM: &str = r#"
#include <stdint.h>
#include <stdlib.h>
#define NOINLINE __attribute__((noinline))
volatile uint64_t sink;
NOINLINE uint64_t leaf(uint64_t x) { return x * 3 + 1; }
NOINLINE void slow(void) {
    uint64_t x = 88172645463325252ULL;
    for (int i = 0; i < 400000; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; }
    sink = x;
}
NOINLINE void round_trip(int r) {
    uint64_t s = 0;
    for (int i = 0; i < 2500; i++) s += leaf(i + r);
    sink = s;
    slow();
}
int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 20;
    for (int r = 0; r < rounds; r++) round_trip(r);
    return 0;
}
"#;

/// The test directory and the recording, made once for all the tests.
fn recording() -> Option<&'static (WorkDir, PathBuf)> {
    static ONCE: OnceLock<Option<(WorkDir, PathBuf)>> = OnceLock::new();
    ONCE.get_or_init(|| {
        let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "export_filter_e2e");
        compile(&dir, "gcc", "calls", PROGRAM, INSTRUMENTED)?;
        let out = LAPSE.in_dir(&dir).record(
            &["--method", "instrument"],
            Path::new("calls.data"),
            Path::new("./calls"),
            &[],
        )?;
        assert!(out.status.success(), "record failed: {}", stderr(&out));
        let data = dir.join("calls.data");
        Some((dir, data))
    })
    .as_ref()
}

fn export(dir: &Path, out: &str, args: &[&str]) -> Vec<u8> {
    let mut all = vec!["export", "calls.data", "-o", out];
    all.extend(args);
    LAPSE.in_dir(dir).ok(&all);
    std::fs::read(dir.join(out)).expect("export written")
}

/// What `lapse` said when it refused `args`: one line, and a failure.
fn refused(lapse: &Lapse, args: &[&str]) -> String {
    let out = lapse.run(args);
    assert!(!out.status.success(), "{args:?}");
    let text = stderr(&out);
    assert_eq!(text.trim().lines().count(), 1, "{text}");
    text
}

/// The `format` export with `filter` is smaller than without.
fn shrinks(dir: &Path, format: &str, filter: &[&str]) {
    let all = export(dir, &format!("all.{format}"), &["--format", format]);
    let mut args = vec!["--format", format];
    args.extend(filter);
    let cut = export(dir, &format!("cut.{format}"), &args);
    assert!(
        cut.len() < all.len(),
        "{format} {filter:?}: {} >= {}",
        cut.len(),
        all.len()
    );
}

/// Every `slow` call of a Chrome trace as (start, end) in µs text, per tid.
fn calls_of(trace: &[u8], name: &str) -> Vec<(String, String)> {
    let doc: Value = serde_json::from_slice(trace).expect("chrome JSON");
    let mut open: BTreeMap<u64, Vec<(String, bool)>> = BTreeMap::new();
    let mut out = Vec::new();
    for e in doc["traceEvents"].as_array().unwrap() {
        let tid = e["tid"].as_u64().unwrap_or(0);
        let ts = e["ts"].to_string();
        match e["ph"].as_str() {
            Some("B") => open.entry(tid).or_default().push((ts, e["name"] == name)),
            Some("E") => {
                let (start, is) = open.get_mut(&tid).and_then(Vec::pop).expect("balanced");
                if is {
                    out.push((start, ts));
                }
            }
            _ => {}
        }
    }
    out.sort();
    out
}

fn names(trace: &[u8]) -> Vec<String> {
    let doc: Value = serde_json::from_slice(trace).expect("chrome JSON");
    let mut names: Vec<String> = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "B")
        .map(|e| e["name"].as_str().unwrap_or("").to_owned())
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn min_duration_shrinks_a_chrome_trace_tenfold_and_keeps_long_calls_exact() {
    let Some((dir, _)) = recording() else { return };
    let full = export(dir, "full.chrome", &["--format", "chrome"]);
    let thin = export(
        dir,
        "thin.chrome",
        &["--format", "chrome", "--min-duration", "10us"],
    );
    println!(
        "chrome: {} bytes; --min-duration 10us: {} bytes",
        full.len(),
        thin.len()
    );
    assert!(
        full.len() >= 10 * thin.len(),
        "{} bytes is not 10x smaller than {}",
        thin.len(),
        full.len()
    );
    // The long calls are all there, to the nanosecond; the short ones are not.
    let slow = calls_of(&full, "slow");
    assert_eq!(slow.len(), 20);
    assert_eq!(calls_of(&thin, "slow"), slow);
    assert_eq!(calls_of(&thin, "round_trip"), calls_of(&full, "round_trip"));
    assert_eq!(calls_of(&full, "leaf").len(), 50_000);
    // (a leaf the scheduler interrupted lasts long enough to stay, exact too)
    let kept = calls_of(&thin, "leaf");
    assert!(kept.len() < 500, "{} short calls kept", kept.len());
    let full_leaves = calls_of(&full, "leaf");
    for (start, end) in &kept {
        let us = |t: &str| t.parse::<f64>().unwrap();
        assert!(us(end) - us(start) >= 10.0 - 1e-9, "{start}..{end}");
        assert!(full_leaves
            .binary_search(&(start.clone(), end.clone()))
            .is_ok());
    }
}

#[test]
fn min_duration_applies_to_every_timeline_and_is_refused_elsewhere() {
    let Some((dir, _)) = recording() else { return };
    // (the HTML page buckets its timeline: its size does not follow the calls)
    export(
        dir,
        "thin.html",
        &["--format", "html", "--min-duration", "10us"],
    );
    for format in ["perfetto", "firefox", "speedscope"] {
        shrinks(dir, format, &["--min-duration", "10us"]);
    }
    let out = LAPSE.in_dir(dir).run([
        "export",
        "calls.data",
        "--format",
        "collapsed",
        "--min-duration",
        "10us",
        "-o",
        "x",
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--min-duration"), "{}", stderr(&out));
    let text = refused(
        &LAPSE.in_dir(dir),
        &[
            "export",
            "calls.data",
            "--format",
            "chrome",
            "--min-duration",
            "10 parsecs",
            "-o",
            "x",
        ],
    );
    assert!(text.contains("is not a duration"), "{text}");
}

#[test]
fn function_keeps_its_subtree_in_every_format() {
    let Some((dir, _)) = recording() else { return };
    let chrome = export(
        dir,
        "fn.chrome",
        &["--format", "chrome", "--function", "^round_trip$"],
    );
    assert_eq!(names(&chrome), ["leaf", "round_trip", "slow"]);
    let folded = export(
        dir,
        "fn.collapsed",
        &["--format", "collapsed", "--function", "^slow$"],
    );
    let text = String::from_utf8(folded).unwrap();
    assert!(!text.is_empty());
    assert!(text.lines().all(|l| l.starts_with("slow ")), "{text}");
    for format in [
        "speedscope",
        "perfetto",
        "firefox",
        "pprof",
        "callgrind",
        "html",
        "flamegraph",
    ] {
        shrinks(dir, format, &["--function", "^slow$"]);
    }
}

#[test]
fn time_window_and_threads_select_as_report_does() {
    let Some((dir, data)) = recording() else {
        return;
    };
    let session = LAPSE.in_dir(dir).report(data, "summary", &[]);
    let elapsed = session["session"]["elapsed_inclusive_ns"].as_u64().unwrap() as f64 / 1e9;
    let to = format!("{:.6}", elapsed / 2.0);
    let full = export(dir, "all.chrome2", &["--format", "chrome"]);
    let half = export(dir, "half.chrome", &["--format", "chrome", "--to", &to]);
    // (balanced calls: calls_of panics otherwise)
    let (a, b) = (calls_of(&full, "leaf").len(), calls_of(&half, "leaf").len());
    assert!(b > 0 && b < a, "{b} of {a}");
    let text = refused(
        &LAPSE.in_dir(dir),
        &[
            "export",
            "calls.data",
            "--format",
            "chrome",
            "--tid",
            "99999",
            "-o",
            "x",
        ],
    );
    assert!(
        text.contains("--tid 99999") && text.contains("no thread 99999"),
        "{text}"
    );
    let out = LAPSE.in_dir(dir).run([
        "export",
        "calls.data",
        "--format",
        "chrome",
        "--from",
        "2",
        "--to",
        "1",
        "-o",
        "x",
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("--from 2 is after --to 1"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn size_guard_refuses_a_large_export_unless_forced() {
    let Some((dir, _)) = recording() else { return };
    // A limit of 100 kB for this test (1 GB for users).
    let small = Lapse::new(env!("CARGO_BIN_EXE_lapse"))
        .with_env(&[("LAPSE_EXPORT_SIZE_LIMIT", "100000")])
        .in_dir(dir);
    std::fs::write(dir.join("kept.chrome"), "keep me").unwrap();
    let before: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let text = refused(
        &small,
        &[
            "export",
            "calls.data",
            "--format",
            "chrome",
            "-o",
            "kept.chrome",
        ],
    );
    assert!(text.contains("would be") && text.contains("MB"), "{text}");
    assert!(
        text.contains("--min-duration") && text.contains("--force"),
        "{text}"
    );
    assert_eq!(std::fs::read(dir.join("kept.chrome")).unwrap(), b"keep me");
    let after: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(before.len(), after.len(), "nothing left beside the file");
    // The size it said is the size --force writes.
    small.ok([
        "export",
        "calls.data",
        "--format",
        "chrome",
        "-o",
        "kept.chrome",
        "--force",
    ]);
    let len = std::fs::metadata(dir.join("kept.chrome")).unwrap().len();
    assert!(len > 100_000);
    let said = format!("{:.1} MB", len as f64 / 1e6);
    let said_whole = format!("{:.0} MB", len as f64 / 1e6);
    assert!(
        text.contains(&said) || text.contains(&said_whole),
        "{text} vs {len}"
    );
    // Under the limit, nothing is said.
    small.ok([
        "export",
        "calls.data",
        "--format",
        "chrome",
        "--min-duration",
        "10us",
        "-o",
        "thin2.chrome",
    ]);
}

/// The program sampled for 300 rounds (a few hundred ms), made once.
fn sampled() -> Option<&'static Path> {
    static ONCE: OnceLock<Option<PathBuf>> = OnceLock::new();
    ONCE.get_or_init(|| {
        let (dir, _) = recording()?;
        let out = LAPSE.in_dir(dir).record(
            &["--method", "sample"],
            Path::new("sampled.data"),
            Path::new("./calls"),
            &["300"],
        )?;
        assert!(out.status.success(), "record failed: {}", stderr(&out));
        Some(dir.join("sampled.data"))
    })
    .as_deref()
}

#[test]
fn sampling_exports_take_the_same_filters() {
    let Some((dir, _)) = recording() else { return };
    let Some(_) = sampled() else { return };
    let run = |args: &[&str]| {
        let mut all = vec!["export", "sampled.data", "-o", "s.out"];
        all.extend(args);
        LAPSE.in_dir(dir).run(&all)
    };
    let ok = |args: &[&str]| {
        let out = run(args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        std::fs::read_to_string(dir.join("s.out")).unwrap()
    };
    // Every folded stack starts at slow (the program spends most of its time there).
    let folded = ok(&["--format", "collapsed", "--function", "^slow$"]);
    assert!(!folded.is_empty());
    assert!(folded.lines().all(|l| l.starts_with("slow")), "{folded}");
    let all = ok(&["--format", "collapsed"]);
    let samples = |text: &str| -> u64 {
        text.lines()
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
            .sum()
    };
    assert!(samples(&folded) < samples(&all));
    // A window holds fewer samples than the whole run.
    let chrome_samples = |text: &str| -> usize {
        let doc: Value = serde_json::from_str(text).unwrap();
        doc["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["cat"] == "sample")
            .count()
    };
    let whole = chrome_samples(&ok(&["--format", "chrome"]));
    let early = chrome_samples(&ok(&["--format", "chrome", "--to", "0.05"]));
    assert!(early < whole, "{early} of {whole}");
    // The same one-line errors as report; --min-duration has no calls to merge.
    for (args, says) in [
        (
            &["--format", "chrome", "--tid", "99999"][..],
            "no thread 99999",
        ),
        (
            &["--format", "chrome", "--min-duration", "1ms"][..],
            "sampling recording",
        ),
    ] {
        let out = run(args);
        assert!(!out.status.success(), "{args:?}");
        let text = stderr(&out);
        assert_eq!(text.trim().lines().count(), 1, "{text}");
        assert!(text.contains(says), "{text}");
    }
}
