//! End to end, sampling: C programs built during the test with
//! `-O2 -fomit-frame-pointer` are recorded by the `lapse` binary with
//! `--method sample` and checked through `lapse report --format json`.
//!
//! The programs split their CPU time by iteration counts of one identical
//! loop, interleaved, so the expected shares hold whatever the machine's
//! load (cpu-clock only ticks while the target runs); bounds are a few
//! points. Where threads or processes run at the same time, a loaded
//! machine (a busy hyperthread sibling, another VM) can make the same
//! iterations cost one of them more CPU than the other, so those programs
//! measure their own CPU time and the shares are checked against that.
//! Tests skip (with a message) when perf_event_open is refused or gcc is missing.

use std::path::{Path, PathBuf};
use std::process::Command;

use lapse_testkit::{
    compile, expect_rows, perf_refused, row, shared_dir_with_lapse, skip, Lapse, WorkDir,
};
use serde_json::Value;

const LAPSE: Lapse = Lapse::new(env!("CARGO_BIN_EXE_lapse"));

/// One loop, identical in every function, so iterations are a CPU-time unit.
const PRELUDE: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
/* noipa: no inlining, cloning, identical-code folding or purity tricks. */
#define NOINLINE __attribute__((noipa))
#define LOOP(n) uint64_t x = n; for (uint64_t i = 0; i < (n); i++) x = x * 6364136223846793005ULL + i; return x
volatile uint64_t sink;
static uint64_t unit(int argc, char **argv) { return argc > 1 ? strtoull(argv[1], 0, 10) : 1000000; }
/* Where report_cpu writes: <program>.cpu (set by cpu_log_beside). */
static char cpu_log[4096];
static void cpu_log_beside(const char *argv0) { snprintf(cpu_log, sizeof cpu_log, "%s.cpu", argv0); }
/* Appends "<name> <CPU ns this thread has used>" to the log. */
static void report_cpu(const char *name) {
    struct timespec ts; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    FILE *f = fopen(cpu_log, "a");
    if (!f) return;
    fprintf(f, "%s %lld\n", name, (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
    fclose(f);
}
"#;

/// Iterations per unit of work: about 1 ms of CPU on the reference VM.
const UNIT: &str = "1000000";

fn work_dir(name: &str) -> WorkDir {
    WorkDir::new(env!("CARGO_TARGET_TMPDIR"), &format!("sample_e2e-{name}"))
}

/// Compiles `source` (after the prelude) with `flags`; `None` means skip.
fn gcc(dir: &Path, name: &str, source: &str, flags: &[&str]) -> Option<PathBuf> {
    let mut all = vec!["-O2", "-fomit-frame-pointer", "-g", "-pthread"];
    all.extend_from_slice(flags);
    compile(dir, "gcc", name, &format!("{PRELUDE}\n{source}"), &all)
}

/// Records `argv` by sampling into DIR/out.lapse; `None` means skip.
fn record(dir: &Path, extra: &[&str], argv: &[&str]) -> Option<PathBuf> {
    record_with_stderr(dir, extra, argv).map(|(data, _)| data)
}

/// [`record`], with what lapse said on stderr.
fn record_with_stderr(dir: &Path, extra: &[&str], argv: &[&str]) -> Option<(PathBuf, String)> {
    let data = dir.join("out.lapse");
    let data_s = data.to_str().expect("utf-8 path");
    let mut args = vec!["record", "--method", "sample", "-o", data_s];
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(argv);
    let out = LAPSE.run(&args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if perf_refused(&stderr) {
        return skip(stderr);
    }
    assert!(out.status.success(), "lapse record failed: {stderr}");
    Some((data, stderr))
}

/// CPU time process `pid` has used so far (/proc/PID/schedstat), in ns.
fn cpu_ns(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .expect("schedstat of the spinner")
}

fn pct(r: &Value, key: &str) -> f64 {
    r[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing in {r}"))
}

/// The CPU times a program wrote with `report_cpu`, by name, in ns.
fn measured_cpu(exe: &Path) -> std::collections::HashMap<String, f64> {
    let log = PathBuf::from(format!("{}.cpu", exe.display()));
    let text = std::fs::read_to_string(&log).expect("the program's CPU log");
    text.lines()
        .filter_map(|l| {
            let (name, ns) = l.split_once(' ')?;
            Some((name.to_owned(), ns.parse().ok()?))
        })
        .collect()
}

/// `part`'s share of the CPU time of all `parts`, in percent.
fn share(cpu: &std::collections::HashMap<String, f64>, part: &str, parts: &[&str]) -> f64 {
    let of = |p: &str| {
        *cpu.get(p)
            .unwrap_or_else(|| panic!("no CPU time for {p}: {cpu:?}"))
    };
    100.0 * of(part) / parts.iter().map(|p| of(p)).sum::<f64>()
}

fn assert_near(what: &str, got: f64, want: f64, tolerance: f64) {
    assert!(
        (got - want).abs() <= tolerance,
        "{what}: {got:.1} % (expected {want:.1} ± {tolerance})"
    );
}

/// The work functions call `tick` first so that they are not leaves: gcc
/// gives leaf functions no frame even with `-fno-omit-frame-pointer`, which
/// would hide their caller from `--call-graph fp` stacks.
const SPLIT: &str = r#"
extern uint64_t lib_hot(uint64_t n);
NOINLINE void tick(void) { sink++; }
NOINLINE uint64_t work_a(uint64_t n) { tick(); LOOP(n); }
NOINLINE uint64_t work_b(uint64_t n) { tick(); LOOP(n); }
int main(int argc, char **argv) {
    uint64_t u = unit(argc, argv);
    for (int r = 0; r < 200; r++) {
        sink += work_a(6 * u);
        sink += work_b(3 * u);
        sink += lib_hot(u);
    }
    return 0;
}
"#;

const LIB_HOT: &str = r#"
NOINLINE void lib_tick(void) { sink++; }
uint64_t lib_hot(uint64_t n) { lib_tick(); LOOP(n); }
"#;

/// Builds the 60/30/10 program (lib_hot in its own shared library).
fn build_split(dir: &Path, frame_pointers: bool) -> Option<PathBuf> {
    let fp: &[&str] = if frame_pointers {
        &["-fno-omit-frame-pointer"]
    } else {
        &["-fomit-frame-pointer"]
    };
    gcc(
        dir,
        "libhot.so",
        LIB_HOT,
        &[fp, &["-shared", "-fPIC"]].concat(),
    )?;
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    let libdir = format!("-L{}", dir.display());
    gcc(
        dir,
        "split",
        SPLIT,
        &[fp, &[libdir.as_str(), "-lhot", rpath.as_str()]].concat(),
    )
}

#[test]
fn cpu_split_between_functions_and_a_shared_library() {
    let dir = work_dir("split");
    let Some(exe) = build_split(&dir, false) else {
        return;
    };
    let Some(data) = record(&dir, &[], &[exe.to_str().expect("utf-8"), UNIT]) else {
        return;
    };
    let f = LAPSE.report(&data, "functions", &[]);
    assert_eq!(f["method"], "sampling");
    let samples = f["session"]["samples"].as_u64().expect("samples");
    assert!(samples > 500, "only {samples} samples");
    assert_near(
        "work_a exclusive",
        pct(row(&f, "work_a"), "exclusive_pct"),
        60.0,
        4.0,
    );
    assert_near(
        "work_b exclusive",
        pct(row(&f, "work_b"), "exclusive_pct"),
        30.0,
        4.0,
    );
    let hot = row(&f, "lib_hot");
    assert_eq!(hot["module"], "libhot.so");
    assert_near("lib_hot exclusive", pct(hot, "exclusive_pct"), 10.0, 3.0);
    // main calls every hot function: it is on (nearly) every stack.
    assert!(
        pct(row(&f, "main"), "inclusive_pct") >= 97.0,
        "main: {}",
        row(&f, "main")
    );
    for r in expect_rows(&f) {
        assert!(pct(r, "inclusive_pct") <= 100.0 + 1e-9, "{r}");
    }

    let m = LAPSE.report(&data, "modules", &[]);
    let lib = expect_rows(&m)
        .iter()
        .find(|r| r["module"] == "libhot.so")
        .expect("libhot.so in the modules view");
    assert_near("libhot.so exclusive", pct(lib, "exclusive_pct"), 10.0, 3.0);

    // The hottest line is the loop line of one of the LOOP functions: the
    // one of work_a, which gets 60 %.
    let l = LAPSE.report(&data, "lines", &[]);
    let top = expect_rows(&l)
        .iter()
        .max_by_key(|r| r["exclusive_samples"].as_u64().unwrap_or(0))
        .expect("a line");
    let source = std::fs::read_to_string(dir.join("split.c")).expect("read source");
    let work_a_line = source
        .lines()
        .position(|l| l.contains("work_a(uint64_t n)"))
        .expect("work_a in the source") as u64
        + 1;
    assert_eq!(
        top["line"].as_u64(),
        Some(work_a_line),
        "hottest line: {top}"
    );
    assert!(top["source_file"]
        .as_str()
        .is_some_and(|s| s.ends_with("split.c")));
}

#[test]
fn frame_pointer_call_graph() {
    let dir = work_dir("split-fp");
    let Some(exe) = build_split(&dir, true) else {
        return;
    };
    let Some((data, stderr)) = record_with_stderr(
        &dir,
        &["--call-graph", "fp"],
        &[exe.to_str().expect("utf-8"), UNIT],
    ) else {
        return;
    };
    assert!(!stderr.contains("single frame"), "{stderr}");
    assert!(!stderr.contains("keep no frame pointer"), "{stderr}");
    let f = LAPSE.report(&data, "functions", &[]);
    assert_near(
        "work_a exclusive",
        pct(row(&f, "work_a"), "exclusive_pct"),
        60.0,
        4.0,
    );
    assert!(pct(row(&f, "main"), "inclusive_pct") >= 95.0);
}

/// `--call-graph fp` on code without frame pointers gives one-frame stacks:
/// lapse says so on stderr and in the header, rather than let the call
/// tree pass for flat code.
#[test]
fn frame_pointers_asked_for_code_without_them_is_a_warning() {
    let dir = work_dir("fp-without");
    let Some(exe) = build_split(&dir, false) else {
        return;
    };
    let Some((data, stderr)) = record_with_stderr(
        &dir,
        &["--call-graph", "fp"],
        &[exe.to_str().expect("utf-8"), UNIT],
    ) else {
        return;
    };
    assert!(
        stderr.contains("warning") && stderr.contains("single frame"),
        "{stderr}"
    );
    // Said before the run too, from the program's unwind tables.
    assert!(
        stderr.contains("--call-graph fp: ") && stderr.contains("keep no frame pointer"),
        "{stderr}"
    );
    let info = LAPSE.run(["info", data.to_str().expect("utf-8")]);
    let info = String::from_utf8_lossy(&info.stdout);
    assert!(info.contains("single frame"), "{info}");
    let table = LAPSE.run(["report", data.to_str().expect("utf-8")]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("warning:") && l.contains("single frame")),
        "{table}"
    );
}

/// A stack deeper than the 16 KiB the kernel copies: its partial paths hang
/// under one `[truncated]` root, not as roots of their own.
#[test]
fn stacks_cut_at_the_copy_limit_are_marked_truncated() {
    let dir = work_dir("truncated");
    let src = r#"
NOINLINE uint64_t leaf(uint64_t n) { LOOP(n); }
/* 512 bytes a level: 100 levels are 50 KiB of stack. */
NOINLINE uint64_t deep(int d, uint64_t n) {
    volatile char pad[512];
    pad[0] = (char)d;
    if (d == 0) return leaf(n) + pad[0];
    return deep(d - 1, n) + pad[0];
}
NOINLINE uint64_t shallow(uint64_t n) { return leaf(n) + 1; }
int main(int argc, char **argv) {
    uint64_t u = unit(argc, argv);
    for (int i = 0; i < 100; i++) { sink += deep(100, u); sink += shallow(u); }
    return 0;
}
"#;
    let Some(exe) = gcc(&dir, "deep", src, &[]) else {
        return;
    };
    let Some(data) = record(&dir, &[], &[exe.to_str().expect("utf-8"), UNIT]) else {
        return;
    };
    let t = LAPSE.report(&data, "calltree", &[]);
    let roots: Vec<(&str, f64)> = t["roots"]
        .as_array()
        .expect("roots")
        .iter()
        .map(|r| {
            (
                r["function"].as_str().unwrap_or(""),
                pct(r, "inclusive_pct"),
            )
        })
        .collect();
    let share = |name: &str| roots.iter().find(|r| r.0 == name).map_or(0.0, |r| r.1);
    // Half the time is in the deep recursion, whose stacks do not fit.
    assert_near("[truncated]", share("[truncated]"), 50.0, 8.0);
    assert_near("_start", share("_start"), 50.0, 8.0);
    assert!(
        roots.iter().all(|r| r.0 != "deep" && r.0 != "leaf"),
        "partial paths are not roots: {roots:?}"
    );
    let f = LAPSE.report(&data, "functions", &[]);
    assert_near(
        "leaf exclusive",
        pct(row(&f, "leaf"), "exclusive_pct"),
        100.0,
        3.0,
    );
}

#[test]
fn recursion_counts_once_per_sample() {
    let dir = work_dir("recursion");
    let src = r#"
NOINLINE uint64_t leaf(uint64_t n) { LOOP(n); }
NOINLINE uint64_t rec(int depth, uint64_t n) {
    uint64_t r = leaf(n);
    if (depth > 0) r += rec(depth - 1, n);
    return r + 1;
}
int main(int argc, char **argv) {
    uint64_t u = unit(argc, argv);
    for (int i = 0; i < 50; i++) sink += rec(20, u);
    return 0;
}
"#;
    let Some(exe) = gcc(&dir, "recursion", src, &[]) else {
        return;
    };
    let Some(data) = record(&dir, &[], &[exe.to_str().expect("utf-8"), UNIT]) else {
        return;
    };
    let f = LAPSE.report(&data, "functions", &[]);
    let rec = row(&f, "rec");
    let incl = pct(rec, "inclusive_pct");
    assert!(incl <= 100.0 + 1e-9, "rec inclusive {incl}");
    assert!(incl >= 97.0, "rec inclusive {incl}");
    assert!(pct(row(&f, "leaf"), "exclusive_pct") >= 90.0);
}

#[test]
fn two_threads() {
    let dir = work_dir("threads");
    let src = r#"
NOINLINE uint64_t work_a(uint64_t n) { LOOP(n); }
NOINLINE uint64_t work_b(uint64_t n) { LOOP(n); }
static uint64_t u;
static void *thread_a(void *p) { (void)p; sink += work_a(600 * u); report_cpu("a"); return 0; }
static void *thread_b(void *p) { (void)p; sink += work_b(600 * u); report_cpu("b"); return 0; }
int main(int argc, char **argv) {
    u = unit(argc, argv);
    cpu_log_beside(argv[0]);
    pthread_t a, b;
    pthread_create(&a, 0, thread_a, 0);
    pthread_create(&b, 0, thread_b, 0);
    pthread_join(a, 0);
    pthread_join(b, 0);
    return 0;
}
"#;
    let Some(exe) = gcc(&dir, "threads", src, &[]) else {
        return;
    };
    let Some(data) = record(&dir, &[], &[exe.to_str().expect("utf-8"), UNIT]) else {
        return;
    };
    let t = LAPSE.report(&data, "threads", &[]);
    let busy: Vec<&Value> = expect_rows(&t)
        .iter()
        .filter(|r| pct(r, "inclusive_pct") >= 35.0)
        .collect();
    assert_eq!(busy.len(), 2, "two busy threads expected: {t:#}");
    assert_ne!(busy[0]["tid"], busy[1]["tid"]);
    let f = LAPSE.report(&data, "functions", &[]);
    // (about 50 % each on a quiet machine)
    let cpu = measured_cpu(&exe);
    assert_near(
        "work_a exclusive",
        pct(row(&f, "work_a"), "exclusive_pct"),
        share(&cpu, "a", &["a", "b"]),
        5.0,
    );
    assert_near(
        "work_b exclusive",
        pct(row(&f, "work_b"), "exclusive_pct"),
        share(&cpu, "b", &["a", "b"]),
        5.0,
    );
    assert!(pct(row(&f, "thread_a"), "inclusive_pct") >= 45.0);
}

#[test]
fn a_thread_id_used_again_is_a_thread_of_its_own() {
    // The kernel hands out thread ids in turn up to pid_max and then from
    // the bottom again: threads made and joined one after another get the
    // id of the first again after at most pid_max of them (32,768 by
    // default; no system setting is changed). The first thread spins 50
    // units, the one with its id again 100 (#31 item 16): two rows of the
    // threads view, each with its own share of the samples (one merged row
    // would have them all).
    let dir = work_dir("tid_reused");
    let src = r#"
NOINLINE uint64_t work(uint64_t n) { LOOP(n); }
static uint64_t u;
static pid_t first_tid;
static volatile int reused;
static void *first(void *p) { (void)p; first_tid = gettid(); sink += work(50 * u); report_cpu("first"); return 0; }
static void *filler(void *p) {
    (void)p;
    if (gettid() == first_tid) { reused = 1; sink += work(100 * u); report_cpu("second"); }
    return 0;
}
int main(int argc, char **argv) {
    u = unit(argc, argv);
    cpu_log_beside(argv[0]);
    pthread_t t;
    pthread_create(&t, 0, first, 0);
    pthread_join(t, 0);
    long n = 0;
    while (!reused && n < 5000000) { pthread_create(&t, 0, filler, 0); pthread_join(t, 0); n++; }
    FILE *f = fopen(cpu_log, "a");
    if (f) { fprintf(f, "tid %d\n", (int)first_tid); fclose(f); }
    return reused ? 0 : 3;
}
"#;
    let Some(exe) = gcc(&dir, "tid_reused", src, &[]) else {
        return;
    };
    let Some(data) = record(&dir, &[], &[exe.to_str().expect("utf-8"), UNIT]) else {
        return;
    };
    let cpu = measured_cpu(&exe);
    let tid = *cpu.get("tid").expect("no thread id came round again");
    let t = LAPSE.report(&data, "threads", &[]);
    let mut rows: Vec<&Value> = expect_rows(&t)
        .iter()
        .filter(|r| r["tid"].as_f64() == Some(tid))
        .collect();
    rows.sort_by_key(|r| r["thread_serial"].as_u64());
    let serials: Vec<_> = rows.iter().map(|r| r["thread_serial"].as_u64()).collect();
    assert_eq!(
        serials,
        [Some(0), Some(1)],
        "two threads of id {tid}: {t:#}"
    );
    let samples = |r: &Value| r["inclusive_samples"].as_f64().expect("inclusive_samples");
    let both = samples(rows[0]) + samples(rows[1]);
    assert!(both >= 50.0, "{both} samples of the two threads");
    // (first: about a third of the two threads' samples on a quiet machine)
    for (r, name) in rows.iter().zip(["first", "second"]) {
        assert_near(
            &format!("{name} thread's samples"),
            100.0 * samples(r) / both,
            share(&cpu, name, &["first", "second"]),
            12.0,
        );
    }
}

#[test]
fn no_samples_while_asleep() {
    let dir = work_dir("sleep");
    let src = r#"
NOINLINE uint64_t work(uint64_t n) { LOOP(n); }
int main(int argc, char **argv) {
    uint64_t u = unit(argc, argv);
    usleep(800000);
    sink += work(300 * u);
    return 0;
}
"#;
    let Some(exe) = gcc(&dir, "sleep", src, &[]) else {
        return;
    };
    let Some(data) = record(&dir, &[], &[exe.to_str().expect("utf-8"), UNIT]) else {
        return;
    };
    let f = LAPSE.report(&data, "functions", &[]);
    let samples = f["session"]["samples"].as_u64().expect("samples");
    let duration_ms = f["session"]["duration_ns"].as_u64().expect("duration") / 1_000_000;
    assert!(
        duration_ms >= 800,
        "the run includes the sleep: {duration_ms} ms"
    );
    // At 1 kHz on CPU time, the 0.8 s asleep add nothing.
    assert!(
        samples + 700 < duration_ms,
        "{samples} samples over {duration_ms} ms"
    );
    assert!(pct(row(&f, "work"), "exclusive_pct") >= 90.0);
}

#[test]
fn forked_child_and_dlopened_library() {
    let dir = work_dir("fork-dlopen");
    let plugin = r#"
uint64_t plug_hot(uint64_t n) { LOOP(n); }
"#;
    let Some(_) = gcc(&dir, "libplug.so", plugin, &["-shared", "-fPIC"]) else {
        return;
    };
    let src = format!(
        r#"
NOINLINE uint64_t parent_work(uint64_t n) {{ LOOP(n); }}
int main(int argc, char **argv) {{
    uint64_t u = unit(argc, argv);
    cpu_log_beside(argv[0]);
    pid_t pid = fork();
    if (pid == 0) {{
        void *h = dlopen("{}/libplug.so", RTLD_NOW);
        if (!h) return 3;
        uint64_t (*hot)(uint64_t) = (uint64_t (*)(uint64_t))dlsym(h, "plug_hot");
        sink += hot(400 * u);
        report_cpu("child");
        return 0;
    }}
    sink += parent_work(400 * u);
    report_cpu("parent");
    int status = 0;
    waitpid(pid, &status, 0);
    return WEXITSTATUS(status);
}}
"#,
        dir.display()
    );
    let Some(exe) = gcc(&dir, "forker", &src, &["-ldl"]) else {
        return;
    };
    let Some(data) = record(&dir, &[], &[exe.to_str().expect("utf-8"), UNIT]) else {
        return;
    };
    let p = LAPSE.report(&data, "processes", &[]);
    let busy = expect_rows(&p)
        .iter()
        .filter(|r| pct(r, "inclusive_pct") >= 35.0)
        .count();
    assert_eq!(busy, 2, "parent and child both sampled: {p:#}");
    let f = LAPSE.report(&data, "functions", &[]);
    let hot = row(&f, "plug_hot");
    assert_eq!(hot["module"], "libplug.so");
    // (about 50 % each on a quiet machine)
    let cpu = measured_cpu(&exe);
    let parts = ["child", "parent"];
    assert_near(
        "plug_hot exclusive",
        pct(hot, "exclusive_pct"),
        share(&cpu, "child", &parts),
        6.0,
    );
    assert_near(
        "parent_work exclusive",
        pct(row(&f, "parent_work"), "exclusive_pct"),
        share(&cpu, "parent", &parts),
        6.0,
    );
}

#[test]
fn attach_to_a_running_process() {
    let dir = work_dir("attach");
    let src = r#"
NOINLINE uint64_t attach_spin(uint64_t n) { LOOP(n); }
int main(int argc, char **argv) {
    uint64_t u = unit(argc, argv);
    for (;;) sink += attach_spin(10 * u);
}
"#;
    let Some(exe) = gcc(&dir, "spinner", src, &[]) else {
        return;
    };
    let mut child = Command::new(&exe).arg(UNIT).spawn().expect("start spinner");
    std::thread::sleep(std::time::Duration::from_millis(200));
    let data = dir.join("out.lapse");
    let pid = child.id().to_string();
    let cpu_before = cpu_ns(child.id());
    let out = LAPSE.run([
        "record",
        "-o",
        data.to_str().expect("utf-8"),
        "--pid",
        &pid,
        "--duration",
        "1",
    ]);
    let cpu_ms = (cpu_ns(child.id()) - cpu_before) as f64 / 1e6;
    let _ = child.kill();
    let _ = child.wait();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if perf_refused(&stderr) {
        return skip(stderr).unwrap_or(());
    }
    assert!(out.status.success(), "lapse record --pid failed: {stderr}");
    // (it ran on: no exit status to speak of; before, "target exited with
    // status 0")
    assert!(
        stderr.contains(&format!("process {pid} runs on")) && !stderr.contains("exited"),
        "{stderr}"
    );
    let f = LAPSE.report(&data, "functions", &[]);
    let samples = f["session"]["samples"].as_u64().expect("samples") as f64;
    // At 1 kHz of CPU time the samples are at most the CPU time the spinner
    // had while lapse ran (a busy machine gives it less, never more), and a
    // good part of it: the window excludes only lapse's start and finish.
    assert!(
        samples <= cpu_ms * 1.05 + 10.0 && samples >= 0.3 * cpu_ms && samples >= 20.0,
        "{samples} samples while the spinner had {cpu_ms:.0} ms of CPU"
    );
    assert!(pct(row(&f, "attach_spin"), "exclusive_pct") >= 90.0);
    assert!(pct(row(&f, "main"), "inclusive_pct") >= 95.0);
}

#[test]
fn attaching_to_another_users_process_says_whose_it_is() {
    // Before: the refusal blamed kernel.perf_event_paranoid, whatever its
    // level, though no level lets a user watch another user's process.
    use std::os::unix::process::CommandExt;
    let (dir, lapse) =
        shared_dir_with_lapse(env!("CARGO_BIN_EXE_lapse"), "lapse-sample_e2e-foreign");
    // SAFETY: geteuid has no failure mode.
    let root = unsafe { libc::geteuid() } == 0;
    let mut cmd = Command::new(&lapse);
    cmd.args([
        "record",
        "-o",
        "out.lapse",
        "--pid",
        "1",
        "--duration",
        "0.2",
    ])
    .current_dir(&*dir);
    if root {
        cmd.uid(65534).gid(65534); // nobody: pid 1 is root's
    }
    let out = match cmd.output() {
        Ok(out) => out,
        Err(e) => return skip(format!("cannot run lapse as nobody: {e}")).unwrap_or(()),
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains("belongs to another user (uid 0)"),
        "{stderr}"
    );
    assert!(!dir.join("out.lapse").exists());
}

#[test]
fn hardware_events_work_or_fail_in_one_clear_line() {
    let dir = work_dir("cycles");
    let data = dir.join("out.lapse");
    let out = LAPSE.run([
        "record",
        "--method",
        "sample",
        "--event",
        "cycles",
        "-o",
        data.to_str().expect("utf-8"),
        "--",
        "true",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        return; // this machine has a PMU
    }
    assert!(
        stderr.contains("not supported") || stderr.contains("refused"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
}

/// A stripped copy of an -O2 program: no symbols, no DWARF, only the unwind
/// table. Its hottest function is one row (`module+0xSTART`, the start its
/// symbol has in the unstripped program) with its whole share, as in the
/// unstripped run; the lines view says how much has no line information.
#[test]
fn stripped_code_is_grouped_into_functions() {
    let dir = work_dir("stripped");
    let Some(exe) = build_split(&dir, false) else {
        return;
    };
    let stripped = dir.join("split-stripped");
    let ok = Command::new("strip")
        .arg("-o")
        .arg(&stripped)
        .arg(&exe)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        return skip("strip is not available").unwrap_or(());
    }
    let Some(data) = record(&dir, &[], &[exe.to_str().expect("utf-8"), UNIT]) else {
        return;
    };
    let full = LAPSE.report(&data, "functions", &[]);
    let work_a = row(&full, "work_a");
    let address = work_a["address"].as_str().expect("work_a's address");
    let share = pct(work_a, "exclusive_pct");
    let Some(data) = record(&dir, &[], &[stripped.to_str().expect("utf-8"), UNIT]) else {
        return;
    };
    let bare = LAPSE.report(&data, "functions", &[]);
    let name = format!("split-stripped+{address}");
    let grouped = row(&bare, &name);
    assert_near(
        "the stripped work_a's exclusive share",
        pct(grouped, "exclusive_pct"),
        share,
        4.0,
    );
    // A handful of functions from the stripped module, not one per address.
    let rows_of_module = expect_rows(&bare)
        .iter()
        .filter(|r| r["module"] == "split-stripped")
        .count();
    assert!(rows_of_module <= 12, "{rows_of_module} rows: {bare:#}");
    // main is not in .dynsym either: its range is on every stack.
    assert!(
        expect_rows(&bare)
            .iter()
            .any(|r| r["module"] == "split-stripped" && pct(r, "inclusive_pct") >= 97.0),
        "{bare:#}"
    );
    // The lines view: the stripped 90 % has no line information.
    let lines = LAPSE.report(&data, "lines", &[]);
    let no_line = expect_rows(&lines)
        .iter()
        .find(|r| r["source_file"].is_null() && r["line"].is_null())
        .expect("a row of no line");
    assert_near(
        "no line, exclusive",
        pct(no_line, "exclusive_pct"),
        90.0,
        4.0,
    );
}

/// JIT code: a program copies machine code into anonymous memory, makes it
/// executable, writes a perf map for it (`/tmp/perf-PID.map`) and runs it.
/// The code is named by the map, in a module called after it, and stacks
/// go on through it by frame pointers (the generated code keeps them, as
/// JITs do for profilers).
#[cfg(target_arch = "x86_64")]
#[test]
fn jit_code_is_named_by_its_perf_map() {
    let dir = work_dir("jit");
    let src = r#"
#include <string.h>
#include <sys/mman.h>
NOINLINE uint64_t native_spin(uint64_t n) { LOOP(n); }
/* push %rbp; mov %rsp,%rbp; mov %rdi,%rax; 1: dec %rax; jnz 1b; pop %rbp; ret */
static const unsigned char code[] = {0x55, 0x48, 0x89, 0xe5, 0x48, 0x89, 0xf8,
                                     0x48, 0xff, 0xc8, 0x75, 0xfb, 0x5d, 0xc3};
int main(int argc, char **argv) {
    uint64_t u = unit(argc, argv);
    unsigned char *mem = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return 1;
    memcpy(mem, code, sizeof code);
    if (mprotect(mem, 4096, PROT_READ | PROT_EXEC) != 0) return 2;
    char path[64];
    snprintf(path, sizeof path, "/tmp/perf-%d.map", getpid());
    FILE *f = fopen(path, "w");
    if (!f) return 3;
    fprintf(f, "%lx %zx jitted_countdown\n", (unsigned long)mem, sizeof code);
    fclose(f);
    printf("pid %d\n", getpid());
    fflush(stdout);
    uint64_t (*jitted)(uint64_t) = (uint64_t (*)(uint64_t))mem;
    for (int i = 0; i < 100; i++) {
        sink += jitted(3 * u);
        sink += native_spin(u);
    }
    return 0;
}
"#;
    let Some(exe) = gcc(&dir, "jit", src, &["-fno-omit-frame-pointer"]) else {
        return;
    };
    let data = dir.join("out.lapse");
    let out = LAPSE.run([
        "record",
        "--method",
        "sample",
        "-o",
        data.to_str().expect("utf-8"),
        "--",
        exe.to_str().expect("utf-8"),
        UNIT,
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let pid = stdout
        .lines()
        .find_map(|l| l.strip_prefix("pid "))
        .map(|p| p.trim().to_owned());
    if let Some(pid) = &pid {
        let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    if perf_refused(&stderr) {
        return skip(stderr).unwrap_or(());
    }
    assert!(out.status.success(), "lapse record failed: {stderr}");
    let pid = pid.expect("the program printed its pid");
    let f = LAPSE.report(&data, "functions", &[]);
    let jitted = row(&f, "jitted_countdown");
    assert_eq!(jitted["module"], format!("perf-{pid}.map"), "{jitted}");
    assert!(pct(jitted, "exclusive_pct") >= 20.0, "{jitted}");
    // Through the generated code by frame pointers, into main.
    assert!(pct(row(&f, "main"), "inclusive_pct") >= 95.0, "{f:#}");
    // No address of the generated code is left without a name.
    for r in expect_rows(&f) {
        let name = r["function"].as_str().unwrap_or("");
        assert!(
            !(name.starts_with("0x") && pct(r, "exclusive_pct") > 2.0),
            "{r}"
        );
    }
}

#[test]
fn a_binary_replaced_or_deleted_during_the_recording_is_named_from_what_ran() {
    // Before: the symbols were read from whatever the path named by then
    // (the rebuilt program's functions on the old one's samples).
    const RAN: &str = r#"
#include <time.h>
NOINLINE uint64_t alpha_spin(uint64_t x) { for (int i = 0; i < 1000; i++) x = x * 6364136223846793005u + 1; return x; }
int main(int argc, char **argv) {
    char path[4096];
    snprintf(path, sizeof path, "%s/ready", argv[1]);
    fclose(fopen(path, "w"));
    snprintf(path, sizeof path, "%s/go", argv[1]);
    while (access(path, F_OK) != 0) usleep(1000);
    uint64_t x = 1;
    clock_t end = clock() + CLOCKS_PER_SEC / 5;
    while (clock() < end) x = alpha_spin(x);
    return (int)(x & 0);
}
"#;
    for how in ["replaced", "deleted"] {
        let dir = work_dir(&format!("replaced-{how}"));
        let Some(exe) = gcc(&dir, "prog", RAN, &[]) else {
            return;
        };
        // The same program with other names, a page further on.
        let other = RAN.replace("alpha_spin", "zz_other_name").replace(
            "NOINLINE uint64_t zz",
            "char pad[8192] = {1};\nNOINLINE uint64_t zz",
        );
        let new = gcc(&dir, "prog.new", &other, &[]).expect("built before");
        let (d, e) = (dir.to_path_buf(), exe.clone());
        let recorder = std::thread::spawn(move || {
            record(
                &d,
                &[],
                &[e.to_str().expect("utf-8"), d.to_str().expect("utf-8")],
            )
        });
        lapse_testkit::wait_until("the program is ready", || {
            dir.join("ready").exists() || recorder.is_finished()
        });
        if how == "replaced" {
            std::fs::rename(&new, &exe).expect("replace the program");
        } else {
            std::fs::remove_file(&exe).expect("delete the program");
        }
        std::fs::write(dir.join("go"), "").expect("go");
        let Some(data) = recorder.join().expect("recorder thread") else {
            return;
        };
        let v = LAPSE.report(&data, "functions", &[]);
        let names: Vec<&str> = expect_rows(&v)
            .iter()
            .filter_map(|r| r["function"].as_str())
            .collect();
        assert!(names.contains(&"alpha_spin"), "{how}: {names:?}");
        assert!(!names.contains(&"zz_other_name"), "{how}: {names:?}");
    }
}

#[test]
fn annotate_shows_a_functions_source_lines_with_their_samples() {
    let dir = work_dir("annotate");
    // Two loops of one function, each on its own line: 3 units, then 1.
    let src = r#"
NOINLINE uint64_t two_loops(uint64_t n) {
    uint64_t x = 1, y = 2;
    for (uint64_t i = 0; i < 3 * n; i++) x = x * 6364136223846793005ULL + i; /* heavy */
    sink = x;
    for (uint64_t i = 0; i < n; i++) y = y * 2862933555777941757ULL + i; /* light */
    return x + y;
}
int main(int argc, char **argv) {
    uint64_t u = unit(argc, argv);
    for (int i = 0; i < 100; i++) sink += two_loops(u);
    return 0;
}
"#;
    let Some(exe) = gcc(&dir, "annotate", src, &[]) else {
        return;
    };
    let Some(data) = record(&dir, &[], &[exe.to_str().expect("utf-8"), UNIT]) else {
        return;
    };
    let doc = LAPSE.report(&data, "annotate", &["--function", "two_loops"]);
    let rows = expect_rows(&doc);
    // Every line from the declaration on, in order, with its text.
    let lines: Vec<u64> = rows.iter().map(|r| r["line"].as_u64().unwrap()).collect();
    assert!(lines.windows(2).all(|w| w[1] == w[0] + 1), "{lines:?}");
    let at = |mark: &str| {
        rows.iter()
            .find(|r| r["source"].as_str().is_some_and(|s| s.contains(mark)))
            .unwrap_or_else(|| panic!("no line with {mark}: {doc}"))
    };
    assert!(at("two_loops(uint64_t n)")["source"].is_string());
    let heavy = at("/* heavy */")["exclusive_samples"]
        .as_f64()
        .unwrap_or(0.0);
    let light = at("/* light */")["exclusive_samples"]
        .as_f64()
        .unwrap_or(0.0);
    assert!(light > 0.0, "{doc}");
    let ratio = heavy / light;
    assert!((1.8..5.0).contains(&ratio), "heavy/light {ratio}: {doc}");
    // The lines view names each line's function.
    let lines = LAPSE.report(&data, "lines", &[]);
    let heavy_line = at("/* heavy */")["line"].clone();
    let row = expect_rows(&lines)
        .iter()
        .find(|r| r["line"] == heavy_line && r["function"] == "two_loops")
        .unwrap_or_else(|| panic!("no two_loops line {heavy_line}: {lines}"));
    assert!(row["exclusive_samples"].as_u64().unwrap() > 0);
    // Without --function there is nothing to annotate: an error.
    let out = LAPSE.run(["report", data.to_str().unwrap(), "--view", "annotate"]);
    assert!(!out.status.success());
}
