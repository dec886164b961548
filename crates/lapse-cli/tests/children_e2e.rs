//! End to end: children — fork, exec from any thread, explicit environments,
//! `--no-inherit`. C programs built during the test report what their
//! children saw (environment, whether the runtime is mapped), and lapse's
//! report must hold exactly the calls of the processes it follows.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{Command, Output};

use lapse_testkit::{compile, perf_refused, printed, skip, stderr, Lapse, WorkDir, INSTRUMENTED};
use serde_json::Value;

const LAPSE: Lapse = Lapse::new(env!("CARGO_BIN_EXE_lapse"));

mod probe_sources;

const PRELUDE: &str = r#"
#define _GNU_SOURCE
#include <pthread.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#define NOINLINE __attribute__((noinline))
volatile uint64_t sink;
extern char **environ;
/* What a child sees: lapse's variables in its environment, and whether the
 * runtime is loaded in it. */
__attribute__((no_instrument_function)) static void print_child_view(const char *who) {
    static const char *const names[] = {"LD_PRELOAD=", "LAPSE_SOCKET=", "LAPSE_SPILL=",
        "LAPSE_CALIBRATE=", "LAPSE_FLUSH_TICKS=", "LAPSE_NO_ARENA=", "LAPSE_NO_INHERIT="};
    int vars = 0, mapped = 0;
    for (char **e = environ; *e; e++)
        for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++)
            if (!strncmp(*e, names[i], strlen(names[i]))) vars++;
    FILE *m = fopen("/proc/self/maps", "r");
    char line[512];
    while (m && fgets(line, sizeof line, m))
        if (strstr(line, "liblapse_rt")) mapped = 1;
    if (m) fclose(m);
    printf("%s_vars %d %s_runtime %d\n", who, vars, who, mapped);
    fflush(stdout);
}
"#;

struct Run {
    dir: WorkDir,
    exe: PathBuf,
}

fn build(name: &str, body: &str) -> Option<Run> {
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), &format!("children-{name}"));
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

    fn native(&self) -> Output {
        Command::new(&self.exe)
            .current_dir(&self.dir)
            .output()
            .expect("run the program")
    }

    fn record(&self, extra: &[&str]) -> Option<Output> {
        LAPSE
            .in_dir(&self.dir)
            .record(extra, &self.data(), &self.exe, &[])
    }

    fn report(&self, view: &str) -> Value {
        LAPSE.in_dir(&self.dir).report(self.data(), view, &[])
    }

    /// The program's own functions' calls (library calls, recorded by
    /// default, are another test's subject).
    fn calls(&self) -> HashMap<String, u64> {
        let v = self.report("functions");
        v["rows"]
            .as_array()
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .filter(|r| !r["module"].as_str().unwrap_or("").contains(".so"))
            .filter_map(|r| Some((r["function"].as_str()?.to_owned(), r["calls"].as_u64()?)))
            .collect()
    }

    fn rows(&self, view: &str) -> usize {
        self.report(view)["rows"].as_array().map_or(0, Vec::len)
    }

    fn info(&self) -> String {
        // (any exit status, as before)
        let out = LAPSE
            .in_dir(&self.dir)
            .run([OsStr::new("info"), self.data().as_os_str()]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

#[test]
fn no_inherit_hands_neither_the_runtime_nor_its_environment_to_children() {
    // Before the fix, --no-inherit only made the recorder ignore children:
    // they still got LD_PRELOAD and LAPSE_*, loaded the runtime, connected
    // and calibrated.
    let Some(run) = build(
        "no_inherit",
        r#"
NOINLINE void parent_work(long i) { sink += (uint64_t)i; }
NOINLINE void child_work(long i) { sink ^= (uint64_t)i; }
NOINLINE void exec_child_work(long i) { sink -= (uint64_t)i; }
int main(int argc, char **argv) {
    if (argc > 1) {
        for (long i = 0; i < 1000; i++) exec_child_work(i);
        print_child_view("exec_child");
        return 0;
    }
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {
        /* a fork child: the runtime is in its memory, but must stay silent
         * and keep off the parent's buffers */
        for (long i = 0; i < 100000; i++) child_work(i);
        execl(argv[0], argv[0], "child", (char *)0);
        _exit(9);
    }
    for (long i = 0; i < 100000; i++) parent_work(i);
    int st = 0;
    waitpid(p, &st, 0);
    printf("child_status %d\n", WEXITSTATUS(st));
    return 0;
}
"#,
    ) else {
        return;
    };
    // (natively, whatever the test's own environment holds, e.g. an LD_PRELOAD)
    let native = printed::<i64>(&run.native());
    let Some(out) = run.record(&["--no-inherit"]) else {
        return;
    };
    assert_eq!(out.status.code(), Some(0), "lapse said: {}", stderr(&out));
    let p = printed::<i64>(&out);
    assert_eq!(
        p.get("exec_child_vars"),
        native.get("exec_child_vars"),
        "{p:?}"
    );
    assert_eq!(p.get("exec_child_runtime"), Some(&0), "{p:?}");
    assert_eq!(p.get("child_status"), Some(&0));
    // Only the parent's calls: main and parent_work. (Counted over all rows:
    // a fork child's calls before its exec may show under an address rather
    // than a name, a separate symbolization matter.)
    let calls = run.calls();
    assert_eq!(calls.get("parent_work"), Some(&100_000));
    assert_eq!(calls.values().sum::<u64>(), 100_001, "{calls:?}");
    assert_eq!(run.rows("processes"), 1);
    assert!(run.info().contains("lost:        0 events"));

    // Without --no-inherit both children are traced (and see lapse's variables).
    let Some(out) = run.record(&[]) else {
        return;
    };
    assert_eq!(out.status.code(), Some(0), "lapse said: {}", stderr(&out));
    assert_eq!(printed::<i64>(&out).get("exec_child_runtime"), Some(&1));
    let calls = run.calls();
    assert_eq!(calls.get("exec_child_work"), Some(&1_000));
    assert_eq!(run.rows("processes"), 2);
}

#[test]
fn a_fork_child_that_execs_returns_from_fork_and_calls_execl_under_main() {
    // uftrace's t010_forkexec (#31 item 19). The child's calls before its
    // exec are of the image it inherited; the kernel's record of the exec
    // was read before the fork was applied, so the child's first image got
    // the new one's mappings: its return from the inherited `fork` frame
    // resolved to another function (an exit matching nothing) and `execl`
    // to an `[unknown]` address, nested under the `fork` left open.
    use probe_sources::{child, children, info, info_count, report, roots, rows, run, Cyg, Pg};
    let body = r#"
NOIPA long a(void) { return leaf(1); }
int main(int argc, char **argv) {
    if (argc > 1) { a(); return 0; }
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {
        execl(argv[0], argv[0], "child", (char *)0);
        _exit(9);
    }
    int st = 0;
    waitpid(p, &st, 0);
    return WEXITSTATUS(st);
}
"#;
    for source in [Cyg, Pg] {
        let Some(r) = run("fork_exec", "gcc", source, body, &[]) else {
            return;
        };
        let i = info(&r);
        assert_eq!(info_count(&i, "unmatched:"), 0, "{source:?}\n{i}");
        assert_eq!(info_count(&i, "open calls:"), 0, "{source:?}\n{i}");
        let v = report(&r, "processes", &[]);
        assert_eq!(rows(&v).len(), 2, "{source:?}: parent and child");
        // The child: main (inherited) > fork (inherited, returned), then
        // main > execl, named as the C library's; the new image's main > a.
        let mut saw_execl = false;
        for p in rows(&v) {
            let pid = p["pid"].to_string();
            let tree = report(&r, "calltree", &["--pid", &pid])["roots"].clone();
            let tree = tree.as_array().cloned().unwrap_or_default();
            let mut todo: Vec<&Value> = tree.iter().collect();
            while let Some(n) = todo.pop() {
                assert_ne!(n["module"], "[unknown]", "{source:?}: pid {pid}: {n}");
                todo.extend(children(n));
            }
            let main = tree.iter().find(|n| n["function"] == "main");
            let main = main.unwrap_or_else(|| panic!("{source:?}: pid {pid}: main is a root"));
            let fork = child(main, "fork").expect("main > fork");
            assert!(
                child(fork, "execl").is_none(),
                "{source:?}: execl under fork"
            );
            assert_eq!(fork["open_calls"], 0, "{source:?}: pid {pid}: {fork}");
            if let Some(execl) = child(main, "execl") {
                assert!(execl["module"].as_str().unwrap_or("").starts_with("libc"));
                assert!(
                    child(main, "a").is_some(),
                    "{source:?}: the new image's main > a"
                );
                saw_execl = true;
            }
        }
        assert!(saw_execl, "{source:?}: no main > execl");
        assert!(roots(&r).iter().all(|n| n["function"] != "execl"));
    }
}

#[test]
fn exec_from_a_thread_other_than_main_keeps_the_new_image() {
    // The kernel ends the old main thread at such an exec (an exit record
    // for pid/pid) and the exec'ing thread goes on as pid/pid. Before the
    // fix the recorder took that for the end of the process: it let the
    // process's buffers go 200 ms later and its thread 500 ms later, so the
    // new image's calls after that were dropped (7,000 of 30,000 here) or
    // counted as lost events that were not lost.
    let Some(run) = build(
        "thread_exec",
        r#"
static char *self;
NOINLINE void work(long i) { sink += (uint64_t)i; }
NOINLINE void after(long i) { sink ^= (uint64_t)i; }
NOINLINE void *execer(void *arg) {
    (void)arg;
    for (long i = 0; i < 1000; i++) work(i);
    execl(self, self, "again", (char *)0);
    return NULL;
}
int main(int argc, char **argv) {
    if (argc > 1) {
        /* the new image lives well past the recorder's 500 ms */
        for (int k = 0; k < 30; k++) { for (long i = 0; i < 1000; i++) after(i); usleep(40000); }
        return 5;
    }
    self = argv[0];
    for (long i = 0; i < 30000; i++) work(i);
    pthread_t t;
    pthread_create(&t, NULL, execer, NULL);
    pthread_join(t, NULL);
    return 1;
}
"#,
    ) else {
        return;
    };
    let Some(out) = run.record(&[]) else {
        return;
    };
    assert_eq!(out.status.code(), Some(5), "lapse said: {}", stderr(&out));
    let calls = run.calls();
    assert_eq!(calls.get("after"), Some(&30_000), "{calls:?}");
    assert_eq!(calls.get("work"), Some(&31_000));
    assert_eq!(calls.get("execer"), Some(&1));
    assert_eq!(calls.get("main"), Some(&2), "one per image");
    let info = run.info();
    assert!(info.contains("lost:        0 events"), "{info}");
    assert_eq!(run.rows("processes"), 1);
    assert_eq!(
        run.rows("threads"),
        2,
        "main (both images) and the exec'ing thread"
    );
}

#[test]
fn children_given_an_explicit_environment_are_traced_unless_no_inherit() {
    // Before the fix, a child started with an environment of the program's
    // own making (posix_spawn, execve, execle, execvpe) had no LD_PRELOAD
    // and no LAPSE_* and went unrecorded.
    let Some(run) = build(
        "explicit_env",
        r#"
NOINLINE void child_work(long i) { sink += (uint64_t)i; }
/* The environment the process started with (with --no-inherit the runtime
 * took lapse's variables out of environ; this block still has them). */
static char *original[4096];
__attribute__((no_instrument_function)) static char **original_env(void) {
    static char block[1 << 16];
    FILE *f = fopen("/proc/self/environ", "r");
    size_t len = f ? fread(block, 1, sizeof block - 1, f) : 0;
    if (f) fclose(f);
    int n = 0;
    for (size_t i = 0; i < len && n < 4095; i += strlen(block + i) + 1) original[n++] = block + i;
    original[n] = NULL;
    return original;
}
int main(int argc, char **argv) {
    if (argc > 1) {
        for (long i = 0; i < 1000; i++) child_work(i);
        print_child_view(argv[1]);
        printf("%s_foo %d\n", argv[1], getenv("FOO") != NULL);
        return 0;
    }
    int keep = getenv("PASS_ORIGINAL") != NULL;
    char *mine[] = {"FOO=bar", NULL};
    char **env = keep ? original_env() : mine;
    pid_t p;
    int st;
    char *a1[] = {argv[0], "spawn", NULL};
    if (posix_spawn(&p, argv[0], NULL, NULL, a1, env) == 0) waitpid(p, &st, 0);
    char *a2[] = {argv[0], "spawnp", NULL};
    if (posix_spawnp(&p, argv[0], NULL, NULL, a2, env) == 0) waitpid(p, &st, 0);
    fflush(stdout);
    if ((p = fork()) == 0) { char *a[] = {argv[0], "execve", NULL}; execve(argv[0], a, env); _exit(9); }
    waitpid(p, &st, 0);
    if ((p = fork()) == 0) { execle(argv[0], argv[0], "execle", (char *)0, env); _exit(9); }
    waitpid(p, &st, 0);
    if ((p = fork()) == 0) { char *a[] = {argv[0], "execvpe", NULL}; execvpe(argv[0], a, env); _exit(9); }
    waitpid(p, &st, 0);
    return 0;
}
"#,
    ) else {
        return;
    };
    let kinds = ["spawn", "spawnp", "execve", "execle", "execvpe"];
    let Some(out) = run.record(&[]) else {
        return;
    };
    assert_eq!(out.status.code(), Some(0), "lapse said: {}", stderr(&out));
    let p = printed::<i64>(&out);
    for k in kinds {
        assert_eq!(p.get(&format!("{k}_runtime")), Some(&1), "{k}: {p:?}");
        assert_eq!(
            p.get(&format!("{k}_foo")),
            Some(&1),
            "{k} keeps the program's own: {p:?}"
        );
    }
    assert_eq!(run.calls().get("child_work"), Some(&5_000));
    assert!(run.info().contains("lost:        0 events"));

    // --no-inherit: none is traced, even given the original environment
    // (which, natively, holds whatever the test's own environment holds).
    let native = Command::new(&run.exe)
        .env("PASS_ORIGINAL", "1")
        .current_dir(&run.dir)
        .output()
        .expect("run the program");
    let native = printed::<i64>(&native);
    let out = Command::new(env!("CARGO_BIN_EXE_lapse"))
        .args(["record", "--no-inherit", "-o"])
        .arg(run.data())
        .arg("--")
        .arg(&run.exe)
        .env("PASS_ORIGINAL", "1")
        .current_dir(&run.dir)
        .output()
        .expect("run lapse record");
    assert_eq!(out.status.code(), Some(0), "lapse said: {}", stderr(&out));
    let p = printed::<i64>(&out);
    for k in kinds {
        assert_eq!(p.get(&format!("{k}_runtime")), Some(&0), "{k}: {p:?}");
        let vars = format!("{k}_vars");
        assert_eq!(p.get(&vars), native.get(&vars), "{k}: {p:?}");
    }
    assert_eq!(run.calls().get("child_work"), None);
}

#[test]
fn record_returns_when_the_target_exits_though_a_daemon_it_started_runs_on() {
    // Before: a descendant that left lapse's session (setsid) and kept
    // making calls kept `record` waiting until the daemon itself ended.
    let Some(run) = build(
        "daemon",
        r#"
#include <fcntl.h>
#include <sys/stat.h>
NOINLINE void tick(long i) { sink += (uint64_t)i; }
int main(void) {
    if (fork() == 0) {
        setsid();
        if (fork() == 0) {
            int null = open("/dev/null", O_RDWR);   /* as daemons do */
            dup2(null, 0), dup2(null, 1), dup2(null, 2);
            FILE *f = fopen("daemon.pid", "w");
            fprintf(f, "%d\n", getpid());
            fclose(f);
            struct stat st;
            for (long i = 0; i < 600000 && stat("stop", &st) != 0; i++) {
                tick(i);
                usleep(1000);
            }
            _exit(0);
        }
        _exit(0);
    }
    wait(NULL);
    while (access("daemon.pid", F_OK) != 0) usleep(1000);
    return 3;
}
"#,
    ) else {
        return;
    };
    let out = Command::new(env!("CARGO_BIN_EXE_lapse"))
        .args(["record", "-o", "out.lapse", "--"])
        .arg(&run.exe)
        .current_dir(&run.dir)
        .output()
        .expect("run lapse record");
    // (a daemon left running if the test fails: stopped by its file)
    let stop = || std::fs::write(run.dir.join("stop"), "").expect("stop file");
    if perf_refused(&stderr(&out)) {
        stop();
        return skip(stderr(&out)).unwrap_or(());
    }
    let pid = std::fs::read_to_string(run.dir.join("daemon.pid")).expect("daemon.pid");
    let alive = !lapse_testkit::ended(&pid);
    stop();
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(alive, "record waited for the daemon to end");
    lapse_testkit::wait_until("the daemon ends", || lapse_testkit::ended(&pid));
}

#[test]
fn raw_forks_make_processes_of_their_own_and_the_parent_keeps_its_calls() {
    // Before: syscall(SYS_fork), _Fork() and clone() without CLONE_VM ran
    // no fork handlers: the child wrote into the parent's arena, its calls
    // were taken for the parent's and the parent's after the fork were lost.
    let Some(run) = build(
        "raw_forks",
        r#"
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
pid_t _Fork(void);
NOINLINE void by_syscall(long i) { sink += (uint64_t)i; }
NOINLINE void by_underscore_fork(long i) { sink ^= (uint64_t)i; }
NOINLINE void by_clone(long i) { sink -= (uint64_t)i; }
NOINLINE void in_parent(long i) { sink *= (uint64_t)i | 1; }
static int clone_body(void *arg) { (void)arg; for (long i = 0; i < 3000; i++) by_clone(i); return 0; }
static void parent_part(void) { for (long i = 0; i < 1000; i++) in_parent(i); }
int main(void) {
    pid_t p = syscall(SYS_fork);
    if (p == 0) { for (long i = 0; i < 1000; i++) by_syscall(i); _exit(0); }
    parent_part();
    waitpid(p, NULL, 0);
    p = _Fork();
    if (p == 0) { for (long i = 0; i < 2000; i++) by_underscore_fork(i); _exit(0); }
    parent_part();
    waitpid(p, NULL, 0);
    static char stack[1 << 16];
    p = clone(clone_body, stack + sizeof stack, SIGCHLD, NULL);
    parent_part();
    waitpid(p, NULL, 0);
    printf("done 1\n");
    return 0;
}
"#,
    ) else {
        return;
    };
    let Some(out) = run.record(&[]) else {
        return;
    };
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done 1\n");
    let calls = run.calls();
    for (f, n) in [
        ("in_parent", 3000),
        ("by_syscall", 1000),
        ("by_underscore_fork", 2000),
        ("by_clone", 3000),
        ("main", 1),
    ] {
        assert_eq!(calls.get(f).copied(), Some(n), "{f}: {calls:?}");
    }
    // Each child is a process of its own, holding its own calls only (the
    // clone child's function and what it calls).
    let procs = run.report("processes");
    let rows = procs["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 4, "{procs}");
    let root = rows
        .iter()
        .map(|r| r["pid"].as_u64())
        .min()
        .expect("a root");
    let mut children: Vec<u64> = rows
        .iter()
        .filter(|r| r["pid"].as_u64() != root)
        .filter_map(|r| r["calls"].as_u64())
        .collect();
    children.sort_unstable();
    assert_eq!(children, [1000, 2000, 3001], "{procs}");
    let info = run.info();
    assert!(info.contains("lost:        0 events"), "{info}");
}

#[test]
fn a_program_in_its_own_pid_namespace_is_recorded_with_its_off_cpu_time() {
    // Before: the runtime's pid 1 was taken for the machine's init process
    // (its command, its mappings: every name [unknown]), and a 300 ms sleep
    // counted as application time (its switches were not matched).
    if lapse_testkit::root("a PID namespace is made with unshare -p").is_none() {
        return;
    }
    let Some(run) = build(
        "pid_namespace",
        r#"
NOINLINE void nap(void) { usleep(300000); }
NOINLINE void *sleeper(void *arg) { (void)arg; nap(); return NULL; }
int main(void) {
    pthread_t t;
    pthread_create(&t, NULL, sleeper, NULL);
    pthread_join(t, NULL);
    nap();
    printf("pid %d\n", getpid());
    return 0;
}
"#,
    ) else {
        return;
    };
    let out = Command::new(env!("CARGO_BIN_EXE_lapse"))
        .args(["record", "--method", "instrument", "-o"])
        .arg(run.data())
        .args(["--", "unshare", "-p", "-f", "--mount-proc"])
        .arg(&run.exe)
        .current_dir(&run.dir)
        .output()
        .expect("run lapse record");
    if stderr(&out).contains("unshare failed") || stderr(&out).contains("Operation not permitted") {
        return skip(format!("no PID namespace here: {}", stderr(&out))).unwrap_or(());
    }
    if perf_refused(&stderr(&out)) {
        return skip(stderr(&out)).unwrap_or(());
    }
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "pid 1\n",
        "in its namespace"
    );
    let v = run.report("functions");
    let nap = v["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["function"] == "nap")
        .unwrap_or_else(|| panic!("a nap row (named): {v}"));
    assert_eq!(nap["calls"], 2, "{nap}");
    let ms = |k: &str| nap[k].as_f64().unwrap_or(f64::NAN) / 1e6;
    assert!(ms("elapsed_inclusive_ns") >= 590.0, "{nap}");
    assert!(
        ms("application_inclusive_ns") < 100.0,
        "asleep is not application time: {nap}"
    );
    // Two processes (unshare's and the program), no machine's init.
    let procs = run.report("processes");
    let rows = procs["rows"].as_array().expect("rows");
    assert!(
        rows.iter().all(|r| r["pid"] != 1),
        "the runtime's pid 1 is not the machine's: {procs}"
    );
    assert_eq!(rows.len(), 2, "{procs}");
}

#[test]
fn a_relative_tmpdir_loses_no_child_of_a_target_that_changes_directory() {
    // Before: with TMPDIR=tmp the runtime's socket and library paths were
    // relative; a child exec'd after the target's chdir("/") found neither.
    let Some(run) = build(
        "relative_tmpdir",
        r#"
NOINLINE void in_child(long i) { sink += (uint64_t)i; }
int main(int argc, char **argv) {
    if (argc > 1) { for (long i = 0; i < 5000; i++) in_child(i); return 0; }
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return 3;
    self[n] = 0;
    if (chdir("/") != 0) return 4;
    pid_t p = fork();
    if (p == 0) { execl(self, self, "child", (char *)NULL); _exit(5); }
    int st;
    waitpid(p, &st, 0);
    printf("child %d\n", WEXITSTATUS(st));
    return 0;
}
"#,
    ) else {
        return;
    };
    std::fs::create_dir_all(run.dir.join("tmp")).expect("tmp");
    let out = Command::new(env!("CARGO_BIN_EXE_lapse"))
        .args(["record", "-o", "out.lapse", "--"])
        .arg(&run.exe)
        .env("TMPDIR", "tmp")
        .current_dir(&run.dir)
        .output()
        .expect("run lapse record");
    if perf_refused(&stderr(&out)) {
        return skip(stderr(&out)).unwrap_or(());
    }
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "child 0\n");
    assert_eq!(run.calls().get("in_child").copied(), Some(5000));
}
