//! End to end: the recorder is killed (SIGKILL) while the target runs on;
//! the runtime keeps its events in `<output>.spill`, `lapse info` and
//! `lapse report` point at it, and `lapse recover` merges it so that the
//! calls made after the kill are in the report with exact counts.
//!
//! Skips (with a message) where gcc is missing or perf_event_open is refused.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use lapse_testkit::{compile, ended, skip, wait_until, Lapse, WorkDir};
use serde_json::Value;

const LAPSE: Lapse = Lapse::new(env!("CARGO_BIN_EXE_lapse"));

/// Phase 1 ticks until the test creates `go` (after killing the recorder;
/// with BUSY a tick is 1,000 calls and some 40 us of work without any: a
/// buffer every ~70 us, so the recorder stays awake, reading the arena, and
/// keeps up with it when it is killed); phase 2 makes a known number of calls on the main thread and on a thread
/// started after the kill, then writes how many ticks phase 1 made.
const PROGRAM: &str = r#"
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#define NOINLINE __attribute__((noinline))
volatile uint64_t sink;
NOINLINE uint64_t leaf(uint64_t x) { return x * 3 + 1; }
#ifdef BUSY
NOINLINE uint64_t spin(uint64_t x) { return x * 5 + 3; }
NOINLINE void tick(void) {
    for (int i = 0; i < 1000; i++) sink = spin(sink);
    for (volatile int k = 0; k < 20000; k++) {}
}
#else
NOINLINE void tick(void) { struct timespec d = {0, 1000000}; nanosleep(&d, NULL); }
#endif
NOINLINE void after(int i) { sink = leaf(sink + (uint64_t)i); }
NOINLINE void *worker(void *arg) { (void)arg; for (int i = 0; i < 30000; i++) after(i); return NULL; }
int main(void) {
    FILE *f = fopen("pid", "w"); fprintf(f, "%d\n", (int)getpid()); fclose(f);
    long ticks = 0;
    while (access("go", F_OK) != 0) { tick(); ticks++; }
    pthread_t t; pthread_create(&t, NULL, worker, NULL);
    for (int i = 0; i < 50000; i++) after(i);
    pthread_join(t, NULL);
    f = fopen("ticks.tmp", "w"); fprintf(f, "%ld\n", ticks); fclose(f);
    rename("ticks.tmp", "ticks");
    return 0;
}
"#;

/// `lapse report out.lapse --view functions --format json` in `dir`.
fn functions_json(dir: &Path) -> Value {
    let out = LAPSE.in_dir(dir).run([
        "report",
        "out.lapse",
        "--view",
        "functions",
        "--format",
        "json",
    ]);
    serde_json::from_slice(&out.stdout).expect("report is JSON")
}

fn calls(v: &Value, name: &str) -> f64 {
    v["rows"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["function"] == name))
        .and_then(|r| r["calls"].as_f64())
        .unwrap_or(0.0)
}

/// Waits until the file `name` appears in `dir` with something in it; its
/// contents.
fn wait_for(dir: &Path, name: &str) -> String {
    let mut text = String::new();
    wait_until(name, || {
        text = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
        !text.is_empty()
    });
    text
}

#[test]
fn events_after_a_killed_recorder_are_recovered_exactly() {
    recovered_after_a_kill("recover_e2e", &[]);
}

#[test]
fn buffers_handed_over_quietly_to_a_killed_recorder_are_recovered_exactly() {
    // The recorder is killed while awake: it had told the runtime it was
    // reading the arena, so threads handed buffers over by their state
    // alone, to no one. Before the fix those waited in the arena until the
    // process ended and were lost (phase 2's calls were short in the report).
    recovered_after_a_kill("recover_busy_e2e", &["-DBUSY"]);
}

/// Phase 1, the recorder killed, phase 2 without it, `lapse recover`: every
/// call of phase 2 is in the report.
fn recovered_after_a_kill(name: &str, defines: &[&str]) {
    let busy = defines.contains(&"-DBUSY");
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), name);
    let flags: Vec<&str> = ["-finstrument-functions", "-O1", "-pthread", "-g"]
        .into_iter()
        .chain(defines.iter().copied())
        .collect();
    let Some(exe) = compile(&dir, "gcc", "spill", PROGRAM, &flags) else {
        return;
    };
    // A stale spill from an earlier run must not end up in this recording.
    std::fs::write(dir.join("out.lapse.spill"), b"stale").expect("write stale spill");
    let mut recorder = Command::new(env!("CARGO_BIN_EXE_lapse"))
        .args(["record", "-o", "out.lapse", "--"])
        .arg(&exe)
        .current_dir(&dir)
        // (not a pipe: the target inherits it and outlives the recorder)
        .stderr(std::fs::File::create(dir.join("record.err")).expect("stderr file"))
        .spawn()
        .expect("start lapse record");
    let pid = wait_for(&dir, "pid");
    let pid = pid.trim().to_owned();
    // However this test ends, the target must not outlive it: it would hold
    // the test harness's output open and keep a CI run waiting.
    let _target = KillOnDrop(pid.parse().expect("pid file holds a pid"));
    // Killed once it has written something (on a loaded machine the first
    // write can take longer than any fixed pause): the file is then one
    // that `info` reads and finds unfinished.
    wait_until("the recorder's first write", || {
        std::fs::metadata(dir.join("out.lapse")).map_or(0, |m| m.len()) > 0
    });
    std::thread::sleep(Duration::from_millis(700));
    let _ = recorder.kill(); // SIGKILL: the recorder cannot finish anything
    let _ = recorder.wait();
    if busy {
        // (at once: the arena must not fill, or the runtime finds the
        // recorder gone and spills before the target ends)
        std::fs::write(dir.join("go"), b"").expect("create go");
    }
    let stderr = std::fs::read_to_string(dir.join("record.err")).unwrap_or_default();
    if stderr.contains("perf_event_open") {
        skip::<()>(format!("perf events are not available here: {stderr}"));
        let _ = std::fs::write(dir.join("go"), b"");
        return;
    }
    // (the runtime may already have spilled since the kill: only the stale
    // content must be gone)
    let spill_now = std::fs::read(dir.join("out.lapse.spill")).unwrap_or_default();
    assert!(
        !spill_now.starts_with(b"stale"),
        "the stale spill was removed at the start"
    );
    // Everything from here on happens without a recorder.
    std::fs::write(dir.join("go"), b"").expect("create go");
    let ticks: f64 = wait_for(&dir, "ticks").trim().parse().expect("tick count");
    wait_until("the target's end", || ended(&pid));
    assert!(dir.join("out.lapse.spill").exists(), "the runtime spilled");

    let info = LAPSE.in_dir(&dir).run(["info", "out.lapse"]);
    let info = String::from_utf8_lossy(&info.stdout);
    assert!(
        info.contains("lapse recover"),
        "info points at the spill: {info}"
    );
    let before = LAPSE.in_dir(&dir).run([
        "report",
        "out.lapse",
        "--view",
        "functions",
        "--format",
        "json",
    ]);
    assert!(
        String::from_utf8_lossy(&before.stderr).contains("lapse recover"),
        "report points at the spill"
    );
    let v: Value = serde_json::from_slice(&before.stdout).expect("report is JSON");
    assert_eq!(
        calls(&v, "after"),
        0.0,
        "nothing of phase 2 reached the file"
    );

    // A spill of this recording put beside another recording is not merged
    // into it (before: its events were added to the wrong recording).
    let spill = std::fs::read(dir.join("out.lapse.spill")).expect("read the spill");
    let other = LAPSE.in_dir(&dir).run([
        "record",
        "-o",
        "other.lapse",
        "--",
        &exe.display().to_string(),
    ]);
    assert!(
        other.status.success(),
        "{}",
        String::from_utf8_lossy(&other.stderr)
    );
    let other_before = std::fs::read(dir.join("other.lapse")).expect("read other.lapse");
    std::fs::write(dir.join("other.lapse.spill"), &spill).expect("plant the spill");
    let refused = LAPSE.in_dir(&dir).run(["recover", "other.lapse"]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{said}");
    assert!(said.contains("belongs to another recording"), "{said}");
    assert_eq!(said.trim().lines().count(), 1, "{said}");
    assert_eq!(
        std::fs::read(dir.join("other.lapse")).ok(),
        Some(other_before)
    );
    assert!(
        dir.join("other.lapse.spill").exists(),
        "the spill is left as it was"
    );

    let rec = LAPSE.in_dir(&dir).run(["recover", "out.lapse"]);
    let said = String::from_utf8_lossy(&rec.stderr);
    assert!(rec.status.success(), "lapse recover: {said}");
    assert!(said.contains("recovered"), "{said}");
    assert!(!dir.join("out.lapse.spill").exists(), "the spill is merged");

    let after = LAPSE.in_dir(&dir).run([
        "report",
        "out.lapse",
        "--view",
        "functions",
        "--format",
        "json",
    ]);
    assert!(after.status.success());
    assert!(!String::from_utf8_lossy(&after.stderr).contains("lapse recover"));
    let v: Value = serde_json::from_slice(&after.stdout).expect("report is JSON");
    assert_eq!(calls(&v, "after"), 80_000.0, "every call after the kill");
    assert_eq!(calls(&v, "leaf"), 80_000.0);
    assert_eq!(calls(&v, "worker"), 1.0);
    assert_eq!(calls(&v, "main"), 1.0);
    let t = calls(&v, "tick");
    assert!(
        (300.0..=ticks).contains(&t),
        "ticks before the kill are kept ({t} of {ticks}), some lost at the break"
    );
    let threads = LAPSE.in_dir(&dir).run([
        "report",
        "out.lapse",
        "--view",
        "threads",
        "--format",
        "json",
    ]);
    let threads: Value = serde_json::from_slice(&threads.stdout).expect("JSON");
    assert_eq!(
        threads["rows"].as_array().map(Vec::len),
        Some(2),
        "main and the worker started after the kill: {threads}"
    );
    let info = LAPSE.in_dir(&dir).run(["info", "out.lapse"]);
    let info = String::from_utf8_lossy(&info.stdout);
    assert!(info.contains("recovered from"), "{info}");
    // Nothing left to recover.
    assert!(!LAPSE
        .in_dir(&dir)
        .run(["recover", "out.lapse"])
        .status
        .success());
}

/// Sends SIGKILL to a process when dropped (a no-op once it has ended).
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // SAFETY: signalling the test's own target process by pid.
        unsafe { libc::kill(self.0, libc::SIGKILL) };
    }
}

/// The spill's `EVENTS` datagrams (see `csrc/lapse_rt.h`: a `u32` length,
/// then a 48-byte header: kind at 4, flags at 6, pid at 8, tid at 12, first
/// event index at 16, count at 32): (pid, tid, first, count, discard).
fn spilled_batches(spill: &[u8]) -> Vec<(u32, u32, u64, u64, bool, u64)> {
    let u16_at = |b: &[u8], at: usize| u16::from_ne_bytes([b[at], b[at + 1]]);
    let u32_at = |b: &[u8], at: usize| u32::from_ne_bytes(b[at..at + 4].try_into().unwrap());
    let u64_at = |b: &[u8], at: usize| u64::from_ne_bytes(b[at..at + 8].try_into().unwrap());
    let mut out = Vec::new();
    let mut pos = 0;
    while pos + 4 <= spill.len() {
        let len = u32_at(spill, pos) as usize;
        let Some(d) = spill.get(pos + 4..pos + 4 + len) else {
            break;
        };
        pos += 4 + len;
        if d.len() >= 48 && u16_at(d, 4) == 2 {
            let discard = u16_at(d, 6) & 1 == 1;
            let slots = u64::from(u32_at(d, 32));
            // (a leaf call's slot, lapse_rt.h's LAPSE_LEAF_BIT, is two events)
            let events = d[48..]
                .chunks_exact(24)
                .map(|e| {
                    let (f, stamp, sp) = (u64_at(e, 0), u64_at(e, 8), u64_at(e, 16));
                    1 + u64::from(f >= 4096 && stamp & 1 == 0 && sp >> 63 == 1)
                })
                .sum();
            out.push((
                u32_at(d, 8),
                u32_at(d, 12),
                u64_at(d, 16),
                slots,
                discard,
                events,
            ));
        }
    }
    out
}

#[test]
fn spilled_calibration_buffers_keep_their_discard_mark() {
    // The program stops the recorder before the runtime starts (from
    // .preinit_array), so the runtime's calibration buffers are still queued
    // in the arena when the program kills the recorder: they go to the spill
    // with everything else. Before the fix they lost their discard mark and
    // collided with the program's own events (same event numbers), so
    // `lapse recover` dropped real calls as duplicates.
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "recover_e2e-discard");
    let Some(exe) = compile(
        &dir,
        "gcc",
        "early_stop",
        r#"
#define _GNU_SOURCE
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#define NOINLINE __attribute__((noinline))
volatile uint64_t sink;
__attribute__((no_instrument_function)) static void stop_recorder(int c, char **a, char **e) {
    (void)c; (void)a; (void)e;
    kill(getppid(), SIGSTOP);
}
__attribute__((section(".preinit_array"), used)) static void (*preinit)(int, char **, char **) = stop_recorder;
NOINLINE void work(long i) { sink ^= (uint64_t)i; }
/* Whether the thread whose stat file is `path` has exited (a zombie or
 * gone): its descriptors are let go by then. */
__attribute__((no_instrument_function)) static int exited(const char *path) {
    char stat[512];
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    size_t n = fread(stat, 1, sizeof stat - 1, f);
    fclose(f);
    stat[n] = 0;
    char *p = strrchr(stat, ')');
    return !p || p[2] == 'Z' || p[2] == 'X';
}
/* Until every thread of `pid` has exited: its sockets are closed, so what
 * the runtime sends from here on goes to the spill. Its main thread alone
 * is not enough: that is a zombie as soon as it has exited itself, while
 * the recorder's worker thread may still be on its way out with the
 * connection open; on a busy machine the second loop and the runtime's end
 * all ran in that time, to a recorder that still looked connected, and
 * nothing was spilled. (Before then, datagrams can still land in the dying
 * recorder's socket and be lost with it, which this test is not about.) */
__attribute__((no_instrument_function)) static void wait_dead(pid_t pid) {
    char dir[64], path[128];
    snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
    for (;;) {
        DIR *d = opendir(dir);
        if (!d) return;
        int alive = 0;
        for (struct dirent *e; (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;
            snprintf(path, sizeof path, "%s/%s/stat", dir, e->d_name);
            alive |= !exited(path);
        }
        closedir(d);
        if (!alive) return;
        usleep(1000);
    }
}
int main(void) {
    pid_t recorder = getppid();
    for (long i = 0; i < 50000; i++) work(i);
    kill(recorder, SIGKILL);
    wait_dead(recorder);
    for (long i = 0; i < 50000; i++) work(i);
    FILE *f = fopen("done.tmp", "w"); fprintf(f, "%d\n", (int)getpid()); fclose(f);
    rename("done.tmp", "done");
    return 0;
}
"#,
        &["-finstrument-functions", "-O1", "-g"],
    ) else {
        return;
    };
    let mut recorder = Command::new(env!("CARGO_BIN_EXE_lapse"))
        // (--no-libcalls: the numbering below counts main and work only)
        .args(["record", "--no-libcalls", "-o", "out.lapse", "--"])
        .arg(&exe)
        .current_dir(&dir)
        .stderr(std::fs::File::create(dir.join("record.err")).expect("stderr file"))
        .spawn()
        .expect("start lapse record");
    let recorder_pid = recorder.id();
    let _ = recorder.wait(); // killed by the program
    let stderr = std::fs::read_to_string(dir.join("record.err")).unwrap_or_default();
    if stderr.contains("perf_event_open") {
        skip::<()>(format!("perf events are not available here: {stderr}"));
        return;
    }
    let pid = wait_for(&dir, "done");
    wait_until("the target's end", || ended(pid.trim()));
    remove_session_dirs_of(recorder_pid);
    let spill = std::fs::read(dir.join("out.lapse.spill")).expect("the runtime spilled");
    let batches = spilled_batches(&spill);
    let discarded: u64 = batches.iter().filter(|b| b.4).map(|b| b.3).sum();
    assert!(discarded > 0, "the calibration's buffers are in the spill");
    // The program's own events: numbered 0.. without overlap, all there
    // (main's enter and exit, 100,000 calls of work, most of them a slot
    // for both their events).
    let mut real: Vec<(u64, u64)> = batches
        .iter()
        .filter(|b| !b.4)
        .map(|b| (b.2, b.2 + b.5))
        .collect();
    real.sort_unstable();
    let mut next = 0;
    for (from, to) in &real {
        assert_eq!(
            *from, next,
            "spilled event numbers overlap or leave a gap: {real:?}"
        );
        next = *to;
    }
    assert_eq!(next, 200_002);
    let slots: u64 = batches.iter().filter(|b| !b.4).map(|b| b.3).sum();
    assert!(slots < 150_000, "work's calls take a slot each: {slots}");
}

/// A killed recorder leaves its session directory behind (the next
/// recording removes it); a test leaves nothing behind.
fn remove_session_dirs_of(pid: u32) {
    let prefix = format!("lapse-{pid}-");
    if let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

#[test]
fn the_spill_stops_growing_at_its_limit_and_the_target_runs_on() {
    // The program kills its recorder, then makes a million calls (some
    // 32 MB of spilled events) with the spill limited to 1 MB: the file
    // stops near 1 MB, the program finishes as without lapse, and recover
    // keeps what fits.
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "recover_e2e-cap");
    let Some(exe) = compile(
        &dir,
        "gcc",
        "flood",
        r#"
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#define NOINLINE __attribute__((noinline))
volatile uint64_t sink;
NOINLINE void work(long i) { sink += (uint64_t)i; }
/* The recorder has put its file in place (a busy machine may take longer
 * than any fixed sleep: recover needs the file's header and mappings). */
__attribute__((no_instrument_function)) static int in_place(void) {
    struct stat st;
    return stat("out.lapse", &st) == 0 && st.st_size > 0;
}
int main(void) {
    /* full buffers, handed over: the recorder puts the file in place */
    for (long i = 0; i < 10000; i++) work(i);
    for (int i = 0; i < 100000 && !in_place(); i++) usleep(1000);
    kill(getppid(), SIGKILL);
    for (long i = 10000; i < 1000000; i++) work(i);
    FILE *f = fopen("done.tmp", "w"); fprintf(f, "%d %llu\n", (int)getpid(), (unsigned long long)sink); fclose(f);
    rename("done.tmp", "done");
    return 7;
}
"#,
        &["-finstrument-functions", "-O1", "-g"],
    ) else {
        return;
    };
    const LIMIT: u64 = 1_000_000;
    let mut recorder = Command::new(env!("CARGO_BIN_EXE_lapse"))
        .args(["record", "-o", "out.lapse", "--"])
        .arg(&exe)
        .current_dir(&dir)
        .env("LAPSE_SPILL_MAX", LIMIT.to_string())
        .stderr(std::fs::File::create(dir.join("record.err")).expect("stderr file"))
        .spawn()
        .expect("start lapse record");
    let recorder_pid = recorder.id();
    let _ = recorder.wait(); // killed by the program
    let stderr = std::fs::read_to_string(dir.join("record.err")).unwrap_or_default();
    if stderr.contains("perf_event_open") {
        skip::<()>(format!("perf events are not available here: {stderr}"));
        return;
    }
    let done = wait_for(&dir, "done");
    let (pid, sum) = done.trim().split_once(' ').expect("pid and sum");
    // (the sum of 0..1,000,000: what the program computes without lapse)
    assert_eq!(sum, "499999500000", "the program's result");
    wait_until("the target's end", || ended(pid));
    remove_session_dirs_of(recorder_pid);
    let size = std::fs::metadata(dir.join("out.lapse.spill"))
        .expect("the runtime spilled")
        .len();
    // (at most one datagram past the limit: 48-byte header + 4,096 events)
    assert!(
        (LIMIT / 2..=LIMIT + 4 + 48 + 4096 * 16).contains(&size),
        "spill of {size} bytes with a limit of {LIMIT}"
    );
    let rec = LAPSE.in_dir(&dir).run(["recover", "out.lapse"]);
    assert!(
        rec.status.success(),
        "lapse recover: {}",
        String::from_utf8_lossy(&rec.stderr)
    );
    let v = functions_json(&dir);
    let work = calls(&v, "work");
    assert!(
        (5_000.0..1_000_000.0).contains(&work),
        "what the file and the spill hold: {work} calls"
    );
}

#[test]
fn a_recorder_killed_before_its_first_flush_of_events_is_recovered_from_its_partial_file() {
    // Before: the file existed only as an empty `.out.lapse.partial-*`
    // (header and mappings still in the recorder's buffer): `lapse recover`
    // said "No such file" and the partial file stayed behind.
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "recover-early");
    let Some(exe) = compile(
        &dir,
        "gcc",
        "early",
        r#"
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
volatile uint64_t sink;
__attribute__((noinline)) void work(long i) { sink += (uint64_t)i; }
/* The recorder's temporary file holds something (its header). */
static int header_written(void) {
    DIR *d = opendir(".");
    struct dirent *e;
    int found = 0;
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, ".out.lapse.partial-", 19)) {
            struct stat st;
            found |= stat(e->d_name, &st) == 0 && st.st_size > 0;
        }
    if (d) closedir(d);
    return found;
}
int main(void) {
    for (int i = 0; i < 100000 && !header_written(); i++) usleep(1000);
    kill(getppid(), SIGKILL);      /* before its first flush of events */
    usleep(1000);
    /* More events than the arena holds (--buffer-size 8M: 128 buffers of 2,730): handed over
     * quietly, buffers stay there once nobody frees them, so the runtime
     * must find the recorder gone and spill them all. */
    for (long i = 0; i < 400000; i++) work(i);
    printf("done\n");
    return 0;
}
"#,
        &["-finstrument-functions", "-O1"],
    ) else {
        return;
    };
    let out = LAPSE.in_dir(&dir).run([
        "record",
        "--buffer-size",
        "8M",
        "-o",
        "out.lapse",
        "--",
        exe.to_str().expect("utf-8"),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    if lapse_testkit::perf_refused(&err) {
        return skip(err).unwrap_or(());
    }
    assert_eq!(out.status.code(), None, "the recorder was killed: {err}");
    // Killed before its first flush of events, the file is not in place
    // yet (unless a busy machine let the recorder flush before the target
    // got to kill it: the rest holds either way).
    if dir.join("out.lapse").exists() {
        eprintln!("note: the recorder flushed events before it was killed");
    }
    // (recover refuses while the target still writes its spill)
    let mut recovered = None;
    wait_until("the target ends and its spill is recovered", || {
        let r = LAPSE.in_dir(&dir).run(["recover", "out.lapse"]);
        let still = String::from_utf8_lossy(&r.stderr).contains("still being written");
        if !still {
            recovered = Some(r);
        }
        !still
    });
    let r = recovered.expect("recover ran");
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let v = functions_json(&dir);
    // Every event is accounted for: merged, or counted lost (buffers the
    // runtime had handed over quietly to the recorder that was killed).
    let merged = calls(&v, "work");
    let lost = v["session"]["lost_events"].as_f64().unwrap_or(0.0);
    assert!(merged > 0.0, "{v}");
    assert!(
        2.0 * merged + lost >= 2.0 * 400000.0,
        "merged {merged} calls, lost {lost} events: {v}"
    );
    let left: Vec<String> = std::fs::read_dir(&dir)
        .expect("dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".partial-") || n.ends_with(".spill"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
