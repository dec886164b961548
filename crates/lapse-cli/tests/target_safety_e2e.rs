//! End to end: "the target is never harmed" (SPEC section 8). C programs
//! built during the test do what real programs do to a profiler's runtime —
//! signal handlers that call traced code, closing or dup2-ing over every
//! descriptor, thousands of threads — and must compute, print and exit
//! exactly as they do natively, while lapse keeps (or counts as lost) every
//! call. Checks are on what the programs print and on exact counts, never on
//! wall-clock time, so that a busy machine does not change the outcome.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use lapse_testkit::{
    compile, perf_refused, printed, skip, stderr, stop_for, Lapse, WorkDir, INSTRUMENTED,
};
use serde_json::Value;

const LAPSE: Lapse = Lapse::new(env!("CARGO_BIN_EXE_lapse"));

const PRELUDE: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>
#define NOINLINE __attribute__((noinline))
volatile uint64_t sink;
"#;

struct Run {
    dir: WorkDir,
    exe: PathBuf,
}

/// Builds `body` (after the prelude) with probes; `None` means skip.
fn build(name: &str, body: &str) -> Option<Run> {
    let dir = WorkDir::new(
        env!("CARGO_TARGET_TMPDIR"),
        &format!("target_safety-{name}"),
    );
    let exe = compile(
        &dir,
        "gcc",
        name,
        &format!("{PRELUDE}\n{body}"),
        INSTRUMENTED,
    )?;
    Some(Run { dir, exe })
}

impl Run {
    fn data(&self) -> PathBuf {
        self.dir.join("out.lapse")
    }

    /// The program on its own.
    fn native(&self, args: &[&str]) -> Output {
        Command::new(&self.exe)
            .args(args)
            .current_dir(&self.dir)
            .output()
            .expect("run the program")
    }

    /// `lapse record [extra] -o out.lapse -- program args`; `None` means skip.
    fn record(&self, extra: &[&str], args: &[&str]) -> Option<Output> {
        self.record_with(&[], extra, args)
    }

    /// The same with variables set for lapse (and so the program).
    fn record_with(&self, env: &[(&str, &str)], extra: &[&str], args: &[&str]) -> Option<Output> {
        LAPSE
            .in_dir(&self.dir)
            .with_env(env)
            .record(extra, &self.data(), &self.exe, args)
    }

    /// Records the program, which must exit 0 under lapse, and gives the
    /// numbers it printed; `None` means skip.
    fn record_printed(&self) -> Option<HashMap<String, u64>> {
        let out = self.record(&[], &[])?;
        assert_eq!(out.status.code(), Some(0), "lapse said: {}", stderr(&out));
        Some(printed::<u64>(&out))
    }

    fn report(&self) -> Report {
        report_of(&self.dir, &self.data())
    }

    /// The runtime's events lost: the file's lost events less the kernel's
    /// context-switch records its rings could not hold (on a busy machine
    /// the recorder can fall that far behind; those cost off-CPU detail,
    /// never a call).
    fn events_lost(&self, r: &Report) -> u64 {
        let info = info(self);
        let kernel: u64 = info
            .lines()
            .find_map(|l| l.split_once(" of the lost events are the kernel's records"))
            .and_then(|(before, _)| before.split_whitespace().last()?.parse().ok())
            .unwrap_or(0);
        r.lost() - kernel
    }
}

/// `lapse report --view functions --format json` of a recording.
struct Report(Value);

fn report_of(dir: &Path, data: &Path) -> Report {
    Report(LAPSE.in_dir(dir).report(data, "functions", &[]))
}

impl Report {
    fn calls(&self) -> HashMap<String, u64> {
        self.0["rows"]
            .as_array()
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .filter_map(|r| Some((r["function"].as_str()?.to_owned(), r["calls"].as_u64()?)))
            .collect()
    }

    fn calls_of(&self, name: &str) -> u64 {
        self.calls().get(name).copied().unwrap_or(0)
    }

    fn lost(&self) -> u64 {
        self.0["session"]["lost_events"].as_u64().unwrap_or(0)
    }
}

#[test]
fn sigprof_handler_calling_traced_code_runs_as_natively_and_every_call_counts() {
    let _alone = THOUSANDS.lock().unwrap_or_else(|e| e.into_inner());
    // A profiling timer every 100 µs of CPU time whose handler makes 2,000
    // traced calls: handlers land between a probe's claim of a slot and its
    // write, and fill and hand over the buffer under it (before the fix:
    // exit 139 under lapse, 0 natively).
    let Some(run) = build(
        "sigprof",
        r#"
volatile long handled;
NOINLINE void in_handler(int i) { sink += (uint64_t)i; }
NOINLINE void on_prof(int sig) { (void)sig; for (int i = 0; i < 2000; i++) in_handler(i); handled++; }
NOINLINE void work(long i) { sink ^= (uint64_t)i; }
int main(void) {
    struct sigaction sa; memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_prof; sa.sa_flags = SA_RESTART; sigemptyset(&sa.sa_mask);
    sigaction(SIGPROF, &sa, NULL);
    struct itimerval it = {{0, 100}, {0, 100}};
    setitimer(ITIMER_PROF, &it, NULL);
    for (long i = 0; i < 10000000; i++) work(i);
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_PROF, &off, NULL);
    printf("handled %ld\n", handled);
    return 0;
}
"#,
    ) else {
        return;
    };
    let native = run.native(&[]);
    assert_eq!(native.status.code(), Some(0));
    let Some(out) = run.record(&[], &[]) else {
        return;
    };
    assert_eq!(out.status.code(), Some(0), "lapse said: {}", stderr(&out));
    let handled = printed::<u64>(&out)
        .get("handled")
        .copied()
        .expect("the program printed");
    assert!(handled > 0, "the timer fired");
    let r = run.report();
    assert_eq!(r.calls_of("work"), 10_000_000);
    assert_eq!(r.calls_of("on_prof"), handled, "every handler run");
    assert_eq!(r.calls_of("in_handler"), handled * 2000);
    assert_eq!(run.events_lost(&r), 0, "nothing was lost");
}

#[test]
fn siglongjmp_out_of_a_handler_keeps_the_target_alive_and_counts_what_it_abandons() {
    let _alone = THOUSANDS.lock().unwrap_or_else(|e| e.into_inner());
    // The handler jumps back into main's loop: the probe it interrupted never
    // writes its event. That slot is a hole, counted as lost, not garbage.
    let Some(run) = build(
        "siglongjmp",
        r#"
volatile long jumps, done;
static sigjmp_buf jb;
NOINLINE void in_handler(int i) { sink += (uint64_t)i; }
NOINLINE void on_prof(int sig) { (void)sig; for (int i = 0; i < 3000; i++) in_handler(i); jumps++; siglongjmp(jb, 1); }
NOINLINE void work(long i) { sink ^= (uint64_t)i; }
int main(void) {
    struct sigaction sa; memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_prof; sigemptyset(&sa.sa_mask);
    sigaction(SIGPROF, &sa, NULL);
    struct itimerval it = {{0, 100}, {0, 100}};
    setitimer(ITIMER_PROF, &it, NULL);
    sigsetjmp(jb, 1);
    while (done < 10000000) { work(done); done++; }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_PROF, &off, NULL);
    printf("jumps %ld done %ld\n", jumps, done);
    return 0;
}
"#,
    ) else {
        return;
    };
    let Some(p) = run.record_printed() else {
        return;
    };
    let (jumps, done) = (p["jumps"], p["done"]);
    assert_eq!(done, 10_000_000);
    let r = run.report();
    assert_eq!(r.calls_of("on_prof"), jumps, "every handler run");
    assert_eq!(r.calls_of("in_handler"), jumps * 3000);
    // A jump abandons at most one probe (a hole, lost) and at most one call
    // of work that had started but was not counted by the program.
    let lost = run.events_lost(&r);
    assert!(lost <= jumps, "lost {lost} > jumps {jumps}");
    let work = r.calls_of("work");
    assert!(
        work + lost >= done && work <= done + jumps,
        "work entered {work} times, done {done}, jumps {jumps}, lost {lost}"
    );
}

#[test]
fn a_jump_out_of_a_probe_at_any_instruction_leaves_a_hole_never_a_torn_event() {
    let _alone = THOUSANDS.lock().unwrap_or_else(|e| e.into_inner());
    // The program single-steps one call of `stepped` (the trap flag, a
    // SIGTRAP after each instruction of it and of the probes) and jumps out
    // of the handler after its first instruction, then its second, ... until
    // the call runs to its end: every point where a signal handler can leave
    // a probe for good. The first 12 sweeps stop stepping at the exit probe,
    // the other 12 go through it. A slot the jump left half written must be
    // a hole (lost), never an event made of its new words and words left
    // from the buffer's last use: the probe once wrote its stamp before its
    // stack word, and a stale stack word with the leaf bit read as a leaf
    // call the runtime had not counted; the next buffer's first event (a
    // call of `work`, after each sweep) was then taken for a duplicate and
    // dropped. (A SIGPROF handler that jumps out lost a call that way about
    // once in 3,000 jumps.)
    let Some(run) = build(
        "jump_anywhere",
        r#"
#include <dlfcn.h>
#include <link.h>
#include <ucontext.h>
#define NOINSTR __attribute__((no_instrument_function))
extern char __executable_start[], etext[];
static uintptr_t lo[3], hi[3];
static volatile long steps, stop_at, jumps, sweeps_done, entry_only;
static sigjmp_buf jb;
NOINLINE void work(long i) { sink ^= (uint64_t)i; }
NOINLINE void stepped(long i) { sink += (uint64_t)i; }
NOINSTR static void bounds(int k, const char *name) {
    void *f = dlsym(RTLD_DEFAULT, name);
    Dl_info di; const ElfW(Sym) *sym = NULL;
    if (!f || !dladdr1(f, &di, (void **)&sym, RTLD_DL_SYMENT) || !sym) { lo[k] = hi[k] = 0; return; }
    lo[k] = (uintptr_t)f; hi[k] = lo[k] + sym->st_size;
}
/* One instruction done: inside the program or the probes, count it, and at
 * the chosen one leave by a jump; anywhere else (the probe's slow path,
 * the dynamic linker) stop stepping. */
NOINSTR static void on_trap(int sig, siginfo_t *si, void *ucv) {
    (void)sig; (void)si;
    ucontext_t *uc = ucv;
    uintptr_t ip = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
    int inside = 0;
    for (int k = 0; k < 3 - entry_only; k++) inside |= ip >= lo[k] && ip < hi[k];
    if (!inside) { uc->uc_mcontext.gregs[REG_EFL] &= ~0x100L; return; }
    if (++steps == stop_at) { jumps++; siglongjmp(jb, 1); }
}
NOINSTR static inline void trace_on(void) { __asm__ volatile("pushfq; orq $0x100, (%%rsp); popfq" ::: "memory", "cc"); }
NOINSTR static inline void trace_off(void) { __asm__ volatile("pushfq; andq $~0x100, (%%rsp); popfq" ::: "memory", "cc"); }
int main(void) {
    lo[0] = (uintptr_t)__executable_start; hi[0] = (uintptr_t)etext;
    bounds(1, "__cyg_profile_func_enter");
    bounds(2, "__cyg_profile_func_exit");
    struct sigaction sa; memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_trap; sa.sa_flags = SA_SIGINFO; sigemptyset(&sa.sa_mask);
    sigaction(SIGTRAP, &sa, NULL);
    long plain = 0;
    for (long i = 0; i < 1000000; i++, plain++) work(i); /* every arena buffer used once */
    for (int r = 0; r < 24; r++) {
        entry_only = r < 12;
        for (long k = 1;; k++) {
            steps = 0; stop_at = k;
            if (sigsetjmp(jb, 1) == 0) {
                trace_on();
                stepped(k);
                trace_off();
                if (steps < k) break; /* the call ran to its end: every point was tried */
            }
        }
        sweeps_done++;
        for (long i = 0; i < 3000 + 37 * r; i++, plain++) work(i);
    }
    printf("plain %ld jumps %ld sweeps %ld\n", plain, jumps, sweeps_done);
    return 0;
}
"#,
    ) else {
        return;
    };
    let Some(p) = run.record_printed() else {
        return;
    };
    let (plain, jumps, sweeps) = (p["plain"], p["jumps"], p["sweeps"]);
    assert_eq!(sweeps, 24);
    // (with the probes, a call of `stepped` is about 100 instructions)
    assert!(
        jumps > 24 * 40,
        "{jumps} jumps: the probes were not stepped through"
    );
    let r = run.report();
    assert_eq!(r.calls_of("work"), plain, "every call of work");
    let stepped = r.calls_of("stepped");
    assert!(
        stepped > 0 && stepped <= jumps + sweeps,
        "stepped entered {stepped} times in {jumps} jumps"
    );
    let lost = run.events_lost(&r);
    assert!(lost <= jumps, "lost {lost} > jumps {jumps}");
    let unmatched: u64 = info(&run)
        .lines()
        .find_map(|l| l.strip_prefix("unmatched:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .expect("lapse info tells of unmatched exits");
    assert_eq!(unmatched, 0, "exits whose entries the recorder dropped");
}

/// Records `run` and checks what every descriptor test expects: the program
/// printed what it prints natively, every call of `work` and `main` is in
/// the data file, and nothing went to a spill file (the runtime kept its
/// connection, or made a new one).
fn record_matches_native(run: &Run, key: &str, calls: u64) {
    let native = run.native(&[]);
    assert_eq!(native.status.code(), Some(0));
    assert_eq!(printed::<u64>(&native).get(key), Some(&0), "natively");
    let Some(out) = run.record(&[], &[]) else {
        return;
    };
    assert_eq!(out.status.code(), Some(0), "lapse said: {}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&native.stdout),
        "the program's output under lapse"
    );
    let r = run.report();
    assert_eq!(r.calls_of("work"), calls);
    assert_eq!(r.calls_of("main"), 1);
    assert_eq!(run.events_lost(&r), 0);
    assert!(
        !run.dir.join("out.lapse.spill").exists(),
        "the events reached the recorder"
    );
}

#[test]
fn a_daemon_that_closes_every_descriptor_and_opens_sockets_gets_no_datagram_of_lapse() {
    let _alone = THOUSANDS.lock().unwrap_or_else(|e| e.into_inner());
    // Before the fix the runtime kept writing to "its" descriptor number,
    // which by then was one of the program's sockets: the program received
    // lapse's hand-over datagrams, and the recording had 0 events.
    let Some(run) = build(
        "daemon_fds",
        r#"
NOINLINE void work(long i) { sink ^= (uint64_t)i; }
static int peer[4096];
int main(void) {
    for (int fd = 3; fd < 1024; fd++) close(fd);
    for (;;) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) != 0) break;
        if (sv[0] < 4096) peer[sv[0]] = sv[1];
        if (sv[1] >= 1000) break;
    }
    for (long i = 0; i < 100000; i++) work(i);
    long foreign = 0;
    static char buf[1 << 17];
    for (int fd = 3; fd < 4096; fd++) {
        if (!peer[fd]) continue;
        ssize_t r;
        while ((r = recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0) foreign += r;
        while ((r = recv(peer[fd], buf, sizeof buf, MSG_DONTWAIT)) > 0) foreign += r;
    }
    printf("foreign %ld\n", foreign);
    return 0;
}
"#,
    ) else {
        return;
    };
    record_matches_native(&run, "foreign", 100_000);
}

#[test]
fn a_program_that_dup2s_its_log_over_high_descriptors_keeps_them_all() {
    let _alone = THOUSANDS.lock().unwrap_or_else(|e| e.into_inner());
    // Before the fix the runtime closed descriptor 900 (the program's log by
    // then) and spilled the whole recording.
    let Some(run) = build(
        "dup2_fds",
        r#"
NOINLINE void work(long i) { sink ^= (uint64_t)i; }
int main(void) {
    int log = open("log.txt", O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (log < 0) return 3;
    for (int fd = 900; fd < 1024; fd++) dup2(log, fd);
    struct stat want;
    fstat(log, &want);
    for (long i = 0; i < 100000; i++) work(i);
    long closed = 0;
    for (int fd = 900; fd < 1024; fd++) {
        struct stat st;
        if (fstat(fd, &st) != 0 || st.st_ino != want.st_ino) closed++;
    }
    printf("closed %ld\n", closed);
    return 0;
}
"#,
    ) else {
        return;
    };
    record_matches_native(&run, "closed", 100_000);
}

/// `lapse info` of the run's data file.
fn info(run: &Run) -> String {
    // (any exit status, as before)
    let out = LAPSE
        .in_dir(&run.dir)
        .run([OsStr::new("info"), run.data().as_os_str()]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The recorder's own peak resident memory (VmHWM), from its note in the file.
fn recorder_peak_mib(info: &str) -> f64 {
    info.lines()
        .find_map(|l| l.split("recorder peak memory: ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no recorder peak memory note in: {info}"))
}

/// Held by every test of this file: they bound the recorder's memory and
/// what it loses, and a sibling's recording beside them (thousands of
/// threads, a compiler, a CPU-heavy target) changes both. (A recorder's
/// peak after 24,000 short processes once reached 134 MiB beside the
/// others, against 34-46 MiB alone or beside CPU hogs.)
static THOUSANDS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The program of bench/instrument/threads.sh (`n` threads alive at once,
/// each making calls before and after a barrier they all wait at), built
/// and run natively; `None` means skip.
fn threads_at_once(name: &str, n: &str) -> Option<(Run, Output)> {
    let run = build(name, include_str!("../../../bench/instrument/threads.c"))?;
    let native = run.native(&[n]);
    assert_eq!(
        native.status.code(),
        Some(0),
        "natively: {}",
        stderr(&native)
    );
    Some((run, native))
}

#[test]
fn five_thousand_threads_at_once_run_as_natively_and_the_recorder_stays_small() {
    // (not beside the other test of thousands of threads: 2,000 threads
    // spinning leave a recorder next to them too little CPU to lose nothing)
    let _alone = THOUSANDS.lock().unwrap_or_else(|e| e.into_inner());
    // Before the fix, threads that found no free arena buffer waited for the
    // recorder without bound, all woken at once for every buffer it freed:
    // 2,000 short threads took 19 s (0.1 s natively), 5,000 ran for minutes,
    // and the recorder grew with the thread count (8 KiB per thread alone
    // for an address cache).
    let Some((run, native)) = threads_at_once("threads5000", "5000") else {
        return;
    };
    // The same program with 1,000 threads first: what the recorder needs
    // whatever the thread count (its own code, the symbol and line tables
    // it reads to name the program's and the C library's functions, and the
    // shared arena of event buffers, all 256 of them claimed by threads
    // waiting at the barrier from a few hundred threads on: 15 MiB of
    // shared pages with 1,000 threads as with 5,000, against none with 50).
    let Some(out) = run.record(&[], &["1000"]) else {
        return;
    };
    assert_eq!(out.status.code(), Some(0), "lapse said: {}", stderr(&out));
    let few = recorder_peak_mib(&info(&run));
    let Some(out) = run.record(&[], &["5000"]) else {
        return;
    };
    assert_eq!(out.status.code(), Some(0), "lapse said: {}", stderr(&out));
    assert_eq!(out.stdout, native.stdout);
    let r = run.report();
    assert_eq!(r.calls_of("work"), 50_000);
    assert_eq!(r.calls_of("body"), 5_000);
    assert_eq!(run.events_lost(&r), 0);
    let info = info(&run);
    assert!(info.contains("threads:     5001"), "{info}");
    // 4,000 more threads may not make the recorder grow by more than
    // 16 MiB, 4 KiB a thread (it grew by 1 GB before the fix, 8 KiB a
    // thread for the address cache alone; 1-2 KiB a thread in this debug
    // build now, what it keeps of each is counted byte by byte in
    // lapse-record's instrument::os tests). The whole stays within 64 MiB
    // for the release build (BENCHMARKS.md); this debug build's own code
    // adds to both.
    let peak = recorder_peak_mib(&info);
    assert!(
        peak - few <= 16.0 && peak <= 80.0,
        "recorder peak memory {peak} MiB with 5,000 threads, {few} MiB with 1,000"
    );
}

#[test]
fn threads_past_the_recorders_limit_are_left_out_whole_and_counted_as_lost() {
    let _alone = THOUSANDS.lock().unwrap_or_else(|e| e.into_inner());
    // The recorder keeps about 340 bytes for each thread alive (streams and
    // the kernel's census), so its memory has a bound only if the number of
    // threads it follows at once has one (100,000 by default: a raised
    // pid_max lets 190,000 live here, which took 71 MiB). Past it, a new
    // thread is not followed: none of its calls is recorded, all its events
    // count as lost, and the program runs as it does natively. 600 threads
    // alive at once (each 11 calls: body, then work 10 times) against a
    // limit of 50.
    let Some((run, native)) = threads_at_once("threads_past_limit", "600") else {
        return;
    };
    let Some(out) = run.record_with(&[("LAPSE_MAX_THREADS", "50")], &[], &["600"]) else {
        return;
    };
    assert_eq!(out.status.code(), Some(0), "lapse said: {}", stderr(&out));
    assert_eq!(out.stdout, native.stdout);
    let info = info(&run);
    let refused: u64 = info
        .lines()
        .find_map(|l| l.split_once(" thread(s) were not recorded"))
        .and_then(|(before, _)| before.split_whitespace().last())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no note of threads left out in: {info}"));
    let r = run.report();
    let (body, work) = (r.calls_of("body"), r.calls_of("work"));
    // Every worker is either recorded whole or left out whole. (Threads
    // that ended half a second before another's first events arrive are
    // let go and make room, so the split is not exactly 50 / 550 on a busy
    // machine.) The main thread usually sends its events last, at its exit,
    // and is followed still: main threads have room of their own past the
    // limit. (On a busy machine its first buffer can go out earlier, on
    // its timer, and take one of the 50.)
    assert_eq!(r.calls_of("main"), 1);
    assert_eq!(body + refused, 600, "{body} recorded, {refused} left out");
    assert_eq!(work, 10 * body);
    assert!(
        refused >= 1 && body >= 49,
        "{body} recorded, {refused} left out with a limit of 50"
    );
    assert!(
        r.lost() >= 22 * refused,
        "{} lost events for {refused} threads of 22 events each",
        r.lost()
    );
}

#[test]
fn a_thread_limit_that_is_not_a_number_is_refused_before_anything_runs() {
    let _alone = THOUSANDS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(run) = build("limit_bad", "int main(void) { puts(\"ran\"); return 0; }") else {
        return;
    };
    for bad in ["0", "-3", "lots"] {
        let out = Command::new(env!("CARGO_BIN_EXE_lapse"))
            .env("LAPSE_MAX_THREADS", bad)
            .args(["record", "-o"])
            .arg(run.data())
            .arg("--")
            .arg(&run.exe)
            .current_dir(&run.dir)
            .output()
            .expect("run lapse record");
        let err = stderr(&out);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains("LAPSE_MAX_THREADS") && err.trim().lines().count() == 1,
            "{err}"
        );
        assert!(out.stdout.is_empty(), "the program ran");
        assert!(!run.data().exists());
    }
}

#[test]
fn thousands_of_short_processes_in_turn_are_recorded_whole_and_let_go() {
    let _alone = THOUSANDS.lock().unwrap_or_else(|e| e.into_inner());
    // SPEC 7: the recorder's memory is bounded whatever the run length. It
    // kept the mappings (about 1.2 KiB) and the records (about 430 bytes)
    // of every process a run ever had. Now a process that ended, once all
    // it sent is read and its threads are let go, is written out and
    // forgotten; its record must be as if it had been kept to the end.
    let Some(run) = build("forks", include_str!("../../../bench/instrument/forks.c")) else {
        return;
    };
    let Some(out) = run.record(&[], &["2000"]) else {
        return;
    };
    assert_eq!(out.status.code(), Some(0), "lapse said: {}", stderr(&out));
    let few = recorder_peak_mib(&info(&run));
    let Some(out) = run.record(&[], &["24000"]) else {
        return;
    };
    assert_eq!(out.status.code(), Some(0), "lapse said: {}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "forked 24000\n");
    let r = run.report();
    assert_eq!(r.calls_of("main"), 1);
    assert_eq!(r.calls_of("child"), 24_000);
    assert_eq!(r.calls_of("work"), 2_400_000);
    assert_eq!(run.events_lost(&r), 0);
    let info = info(&run);
    assert!(info.contains("processes:   24001"), "{info}");
    // Every child's record: its command (inherited), its parent, its end.
    let out = Command::new(env!("CARGO_BIN_EXE_lapse"))
        .args([
            "report",
            "out.lapse",
            "--view",
            "processes",
            "--format",
            "json",
        ])
        .current_dir(&run.dir)
        .output()
        .expect("run lapse report");
    let v: Value = serde_json::from_slice(&out.stdout).expect("report is JSON");
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 24001);
    let root = run.exe.display().to_string();
    for row in rows {
        let command = row["command"].as_str().unwrap_or_default();
        assert!(command.contains(&root), "{row}");
    }
    // (each child: `child` and its 100 calls of `work`)
    let children = rows.iter().filter(|r| r["calls"].as_u64() == Some(101));
    assert_eq!(children.count(), 24_000);
    // An ended process is let go as soon as everything it sent is read (a
    // read of its connection that began after its end found it empty) and
    // 20 ms have passed; with a fixed 500 ms grace the recorder held the
    // last half second's processes, so its peak followed the fork rate (CI
    // once grew 25 MiB from 2,000 to 16,000 processes). What a starved
    // recorder has read but not yet seen end still varies with the load:
    // measured with this debug build, 2,000 -> 16,000 grew 2.3-3.5 MiB idle
    // and 6-12 MiB beside three CPU hogs, 2,000 -> 30,000 0.8 MiB idle and
    // 11.8 beside three hogs (not more with more processes). Keeping 1.6 KiB
    // per process for the whole run (the first design) would add 34 MiB
    // here. (24,000: the kernel reuses pids past 32,768 here, and two
    // processes of one pid would be one row.) Release: 26.6 MiB at 2,000
    // and at 16,000 processes, 28.7 at 64,000 (41 at 2,000 with the grace).
    let peak = recorder_peak_mib(&info);
    eprintln!("recorder peak: {few} MiB after 2,000 processes, {peak} MiB after 24,000");
    assert!(
        peak - few <= 18.0,
        "recorder peak memory {peak} MiB after 24,000 processes, {few} MiB after 2,000"
    );
}

/// `lapse record -o out.lapse -- program args` with the recorder stopped
/// 150 ms of every 200 until it ends: it learns of processes' ends from the
/// kernel long before it reads what they sent. `None` means skip.
fn record_starved(run: &Run, args: &[&str]) -> Option<Output> {
    let mut cmd = LAPSE.in_dir(&run.dir).command([
        OsStr::new("record"),
        OsStr::new("-o"),
        run.data().as_os_str(),
        OsStr::new("--"),
        run.exe.as_os_str(),
    ]);
    let mut lapse = cmd
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start lapse record");
    while lapse.try_wait().expect("wait for lapse").is_none() {
        stop_for(lapse.id(), Duration::from_millis(150));
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = lapse.wait_with_output().expect("lapse's output");
    if perf_refused(&stderr(&out)) {
        return skip("perf_event_open refused");
    }
    Some(out)
}

/// Every child of a starved recording is one process and one thread, all
/// its calls there, none taken for a program without the runtime.
fn assert_children_whole(run: &Run, out: &Output, children: u64) {
    assert_eq!(out.status.code(), Some(0), "lapse said: {}", stderr(out));
    let r = run.report();
    assert_eq!(run.events_lost(&r), 0);
    assert_eq!(r.calls_of("child"), children);
    assert_eq!(r.calls_of("work"), children * 100);
    let info = info(run);
    assert!(!info.contains("without lapse's runtime"), "{info}");
    assert!(
        info.contains(&format!("processes:   {}\n", children + 1)),
        "{info}"
    );
    assert!(
        info.contains(&format!("threads:     {}\n", children + 1)),
        "{info}"
    );
}

#[test]
fn a_starved_recorder_keeps_each_child_whole_though_the_kernel_told_of_its_end_first() {
    let _alone = THOUSANDS.lock().unwrap_or_else(|e| e.into_inner());
    // The recorder learns that a process ended from the kernel's rings, and
    // what it sent from its socket. Starved, it read a child's end before
    // its first message, found no connection the child had been read from,
    // took that as "all read" and let the child go; its messages, read
    // later, made a second process and thread with no runtime ("N
    // process(es) ran without lapse's runtime"; 4,045 threads for 3,001
    // processes). A fork child's messages travel on the connection it
    // inherited: it is let go once its parent's is read past its end.
    let Some(run) = build("forks", include_str!("../../../bench/instrument/forks.c")) else {
        return;
    };
    let Some(out) = record_starved(&run, &["3000"]) else {
        return;
    };
    assert_eq!(String::from_utf8_lossy(&out.stdout), "forked 3000\n");
    assert_children_whole(&run, &out, 3000);
}

#[test]
fn a_starved_recorder_keeps_each_exec_whole_though_the_kernel_told_of_its_end_first() {
    let _alone = THOUSANDS.lock().unwrap_or_else(|e| e.into_inner());
    // The same with children that exec: the new image connects anew, and
    // its connection may still wait in the socket's queue, not taken, when
    // the kernel tells of the child's end (5-368 such children in 500 here
    // before). It is let go once a look for new connections that began
    // after its end found none, and every new one is read past its end.
    let Some(run) = build(
        "execs",
        r#"
NOINLINE void work(int i) { sink += (uint64_t)i; }
NOINLINE void child(void) { for (int i = 0; i < 100; i++) work(i); }
int main(int argc, char **argv) {
    if (argc > 2) { child(); return 0; }
    int n = atoi(argv[1]);
    for (int i = 0; i < n; i++) {
        pid_t p = fork();
        if (p == 0) { execl("/proc/self/exe", argv[0], "1", "child", (char *)0); _exit(3); }
        int st;
        if (p < 0 || waitpid(p, &st, 0) != p || st != 0) { perror("fork"); return 2; }
    }
    printf("exec'd %d\n", n);
    return 0;
}
"#,
    ) else {
        return;
    };
    let Some(out) = record_starved(&run, &["400"]) else {
        return;
    };
    assert_eq!(String::from_utf8_lossy(&out.stdout), "exec'd 400\n");
    assert_children_whole(&run, &out, 400);
}

#[test]
fn forty_thousand_threads_in_turn_are_each_recorded_whole_and_the_recorder_stays_within_64_mib() {
    let _alone = THOUSANDS.lock().unwrap_or_else(|e| e.into_inner());
    // Threads that come and go, 50 at a time. A thread that ended a while
    // ago and has nothing left in transit is written out complete (name,
    // start, end) and forgotten by the recorder; its record must be as if
    // it had been kept to the end. (The kernel reuses thread ids past its
    // pid limit, 32,768 here, so some ids are two threads: recorded as one
    // thread that covers both.) Measured: 38-43 MiB for this debug build,
    // with or without forgetting them (the recorder's peak did not follow
    // the census here; BENCHMARKS.md), so this guards the bound, not the fix.
    let Some(run) = build(
        "thread_churn",
        r#"
NOINLINE void work(int i) { sink += (uint64_t)i; }
NOINLINE void *body(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "worker");
    for (int i = 0; i < 10; i++) work(i);
    return NULL;
}
int main(int argc, char **argv) {
    int rounds = atoi(argv[1]);
    pthread_t t[50];
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 64 << 10);
    long made = 0;
    for (int r = 0; r < rounds; r++) {
        int n = 0;
        for (int i = 0; i < 50; i++) if (pthread_create(&t[n], &a, body, NULL) == 0) n++;
        for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
        made += n;
    }
    printf("threads %ld\n", made);
    return made == 50L * rounds ? 0 : 2;
}
"#,
    ) else {
        return;
    };
    {
        let rounds = "800";
        let native = run.native(&[rounds]);
        assert_eq!(
            native.status.code(),
            Some(0),
            "natively: {}",
            stderr(&native)
        );
        let Some(out) = run.record(&["--no-libcalls"], &[rounds]) else {
            return;
        };
        assert_eq!(out.status.code(), Some(0), "lapse said: {}", stderr(&out));
        assert_eq!(out.stdout, native.stdout);
        let threads: u64 = rounds.parse::<u64>().unwrap() * 50;
        let r = run.report();
        // A debug recorder starved by a loaded machine may run out of free
        // buffers: such events are counted as lost and the file says it is
        // not complete; every call is then in the report or among them.
        // Nothing lost: every call, exactly.
        let lost = run.events_lost(&r);
        let (work, body) = (r.calls_of("work"), r.calls_of("body"));
        if lost == 0 {
            assert_eq!(work, threads * 10);
            assert_eq!(body, threads);
        } else {
            let info = info(&run);
            assert!(info.contains("complete:    no"), "{lost} lost: {info}");
            assert!(work <= threads * 10 && body <= threads);
            assert!(
                work + body + lost >= threads * 11,
                "work {work}, body {body}, {lost} events lost: calls missing beyond the loss"
            );
        }
        let peak = recorder_peak_mib(&info(&run));
        assert!(
            peak <= 64.0,
            "recorder peak memory {peak} MiB with 40,000 threads in turn"
        );
        // Every thread record is complete: the kernel's name, and an end
        // of its own (not the program's: then each worker would span the run).
        let rows = thread_rows(&run);
        let main = rows
            .iter()
            .find(|t| t.0 != "worker")
            .expect("the main thread");
        let workers: Vec<_> = rows.iter().filter(|t| t.0 == "worker").collect();
        assert_eq!(rows.len(), workers.len() + 1, "{rows:?}");
        assert!(
            workers.len() as u64 >= threads.min(20_000),
            "{} workers",
            workers.len()
        );
        let mut spans: Vec<u64> = workers.iter().map(|t| t.1).collect();
        spans.sort_unstable();
        let median = spans[spans.len() / 2];
        assert!(
            median * 10 < main.1,
            "a worker's median span {median} ns against the main thread's {} ns",
            main.1
        );
    }
}

/// (name, elapsed inclusive ns) of each thread in a recording.
fn thread_rows(run: &Run) -> Vec<(String, u64)> {
    let out = Command::new(env!("CARGO_BIN_EXE_lapse"))
        .arg("report")
        .arg(run.data())
        .args(["--view", "threads", "--format", "json"])
        .output()
        .expect("run lapse report");
    assert!(out.status.success(), "lapse report: {}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).expect("report is JSON");
    v["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            (
                r["thread_name"].as_str().unwrap_or_default().to_owned(),
                r["elapsed_inclusive_ns"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

#[test]
fn ctrl_c_stops_thousands_of_busy_threads_and_the_file_is_finished() {
    // (not beside the other test of thousands of threads: 2,000 threads
    // spinning leave a recorder next to them too little CPU to lose nothing)
    let _alone = THOUSANDS.lock().unwrap_or_else(|e| e.into_inner());
    // 2,000 threads call traced code until the program is interrupted.
    let Some(run) = build(
        "ctrl_c_threads",
        r#"
#define THREADS 2000
NOINLINE void work(int i) { sink += (uint64_t)i; }
NOINLINE void *body(void *arg) { (void)arg; for (int i = 0;; i++) work(i); return NULL; }
int main(void) {
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 64 << 10);
    for (int i = 0; i < THREADS; i++) {
        pthread_t t;
        if (pthread_create(&t, &a, body, NULL) != 0) return 2;
    }
    close(open("ready", O_CREAT | O_WRONLY, 0600));
    for (;;) pause();
}
"#,
    ) else {
        return;
    };
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lapse"));
    cmd.arg("record")
        .arg("-o")
        .arg(run.data())
        .arg("--")
        .arg(&run.exe)
        .current_dir(&run.dir)
        .stderr(std::process::Stdio::piped());
    // SAFETY: signal() is async-signal-safe; nothing else runs in the child.
    // (Ctrl-C must be able to end the program whatever this test inherited:
    // a shell's background job ignores SIGINT, and lapse rightly passes
    // that on to the target, which would then spin forever.)
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut lapse = cmd.spawn().expect("start lapse record");
    while !run.dir.join("ready").exists() {
        if let Ok(Some(status)) = lapse.try_wait() {
            let out = lapse.wait_with_output().expect("lapse output");
            if perf_refused(&stderr(&out)) {
                return skip(stderr(&out)).unwrap_or(());
            }
            panic!("lapse ended ({status}) first: {}", stderr(&out));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = i32::try_from(lapse.id()).expect("pid fits");
    // SAFETY: signalling the child we started (not from a terminal: the
    // recorder passes it on to the target).
    unsafe { libc::kill(pid, libc::SIGINT) };
    let out = lapse.wait_with_output().expect("lapse record ends");
    assert_eq!(
        out.status.code(),
        Some(128 + 2),
        "lapse said: {}",
        stderr(&out)
    );
    let r = run.report();
    assert!(r.calls_of("work") > 0);
    // The file is finished (its footer written). Under heavy load (two CPU
    // hogs beside 2,000 spinning threads and a debug recorder) the shared
    // buffers fill and sends time out (the runtime may then take the
    // recorder for gone): those events are lost, counted, and said.
    if r.0["session"]["complete"] != true {
        let lost = run.events_lost(&r);
        let info = info(&run);
        assert!(
            lost > 0
                && info.contains("events were lost")
                && (info.contains("found no free buffer") || info.contains("found no room")),
            "{info}"
        );
    }
}

/// `lapse record` as started by a parent that ignores `ignore` and blocks
/// `block` (both may be 0), with stdout piped to a reader that closes it
/// after `keep` bytes; the recorder's exit status and what the target said
/// on stderr.
fn record_under_parent(
    run: &Run,
    method: &str,
    args: &[&str],
    ignore: i32,
    block: i32,
    keep: usize,
) -> Option<(Option<i32>, String)> {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lapse"));
    cmd.args(["record", "--method", method, "-o"])
        .arg(run.data())
        .arg("--")
        .arg(&run.exe)
        .args(args)
        .current_dir(&run.dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if ignore != 0 {
                libc::signal(ignore, libc::SIG_IGN);
            }
            if block != 0 {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, block);
                libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("start lapse record");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut got = vec![0u8; keep];
    stdout
        .read_exact(&mut got)
        .expect("the program's first bytes");
    drop(stdout); // as `| head -c KEEP` does
    let out = child.wait_with_output().expect("lapse ends");
    let err = stderr(&out);
    if perf_refused(&err) && !run.data().exists() {
        return skip(format!("perf events are not available here: {err}"));
    }
    Some((out.status.code(), err))
}

#[test]
fn the_target_gets_the_signal_dispositions_and_mask_lapse_inherited() {
    let _alone = THOUSANDS.lock().unwrap_or_else(|e| e.into_inner());
    // Rust programs ignore SIGPIPE; a target that inherited that would write
    // on into a closed pipe (`lapse record -- prog | head`) and not end by
    // the signal as it does natively.
    let Some(run) = build(
        "inherited_signals",
        r#"
NOINLINE void say(int i) { printf("line %d\n", i); fflush(stdout); }
int main(int argc, char **argv) {
    sigset_t s;
    sigprocmask(SIG_SETMASK, NULL, &s);
    fprintf(stderr, "usr1 blocked: %d\n", sigismember(&s, SIGUSR1));
    if (argc > 1) {        /* writes until the pipe is closed */
        for (int i = 0; i < 100000000; i++) say(i);
        return 3;
    }
    say(0);
    kill(getpid(), SIGPIPE);
    return 0;
}
"#,
    ) else {
        return;
    };
    for method in ["instrument", "sample"] {
        // Natively: killed by SIGPIPE either way.
        let Some((status, err)) = record_under_parent(&run, method, &["endless"], 0, 0, 8) else {
            return;
        };
        assert_eq!(status, Some(128 + libc::SIGPIPE), "{method}: {err}");
        assert!(err.contains("usr1 blocked: 0"), "{method}: {err}");
        let (status, err) = record_under_parent(&run, method, &[], 0, 0, 7).expect("ran before");
        assert_eq!(status, Some(128 + libc::SIGPIPE), "{method}: {err}");
        // A parent that ignores SIGPIPE and blocks SIGUSR1 passes both on.
        let (status, err) = record_under_parent(&run, method, &[], libc::SIGPIPE, libc::SIGUSR1, 7)
            .expect("ran before");
        assert_eq!(status, Some(0), "{method}: {err}");
        assert!(err.contains("usr1 blocked: 1"), "{method}: {err}");
    }
}

#[test]
fn lapse_runs_under_a_64_kib_stack_limit_and_the_target_inherits_it() {
    let _alone = THOUSANDS.lock().unwrap_or_else(|e| e.into_inner());
    // Before: `ulimit -s 64` aborted lapse itself ("stack overflow") before
    // the target ran; the limit is the target's to inherit, not lapse's.
    use std::os::unix::process::CommandExt;
    let Some(run) = build(
        "small_stack",
        r#"
#include <sys/resource.h>
NOINLINE long depth(long n) { return n ? depth(n - 1) + 1 : 0; }
int main(void) {
    struct rlimit r;
    getrlimit(RLIMIT_STACK, &r);
    printf("stack %ld KiB, depth %ld\n", (long)(r.rlim_cur >> 10), depth(100));
    return 5;
}
"#,
    ) else {
        return;
    };
    let limited = |args: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lapse"));
        cmd.args(args).current_dir(&run.dir);
        // SAFETY: setrlimit is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                let r = libc::rlimit {
                    rlim_cur: 64 << 10,
                    rlim_max: libc::RLIM_INFINITY,
                };
                libc::setrlimit(libc::RLIMIT_STACK, &r);
                Ok(())
            });
        }
        cmd.output().expect("run lapse")
    };
    let data = run.data();
    let data = data.to_str().expect("utf-8");
    let exe = run.exe.to_str().expect("utf-8");
    for method in ["sample", "instrument"] {
        let out = limited(&["record", "--method", method, "-o", data, "--", exe]);
        if perf_refused(&stderr(&out)) {
            return skip(stderr(&out)).unwrap_or(());
        }
        assert_eq!(out.status.code(), Some(5), "{method}: {}", stderr(&out));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "stack 64 KiB, depth 100\n",
            "{method}"
        );
        let report = limited(&["report", data, "--view", "calltree"]);
        assert!(report.status.success(), "{method}: {}", stderr(&report));
    }
    assert_eq!(run.report().calls_of("depth"), 101, "every call recorded");
}

#[test]
fn a_setuid_or_instantly_killed_target_passes_its_status_on_and_lapse_says_why() {
    let _alone = THOUSANDS.lock().unwrap_or_else(|e| e.into_inner());
    // Before: "recorded nothing ... is it built with -finstrument-functions?"
    // and status 1 for a set-user-ID program (the dynamic linker ignores
    // LD_PRELOAD there), and nothing said for a sampling run with no sample.
    let Some(run) = build("setuid", "int main(void) { return 9; }") else {
        return;
    };
    let exe = run.exe.to_str().expect("utf-8");
    let data = run.data();
    let data = data.to_str().expect("utf-8");
    let lapse = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_lapse"))
            .args(args)
            .current_dir(&run.dir)
            .output()
            .expect("run lapse")
    };
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        use std::os::unix::fs::PermissionsExt;
        std::os::unix::fs::chown(exe, Some(65534), Some(65534)).expect("chown");
        std::fs::set_permissions(exe, std::fs::Permissions::from_mode(0o4755)).expect("chmod");
        let out = lapse(&["record", "--method", "instrument", "-o", data, "--", exe]);
        assert_eq!(out.status.code(), Some(9), "{}", stderr(&out));
        assert!(stderr(&out).contains("set-user-ID"), "{}", stderr(&out));
        assert_eq!(stderr(&out).trim().lines().count(), 1, "{}", stderr(&out));
    }
    let killed = compile(
        &run.dir,
        "gcc",
        "killed",
        "#include <signal.h>\n#include <unistd.h>\nint main(void) { kill(getpid(), SIGKILL); return 0; }",
        &[],
    )
    .expect("built before");
    let killed = killed.to_str().expect("utf-8");
    // (--no-patch .: built without probes, it would be patched at run time
    // and its main recorded, some of the time, before the signal)
    let out = lapse(&[
        "record",
        "--method",
        "instrument",
        "--no-patch",
        ".",
        "-o",
        data,
        "--",
        killed,
    ]);
    assert_eq!(out.status.code(), Some(128 + 9), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("killed by signal 9"),
        "{}",
        stderr(&out)
    );
    let out = lapse(&["record", "--method", "sample", "-o", data, "--", killed]);
    if perf_refused(&stderr(&out)) {
        return skip(stderr(&out)).unwrap_or(());
    }
    assert_eq!(out.status.code(), Some(128 + 9), "{}", stderr(&out));
    // (on a busy machine its start-up can take a sample's worth of CPU:
    // then lapse says the samples are too few)
    let said = stderr(&out);
    assert!(
        said.contains("no sample was taken") || said.contains("too few to say where the time went"),
        "{said}"
    );
}

#[test]
fn a_child_exec_d_after_a_privilege_drop_gets_no_ld_so_error_and_the_file_says_so() {
    let _alone = THOUSANDS.lock().unwrap_or_else(|e| e.into_inner());
    // Before: the dynamic linker printed "ERROR: ld.so: object ... cannot be
    // preloaded" on the child's stderr (the runtime is readable by root
    // only), and the file said nothing of the child.
    if lapse_testkit::root("dropping privileges").is_none() {
        return;
    }
    let Some(run) = build(
        "privilege_drop",
        r#"
NOINLINE void work(long i) { sink += (uint64_t)i; }
int main(void) {
    for (long i = 0; i < 1000; i++) work(i);
    pid_t p = fork();
    if (p == 0) {
        if (setgid(65534) || setuid(65534)) return 9;
        execl("/bin/echo", "echo", "child says hi", (char *)NULL);
        return 8;
    }
    int st;
    waitpid(p, &st, 0);
    printf("child status %d\n", WEXITSTATUS(st));
    return 0;
}
"#,
    ) else {
        return;
    };
    let Some(out) = run.record(&[], &[]) else {
        return;
    };
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "child says hi\nchild status 0\n"
    );
    assert!(!stderr(&out).contains("ld.so"), "{}", stderr(&out));
    assert!(
        info(&run).contains("ran without lapse's runtime"),
        "{}",
        info(&run)
    );
    assert_eq!(run.report().calls_of("work"), 1000);
}

/// Runs `body`'s cut-off program (it loses lapse's connection after its
/// first 1,000 calls, then makes 3,000,000 more) and checks that every call
/// is either counted or counted as lost, and that `info` says why.
fn every_call_after_a_cut_is_counted_or_lost(name: &str, body: &str, why: &str) {
    let Some(run) = build(name, body) else {
        return;
    };
    let Some(out) = run.record(&[], &[]) else {
        return;
    };
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(printed::<u64>(&out), printed::<u64>(&run.native(&[])));
    let r = run.report();
    let (calls, lost) = (r.calls_of("work"), run.events_lost(&r));
    // (each call is two events)
    assert_eq!(calls + lost / 2, 3_001_000, "calls {calls}, lost {lost}");
    // Shared memory carries them: at most a few buffers (2,730 events each)
    // may find no room on a busy machine, never most of them.
    assert!(calls > 2_900_000, "calls {calls}, lost {lost}");
    let info = info(&run);
    assert!(
        info.contains("lost their connection to lapse") && info.contains(why),
        "{info}"
    );
    let complete = if lost == 0 {
        "complete:    yes"
    } else {
        "complete:    no"
    };
    assert!(info.contains(complete), "{info}");
}

#[test]
fn a_program_that_closes_every_descriptor_under_a_limit_of_3_has_every_call_counted() {
    let _alone = THOUSANDS.lock().unwrap_or_else(|e| e.into_inner());
    // Before: the recorder let the arena go when the connection closed, the
    // runtime could open neither a connection nor the spill, and 100,000 calls
    // "recorded nothing"; with more, most were lost uncounted and the file
    // said complete.
    every_call_after_a_cut_is_counted_or_lost(
        "nofile_3",
        r#"
#include <sys/resource.h>
#include <sys/syscall.h>
NOINLINE void work(long i) { sink += (uint64_t)i; }
int main(void) {
    for (long i = 0; i < 1000; i++) work(i);
    struct rlimit r = {3, 3};
    if (setrlimit(RLIMIT_NOFILE, &r) != 0) return 7;
    if (syscall(SYS_close_range, 3, ~0U, 0) != 0) return 6;
    for (long i = 0; i < 3000000; i++) work(i);
    int fd = open("/dev/null", O_RDONLY);
    printf("sum %llu open %d\n", (unsigned long long)sink, fd);
    return 0;
}
"#,
        "Too many open files",
    );
}

#[test]
fn a_seccomp_filter_that_forbids_sockets_and_sendmsg_loses_no_call_uncounted() {
    let _alone = THOUSANDS.lock().unwrap_or_else(|e| e.into_inner());
    // Before: the first refused send closed the connection, the recorder let
    // the arena go, and every later buffer went to the spill file: the
    // recording held a fraction of the calls and said it was complete.
    every_call_after_a_cut_is_counted_or_lost(
        "seccomp_sockets",
        r#"
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
NOINLINE void work(long i) { sink += (uint64_t)i; }
int main(void) {
    for (long i = 0; i < 1000; i++) work(i);
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_sendmsg, 4, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_sendto, 3, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_socket, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_connect, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
    };
    struct sock_fprog prog = {sizeof f / sizeof f[0], f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
        return 7;
    for (long i = 0; i < 3000000; i++) work(i);
    printf("sum %llu\n", (unsigned long long)sink);
    return 0;
}
"#,
        "Operation not permitted",
    );
}
