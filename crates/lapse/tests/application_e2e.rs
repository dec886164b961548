//! End to end, SPEC 2.1's exact application rule: a CPU loop with no
//! instrumented callee shares one core with a competing spinner, so the
//! scheduler preempts it again and again inside its single interval. Its
//! application time must be the CPU time the kernel gave its thread
//! (`CLOCK_THREAD_CPUTIME_ID`, which the program prints), within 10 %;
//! the interval rule, which drops any interval touched by a switch, must
//! not come close - that is what makes this test able to fail.

use std::process::Command;

use lapse_testkit::{compile, perf_refused, skip, WorkDir};
use serde_json::Value;

const PROGRAM: &str = r#"
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#define NOINLINE __attribute__((noinline))
volatile uint64_t sink;
/* not instrumented: it must not add probes inside the loop */
__attribute__((no_instrument_function)) static uint64_t cpu_ns(void) {
    struct timespec ts; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
/* 300 ms of this thread's CPU time, in one call with no callee */
NOINLINE uint64_t crunch(void) {
    uint64_t x = 88172645463325252ull, end = cpu_ns() + 300000000ull;
    while (cpu_ns() < end) for (int i = 0; i < 2000; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; }
    return x;
}
int main(void) {
    cpu_set_t one; CPU_ZERO(&one); CPU_SET(0, &one);
    sched_setaffinity(0, sizeof one, &one);
    pid_t rival = fork();
    if (rival == 0) { for (;;) sink++; }   /* shares CPU 0 (affinity is inherited) */
    usleep(20000);
    uint64_t t0 = cpu_ns();
    sink = crunch();
    uint64_t t1 = cpu_ns();
    kill(rival, SIGKILL); waitpid(rival, 0, 0);
    printf("%llu\n", (unsigned long long)(t1 - t0));
    return 0;
}
"#;

fn lapse(dir: &WorkDir, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_lapse"))
        .args(args)
        .current_dir(dir.path())
        .output()
        .expect("run lapse")
}

fn crunch(dir: &WorkDir, rule: &str) -> (f64, f64) {
    let out = lapse(
        dir,
        &[
            "report",
            "out.lapse",
            "--view",
            "functions",
            "--format",
            "json",
            "--application",
            rule,
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["session"]["application_rule"], rule);
    let row = v["rows"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["function"] == "crunch"))
        .unwrap_or_else(|| panic!("no crunch row: {v}"))
        .clone();
    (
        row["elapsed_inclusive_ns"].as_f64().unwrap(),
        row["application_inclusive_ns"].as_f64().unwrap(),
    )
}

#[test]
fn a_preempted_cpu_loop_reports_its_cpu_time_as_application_time() {
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "application_e2e");
    let Some(exe) = compile(
        &dir,
        "gcc",
        "shared_core",
        PROGRAM,
        &["-finstrument-functions", "-O1", "-g"],
    ) else {
        return;
    };
    // (--no-libcalls: the loop's clock_gettime would be a traced call, and
    // crunch must stay one interval)
    let out = lapse(
        &dir,
        &[
            "record",
            "--no-libcalls",
            "-o",
            "out.lapse",
            "--",
            exe.to_str().unwrap(),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    if perf_refused(&stderr) && !dir.join("out.lapse").exists() {
        return skip(stderr).unwrap_or(());
    }
    assert!(out.status.success(), "lapse record: {stderr}");
    let cpu: f64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("the program prints its CPU time");
    let (elapsed, exact) = crunch(&dir, "exact");
    // Sharing a core, the loop waits about as long as it runs.
    assert!(
        elapsed > 1.3 * cpu,
        "the rival did take the core: elapsed {elapsed} ns, CPU {cpu} ns"
    );
    assert!(
        (0.9 * cpu..=1.1 * cpu).contains(&exact),
        "application {exact} ns should be the thread's CPU time {cpu} ns (elapsed {elapsed} ns)"
    );
    let (_, interval) = crunch(&dir, "interval");
    assert!(
        interval < 0.5 * cpu,
        "the interval rule loses the preempted interval: {interval} ns of {cpu} ns"
    );
}
