//! End to end: the return trampoline and its shadow stack, through every
//! probe source that uses it. Each program is built during the test, run as
//! it is and under `lapse record`: it must print and exit exactly the same,
//! and the recording must count every call it made, with no call's
//! inclusive time beyond its thread's.
//!
//! The programs stress what a trampoline must survive: C++ exceptions
//! through hooked frames, longjmp and siglongjmp, signal handlers that call
//! traced code while the interrupted code is inside a hook, fork (the child
//! returns through the trampolines it inherited), vfork and exec, threads
//! that end with pthread_exit, swapcontext, tail calls and backtrace().

use std::process::Command;

use lapse_testkit::{compile, perf_refused, skip, WorkDir};

mod probe_sources;
use probe_sources::*;

// ---- -pg and -pg -mfentry: the values of -finstrument-functions ----

#[test]
fn pg_and_fentry_give_the_values_of_finstrument_functions() {
    let body = r#"
NOIPA void outer_spin(void) { sink = spin(40.0); }
NOIPA long small(long x) { return x * 3 + 1; }
NOIPA void many_calls(void) { for (long i = 0; i < 200000; i++) sink += small(i); sink = spin(20.0); }
NOIPA long rec(int d) { if (d == 0) { sink = spin(10.0); return 1; } long r = rec(d - 1); __asm__ volatile("" : "+r"(r)); return r + 1; }
NOIPA double fp(double a, double b) { return a * b + 0.5; }
int main(void) {
    outer_spin(); many_calls(); sink = rec(20);
    double d = 1; for (int i = 0; i < 1000; i++) d = fp(d, 1.000001);
    printf("%.6f\n", d);
    return 0;
}
"#;
    let mut values = Vec::new();
    for source in [Cyg, Pg, Fentry, Sancov, Patch] {
        let Some(r) = run("values", "gcc", source, body, &[]) else {
            return;
        };
        let v = report(&r, "functions", &[]);
        assert_eq!(v["method"], "instrumentation", "{source:?}: --method auto");
        let sources = &v["session"]["probe_sources"];
        let module = format!("values-{}", source.tag());
        assert_eq!(
            sources[module.as_str()],
            source.probe_source(),
            "{source:?}: {sources}"
        );
        assert_calls(
            &r,
            &v,
            &[
                ("main", 1),
                ("outer_spin", 1),
                ("many_calls", 1),
                ("small", 200_000),
                ("rec", 21),
                ("fp", 1000),
                ("spin", 3),
            ],
        );
        assert_inclusive_within_threads(&r, &v);
        values.push((
            source,
            ms(row(&v, "outer_spin"), "application_inclusive_ns"),
            ms(row(&v, "many_calls"), "application_inclusive_ns"),
            ms(row(&v, "rec"), "application_inclusive_ns"),
        ));
    }
    // CPU-time spins: each source sees them as they are (a busy machine
    // stretches elapsed time, not application time).
    for &(source, outer, many, rec) in &values {
        assert_spins(source, outer, many);
        assert!(
            (9.0..=16.0).contains(&rec),
            "{source:?}: rec {rec:.1} ms of 10"
        );
    }
}

#[test]
fn gmon_out_is_written_as_without_lapse() {
    // glibc's gprof support (gcrt1.o) writes gmon.out at exit whatever
    // mcount is: lapse neither needs it nor keeps it from being written.
    let body = "int main(void) { sink = spin(30.0); leaf(1); return 0; }";
    for source in [Pg, Fentry] {
        let Some(r) = run("gmon", "gcc", source, body, &[]) else {
            return;
        };
        let gmon = std::fs::read(r.dir.join("gmon.out")).expect("gmon.out written under lapse");
        assert!(gmon.starts_with(b"gmon"), "{source:?}: a gmon.out file");
        let v = report(&r, "functions", &[]);
        assert_calls(&r, &v, &[("main", 1), ("leaf", 1), ("spin", 1)]);
    }
}

#[test]
fn auto_finds_pg_probes_in_a_needed_library() {
    for source in TRAMPOLINED {
        let dir = WorkDir::new(
            env!("CARGO_TARGET_TMPDIR"),
            &format!("trampoline_e2e-pglib-{}", source.tag()),
        );
        let lib_src = format!(
            "{PRELUDE}\nNOIPA long lib_work(long n) {{ long s = 0; for (long i = 0; i < n; i++) s += leaf(i); return s; }}\n"
        );
        let mut flags = vec!["-O2", "-shared", "-fPIC"];
        flags.extend_from_slice(source.flags());
        let stub = (source == Sancov).then(stub_object);
        if let Some(stub) = &stub {
            flags.push(stub.to_str().expect("a UTF-8 path"));
        }
        let compiler = source.compiler("gcc");
        let Some(_) = compile(&dir, compiler, "libpgwork.so", &lib_src, &flags) else {
            return;
        };
        let lib_dir = dir.to_str().expect("utf-8 path");
        let rpath = format!("-Wl,-rpath,{lib_dir}");
        let link = format!("-L{lib_dir}");
        let Some(exe) = compile(
            &dir,
            compiler,
            "uses_pglib",
            "#include <stdio.h>\nlong lib_work(long);\nint main(void) { printf(\"%ld\\n\", lib_work(1000)); return 0; }\n",
            &["-O2", &link, &rpath, "-l:libpgwork.so"],
        ) else {
            return;
        };
        let data = dir.join("out.lapse");
        let out = Command::new(env!("CARGO_BIN_EXE_lapse"))
            .args(["record", "-o"])
            .arg(&data)
            .arg("--")
            .arg(&exe)
            .current_dir(&dir)
            .output()
            .expect("run lapse record");
        let stderr = String::from_utf8_lossy(&out.stderr);
        if perf_refused(&stderr) && !data.exists() {
            return skip::<()>(format!("perf events are not available: {stderr}")).unwrap_or(());
        }
        assert_eq!(String::from_utf8_lossy(&out.stdout), "500500\n", "{stderr}");
        assert!(stderr.contains("probes found in"), "{source:?}: {stderr}");
        let r = Run { dir, data, source };
        let v = report(&r, "functions", &[]);
        assert_calls(&r, &v, &[("lib_work", 1), ("leaf", 1000)]);
    }
}

// ---- what the trampoline must survive ----

#[test]
fn exceptions_through_hooked_frames() {
    let body = r#"
#include <stdexcept>
#include <string>
struct Guard { long v; ~Guard() { leaf(v); } };
NOIPA void thrower(int d) {
    Guard g{d}; leaf(d);
    if (d == 0) throw std::runtime_error("deep");
    thrower(d - 1);
}
NOIPA void rethrower(int d) {
    try { thrower(d); } catch (std::exception &) { leaf(-1); throw; }
}
NOIPA int catcher(int round) {
    try { rethrower(3); } catch (std::runtime_error &e) { return (int)std::string(e.what()).size() + round % 2; }
    return -1;
}
NOIPA long after(long x) { return leaf(x) * 2; }
int main() {
    long total = 0;
    for (int r = 0; r < 200; r++) { total += catcher(r); total += after(r); }
    try { throw 7; } catch (int v) { total += v; }
    printf("%ld\n", total);
    return (int)(total % 97);
}
"#;
    for source in TRAMPOLINED_OR_PATCHED {
        let Some(r) = run("exceptions", "g++", source, body, &[]) else {
            return;
        };
        let v = report(&r, "functions", &[]);
        assert_calls(
            &r,
            &v,
            &[
                ("main", 1),
                ("catcher(int)", 200),
                ("rethrower(int)", 200),
                ("thrower(int)", 800),
                ("after(long)", 200),
            ],
        );
        assert_inclusive_within_threads(&r, &v);
    }
}

#[test]
fn longjmp_and_siglongjmp_through_hooked_frames() {
    let body = r#"
static jmp_buf jb;
static sigjmp_buf sjb;
NOIPA void jumper(int d) { leaf(d); if (d == 0) longjmp(jb, d + 5); jumper(d - 1); leaf(d); }
NOIPA void on_usr1(int s) { leaf(s); siglongjmp(sjb, 1); }
NOIPA void raiser(int d) { leaf(d); if (d == 0) raise(SIGUSR1); else raiser(d - 1); leaf(d); }
NOIPA long after(long x) { return leaf(x) + 1; }
int main(void) {
    long total = 0;
    signal(SIGUSR1, on_usr1);
    for (int r = 0; r < 300; r++) {
        int v = setjmp(jb);
        if (v == 0) jumper(4); else total += v;
        if (sigsetjmp(sjb, 1) == 0) raiser(3); else total += 1;
        total += after(r);
    }
    printf("%ld\n", total);
    return 0;
}
"#;
    for source in TRAMPOLINED_OR_PATCHED {
        let Some(r) = run("longjmp", "gcc", source, body, &[]) else {
            return;
        };
        let v = report(&r, "functions", &[]);
        // (LLVM's coverage leaves a function that can only end in a
        // noreturn call, as on_usr1, without its hook: nothing to record)
        let handler = if source == Sancov { 0 } else { 300 };
        assert_calls(
            &r,
            &v,
            &[
                ("main", 1),
                ("jumper", 1500),
                ("raiser", 1200),
                ("on_usr1", handler),
                ("after", 300),
            ],
        );
        assert_inclusive_within_threads(&r, &v);
    }
}

#[test]
fn signal_handlers_call_traced_code_while_the_program_is_in_a_hook() {
    // A 20 kHz timer interrupts the program wherever it is (in hooks and
    // in the trampoline most of the time); its handler calls traced code.
    let body = r#"
static volatile long hits;
NOIPA long mid(long x) { long s = 0; for (int i = 0; i < 4; i++) s += leaf(x + i); return s; }
NOIPA double fleaf(double a, double b) { return a * b; }
NOIPA void on_alarm(int s) { hits++; mid(s); }
int main(void) {
    struct sigaction sa; memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm; sa.sa_flags = SA_RESTART; sigaction(SIGALRM, &sa, 0);
    struct itimerval it = {{0, 50}, {0, 50}}; setitimer(ITIMER_REAL, &it, 0);
    long s = 0; double d = 1.0;
    for (long i = 0; i < 400000; i++) { s += mid(i); d = fleaf(d, 1.0000001); }
    struct itimerval off = {{0, 0}, {0, 0}}; setitimer(ITIMER_REAL, &off, 0);
    FILE *f = fopen("hits", "w"); fprintf(f, "%ld\n", hits); fclose(f);
    printf("%ld %.6f\n", s, d);
    return 0;
}
"#;
    for source in TRAMPOLINED_OR_PATCHED {
        let Some(r) = run("signals", "gcc", source, body, &[]) else {
            return;
        };
        let hits: u64 = std::fs::read_to_string(r.dir.join("hits"))
            .expect("hits")
            .trim()
            .parse()
            .expect("a number");
        assert!(hits > 0, "the timer fired");
        let v = report(&r, "functions", &[]);
        assert_calls(
            &r,
            &v,
            &[
                ("main", 1),
                ("mid", 400_000 + hits),
                ("fleaf", 400_000),
                ("on_alarm", hits),
            ],
        );
        assert_inclusive_within_threads(&r, &v);
        let i = info(&r);
        assert_eq!(info_count(&i, "lost:"), 0, "{i}");
        assert_eq!(info_count(&i, "unmatched:"), 0, "{i}");
    }
}

#[test]
fn fork_vfork_and_exec_keep_the_program_whole() {
    // The fork child returns through the trampolines of the calls it
    // inherited (spawn, main); a vfork child execs; the program execs itself.
    let body = r#"
NOIPA pid_t spawn(long x) { leaf(x); pid_t p = fork(); if (p == 0) leaf(x + 1); return p; }
NOIPA int waited(pid_t p) { int st = 0; waitpid(p, &st, 0); return WEXITSTATUS(st); }
NOIPA int vforked(void) {
    pid_t p = vfork();
    if (p == 0) { execl("/bin/sh", "sh", "-c", "exit 3", (char *)0); _exit(9); }
    return waited(p);
}
int main(int argc, char **argv) {
    if (argc > 1) { printf("again %s\n", argv[1]); return 4; }
    long total = 0;
    for (int i = 0; i < 5; i++) {
        pid_t p = spawn(i);
        if (p == 0) { printf("child %d\n", i); fflush(stdout); _exit(10 + i); }
        total += waited(p);
    }
    total += vforked();
    printf("total %ld\n", total);
    fflush(stdout);
    execl(argv[0], argv[0], "x", (char *)0);
    return 1;
}
"#;
    for source in TRAMPOLINED_OR_PATCHED {
        let Some(r) = run("fork", "gcc", source, body, &[]) else {
            return;
        };
        let v = report(&r, "functions", &[]);
        // (each child's calls are counted in its own process too)
        assert!(calls(&v, "spawn") >= 5 && calls(&v, "waited") >= 6);
        assert_eq!(calls(&v, "vforked"), 1);
        assert_inclusive_within_threads(&r, &v);
    }
}

#[test]
fn threads_end_with_pthread_exit_from_deep_frames() {
    let body = r#"
NOIPA void deeper(long n, int d) { leaf(d); if (d == 0) pthread_exit((void *)(n * 10)); deeper(n, d - 1); leaf(d); }
NOIPA void *worker(void *a) {
    long n = (long)a;
    for (long i = 0; i < 10000; i++) leaf(i);
    if (n % 2) deeper(n, 5);
    return (void *)n;
}
int main(void) {
    pthread_t t[6]; long total = 0;
    for (long i = 0; i < 6; i++) pthread_create(&t[i], 0, worker, (void *)i);
    for (int i = 0; i < 6; i++) { void *rv; pthread_join(t[i], &rv); total += (long)rv; }
    printf("%ld\n", total);
    return 0;
}
"#;
    for source in TRAMPOLINED_OR_PATCHED {
        let Some(r) = run("threads", "gcc", source, body, &[]) else {
            return;
        };
        let v = report(&r, "functions", &[]);
        assert_calls(
            &r,
            &v,
            &[
                ("main", 1),
                ("worker", 6),
                ("deeper", 18),
                ("leaf", 60_000 + 18),
            ],
        );
        assert_inclusive_within_threads(&r, &v);
    }
}

#[test]
fn contexts_tail_calls_and_backtraces() {
    // Coroutines on their own stack (swapcontext), tail calls (the hooked
    // frame is reused by the callee), and backtrace() from deep hooked
    // frames: the same frames as without lapse.
    let body = r#"
#include <execinfo.h>
#include <ucontext.h>
static ucontext_t main_ctx, co_ctx;
static char co_stack[1 << 16];
NOIPA void co_body(void) { for (int i = 0; i < 1000; i++) { leaf(i); swapcontext(&co_ctx, &main_ctx); } }
NOIPA long tail_b(long x) { return leaf(x) * 2; }
NOIPA long tail_a(long x) { return tail_b(x + 1); }
NOIPA void show_trace(void) {
    void *b[16]; int n = backtrace(b, 16);
    char **s = backtrace_symbols(b, n);
    for (int i = 0; i < n && i < 4; i++) {
        char *open = strchr(s[i], '('), *close = open ? strchr(open, ')') : 0;
        if (open && close) printf("frame %d %.*s\n", i, (int)(close - open - 1), open + 1);
    }
    free(s);
}
NOIPA void trace_at(int d) { if (d == 0) show_trace(); else trace_at(d - 1); leaf(d); }
int main(void) {
    getcontext(&co_ctx);
    co_ctx.uc_stack.ss_sp = co_stack; co_ctx.uc_stack.ss_size = sizeof co_stack; co_ctx.uc_link = &main_ctx;
    makecontext(&co_ctx, co_body, 0);
    long total = 0;
    for (int i = 0; i < 1000; i++) { swapcontext(&main_ctx, &co_ctx); total += leaf(i); }
    for (int i = 0; i < 1000; i++) total += tail_a(i);
    trace_at(2);
    printf("%ld\n", total);
    return 0;
}
"#;
    for source in TRAMPOLINED_OR_PATCHED {
        let Some(r) = run("contexts", "gcc", source, body, &["-rdynamic"]) else {
            return;
        };
        let v = report(&r, "functions", &[]);
        assert_calls(
            &r,
            &v,
            &[
                ("main", 1),
                ("co_body", 1),
                ("tail_a", 1000),
                ("tail_b", 1000),
                ("leaf", 3003),
                ("trace_at", 3),
                ("show_trace", 1),
            ],
        );
        assert_inclusive_within_threads(&r, &v);
    }
}
