//! End to end, `record --method sample --off-cpu`: C programs built during
//! the test measure themselves (their CPU time, how long they blocked or
//! slept, on CLOCK_MONOTONIC) and print it; lapse's values are checked
//! against those measurements, never against a wall-clock budget, so the
//! tests hold on a busy machine. Tests skip (with a message) when
//! perf_event_open is refused or gcc is missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use lapse_testkit::{compile, perf_refused, row, skip, stop_for, Hogs, Lapse, WorkDir};
use serde_json::Value;

const LAPSE: Lapse = Lapse::new(env!("CARGO_BIN_EXE_lapse"));

const PRELUDE: &str = r#"
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#define NOINLINE __attribute__((noipa))
volatile uint64_t sink;
static uint64_t ns_of(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}
/* Spins until this thread has had `ns` of CPU time. */
NOINLINE void spin(uint64_t ns) {
    uint64_t start = ns_of(CLOCK_THREAD_CPUTIME_ID);
    while (ns_of(CLOCK_THREAD_CPUTIME_ID) - start < ns)
        for (int i = 0; i < 1000; i++) sink++;
}
"#;

fn work_dir(name: &str) -> WorkDir {
    WorkDir::new(env!("CARGO_TARGET_TMPDIR"), &format!("off_cpu_e2e-{name}"))
}

fn gcc(dir: &Path, name: &str, source: &str) -> Option<PathBuf> {
    compile(
        dir,
        "gcc",
        name,
        &format!("{PRELUDE}\n{source}"),
        &["-O2", "-fomit-frame-pointer", "-g", "-pthread"],
    )
}

fn ms(r: &Value, key: &str) -> f64 {
    r[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} missing in {r}")) as f64
        / 1e6
}

/// `name value` lines the program printed, in ms.
fn measured(stdout: &[u8], name: &str) -> f64 {
    String::from_utf8_lossy(stdout)
        .lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("the program did not print {name}")) as f64
        / 1e6
}

fn assert_within(what: &str, got: f64, want: f64, tolerance: f64) {
    assert!(
        (got - want).abs() <= tolerance,
        "{what}: {got:.1} ms, the program measured {want:.1} ms (± {tolerance:.1})"
    );
}

/// Spins 120 ms of CPU, blocks about 200 ms on a pipe (a second thread
/// writes to it after sleeping), sleeps 100 ms.
const SPIN_BLOCK_SLEEP: &str = r#"
static int fds[2];
static void *writer(void *arg) {
    (void)arg;
    usleep(200000);
    char c = 1;
    if (write(fds[1], &c, 1) != 1) abort();
    return 0;
}
NOINLINE void wait_for_pipe(void) { char c; if (read(fds[0], &c, 1) != 1) abort(); }
/* (sink++ after the call: no tail call, so the function stays on the stack) */
NOINLINE void take_a_nap(void) { usleep(100000); sink++; }
int main(void) {
    if (pipe(fds) != 0) return 1;
    uint64_t c0 = ns_of(CLOCK_THREAD_CPUTIME_ID);
    spin(120000000);
    uint64_t c1 = ns_of(CLOCK_THREAD_CPUTIME_ID);
    pthread_t t;
    pthread_create(&t, 0, writer, 0);
    uint64_t b0 = ns_of(CLOCK_MONOTONIC);
    wait_for_pipe();
    uint64_t b1 = ns_of(CLOCK_MONOTONIC);
    take_a_nap();
    uint64_t b2 = ns_of(CLOCK_MONOTONIC);
    pthread_join(t, 0);
    printf("spin_cpu %llu\nblocked %llu\nslept %llu\n", (unsigned long long)(c1 - c0),
           (unsigned long long)(b1 - b0), (unsigned long long)(b2 - b1));
    return 0;
}
"#;

/// The blocked and the sleeping function of [`SPIN_BLOCK_SLEEP`]: their
/// off-CPU time is the time the program measured around them (a few ms of
/// it may be on the CPU: entering and leaving the call, waking up).
/// Returns their rows.
fn assert_waits(f: &Value, blocked: f64, slept: f64) -> (&Value, &Value) {
    let wait = row(f, "wait_for_pipe");
    assert_within(
        "wait_for_pipe off-CPU",
        ms(wait, "off_cpu_inclusive_ns"),
        blocked,
        5.0 + 0.05 * blocked,
    );
    let nap = row(f, "take_a_nap");
    assert_within(
        "take_a_nap off-CPU",
        ms(nap, "off_cpu_inclusive_ns"),
        slept,
        5.0 + 0.05 * slept,
    );
    (wait, nap)
}

#[test]
fn blocked_and_sleeping_functions_get_their_off_cpu_time() {
    let dir = work_dir("spin-block-sleep");
    let Some(exe) = gcc(&dir, "spin_block_sleep", SPIN_BLOCK_SLEEP) else {
        return;
    };
    let data = dir.join("out.lapse");
    let out = LAPSE.run([
        "record",
        "--method",
        "sample",
        "--off-cpu",
        "-o",
        data.to_str().expect("utf-8"),
        "--",
        exe.to_str().expect("utf-8"),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if perf_refused(&stderr) {
        return skip(stderr).unwrap_or(());
    }
    assert!(out.status.success(), "lapse record failed: {stderr}");
    let (spin_cpu, blocked, slept) = (
        measured(&out.stdout, "spin_cpu"),
        measured(&out.stdout, "blocked"),
        measured(&out.stdout, "slept"),
    );
    let f = LAPSE.report(&data, "functions", &[]);
    assert!(
        f["session"]["off_cpu_ns"].as_u64().is_some(),
        "{:#}",
        f["session"]
    );

    let (wait, nap) = assert_waits(&f, blocked, slept);
    // Neither ran: no CPU samples in them (at most one, if a tick fell in
    // the few µs they spend entering the call).
    assert!(ms(wait, "estimated_inclusive_ns") <= 2.0, "{wait}");
    assert!(ms(nap, "estimated_inclusive_ns") <= 2.0, "{nap}");
    // The waiting happens in the system calls they make: the exclusive
    // off-CPU time is in libc, not in them.
    assert_eq!(ms(wait, "off_cpu_exclusive_ns"), 0.0, "{wait}");

    // The spinning function: its on-CPU estimate is the CPU time it
    // measured. With --off-cpu the CPU samples come from a timer on each
    // CPU (where allowed), which counts the thread when it is the one
    // running at the tick: a statistical estimate, within 5 ms + 10 %
    // (on a machine with a hundred runnable tasks: +0 to +9 %).
    let spin = row(&f, "spin");
    eprintln!(
        "measured by the program / by lapse: blocked {blocked:.1} / {:.1} ms off-CPU, slept {slept:.1} / {:.1} ms off-CPU, spin {spin_cpu:.1} / {:.1} ms estimated on-CPU",
        ms(wait, "off_cpu_inclusive_ns"),
        ms(nap, "off_cpu_inclusive_ns"),
        ms(spin, "estimated_inclusive_ns")
    );
    // Each time the thread is switched out or in, the tick that counts it
    // may fall on either side: up to a period of error per slice edge,
    // half a period on average. A busy machine cuts the spin into many
    // slices (the clean-clone CI run at load 70: 71 preemptions, 98 ms
    // estimated of 120), a quiet one into a few.
    let slices = f["session"]["off_cpu_periods"].as_u64().unwrap_or(0) as f64;
    let period_ms = f["session"]["sample_period"].as_u64().unwrap_or(1_000_000) as f64 / 1e6;
    assert_within(
        "spin estimated",
        ms(spin, "estimated_inclusive_ns"),
        spin_cpu,
        5.0 + 0.1 * spin_cpu + 0.5 * period_ms * slices,
    );

    // The writer thread slept 200 ms: its own off-CPU time, on its own stack.
    let writer = row(&f, "writer");
    assert!(ms(writer, "off_cpu_inclusive_ns") >= 195.0, "{writer}");
    // main waited at least as long as both calls together.
    let main = row(&f, "main");
    assert!(
        ms(main, "off_cpu_inclusive_ns") >= blocked + slept - 10.0,
        "{main}"
    );

    // The call tree has the path that only waited (no sample on it).
    let tree = LAPSE.report(&data, "calltree", &[]).to_string();
    assert!(tree.contains("\"wait_for_pipe\""), "{tree:.2000}");

    // The exports: the off-CPU folded stacks hold the same time.
    let folded = LAPSE.run([
        "export",
        data.to_str().expect("utf-8"),
        "--format",
        "collapsed",
        "--weight",
        "off-cpu",
        "-o",
        "-",
    ]);
    assert!(folded.status.success());
    let in_wait: u64 = String::from_utf8_lossy(&folded.stdout)
        .lines()
        .filter(|l| l.contains(";wait_for_pipe;") || l.contains(";wait_for_pipe "))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum();
    assert_within(
        "folded wait_for_pipe",
        in_wait as f64 / 1e6,
        ms(wait, "off_cpu_inclusive_ns"),
        0.001,
    );
}

#[test]
fn other_processes_samples_filling_a_starved_recorders_ring_cost_no_off_cpu_period() {
    // Where allowed, --off-cpu samples the CPU with a timer on each CPU for
    // every task, each sample with its 16 KiB stack copy. Beside two CPU
    // hogs, with the recorder starved (stopped here for 400 ms, as a busy
    // machine can), the hogs' samples filled that ring, and the target's
    // switch records, kept in the same ring, were lost with them:
    // take_a_nap's 100 ms came out as 0 in three runs of three (and a CI
    // run lost wait_for_pipe's 200 ms). They have a ring of their own now.
    let dir = work_dir("starved");
    let Some(exe) = gcc(&dir, "spin_block_sleep", SPIN_BLOCK_SLEEP) else {
        return;
    };
    let data = dir.join("out.lapse");
    let hogs = Hogs::start(2);
    let lapse = LAPSE
        .command([
            "record".as_ref(),
            "--method".as_ref(),
            "sample".as_ref(),
            "--off-cpu".as_ref(),
            "-o".as_ref(),
            data.as_os_str(),
            "--".as_ref(),
            exe.as_os_str(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start lapse record");
    std::thread::sleep(Duration::from_millis(100));
    stop_for(lapse.id(), Duration::from_millis(400));
    let out = lapse.wait_with_output().expect("lapse's output");
    drop(hogs);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if perf_refused(&stderr) {
        return skip(stderr).unwrap_or(());
    }
    assert!(out.status.success(), "lapse record failed: {stderr}");
    let (blocked, slept) = (
        measured(&out.stdout, "blocked"),
        measured(&out.stdout, "slept"),
    );
    let f = LAPSE.report(&data, "functions", &[]);
    assert_waits(&f, blocked, slept);
}

/// Attaching: a process that forever spins 20 ms of CPU, then sleeps 30 ms.
#[test]
fn attach_records_off_cpu_time_too() {
    let dir = work_dir("attach");
    let src = r#"
NOINLINE void doze(void) { usleep(30000); sink++; }
int main(void) {
    for (;;) {
        spin(20000000);
        doze();
    }
}
"#;
    let Some(exe) = gcc(&dir, "dozer", src) else {
        return;
    };
    let mut child = Command::new(&exe).spawn().expect("start the program");
    std::thread::sleep(std::time::Duration::from_millis(100));
    let data = dir.join("out.lapse");
    let pid = child.id().to_string();
    let out = LAPSE.run([
        "record",
        "--off-cpu",
        "-o",
        data.to_str().expect("utf-8"),
        "--pid",
        &pid,
        "--duration",
        "1",
    ]);
    let _ = child.kill();
    let _ = child.wait();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if perf_refused(&stderr) {
        return skip(stderr).unwrap_or(());
    }
    assert!(out.status.success(), "lapse record --pid failed: {stderr}");
    let f = LAPSE.report(&data, "functions", &[]);
    let spin = ms(row(&f, "spin"), "estimated_inclusive_ns");
    let doze = ms(row(&f, "doze"), "off_cpu_inclusive_ns");
    // Each round is 20 ms of CPU and at least 30 ms asleep (more when the
    // machine is busy and the wake-up waits for a CPU): the ratio is 1.5,
    // a little more on a busy machine; a recording without off-CPU time
    // would give 0.
    assert!(spin >= 100.0, "only {spin} ms of CPU samples in a second");
    let ratio = doze / spin;
    eprintln!("attach: doze {doze:.1} ms off-CPU / spin {spin:.1} ms on-CPU = {ratio:.2}");
    assert!(
        (1.2..=2.5).contains(&ratio),
        "doze off-CPU {doze:.1} ms / spin on-CPU {spin:.1} ms = {ratio:.2}, expected about 1.5"
    );
}

#[test]
fn off_cpu_needs_a_time_based_event_and_sampling() {
    let dir = work_dir("refused");
    let data = dir.join("out.lapse");
    let data = data.to_str().expect("utf-8");
    for args in [
        &["--method", "sample", "--event", "page-faults"][..],
        &["--method", "instrument"][..],
    ] {
        let mut all = vec!["record", "--off-cpu", "-o", data];
        all.extend_from_slice(args);
        all.extend(["--", "true"]);
        let out = LAPSE.run(&all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} should be refused");
        assert!(stderr.contains("--off-cpu"), "{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    }
}
