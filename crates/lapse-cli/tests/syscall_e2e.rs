//! End to end: `--os-events syscall` makes system calls OS events (SPEC 1.1,
//! 2.1): an interval holding a system call is elapsed time but not
//! application time. A C program built during the test makes many cheap
//! system calls in one function and only computes in another, and prints the
//! CPU time each took: application time is compared with that, not with
//! elapsed time, which a busy machine stretches by preempting the program.
//!
//! Skips (with a message) where gcc is missing, perf_event_open is refused,
//! or the kernel refuses the syscall tracepoints (the recorder then notes it).

use std::path::{Path, PathBuf};
use std::process::Output;

use lapse_testkit::{compile, skip, Lapse, WorkDir};
use serde_json::Value;

const LAPSE: Lapse = Lapse::new(env!("CARGO_BIN_EXE_lapse"));

/// `with_syscalls` makes 100 000 getppid() calls with an instrumented leaf
/// call between each two, so every interval between them holds one system
/// call; `compute` calls the same leaf but makes no system call. `main`
/// prints each one's CPU time in nanoseconds (measured outside them), then
/// with_syscalls' user and system time (`RUSAGE_THREAD`, to the tick).
const PROGRAM: &str = r#"
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#define NOINLINE __attribute__((noinline))
volatile uint64_t sink;
static uint64_t cpu_ns(void) {
    struct timespec ts; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}
NOINLINE uint64_t leaf(uint64_t x) { return x * 2862933555777941757ULL + 3037000493ULL; }
NOINLINE void with_syscalls(void) {
    for (int i = 0; i < 100000; i++) { sink += (uint64_t)syscall(SYS_getppid); sink = leaf(sink); }
}
NOINLINE void compute(void) {
    uint64_t x = 88172645463325252ULL;
    for (int i = 0; i < 30000; i++) {
        for (int j = 0; j < 1000; j++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; }
        x = leaf(x);
    }
    sink = x;
}
static uint64_t tv_ns(struct timeval t) { return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_usec * 1000ULL; }
int main(void) {
    struct rusage r0, r1;
    getrusage(RUSAGE_THREAD, &r0);
    uint64_t t0 = cpu_ns(); with_syscalls();
    uint64_t t1 = cpu_ns();
    getrusage(RUSAGE_THREAD, &r1);
    compute();
    uint64_t t2 = cpu_ns();
    printf("%llu %llu %llu %llu\n", (unsigned long long)(t1 - t0), (unsigned long long)(t2 - t1),
           (unsigned long long)(tv_ns(r1.ru_utime) - tv_ns(r0.ru_utime)),
           (unsigned long long)(tv_ns(r1.ru_stime) - tv_ns(r0.ru_stime)));
    return 0;
}
"#;

fn build(dir: &Path) -> Option<PathBuf> {
    compile(
        dir,
        "gcc",
        "sys",
        PROGRAM,
        &["-finstrument-functions", "-O1", "-g"],
    )
}

/// The CPU times the program printed: (with_syscalls, compute), and
/// with_syscalls' user and system parts.
fn cpu_times(out: &Output) -> (f64, f64, f64, f64) {
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Vec<f64> = text
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert_eq!(v.len(), 4, "the program prints four CPU times: {text:?}");
    (v[0], v[1], v[2], v[3])
}

/// (elapsed_inclusive_ns, application_inclusive_ns, calls) of `name`.
fn times(v: &Value, name: &str) -> (f64, f64, f64) {
    let row = v["rows"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["function"] == name))
        .unwrap_or_else(|| panic!("no row for {name} in {v}"));
    let get = |k: &str| row[k].as_f64().unwrap_or_else(|| panic!("{k} in {row}"));
    (
        get("elapsed_inclusive_ns"),
        get("application_inclusive_ns"),
        get("calls"),
    )
}

#[test]
fn system_calls_are_os_events_when_asked_for() {
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "syscall_e2e");
    let Some(exe) = build(&dir) else { return };
    let exe = exe.to_str().expect("utf-8 path");

    // (--no-libcalls here and below: syscall() would be a traced call of its
    // own, whose hooks add to the CPU time the program measures)
    let with = LAPSE.in_dir(&dir).run([
        "record",
        "--no-libcalls",
        "--os-events",
        "switch,syscall",
        "-o",
        "with.lapse",
        "--",
        exe,
    ]);
    let stderr = String::from_utf8_lossy(&with.stderr);
    if stderr.contains("perf_event_open") && !dir.join("with.lapse").exists() {
        return skip(format!("perf events are not available here: {stderr}")).unwrap_or(());
    }
    assert_eq!(with.status.code(), Some(0), "lapse said: {stderr}");
    let v = LAPSE
        .in_dir(&dir)
        .report(Path::new("with.lapse"), "functions", &[]);
    if stderr.contains("without syscall OS events") {
        // Refused by the kernel: said once on stderr and noted in the header.
        skip::<()>(&stderr);
        let info = LAPSE.in_dir(&dir).run(["info", "with.lapse"]);
        let info = String::from_utf8_lossy(&info.stdout);
        assert!(info.contains("syscall OS events were asked for"), "{info}");
        assert_eq!(v["session"]["os_events"], serde_json::json!(["switch"]));
        return;
    }
    assert_eq!(
        v["session"]["os_events"],
        serde_json::json!(["switch", "syscall"])
    );
    let (sys_cpu, cmp_cpu, sys_user, sys_kernel) = cpu_times(&with);
    let (sys_el, sys_app, sys_calls) = times(&v, "with_syscalls");
    let (cmp_el, cmp_app, _) = times(&v, "compute");
    assert_eq!(sys_calls, 1.0);
    assert_eq!(times(&v, "leaf").2, 130_000.0);
    // The time inside the system calls is OS time, so application time is
    // well below the CPU time, most of which is in the kernel. (Not down to
    // the user time: the exit tracepoint's own cost, about 0.5 us a call,
    // falls after the period's end; docs/semantics.md says so.)
    assert!(
        sys_kernel > 0.5 * sys_cpu && sys_app < 0.75 * sys_cpu && sys_app < sys_el,
        "with_syscalls: application {sys_app} ns should leave out the time in the kernel \
         (CPU {sys_cpu} ns: user {sys_user} ns, kernel {sys_kernel} ns)"
    );
    let waited = v["session"]["recorder_wait_ns"].as_f64().unwrap_or(0.0);
    assert!(
        (0.75 * (cmp_cpu - waited)..=1.25 * cmp_cpu).contains(&cmp_app) && cmp_app <= cmp_el,
        "compute: application {cmp_app} ns should be about its CPU time {cmp_cpu} ns"
    );

    // Without syscall events only switches count: both are mostly application time.
    let without =
        LAPSE
            .in_dir(&dir)
            .run(["record", "--no-libcalls", "-o", "without.lapse", "--", exe]);
    assert_eq!(
        without.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&without.stderr)
    );
    let v = LAPSE
        .in_dir(&dir)
        .report(Path::new("without.lapse"), "functions", &[]);
    assert_eq!(v["session"]["os_events"], serde_json::json!(["switch"]));
    let (sys_cpu, cmp_cpu, _, _) = cpu_times(&without);
    // The program's CPU time includes the waits for buffer hand-overs that
    // lapse takes out of the timeline (a debug recorder keeps the target
    // waiting): application time is about the CPU time less those.
    let waited = v["session"]["recorder_wait_ns"].as_f64().unwrap_or(0.0);
    for (name, cpu) in [("with_syscalls", sys_cpu), ("compute", cmp_cpu)] {
        let (_, app, _) = times(&v, name);
        assert!(
            (0.75 * (cpu - waited)..=1.25 * cpu).contains(&app),
            "without syscall events, {name}: application {app} ns should be about its CPU time {cpu} ns \
             (less up to {waited} ns of waiting for the recorder)"
        );
    }
}
