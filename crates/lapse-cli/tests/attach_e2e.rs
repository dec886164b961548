//! End to end, instrumentation attached to a running process
//! (`lapse record --method instrument --pid PID`): a two-thread service
//! built during the test runs on its own; lapse attaches to it for a window,
//! twice, and detaches. Checked: each window's calls against those the
//! service counted itself in the same window, the application time per
//! call of a CPU function and of a sleep, and that the service ends as it
//! would have (status 0, its output unchanged). Then the same with a thread
//! ending, a fork, signal handlers running, the process killed, and lapse
//! interrupted, during the window; and the refusals.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a wait for the service or lapse may last before the test calls
/// it a hang: far past what any step takes (well under a second alone, a
/// few seconds on a loaded machine), so that only a hang fails it.
const HANG: Duration = Duration::from_secs(180);

use lapse_testkit::{compile, perf_refused, row, rows, skip, stderr, Lapse, WorkDir};
use serde_json::Value;

const LAPSE: Lapse = Lapse::new(env!("CARGO_BIN_EXE_lapse"));

/// The service: its main thread calls `work` (50 µs of its own CPU time)
/// and its second thread `nap` (a 1 ms sleep) until its stdin closes;
/// every 20 naps the second thread writes "monotonic-ns works naps" at the
/// start of the log file (argv[1]) for the test to measure its rates. Its
/// output depends on nothing that timing changes: a hash of `work`'s
/// results for 0..1000, how many later results disagreed, and how many of
/// the extra threads or children (argv[2]: `threads`, `fork`) failed.
/// A line "f" on its stdin forks a child that calls `work` and `nap` until
/// stdin closes; "v" vforks a child that sleeps 5 s ("V": 20 s). With `signals`, a 1 ms interval timer runs `tick` in a
/// signal handler;
/// with `blocked`, the threads swap roles: the main thread sleeps.
const SERVICE: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#define QUIET __attribute__((no_instrument_function))
#define NOINLINE __attribute__((noipa))
QUIET static double now(clockid_t c) { struct timespec t; clock_gettime(c, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
QUIET static uint64_t hash(uint64_t x) {
    uint64_t h = x * 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 64; i++) h = (h ^ (h >> 29)) * 0xBF58476D1CE4E5B9ull;
    return h;
}
NOINLINE uint64_t work(uint64_t x) {
    double end = now(CLOCK_THREAD_CPUTIME_ID) + 50e-6;
    uint64_t h = hash(x);
    while (now(CLOCK_THREAD_CPUTIME_ID) < end) {}
    return h;
}
NOINLINE int nap(void) { struct timespec t = {0, 1000000}; return nanosleep(&t, 0); }
volatile long ticks;
NOINLINE void tick(void) { ticks++; }
QUIET static void on_alarm(int sig) { (void)sig; tick(); }
static volatile int stop;
static volatile long works, naps, failed, mismatches;
static uint64_t table[1000];
static int logfd;
static const char *mode = "";
static pid_t child;
QUIET static void note(void) {
    char line[80];
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
    int n = snprintf(line, sizeof line, "%020lld %012ld %012ld\n",
                     (long long)t.tv_sec * 1000000000LL + t.tv_nsec, works, naps);
    pwrite(logfd, line, n, 0);
}
static void *extra(void *a) { (void)a; for (int i = 0; i < 20; i++) if (work(i) != table[i]) failed++; return 0; }
static void *napper(void *a) {
    (void)a;
    struct pollfd p = {0, POLLIN, 0};
    while (!stop) {
        /* (a sleep cut short: by the attach, unless handlers run) */
        if (nap() != 0 && strcmp(mode, "signals")) failed++;
        naps++;
        if (naps % 20 == 0) note();
        if (poll(&p, 1, 0) > 0) {
            char c = 0;
            if (read(0, &c, 1) == 1 && (c == 'v' || c == 'V')) {
                /* a vfork child that sleeps 5 s (V: 20 s) before it ends:
                 * this thread waits in the kernel meanwhile (state D) */
                time_t secs = c == 'v' ? 5 : 20;
                pid_t c = vfork();
                if (c == 0) {
                    struct timespec t = {secs, 0};
                    nanosleep(&t, 0);
                    _exit(0);
                }
                int st = 0;
                if (c < 0 || waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st)) failed++;
            } else if (c == 'f' && !child) {
                /* a child that lives on until stdin closes */
                child = fork();
                if (child == 0) {
                    for (uint64_t i = 0; poll(&p, 1, 0) <= 0; i++) {
                        if (work(i % 1000) != table[i % 1000]) _exit(1);
                        nap();
                    }
                    _exit(0);
                }
            } else {
                stop = 1;
            }
        }
        if (naps % 300 == 0 && !strcmp(mode, "threads")) {
            pthread_t t;
            if (pthread_create(&t, 0, extra, 0) || pthread_join(t, 0)) failed++;
        }
        if (naps % 300 == 0 && !strcmp(mode, "fork")) {
            pid_t c = fork();
            if (c == 0) { extra(0); exit(failed ? 1 : 0); }
            int st = 0;
            if (c < 0 || waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st)) failed++;
        }
    }
    return 0;
}
static void *worker(void *a) {
    (void)a;
    for (uint64_t n = 0; !stop; n++) { if (work(n % 1000) != table[n % 1000]) mismatches++; works++; }
    return 0;
}
int main(int argc, char **argv) {
    logfd = open(argc > 1 ? argv[1] : "/dev/null", O_WRONLY | O_CREAT, 0600);
    if (argc > 2) mode = argv[2];
    uint64_t h = 0;
    for (int i = 0; i < 1000; i++) { table[i] = hash(i); h ^= table[i] + i; }
    if (!strcmp(mode, "signals")) {
        struct sigaction sa; memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_alarm; sa.sa_flags = SA_RESTART;
        sigaction(SIGALRM, &sa, 0);
        struct itimerval it = {{0, 1000}, {0, 1000}};
        setitimer(ITIMER_REAL, &it, 0);
    }
    note();
    /* (`blocked`: the main thread, which the attach's calls run on, is
     * asleep in a system call nearly all the time) */
    int blocked = !strcmp(mode, "blocked");
    pthread_t t;
    pthread_create(&t, 0, blocked ? worker : napper, 0);
    if (blocked) napper(0); else worker(0);
    pthread_join(t, 0);
    int st = 0;
    if (child && (child < 0 || waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st))) failed++;
    if (!strcmp(mode, "signals")) printf("ticked %s\n", ticks > 0 ? "yes" : "no");
    printf("table %016llx mismatches %ld failed %ld\n", (unsigned long long)h, mismatches, failed);
    return 0;
}
"#;

fn work_dir(name: &str) -> WorkDir {
    WorkDir::new(env!("CARGO_TARGET_TMPDIR"), &format!("attach_e2e-{name}"))
}

/// The service built with `flags`; `None` means skip.
fn build(dir: &Path, name: &str, flags: &[&str]) -> Option<PathBuf> {
    let mut all = vec!["-O1", "-g", "-pthread"];
    all.extend_from_slice(flags);
    compile(dir, "gcc", name, SERVICE, &all)
}

/// A running service; its stdin closes (and it ends) at [`Service::finish`].
struct Service {
    child: Child,
    log: PathBuf,
}

impl Service {
    fn start(exe: &Path, dir: &Path, mode: &str) -> Service {
        Self::start_as(exe, dir, mode, None)
    }

    /// [`Service::start`], as user `uid` (and its group) when given.
    fn start_as(exe: &Path, dir: &Path, mode: &str, uid: Option<u32>) -> Service {
        use std::os::unix::process::CommandExt;
        let log = dir.join(format!("{mode}.log"));
        let mut cmd = Command::new(exe);
        if let Some(uid) = uid {
            cmd.uid(uid).gid(uid);
        }
        let child = cmd
            .arg(&log)
            .arg(mode)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the service");
        let s = Service { child, log };
        // (running: its first lines are written)
        let t = Instant::now();
        while s.counts().1 < 50.0 {
            assert!(t.elapsed() < HANG, "the service did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        s
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    /// (monotonic seconds, works, naps) as the service last wrote them.
    fn counts(&self) -> (f64, f64, f64) {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let v: Vec<f64> = text
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        match v[..] {
            [t, w, n] => (t / 1e9, w, n),
            _ => (0.0, 0.0, 0.0),
        }
    }

    /// Writes `what` to its stdin ("f": fork a child, "v": vfork one).
    fn ask(&mut self, what: &[u8]) {
        let stdin = self.child.stdin.as_mut().expect("stdin");
        stdin.write_all(what).expect("write to the service");
    }

    /// Closes its stdin and waits: its status and stdout.
    fn finish(mut self) -> (i32, String) {
        drop(self.child.stdin.take());
        let out = self.child.wait_with_output().expect("wait for the service");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }
}

/// The code of process `pid`'s executable `exe` is as in its file (every
/// patched byte back).
fn assert_code_as_in_file(exe: &Path, pid: &str) {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    let exe_path = exe.to_str().expect("utf-8");
    let file = std::fs::read(exe).expect("read the program");
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).expect("open its memory");
    let mut code_maps = 0;
    for l in maps.lines().filter(|l| l.ends_with(exe_path)) {
        let f: Vec<&str> = l.split_whitespace().collect();
        if !f[1].contains('x') {
            continue;
        }
        let (lo, hi) = f[0].split_once('-').expect("range");
        let lo = u64::from_str_radix(lo, 16).expect("hex");
        let hi = u64::from_str_radix(hi, 16).expect("hex");
        let off = usize::from_str_radix(f[2], 16).expect("hex");
        let len = ((hi - lo) as usize).min(file.len() - off);
        let mut now = vec![0u8; len];
        use std::os::unix::fs::FileExt;
        mem.read_exact_at(&mut now, lo).expect("read its code");
        assert!(
            now == file[off..off + len],
            "the code at {lo:#x} differs from the file"
        );
        code_maps += 1;
    }
    assert!(code_maps >= 1, "{maps}");
}

/// What lapse (started with its stderr piped) did once it ended; fails
/// the test when it goes on for minutes (a hang, not a slow machine).
fn ended(mut lapse: Child) -> std::process::Output {
    let t = Instant::now();
    while lapse.try_wait().expect("wait for lapse").is_none() {
        if t.elapsed() > HANG {
            let _ = lapse.kill();
            let out = lapse.wait_with_output().expect("wait for lapse");
            panic!("lapse did not end: {}", stderr(&out));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    lapse.wait_with_output().expect("wait for lapse")
}

/// What the service prints when nothing attaches to it.
fn alone(exe: &Path, dir: &Path, mode: &str) -> String {
    let out = Command::new(exe)
        .arg(dir.join("alone.log"))
        .arg(mode)
        .stdin(Stdio::null())
        .output()
        .expect("run the service");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The arguments of `lapse record --method instrument --pid PID extra -o data`.
fn attach_args<'a>(pid: &'a str, data: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["record", "--method", "instrument", "--pid", pid];
    args.extend_from_slice(extra);
    args.extend(["-o", data.to_str().expect("utf-8")]);
    args
}

/// `lapse record --method instrument --pid PID extra -o data`; `None`
/// (a skip) when perf events are refused here.
fn attach(pid: &str, data: &Path, extra: &[&str]) -> Option<std::process::Output> {
    let out = LAPSE.run(attach_args(pid, data, extra));
    let err = stderr(&out);
    if perf_refused(&err) && !data.exists() {
        return skip(format!("perf events are not available here: {err}"));
    }
    Some(out)
}

fn num(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("no {key} in {v:#}"))
}

/// Whether process `pid` is connected to a recorder: its runtime keeps the
/// connection's socket at descriptor 900 or above while attached, and
/// closes it at the end (docs/semantics.md).
fn connected_to_recorder(pid: &str) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
                .is_some_and(|fd| fd >= 900)
        })
        .any(|e| {
            std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
        })
}

/// Attaches twice for 2 s each; checks each window against the calls the
/// service counted itself in it, then that it ends as if alone.
fn twice(exe: &Path, dir: &Path) {
    let expected = alone(exe, dir, "plain");
    let svc = Service::start(exe, dir, "plain");
    let pid = svc.pid();
    for round in 1..=2 {
        let data = dir.join(format!("window{round}.lapse"));
        let mut lapse = LAPSE
            .command(attach_args(&pid, &data, &["--duration", "2"]))
            .stderr(Stdio::piped())
            .spawn()
            .expect("start lapse");
        // The calls the service counted itself during the window: its
        // runtime keeps a connection to the recorder open exactly while
        // attached, and the threads are stopped while it connects and
        // while it disconnects, so the service's last line at either
        // moment is its count at the window's start and end (to the 20
        // naps between its lines).
        let t = Instant::now();
        while !connected_to_recorder(&pid) && lapse.try_wait().expect("wait").is_none() {
            assert!(t.elapsed() < HANG, "round {round}: lapse did not attach");
            std::thread::sleep(Duration::from_millis(2));
        }
        let before = svc.counts();
        while connected_to_recorder(&pid) && lapse.try_wait().expect("wait").is_none() {
            std::thread::sleep(Duration::from_millis(2));
        }
        let after = svc.counts();
        let out = ended(lapse);
        let err = stderr(&out);
        if perf_refused(&err) && !data.exists() {
            return skip(format!("perf events are not available here: {err}")).unwrap_or(());
        }
        assert!(out.status.success(), "round {round}: {err}");
        assert!(err.contains("runs on"), "{err}");
        let f = LAPSE.report(&data, "functions", &[]);
        let window = num(&f["session"], "duration_ns") / 1e9;
        for (name, made) in [("work", after.1 - before.1), ("nap", after.2 - before.2)] {
            let calls = num(row(&f, name), "calls");
            assert!(
                (calls - made).abs() <= 0.15 * made,
                "round {round}: {calls} calls of {name} in the {window:.2} s window, the service counted {made}"
            );
        }
        let per_call = |name: &str| {
            let r = row(&f, name);
            num(r, "application_inclusive_ns") / num(r, "calls") / 1e3
        };
        let work = per_call("work");
        assert!(
            (45.0..=75.0).contains(&work),
            "work: {work:.1} µs per call on the CPU"
        );
        let nap = per_call("nap");
        assert!(nap < 50.0, "nap: {nap:.1} µs per call on the CPU");
    }
    // What stays behind: one copy of the runtime (the second attach found
    // the first's), and no tracer.
    let pid = svc.pid();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    let mut runtimes: Vec<&str> = maps
        .lines()
        .filter(|l| l.contains("liblapse_rt"))
        .filter_map(|l| l.split_whitespace().nth(5))
        .collect();
    runtimes.dedup();
    assert_eq!(runtimes.len(), 1, "{maps}");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    assert!(status.contains("TracerPid:\t0"), "{status}");
    // ... and the program's code as in its file (every patched byte back).
    assert_code_as_in_file(exe, &pid);
    let (status, printed) = svc.finish();
    assert_eq!(status, 0);
    assert_eq!(printed, expected);
}

#[test]
fn attaching_twice_to_an_instrumented_service() {
    let dir = work_dir("cyg");
    let Some(exe) = build(&dir, "service", &["-finstrument-functions"]) else {
        return;
    };
    twice(&exe, &dir);
}

#[test]
fn attaching_twice_to_a_service_built_without_probes() {
    // (its functions are patched at run time, and unpatched at the end)
    let dir = work_dir("plain");
    let Some(exe) = build(&dir, "service", &[]) else {
        return;
    };
    twice(&exe, &dir);
}

/// One window of service `mode`, built with -finstrument-functions and
/// without probes (patched): `check` looks at the recording; the service
/// must end as if alone.
fn one_window(name: &str, mode: &str, check: impl Fn(&Path, &Value)) {
    for (build_name, flags) in [("cyg", &["-finstrument-functions"][..]), ("plain", &[][..])] {
        let dir = work_dir(&format!("{name}-{build_name}"));
        let Some(exe) = build(&dir, "service", flags) else {
            return;
        };
        let expected = alone(&exe, &dir, mode);
        let svc = Service::start(&exe, &dir, mode);
        let data = dir.join("out.lapse");
        let Some(out) = attach(&svc.pid(), &data, &["--duration", "2"]) else {
            return;
        };
        let err = stderr(&out);
        assert!(out.status.success(), "{build_name}: {err}");
        // (no process or thread of the window went unseen by the runtime)
        assert!(
            !err.contains("without lapse's runtime"),
            "{build_name}: {err}"
        );
        let f = LAPSE.report(&data, "functions", &[]);
        check(&data, &f);
        let (status, printed) = svc.finish();
        assert_eq!(status, 0, "{build_name}");
        assert_eq!(printed, expected, "{build_name}");
    }
}

#[test]
fn threads_that_end_during_the_window_are_recorded() {
    one_window("threads", "threads", |data, f| {
        // (each extra thread calls work 20 times; the main thread's calls are many more)
        let t = LAPSE.report(data, "threads", &[]);
        assert!(rows(&t).len() >= 3, "{t:#}");
        assert!(num(row(f, "extra"), "calls") >= 1.0);
    });
}

#[test]
fn children_forked_during_the_window_are_recorded() {
    one_window("fork", "fork", |data, f| {
        // (each child calls extra once, and work 20 times in it)
        let p = LAPSE.report(data, "processes", &[]);
        let children = rows(&p).iter().filter(|r| r["calls"] == 21).count();
        assert!(children >= 2, "{p:#}");
        assert!(num(row(f, "extra"), "calls") >= children as f64);
    });
}

#[test]
fn a_thread_asleep_in_a_system_call_sleeps_on() {
    // (the attach's calls run on the main thread, asleep in nanosleep: put
    // back, its sleep goes on to the end; cut short, `failed` would count it)
    one_window("blocked", "blocked", |_, f| {
        assert!(num(row(f, "nap"), "calls") >= 100.0, "{f:#}");
    });
}

#[test]
fn a_child_forked_during_the_window_that_lives_on_is_detached_too() {
    for (build_name, flags) in [("cyg", &["-finstrument-functions"][..]), ("plain", &[][..])] {
        let dir = work_dir(&format!("child-{build_name}"));
        let Some(exe) = build(&dir, "service", flags) else {
            return;
        };
        let expected = alone(&exe, &dir, "plain");
        let mut svc = Service::start(&exe, &dir, "plain");
        let pid = svc.pid();
        let data = dir.join("out.lapse");
        let lapse = LAPSE
            .command(attach_args(&pid, &data, &["--duration", "2"]))
            .stderr(Stdio::piped())
            .spawn()
            .expect("start lapse");
        // (the window is open once the runtime is in and the threads run)
        let t = Instant::now();
        let attached = || {
            let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            maps.contains("liblapse_rt") && status.contains("TracerPid:\t0")
        };
        while !attached() {
            assert!(t.elapsed() < HANG, "lapse did not attach");
            std::thread::sleep(Duration::from_millis(10));
        }
        svc.ask(b"f");
        let out = ended(lapse);
        let err = stderr(&out);
        if perf_refused(&err) && !data.exists() {
            return skip(err).unwrap_or(());
        }
        assert!(out.status.success(), "{build_name}: {err}");
        assert!(!err.contains("warning"), "{build_name}: {err}");
        let children = task_files(&pid, "children").concat();
        let kid = children
            .split_whitespace()
            .next()
            .expect("the child lives")
            .to_owned();
        let status = std::fs::read_to_string(format!("/proc/{kid}/status")).expect("status");
        assert!(status.contains("TracerPid:\t0"), "{status}");
        assert_code_as_in_file(&exe, &kid);
        let p = LAPSE.report(&data, "processes", &[]);
        assert!(rows(&p).len() >= 2, "{build_name}: {p:#}");
        let (status, printed) = svc.finish();
        assert_eq!(status, 0, "{build_name}");
        assert_eq!(printed, expected, "{build_name}");
    }
}

#[test]
fn a_thread_waiting_for_a_vfork_child_is_waited_for() {
    // A vfork parent waits in the kernel (state D) until its child execs or
    // ends, and stops for the attach only then: lapse waits for it instead
    // of refusing after 2 s ("did not stop within 2 s", as it did).
    let dir = work_dir("vfork");
    let Some(exe) = build(&dir, "service", &["-finstrument-functions"]) else {
        return;
    };
    let expected = alone(&exe, &dir, "plain");
    let mut svc = Service::start(&exe, &dir, "plain");
    let pid = svc.pid();
    svc.ask(b"v");
    let t = Instant::now();
    while !in_vfork(&pid) {
        assert!(t.elapsed() < HANG, "the service did not vfork");
        std::thread::sleep(Duration::from_millis(10));
    }
    let data = dir.join("out.lapse");
    let Some(out) = attach(&pid, &data, &["--duration", "1"]) else {
        return;
    };
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    // (the window opened after the child ended: the napping thread's calls
    // are in it)
    let f = LAPSE.report(&data, "functions", &[]);
    assert!(num(row(&f, "nap"), "calls") >= 50.0, "{f:#}");
    let (status, printed) = svc.finish();
    assert_eq!(status, 0);
    assert_eq!(printed, expected);
}

/// File `name` of every thread of process `pid` (`/proc/PID/task/TID/NAME`)
/// that could be read.
fn task_files(pid: &str, name: &str) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("tasks")
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join(name)).ok())
        .collect()
}

/// Whether a thread of process `pid` is in the kernel (state D): the
/// service's thread waiting for its vfork child.
fn in_vfork(pid: &str) -> bool {
    task_files(pid, "stat")
        .iter()
        .any(|stat| stat.rsplit(") ").next().is_some_and(|s| s.starts_with('D')))
}

#[test]
fn ctrl_c_while_lapse_waits_for_a_vfork_parent_ends_the_attach_at_once() {
    use std::os::unix::process::CommandExt;
    let dir = work_dir("vfork-interrupted");
    let Some(exe) = build(&dir, "service", &["-finstrument-functions"]) else {
        return;
    };
    let mut svc = Service::start(&exe, &dir, "plain");
    let pid = svc.pid();
    svc.ask(b"V");
    let t = Instant::now();
    while !in_vfork(&pid) {
        assert!(t.elapsed() < HANG, "the service did not vfork");
        std::thread::sleep(Duration::from_millis(10));
    }
    let data = dir.join("out.lapse");
    let mut cmd = LAPSE.command(attach_args(&pid, &data, &["--duration", "1"]));
    // (SIGINT at its default, as in `interrupt` below)
    // SAFETY: signal is async-signal-safe; the child execs next.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        })
    };
    let lapse = cmd.stderr(Stdio::piped()).spawn().expect("start lapse");
    // Every thread but the vforking one stops at once: Ctrl-C once lapse
    // has seized them all and waits for that one.
    let seized = || {
        task_files(&pid, "status")
            .iter()
            .all(|status| !status.contains("TracerPid:\t0\n"))
    };
    let t = Instant::now();
    while !seized() {
        assert!(t.elapsed() < HANG, "lapse did not seize the threads");
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: signalling the child we started.
    unsafe { libc::kill(lapse.id() as i32, libc::SIGINT) };
    let out = ended(lapse);
    let err = stderr(&out);
    // Ended before the child did (20 s: lapse waits up to 30 s for a thread
    // in the kernel, and ends within a tenth of a second of a Ctrl-C), with
    // one line, nothing attached.
    assert!(in_vfork(&pid), "lapse waited for the vfork child: {err}");
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("interrupted while thread"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    assert!(!maps.contains("liblapse_rt"), "the runtime was loaded");
    // The service runs on untraced; its vfork child is ended here, which
    // its thread counts as one failure, and nothing else went wrong.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    assert!(status.contains("TracerPid:\t0"), "{status}");
    let kids = task_files(&pid, "children").concat();
    for kid in kids.split_whitespace() {
        // SAFETY: ending the service's sleeping vfork child.
        unsafe { libc::kill(kid.parse().expect("pid"), libc::SIGKILL) };
    }
    let (status, printed) = svc.finish();
    assert_eq!(status, 0);
    assert!(printed.contains("mismatches 0 failed 1"), "{printed}");
}

#[test]
fn signal_handlers_running_during_the_attach() {
    one_window("signals", "signals", |_, f| {
        assert!(num(row(f, "tick"), "calls") >= 100.0, "{f:#}");
    });
}

#[test]
fn a_process_killed_during_the_window_leaves_a_usable_file() {
    let dir = work_dir("killed");
    let Some(exe) = build(&dir, "service", &["-finstrument-functions"]) else {
        return;
    };
    let mut svc = Service::start(&exe, &dir, "plain");
    let data = dir.join("out.lapse");
    let mut lapse = LAPSE
        .command(attach_args(&svc.pid(), &data, &[]))
        .stderr(Stdio::piped())
        .spawn()
        .expect("start lapse");
    // (once events arrive, the window is open)
    std::thread::sleep(Duration::from_millis(1500));
    let _ = svc.child.kill();
    let _ = svc.child.wait();
    let t = Instant::now();
    let status = loop {
        if let Some(s) = lapse.try_wait().expect("wait") {
            break s;
        }
        assert!(
            t.elapsed() < HANG,
            "lapse went on after the process was killed"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    use std::io::Read;
    let _ = lapse
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err);
    if perf_refused(&err) && !data.exists() {
        return skip(err).unwrap_or(());
    }
    assert!(status.success(), "{err}");
    let f = LAPSE.report(&data, "functions", &[]);
    assert!(num(row(&f, "work"), "calls") >= 100.0);
}

#[test]
fn after_lapse_is_killed_during_the_window_the_next_attach_cleans_up() {
    for (build_name, flags) in [("cyg", &["-finstrument-functions"][..]), ("plain", &[][..])] {
        let dir = work_dir(&format!("lapse-killed-{build_name}"));
        let Some(exe) = build(&dir, "service", flags) else {
            return;
        };
        let expected = alone(&exe, &dir, "plain");
        let svc = Service::start(&exe, &dir, "plain");
        let data = dir.join("killed.lapse");
        let mut lapse = LAPSE
            .command(attach_args(&svc.pid(), &data, &[]))
            .stderr(Stdio::null())
            .spawn()
            .expect("start lapse");
        std::thread::sleep(Duration::from_millis(1500));
        let _ = lapse.kill();
        let _ = lapse.wait();
        // The runtime notices and stops recording: what it spills stops
        // growing.
        let spill = dir.join("killed.lapse.spill");
        let size = || std::fs::metadata(&spill).map_or(0, |m| m.len());
        std::thread::sleep(Duration::from_millis(1500));
        let first = size();
        std::thread::sleep(Duration::from_millis(1000));
        assert_eq!(size(), first, "{build_name}: the spill still grows");
        // The next attach finds what the dead one left on, records, and
        // turns it all off.
        let again = dir.join("again.lapse");
        let Some(out) = attach(&svc.pid(), &again, &["--duration", "1"]) else {
            return;
        };
        assert!(out.status.success(), "{build_name}: {}", stderr(&out));
        let f = LAPSE.report(&again, "functions", &[]);
        assert!(num(row(&f, "work"), "calls") >= 100.0, "{build_name}");
        assert_code_as_in_file(&exe, &svc.pid());
        let (status, printed) = svc.finish();
        assert_eq!(status, 0, "{build_name}");
        assert_eq!(printed, expected, "{build_name}");
    }
}

#[test]
fn interrupting_lapse_during_the_attach_leaves_the_service_unharmed() {
    let dir = work_dir("interrupted");
    let Some(exe) = build(&dir, "service", &["-finstrument-functions"]) else {
        return;
    };
    let expected = alone(&exe, &dir, "plain");
    let svc = Service::start(&exe, &dir, "plain");
    let data = dir.join("out.lapse");
    interrupt(&svc, &data);
    let (status, printed) = svc.finish();
    assert_eq!(status, 0);
    assert_eq!(printed, expected);
    // (the same for a program patched at run time)
    let Some(exe) = build(&dir, "plain", &[]) else {
        return;
    };
    let svc = Service::start(&exe, &dir, "plain");
    interrupt(&svc, &data);
    let (status, printed) = svc.finish();
    assert_eq!(status, 0);
    assert_eq!(printed, expected);
}

/// Interrupts lapse attaching to `svc` at a few moments of its start.
fn interrupt(svc: &Service, data: &Path) {
    use std::os::unix::process::CommandExt;
    for delay_ms in [0, 30, 300] {
        let mut cmd = LAPSE.command(attach_args(&svc.pid(), data, &[]));
        // SIGINT at its default, as a shell starts a command in the
        // foreground: a test run as a background job of a script inherits
        // it ignored, and the kernel drops a SIGINT that comes before lapse
        // has caught it (here while it is still being loaded).
        // SAFETY: signal is async-signal-safe; the child execs next.
        unsafe {
            cmd.pre_exec(|| {
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                Ok(())
            })
        };
        let lapse = cmd.stderr(Stdio::piped()).spawn().expect("start lapse");
        std::thread::sleep(Duration::from_millis(delay_ms));
        // SAFETY: signalling the child we started.
        unsafe { libc::kill(lapse.id() as i32, libc::SIGINT) };
        let out = ended(lapse);
        let err = stderr(&out);
        if perf_refused(&err) && !data.exists() {
            return skip(err).unwrap_or(());
        }
        // Interrupted before it began (no file, one line) or during the
        // window (a file that reads).
        use std::os::unix::process::ExitStatusExt;
        if out.status.success() {
            let f = LAPSE.report(data, "functions", &[]);
            assert!(f["session"].is_object());
        } else if out.status.signal() == Some(libc::SIGINT) {
            // (before lapse set anything up: nothing to undo)
            assert!(!data.exists(), "{err}");
        } else {
            assert_eq!(err.trim().lines().count(), 1, "{err}");
        }
        let _ = std::fs::remove_file(data);
        // (the service runs on: its counts go up)
        let n = svc.counts().1;
        let t = Instant::now();
        while svc.counts().1 <= n {
            assert!(t.elapsed() < HANG, "the service stopped");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// lapse's one-line refusal for `pid`, which must name `what`.
fn refused(pid: &str, what: &str) {
    let dir = work_dir("refused");
    let data = dir.join("out.lapse");
    let Some(out) = attach(pid, &data, &["--duration", "1"]) else {
        return;
    };
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains(what), "{what}: {err}");
    assert!(!data.exists());
}

#[test]
fn refusals_say_why_in_one_line() {
    let dir = work_dir("refusals");
    // A statically linked program: no dlopen to load the runtime with.
    if let Some(exe) = build(&dir, "static", &["-static", "-finstrument-functions"]) {
        let svc = Service::start(&exe, &dir, "plain");
        refused(&svc.pid(), "statically linked");
        let (status, _) = svc.finish();
        assert_eq!(status, 0);
    }
    // Traced already (here by a parent that traces its child).
    let tracer = r#"
#include <signal.h>
#include <stdio.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>
int main(void) {
    pid_t c = fork();
    if (c == 0) { ptrace(PTRACE_TRACEME, 0, 0, 0); raise(SIGSTOP); for (;;) pause(); }
    int st; waitpid(c, &st, 0);
    ptrace(PTRACE_CONT, c, 0, 0);
    printf("%d\n", c); fflush(stdout);
    getchar();
    kill(c, SIGKILL);
    return 0;
}
"#;
    if let Some(exe) = compile(&dir, "gcc", "tracer", tracer, &["-finstrument-functions"]) {
        let mut t = Command::new(&exe)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the tracer");
        let mut line = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(t.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the traced child's pid");
        refused(line.trim(), "already traced by process");
        let _ = t.stdin.take().expect("stdin").write_all(b"\n");
        let _ = t.wait();
    }
}

#[test]
fn another_users_process() {
    use std::os::unix::process::CommandExt;
    if lapse_testkit::root("runs the service and lapse as another user").is_none() {
        return;
    }
    let (dir, lapse) =
        lapse_testkit::shared_dir_with_lapse(env!("CARGO_BIN_EXE_lapse"), "lapse-attach_e2e-user");
    let Some(exe) = build(&dir, "service", &["-finstrument-functions"]) else {
        return;
    };
    const NOBODY: u32 = 65534;
    // Root attaches to nobody's service: the runtime and the socket are
    // lent to nobody for the window.
    let expected = alone(&exe, &dir, "plain");
    let svc = Service::start_as(&exe, &dir, "plain", Some(NOBODY));
    let data = dir.join("root.lapse");
    let Some(out) = attach(&svc.pid(), &data, &["--duration", "1"]) else {
        return;
    };
    assert!(out.status.success(), "{}", stderr(&out));
    let f = LAPSE.report(&data, "functions", &[]);
    assert!(num(row(&f, "work"), "calls") >= 100.0);
    let (status, printed) = svc.finish();
    assert_eq!((status, printed), (0, expected));
    // nobody may not attach to root's service: one line, nothing written.
    let svc = Service::start(&exe, &dir, "plain");
    let out = Command::new(&lapse)
        .args([
            "record",
            "--method",
            "instrument",
            "--pid",
            &svc.pid(),
            "--duration",
            "1",
        ])
        .args(["-o", "nobody.lapse"])
        .current_dir(&*dir)
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .expect("run lapse as nobody");
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("run lapse as its user or as root"), "{err}");
    assert!(!dir.join("nobody.lapse").exists());
    let (status, _) = svc.finish();
    assert_eq!(status, 0);
}

#[test]
fn a_process_that_cannot_reach_the_runtime_is_refused() {
    // A service in its own mount namespace with a fresh tmpfs over the
    // directory lapse makes its session directory in (TMPDIR): that is not
    // there for it. (Not over /tmp itself: the test's own files may be
    // there, as in a clone under /tmp.)
    if lapse_testkit::root("mounts a private /tmp in a new mount namespace").is_none() {
        return;
    }
    let Some(unshare) = lapse_testkit::tool("unshare") else {
        return;
    };
    let dir = work_dir("namespace");
    let Some(exe) = build(&dir, "service", &["-finstrument-functions"]) else {
        return;
    };
    let log = dir.join("ns.log");
    let sessions = dir.join("sessions");
    std::fs::create_dir_all(&sessions).expect("a directory for sessions");
    let script = format!(
        "mount -t tmpfs none {} && exec {} {} plain",
        sessions.display(),
        exe.display(),
        log.display()
    );
    let child = Command::new(unshare)
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start unshare");
    let svc = Service { child, log };
    let t = Instant::now();
    while svc.counts().1 < 50.0 {
        if t.elapsed() > HANG {
            let (_, out) = svc.finish();
            return skip(format!(
                "cannot run a service in a private mount namespace: {out}"
            ))
            .unwrap_or(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let data = dir.join("out.lapse");
    let out = LAPSE
        .command(attach_args(&svc.pid(), &data, &["--duration", "1"]))
        .env("TMPDIR", &sessions)
        .output()
        .expect("run lapse");
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("another mount namespace"), "{err}");
    assert!(!data.exists());
    let (status, _) = svc.finish();
    assert_eq!(status, 0);
}
