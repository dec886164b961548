//! End to end: library calls (on by default for instrumentation). Each call
//! an instrumented module makes into a shared library is a function of that
//! library (`fsync` in `libc.so.6`) with its own values: time the caller
//! spent waiting in it is not the caller's own. Checked for every probe
//! source the calling code can have, and through what a hooked call must
//! survive: lazy and immediate binding, -fno-plt, dlopen, fork, threads,
//! signal handlers, C++ exceptions and longjmp out of a library's callback.

use std::process::Command;

use lapse_testkit::{compile, skip, WorkDir};
use serde_json::Value;

mod probe_sources;
use probe_sources::*;

const LIBC: &str = "libc.so.6";

/// Calls of `name` in the C library (0 without a row).
fn libc_calls(v: &Value, name: &str) -> u64 {
    row_in(v, name, LIBC).map_or(0, |r| r["calls"].as_u64().unwrap_or(0))
}

fn libc_row<'a>(v: &'a Value, name: &str) -> &'a Value {
    row_in(v, name, LIBC).unwrap_or_else(|| panic!("no {name} in {LIBC}: {v}"))
}

fn clean(r: &Run) {
    let i = info(r);
    for key in ["lost:", "unmatched:"] {
        assert_eq!(info_count(&i, key), 0, "{:?}: {key}\n{i}", r.source);
    }
}

#[test]
fn fsync_malloc_and_usleep_are_functions_of_the_c_library() {
    let body = r#"
#include <fcntl.h>
void *volatile keep;
static char block[1 << 16];
NOIPA void io(void) {
    int fd = open("io.tmp", O_WRONLY | O_CREAT | O_TRUNC, 0600);
    for (int i = 0; i < 64; i++) { block[i] = (char)i; if (write(fd, block, sizeof block) != (ssize_t)sizeof block) exit(3); }
    if (fsync(fd) != 0) exit(4);
    close(fd); unlink("io.tmp");
}
NOIPA void mem(void) { for (int i = 0; i < 1000; i++) { keep = malloc(64 + i); free(keep); } }
NOIPA void nap(void) { usleep(30000); }
int main(void) { io(); mem(); nap(); printf("done\n"); return 0; }
"#;
    for source in [Cyg, Pg, Fentry] {
        let Some(r) = run("libc", "gcc", source, body, &[]) else {
            return;
        };
        let v = report(&r, "functions", &[]);
        assert_calls(&r, &v, &[("main", 1), ("io", 1), ("mem", 1), ("nap", 1)]);
        for (name, n) in [
            ("malloc", 1000),
            ("free", 1000),
            ("write", 64),
            ("fsync", 1),
            ("usleep", 1),
        ] {
            assert_eq!(libc_calls(&v, name), n, "{source:?}: {name} in {LIBC}");
        }
        // fsync waits for the disk: elapsed, not application time; and it is
        // its own, not io's
        let fsync = libc_row(&v, "fsync");
        let (fe, fa) = (
            ms(fsync, "elapsed_inclusive_ns"),
            ms(fsync, "application_inclusive_ns"),
        );
        assert!(
            fe > fa,
            "{source:?}: fsync elapsed {fe} ms, application {fa} ms"
        );
        let io = row(&v, "io");
        assert!(
            ms(io, "elapsed_exclusive_ns") + fe <= ms(io, "elapsed_inclusive_ns") + 0.01,
            "{source:?}: io's own time holds fsync's"
        );
        // usleep sleeps: nap's time is usleep's, and none of it is application time
        let usleep = libc_row(&v, "usleep");
        assert!(
            ms(usleep, "elapsed_inclusive_ns") >= 29.0,
            "{source:?}: usleep elapsed"
        );
        assert!(
            ms(usleep, "application_inclusive_ns") < 2.0,
            "{source:?}: usleep application {} ms",
            ms(usleep, "application_inclusive_ns")
        );
        assert!(
            ms(row(&v, "nap"), "elapsed_exclusive_ns") < 2.0,
            "{source:?}: nap's own time"
        );
        assert_inclusive_within_threads(&r, &v);
        clean(&r);
    }
}

#[test]
fn a_library_call_is_named_by_the_symbol_the_program_called() {
    // Before: the C library's first alias at the address (fopen64, open64,
    // ssignal), as uftrace's t-tests (fopen, open, signal) showed.
    let body = r#"
#include <fcntl.h>
#include <signal.h>
static void on(int s) { (void)s; }
int main(void) {
    FILE *f = fopen("/dev/null", "r");
    if (f) fclose(f);
    signal(SIGUSR1, on);
    int fd = open("/dev/null", O_RDONLY);
    close(fd);
    return 0;
}
"#;
    let Some(r) = run("called_names", "gcc", Cyg, body, &[]) else {
        return;
    };
    let v = report(&r, "functions", &[]);
    for (called, alias) in [
        ("fopen", "fopen64"),
        ("open", "open64"),
        ("signal", "ssignal"),
    ] {
        assert_eq!(libc_calls(&v, called), 1, "{called}: {v}");
        assert_eq!(libc_calls(&v, alias), 0, "{alias}");
    }
}

#[test]
fn no_libcalls_leaves_library_calls_out() {
    let body = "int main(void) { printf(\"%d\\n\", getpid() > 0); return 0; }";
    let Some(r) = run_with("no_libcalls", "gcc", Cyg, body, &[], &["--no-libcalls"]) else {
        return;
    };
    let v = report(&r, "functions", &[]);
    assert_eq!(libc_calls(&v, "getpid") + libc_calls(&v, "printf"), 0);
    assert_calls(&r, &v, &[("main", 1)]);
}

#[test]
fn eager_binding_no_plt_and_function_addresses() {
    // -fno-plt calls through GLOB_DAT slots; BIND_NOW puts the slots in
    // RELRO. A function whose address the program takes (free, here) keeps
    // its address: the program compares it with the C library's.
    let body = r#"
#include <dlfcn.h>
void *volatile keep;
void (*volatile release)(void *) = free;
NOIPA void mem(void) { for (int i = 0; i < 500; i++) { keep = malloc(32 + i); release(keep); } }
int main(void) {
    mem();
    printf("same %d\n", (void *)release == dlsym(RTLD_DEFAULT, "free"));
    printf("pid %d\n", getpid() > 0);
    return 0;
}
"#;
    for flags in [
        &["-ldl"][..],
        &["-fno-plt", "-ldl"],
        &["-Wl,-z,now", "-ldl"],
        &["-fno-plt", "-Wl,-z,now", "-ldl"],
    ] {
        let Some(r) = run("binding", "gcc", Cyg, body, flags) else {
            return;
        };
        let v = report(&r, "functions", &[]);
        // (a failure says what was recorded instead: it has happened once,
        // on CI, and not in hundreds of runs here)
        let said = || {
            let rows: Vec<String> = rows(&v)
                .iter()
                .map(|r| format!("{} {} {}", r["function"], r["module"], r["calls"]))
                .collect();
            format!("{flags:?}:\n{}\n{}", rows.join("\n"), info(&r))
        };
        assert_eq!(libc_calls(&v, "malloc"), 500, "malloc: {}", said());
        assert_eq!(libc_calls(&v, "getpid"), 1, "getpid: {}", said());
        assert_calls(&r, &v, &[("main", 1), ("mem", 1)]);
        clean(&r);
    }
}

#[test]
fn a_dlopened_library_makes_library_calls_too() {
    for source in [Cyg, Pg, Fentry] {
        let dir = WorkDir::new(
            env!("CARGO_TARGET_TMPDIR"),
            &format!("libcalls_e2e-plugin-{}", source.tag()),
        );
        let plugin_src = format!(
            "{PRELUDE}\nNOIPA long plugin_work(long n) {{ long s = 0; for (long i = 0; i < n; i++) s += getppid() > 0; return s; }}\n"
        );
        let mut flags = vec!["-O2", "-shared", "-fPIC"];
        flags.extend_from_slice(source.flags());
        let Some(plugin) = compile(&dir, "gcc", "libplugin.so", &plugin_src, &flags) else {
            return;
        };
        let body = format!(
            r#"
#include <dlfcn.h>
int main(void) {{
    void *h = dlopen("{}", RTLD_NOW);
    if (!h) {{ printf("%s\n", dlerror()); return 1; }}
    long (*work)(long) = (long (*)(long))dlsym(h, "plugin_work");
    printf("%ld\n", work(100));
    return 0;
}}
"#,
            plugin.display()
        );
        let Some(r) = run("dlopen", "gcc", source, &body, &["-ldl"]) else {
            return;
        };
        let v = report(&r, "functions", &[]);
        assert_calls(&r, &v, &[("main", 1), ("plugin_work", 1)]);
        assert_eq!(
            libc_calls(&v, "getppid"),
            100,
            "{source:?}: the plugin's calls"
        );
        clean(&r);
    }
}

#[test]
fn fork_and_threads_make_library_calls() {
    let body = r#"
NOIPA void *worker(void *a) { for (int i = 0; i < 100; i++) sink += getppid() > 0; usleep(1000); return a; }
int main(void) {
    pthread_t t[4];
    for (long i = 0; i < 4; i++) pthread_create(&t[i], 0, worker, (void *)i);
    for (int i = 0; i < 4; i++) pthread_join(t[i], 0);
    pid_t p = fork();
    if (p == 0) { for (int i = 0; i < 50; i++) sink += getppid() > 0; _exit(7); }
    int st = 0; waitpid(p, &st, 0);
    printf("%d\n", WEXITSTATUS(st));
    return 0;
}
"#;
    for source in [Cyg, Pg, Fentry] {
        let Some(r) = run("fork_threads", "gcc", source, body, &[]) else {
            return;
        };
        let v = report(&r, "functions", &[]);
        assert_calls(&r, &v, &[("worker", 4)]);
        assert_eq!(libc_calls(&v, "getppid"), 450, "{source:?}");
        assert_eq!(libc_calls(&v, "usleep"), 4, "{source:?}");
        assert_eq!(libc_calls(&v, "pthread_create"), 4, "{source:?}");
        assert_inclusive_within_threads(&r, &v);
        clean(&r);
    }
}

#[test]
fn a_signal_handler_makes_library_calls_while_the_program_is_in_one() {
    // A 20 kHz timer interrupts the loop, mostly inside getppid's hook or
    // trampoline; its handler calls getpid and traced code.
    let body = r#"
static volatile long hits;
NOIPA long traced(long x) { return x + 1; }
NOIPA void on_alarm(int s) { hits++; sink += getpid() > 0; traced(s); }
int main(void) {
    struct sigaction sa; memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm; sa.sa_flags = SA_RESTART; sigaction(SIGALRM, &sa, 0);
    struct itimerval it = {{0, 50}, {0, 50}}; setitimer(ITIMER_REAL, &it, 0);
    long s = 0;
    for (long i = 0; i < 300000; i++) s += getppid() > 0;
    struct itimerval off = {{0, 0}, {0, 0}}; setitimer(ITIMER_REAL, &off, 0);
    FILE *f = fopen("hits", "w"); fprintf(f, "%ld\n", hits); fclose(f);
    printf("%ld\n", s);
    return 0;
}
"#;
    for source in [Cyg, Pg, Fentry] {
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
        // On a machine loaded far past two hogs (a debug recorder among
        // parallel tests) a buffer or two can wait past the runtime's
        // patience and be lost; they are counted, and every call is either
        // in the report or among them (seen in 1 of 12 such runs, before
        // and after this session's changes alike).
        let lost = v["session"]["lost_events"].as_u64().unwrap_or(0);
        if lost == 0 {
            assert_eq!(libc_calls(&v, "getppid"), 300_000, "{source:?}");
            assert_eq!(libc_calls(&v, "getpid"), hits, "{source:?}");
            assert_calls(&r, &v, &[("on_alarm", hits), ("traced", hits)]);
        } else {
            let got = libc_calls(&v, "getppid");
            assert!(
                got <= 300_000 && got + lost / 2 >= 300_000,
                "{source:?}: {got} getppid calls, {lost} events lost"
            );
            assert_eq!(
                v["session"]["complete"], false,
                "{source:?}: lost, so not complete"
            );
        }
        assert_inclusive_within_threads(&r, &v);
        clean(&r);
    }
}

#[test]
fn exceptions_and_longjmp_out_of_a_library_s_callback() {
    // qsort calls the program back; the callback throws (C++) or longjmps
    // (C) out of qsort after a few comparisons. The program counts its
    // comparisons; the recording counts the same.
    let cpp = r#"
static long compared;
NOIPA int by_value(const void *a, const void *b) {
    if (++compared % 97 == 0) throw (int)compared;
    return *(const int *)a - *(const int *)b;
}
int main() {
    long caught = 0;
    for (int r = 0; r < 100; r++) {
        int a[64]; for (int i = 0; i < 64; i++) a[i] = (i * 37 + r) % 64;
        try { qsort(a, 64, sizeof a[0], by_value); } catch (int) { caught++; }
    }
    printf("caught %ld compared %ld\n", caught, compared);
    FILE *f = fopen("compared", "w"); fprintf(f, "%ld\n", compared); fclose(f);
    return 0;
}
"#;
    let c = r#"
static jmp_buf out;
static long compared;
NOIPA int by_value(const void *a, const void *b) {
    if (++compared % 97 == 0) longjmp(out, 1);
    return *(const int *)a - *(const int *)b;
}
int main(void) {
    long jumped = 0;
    for (int r = 0; r < 100; r++) {
        int a[64]; for (int i = 0; i < 64; i++) a[i] = (i * 37 + r) % 64;
        if (setjmp(out) == 0) qsort(a, 64, sizeof a[0], by_value); else jumped++;
    }
    printf("jumped %ld compared %ld\n", jumped, compared);
    FILE *f = fopen("compared", "w"); fprintf(f, "%ld\n", compared); fclose(f);
    return 0;
}
"#;
    for (compiler, body, name) in [
        ("g++", cpp, "by_value(void const*, void const*)"),
        ("gcc", c, "by_value"),
    ] {
        for source in [Cyg, Pg, Fentry] {
            let Some(r) = run("callback_out", compiler, source, body, &[]) else {
                return;
            };
            let compared: u64 = std::fs::read_to_string(r.dir.join("compared"))
                .expect("compared")
                .trim()
                .parse()
                .expect("a number");
            let v = report(&r, "functions", &[]);
            assert_calls(&r, &v, &[("main", 1), (name, compared)]);
            assert_eq!(libc_calls(&v, "qsort"), 100, "{compiler} {source:?}");
            assert_inclusive_within_threads(&r, &v);
            clean(&r);
        }
    }
}

#[test]
fn a_static_binary_is_refused_with_a_clear_message() {
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "libcalls_e2e-static");
    let Some(exe) = compile(
        &dir,
        "gcc",
        "static_prog",
        "int main(void) { return 0; }",
        &["-static", "-finstrument-functions"],
    ) else {
        return;
    };
    if std::fs::metadata(&exe).is_err() {
        return skip::<()>("no static C library here").unwrap_or(());
    }
    let out = Command::new(env!("CARGO_BIN_EXE_lapse"))
        .args(["record", "--method", "instrument", "-o"])
        .arg(dir.join("out.lapse"))
        .arg("--")
        .arg(&exe)
        .current_dir(&dir)
        .output()
        .expect("run lapse record");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "refused: {stderr}");
    assert!(stderr.contains("statically linked"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(!dir.join("out.lapse").exists());
}
