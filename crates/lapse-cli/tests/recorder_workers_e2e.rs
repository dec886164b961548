//! End to end: the recorder's worker threads (issue #27, `workers.rs`)
//! keep the file exact. Twelve threads each make a known number of calls
//! (thread i: `first`, then `leaf` 150,000 + 1,000 i times under `work`,
//! then `last`), recorded with three workers and without any, and with two
//! CPU hogs beside the recording (the recorder starved): every call is
//! counted per thread and per function, nothing is lost, and every exit
//! matches its entry (a chunk of a thread written out of order would leave
//! exits without entries and calls closed by repair).

use lapse_testkit::{compile, rows, stderr, Hogs, Lapse, WorkDir, INSTRUMENTED};
use serde_json::Value;

const THREADS: u64 = 12;
const BASE: u64 = 150_000;
const STEP: u64 = 1_000;

const PROGRAM: &str = r#"
#include <pthread.h>
#include <stdio.h>
#define NOINLINE __attribute__((noinline))
volatile long sink;
NOINLINE void leaf(long i) { sink += i; }
NOINLINE void first(void) { sink++; }
NOINLINE void last(void) { sink--; }
NOINLINE void work(long n) { for (long k = 0; k < n; k++) leaf(k); }
static void *body(void *arg) {
    long i = (long)arg;
    first();
    work(150000 + 1000 * i);
    last();
    return NULL;
}
int main(void) {
    pthread_t t[12];
    for (long i = 0; i < 12; i++) pthread_create(&t[i], NULL, body, (void *)i);
    for (int i = 0; i < 12; i++) pthread_join(t[i], NULL);
    printf("%ld\n", sink);
    return 0;
}
"#;

fn info_count(info: &str, key: &str) -> u64 {
    info.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in\n{info}"))
}

/// Records the program with `workers` worker threads (and two CPU hogs
/// when `starved`) and checks the file is exact; `None` means skip.
fn check(dir: &WorkDir, exe: &std::path::Path, workers: &str, starved: bool) -> Option<()> {
    let env = [("NO_COLOR", "1"), ("LAPSE_RECORD_WORKERS", workers)];
    let lapse = Lapse::new(env!("CARGO_BIN_EXE_lapse")).with_env(&env);
    let data = dir.join(format!("w{workers}-{starved}.lapse"));
    let hogs = starved.then(|| Hogs::start(2));
    let out = lapse.in_dir(dir).record(&[], &data, exe, &[])?;
    drop(hogs);
    let what = format!("{workers} workers, starved: {starved}");
    assert!(out.status.success(), "{what}: {}", stderr(&out));
    let info =
        String::from_utf8_lossy(&lapse.ok(["info".as_ref(), data.as_os_str()]).stdout).into_owned();
    for key in ["lost:", "unmatched:", "repaired:", "open calls:"] {
        assert_eq!(info_count(&info, key), 0, "{what}: {key}\n{info}");
    }
    let functions = lapse.report(&data, "functions", &[]);
    let calls = |name: &str| {
        rows(&functions)
            .iter()
            .find(|r| r["function"] == name)
            .and_then(|r| r["calls"].as_u64())
            .unwrap_or(0)
    };
    let leaves: u64 = (0..THREADS).map(|i| BASE + STEP * i).sum();
    assert_eq!(calls("leaf"), leaves, "{what}");
    for f in ["first", "work", "last", "body"] {
        assert_eq!(calls(f), THREADS, "{what}: {f}");
    }
    // Per thread: body, first, work, its leaves, last.
    let threads: Value = lapse.report(&data, "threads", &[]);
    let mut per_thread: Vec<u64> = rows(&threads)
        .iter()
        .filter_map(|r| r["calls"].as_u64())
        .filter(|&c| c > BASE)
        .collect();
    per_thread.sort_unstable();
    let expected: Vec<u64> = (0..THREADS).map(|i| BASE + STEP * i + 4).collect();
    assert_eq!(per_thread, expected, "{what}: calls per thread");
    Some(())
}

#[test]
fn worker_threads_keep_every_thread_exact_even_starved() {
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "recorder_workers_e2e");
    let Some(exe) = compile(&dir, "gcc", "threads12", PROGRAM, INSTRUMENTED) else {
        return;
    };
    for (workers, starved) in [("3", false), ("0", false), ("3", true)] {
        if check(&dir, &exe, workers, starved).is_none() {
            return;
        }
    }
}
