//! Pausing, resuming and marking a recording: the header `lapse header`
//! prints, compiled into real C programs during the test; `--start-paused`
//! and `--signal` from another process; the `marks` view; `--from-mark`/
//! `--to-mark` windows checked against an independent computation on the
//! same recording; and the API as a no-op without lapse.

use std::path::Path;
use std::process::Command;

use lapse_testkit::{compile, ok, rows, stderr, Lapse, WorkDir, INSTRUMENTED};
use serde_json::Value;

const LAPSE: Lapse = Lapse::new(env!("CARGO_BIN_EXE_lapse"));

/// Functions that spin on the CPU for a number of iterations; `print_sink`
/// gives every run the same output (what the program computed).
const COMMON: &str = r#"
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include "lapse.h"
static unsigned long sinks[8];
__attribute__((noinline)) void spin(int slot, int n) {
    for (int i = 0; i < n; i++) { sinks[slot] += (unsigned)i * 7u; __asm__ volatile("" ::: "memory"); }
}
__attribute__((noinline)) void before(void) { spin(0, 300000); }
__attribute__((noinline)) void during(int slot) { spin(slot, 300000); }
__attribute__((noinline)) void after(void) { spin(1, 300000); }
__attribute__((noinline)) void target(void) { spin(2, 300000); }
__attribute__((noinline)) void other(void) { spin(3, 300000); }
static void print_sinks(void) {
    for (int i = 0; i < 8; i++) printf("sink%d %lu\n", i, sinks[i]);
}
static void *worker(void *arg) {
    int slot = (int)(long)arg;
    lapse_mark("worker");
    for (int i = 0; i < 5; i++) during(slot);
    return NULL;
}
"#;

/// Paused on every thread: two workers live only while paused.
const PAUSED: &str = r#"
int main(void) {
    before();
    lapse_mark("pausing");
    lapse_pause();
    pthread_t t[2];
    for (long i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, (void *)(i + 4));
    for (int i = 0; i < 5; i++) during(6);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    lapse_resume();
    lapse_mark("resumed");
    after();
    print_sinks();
    return 0;
}
"#;

/// Marks around one call, and a call after them.
const WINDOW: &str = r#"
int main(void) {
    before();
    lapse_mark("A");
    target();
    lapse_mark("B");
    other();
    lapse_mark("A");
    print_sinks();
    return 0;
}
"#;

/// Started paused (`--start-paused`): only what follows the resume counts.
const STARTS_PAUSED: &str = r#"
int main(void) {
    before();
    lapse_resume();
    after();
    print_sinks();
    return 0;
}
"#;

/// A child process sends the toggle signal to its parent: once to pause,
/// once to resume. (The signal is queued before the child exits, so it has
/// been delivered when waitpid returns.)
const SIGNALLED: &str = r#"
static void poke(void) {
    pid_t c = fork();
    if (c == 0) { kill(getppid(), SIGUSR2); _exit(0); }
    int st;
    waitpid(c, &st, 0);
}
int main(void) {
    before();
    poke();
    during(5);
    poke();
    after();
    print_sinks();
    return 0;
}
"#;

/// A program that handles the signal itself.
const OWN_HANDLER: &str = r#"
static volatile sig_atomic_t got;
static void on_usr2(int s) { (void)s; got = 1; }
int main(void) {
    signal(SIGUSR2, on_usr2);
    before();
    kill(getpid(), SIGUSR2);
    after();
    printf("got %d\n", (int)got);
    return 0;
}
"#;

/// `before` at once, `after` once 1.5 s of the program's own time passed.
const TIMED: &str = r#"
#include <time.h>
static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}
int main(void) {
    double t0 = now_s();
    before();
    while (now_s() < t0 + 1.5) {
        struct timespec d = {0, 20000000};
        nanosleep(&d, NULL);
    }
    after();
    print_sinks();
    return 0;
}
"#;

/// Compiles `main` with the header lapse prints, instrumented or not.
fn build(dir: &Path, name: &str, main: &str, flags: &[&str]) -> Option<std::path::PathBuf> {
    let header = ok(LAPSE.run(["header"])).stdout;
    std::fs::write(dir.join("lapse.h"), header).expect("write lapse.h");
    let include = format!("-I{}", dir.display());
    let mut all: Vec<&str> = flags.to_vec();
    all.push(&include);
    compile(dir, "gcc", name, &format!("{COMMON}{main}"), &all)
}

/// Records `exe` with `options`; its JSON functions view, or `None` (skip).
fn record(dir: &Path, exe: &Path, options: &[&str], data: &str) -> Option<std::process::Output> {
    let mut opts = vec!["--method", "instrument"];
    opts.extend_from_slice(options);
    LAPSE.in_dir(dir).record(&opts, Path::new(data), exe, &[])
}

fn calls(report: &Value, function: &str) -> Option<u64> {
    rows(report)
        .iter()
        .find(|r| r["function"] == function)
        .map(|r| r["calls"].as_u64().expect("calls"))
}

fn value(report: &Value, function: &str, key: &str) -> u64 {
    rows(report)
        .iter()
        .find(|r| r["function"] == function)
        .unwrap_or_else(|| panic!("no row for {function}"))[key]
        .as_u64()
        .expect("a number")
}

#[test]
fn nothing_is_recorded_while_paused_on_any_thread() {
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "marks_paused");
    let Some(exe) = build(&dir, "paused", PAUSED, INSTRUMENTED) else {
        return;
    };
    let Some(out) = record(&dir, &exe, &[], "p.lapse") else {
        return;
    };
    ok(out);
    let f = LAPSE.in_dir(&dir).report("p.lapse", "functions", &[]);
    assert_eq!(calls(&f, "before"), Some(1), "{f:#}");
    assert_eq!(calls(&f, "after"), Some(1), "{f:#}");
    // (spin is called by before and after only: once each)
    assert_eq!(calls(&f, "spin"), Some(2), "{f:#}");
    for absent in ["during", "worker", "pthread_create", "pthread_join"] {
        assert_eq!(
            calls(&f, absent).unwrap_or(0),
            0,
            "{absent} was paused: {f:#}"
        );
    }
    // the runtime wrote nothing while paused (the timeline export shows
    // every event the file holds, the analysis aside)
    ok(LAPSE
        .in_dir(&dir)
        .run(["export", "p.lapse", "--format", "chrome", "-o", "p.json"]));
    let timeline = std::fs::read_to_string(dir.join("p.json")).unwrap();
    assert!(timeline.contains("\"before\""), "{timeline}");
    assert!(!timeline.contains("\"during\""), "{timeline}");
    // the HTML page shades the stretch
    ok(LAPSE
        .in_dir(&dir)
        .run(["export", "p.lapse", "--format", "html", "-o", "p.html"]));
    let page = std::fs::read_to_string(dir.join("p.html")).unwrap();
    assert!(
        page.contains("\"paused\":[["),
        "the page has the paused stretch"
    );
    // main was open when the recording paused: closed there, as at a
    // thread's end, and its exit after the resume matches nothing
    let info = LAPSE
        .in_dir(&dir)
        .json(["info", "p.lapse", "--format", "json"]);
    assert_eq!(info["open_calls"], 1, "{info:#}");
    assert_eq!(info["paused"].as_array().map(Vec::len), Some(1), "{info:#}");
    let stretch = &info["paused"][0];
    let paused_ns = stretch["to_ns"].as_u64().unwrap() - stretch["from_ns"].as_u64().unwrap();
    assert_eq!(f["session"]["paused_ns"], paused_ns, "{:#}", f["session"]);
    // the workers ran only while paused: none of their time is in a
    // function (what the kernel shows of their end after the resume is
    // the thread's own, empty-stack time)
    let threads = LAPSE.in_dir(&dir).report("p.lapse", "threads", &[]);
    let main_tid = rows(&threads)
        .iter()
        .map(|r| r["tid"].as_u64().unwrap())
        .min()
        .unwrap();
    for t in rows(&threads) {
        if t["tid"].as_u64() != Some(main_tid) {
            assert_eq!(t["calls"], 0, "{t:#}");
            assert_eq!(
                t["elapsed_exclusive_ns"], t["elapsed_inclusive_ns"],
                "{t:#}"
            );
        }
    }
    // the paused stretch is left out of the main thread's time too: less
    // than the marks' distance from the start to the end
    let marks = LAPSE.in_dir(&dir).report("p.lapse", "marks", &[]);
    // (each mark is on its own thread's timeline, from which the waits for
    // the recorder are cut: across threads their order holds to within
    // those waits, so only the main thread's are checked for order)
    let mut texts: Vec<&str> = rows(&marks)
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    let times: Vec<u64> = rows(&marks)
        .iter()
        .map(|m| m["time_ns"].as_u64().unwrap())
        .collect();
    assert!(
        times.windows(2).all(|w| w[0] <= w[1]),
        "time order: {marks:#}"
    );
    let main_marks: Vec<&Value> = rows(&marks)
        .iter()
        .filter(|m| m["tid"].as_u64() == Some(main_tid))
        .collect();
    assert_eq!(main_marks.len(), 2, "{marks:#}");
    assert_eq!(main_marks[0]["text"], "pausing");
    assert_eq!(main_marks[1]["text"], "resumed");
    texts.sort_unstable();
    assert_eq!(
        texts,
        ["pausing", "resumed", "worker", "worker"],
        "{marks:#}"
    );
    let at = |m: &Value| m["time_ns"].as_u64().unwrap();
    let paused_ns = at(main_marks[1]) - at(main_marks[0]);
    let session = f["session"]["duration_ns"].as_u64().unwrap();
    let main_ns = rows(&threads)
        .iter()
        .find(|r| r["tid"].as_u64() == Some(main_tid))
        .unwrap()["elapsed_inclusive_ns"]
        .as_u64()
        .unwrap();
    assert!(
        main_ns + paused_ns <= session,
        "{main_ns} + {paused_ns} > {session}"
    );
}

#[test]
fn marks_are_in_the_marks_view_as_table_csv_and_json() {
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "marks_view");
    let Some(exe) = build(&dir, "window", WINDOW, INSTRUMENTED) else {
        return;
    };
    let Some(out) = record(&dir, &exe, &[], "w.lapse") else {
        return;
    };
    ok(out);
    let marks = LAPSE.in_dir(&dir).report("w.lapse", "marks", &[]);
    let texts: Vec<&str> = rows(&marks)
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["A", "B", "A"]);
    for m in rows(&marks) {
        assert_eq!(m["pid"], m["tid"], "the main thread made them: {m:#}");
    }
    let csv = String::from_utf8(
        ok(LAPSE
            .in_dir(&dir)
            .run(["report", "w.lapse", "--view", "marks", "--format", "csv"]))
        .stdout,
    )
    .unwrap();
    let mut lines = csv.lines();
    assert!(
        lines.next().unwrap().starts_with("time_ns,pid,tid,text"),
        "{csv}"
    );
    assert_eq!(lines.filter(|l| !l.is_empty()).count(), 3, "{csv}");
    let table = String::from_utf8(
        ok(LAPSE
            .in_dir(&dir)
            .run(["report", "w.lapse", "--view", "marks"]))
        .stdout,
    )
    .unwrap();
    assert!(table.contains(" B\n") || table.contains(" B"), "{table}");
}

#[test]
fn marks_are_instants_in_the_timeline_exports() {
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "marks_exports");
    let Some(exe) = build(&dir, "window", WINDOW, INSTRUMENTED) else {
        return;
    };
    let Some(out) = record(&dir, &exe, &[], "w.lapse") else {
        return;
    };
    ok(out);
    let export = |format: &str| -> Vec<u8> {
        let name = format!("w.{format}");
        ok(LAPSE
            .in_dir(&dir)
            .run(["export", "w.lapse", "--format", format, "-o", &name]));
        std::fs::read(dir.join(name)).unwrap()
    };
    // Chrome: thread-scoped instants of category lapse:mark, in time order
    let chrome: Value = serde_json::from_slice(&export("chrome")).unwrap();
    let instants: Vec<&Value> = chrome["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "lapse:mark")
        .collect();
    let names: Vec<&str> = instants
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["A", "B", "A"]);
    assert!(instants.iter().all(|e| e["ph"] == "i" && e["s"] == "t"));
    // ... which `lapse import` reads back as marks
    ok(LAPSE
        .in_dir(&dir)
        .run(["import", "w.chrome", "-o", "back.lapse"]));
    let back = LAPSE.in_dir(&dir).report("back.lapse", "marks", &[]);
    let back: Vec<&str> = rows(&back)
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(back, ["A", "B", "A"]);
    // speedscope: a call of no length to `[mark] TEXT` on the thread
    let speedscope: Value = serde_json::from_slice(&export("speedscope")).unwrap();
    let frames = speedscope["shared"]["frames"].as_array().unwrap();
    let mark_a = frames
        .iter()
        .position(|f| f["name"] == "[mark] A")
        .expect("a frame for mark A");
    let events = speedscope["profiles"][0]["events"].as_array().unwrap();
    let opens = events
        .iter()
        .filter(|e| e["type"] == "O" && e["frame"] == mark_a)
        .count();
    assert_eq!(opens, 2, "two marks A");
    let ats: Vec<u64> = events.iter().map(|e| e["at"].as_u64().unwrap()).collect();
    assert!(ats.windows(2).all(|w| w[0] <= w[1]), "in time order");
    // Firefox: instant markers of type LapseMark named by the text
    let firefox: Value = serde_json::from_slice(&export("firefox")).unwrap();
    let thread = &firefox["threads"][0];
    let markers = &thread["markers"];
    let strings = thread["stringArray"].as_array().unwrap();
    let texts: Vec<&str> = (0..markers["length"].as_u64().unwrap() as usize)
        .filter(|&i| markers["data"][i]["type"] == "LapseMark")
        .map(|i| {
            strings[markers["name"][i].as_u64().unwrap() as usize]
                .as_str()
                .unwrap()
        })
        .collect();
    assert_eq!(texts, ["A", "B", "A"], "{markers:#}");
    // Perfetto (protobuf): the category and the texts are interned in it
    let perfetto = export("perfetto");
    let has = |needle: &[u8]| perfetto.windows(needle.len()).any(|w| w == needle);
    assert!(has(b"lapse:mark"));
    // HTML: the marks travel with the page's timeline
    let html = String::from_utf8(export("html")).unwrap();
    let at = html
        .find("\"marks\":[[")
        .expect("the page carries its marks");
    let marks = &html[at..at + html[at..].find("]]").unwrap()];
    assert!(
        marks.contains("\"A\"") && marks.contains("\"B\""),
        "{marks}"
    );
}

#[test]
fn a_window_between_marks_holds_what_lies_between_them() {
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "marks_window");
    let Some(exe) = build(&dir, "window", WINDOW, INSTRUMENTED) else {
        return;
    };
    let Some(out) = record(&dir, &exe, &[], "w.lapse") else {
        return;
    };
    ok(out);
    let l = LAPSE.in_dir(&dir);
    let all = l.report("w.lapse", "functions", &[]);
    let win = l.report(
        "w.lapse",
        "functions",
        &["--from-mark", "A", "--to-mark", "B"],
    );
    // target ran between the first A and the B after it; before and other
    // did not (other ran before the second A)
    assert_eq!(calls(&win, "target"), Some(1), "{win:#}");
    assert_eq!(calls(&win, "before").unwrap_or(0), 0, "{win:#}");
    assert_eq!(calls(&win, "other").unwrap_or(0), 0, "{win:#}");
    // target's call lies wholly inside: its values are those of the whole
    // recording, to the nanosecond
    for key in [
        "elapsed_inclusive_ns",
        "elapsed_exclusive_ns",
        "application_inclusive_ns",
    ] {
        assert_eq!(
            value(&win, "target", key),
            value(&all, "target", key),
            "{key}"
        );
    }
    // the session is the window: its elapsed time is the marks' distance
    // (one thread, alive throughout), computed here from the marks view
    let marks = l.report("w.lapse", "marks", &[]);
    let at = |i: usize| rows(&marks)[i]["time_ns"].as_u64().unwrap();
    assert_eq!(
        win["session"]["elapsed_inclusive_ns"].as_u64().unwrap(),
        at(1) - at(0),
        "{win:#}"
    );
    // the same window given in seconds gives the same values
    let secs = |ns: u64| format!("{}", ns as f64 / 1e9);
    let by_time = l.report(
        "w.lapse",
        "functions",
        &["--from", &secs(at(0)), "--to", &secs(at(1))],
    );
    assert_eq!(rows(&by_time), rows(&win));
    // exports take the window too; a mark that is not there is one error line
    ok(l.run([
        "export",
        "w.lapse",
        "--format",
        "collapsed",
        "--from-mark",
        "A",
        "--to-mark",
        "B",
        "-o",
        "w.folded",
    ]));
    let folded = std::fs::read_to_string(dir.join("w.folded")).unwrap();
    assert!(
        folded.contains("target") && !folded.contains("other"),
        "{folded}"
    );
    let bad = l.run(["report", "w.lapse", "--from-mark", "C"]);
    assert!(!bad.status.success());
    let err = stderr(&bad);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("no such mark"), "{err}");
}

#[test]
fn the_api_is_a_no_op_without_lapse() {
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "marks_no_op");
    let Some(plain) = build(&dir, "plain", PAUSED, &["-O1", "-pthread"]) else {
        return;
    };
    let Some(probed) = build(&dir, "probed", PAUSED, INSTRUMENTED) else {
        return;
    };
    let run = |exe: &Path| ok(Command::new(exe).output().expect("run")).stdout;
    let native = run(&plain);
    assert_eq!(run(&probed), native, "with probes, without lapse");
    let Some(out) = record(&dir, &probed, &[], "n.lapse") else {
        return;
    };
    assert_eq!(ok(out).stdout, native, "under lapse");
    // The plain build, patched at run time: the header's own helpers are
    // not patched (they are lapse's, not the program's work).
    let Some(out) = record(&dir, &plain, &[], "p.lapse") else {
        return;
    };
    assert_eq!(ok(out).stdout, native, "patched under lapse");
    let f = LAPSE.in_dir(&dir).report("p.lapse", "functions", &[]);
    let names: Vec<&str> = rows(&f)
        .iter()
        .filter_map(|r| r["function"].as_str())
        .collect();
    assert!(names.contains(&"main"), "patched: {names:?}");
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("lapse_api_") || n.starts_with("lapse_nop_")),
        "{names:?}"
    );
}

#[test]
fn start_paused_records_from_the_resume() {
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "marks_start_paused");
    let Some(exe) = build(&dir, "sp", STARTS_PAUSED, INSTRUMENTED) else {
        return;
    };
    let Some(out) = record(&dir, &exe, &["--start-paused"], "s.lapse") else {
        return;
    };
    ok(out);
    let f = LAPSE.in_dir(&dir).report("s.lapse", "functions", &[]);
    assert_eq!(calls(&f, "before").unwrap_or(0), 0, "{f:#}");
    assert_eq!(calls(&f, "after"), Some(1), "{f:#}");
    assert_eq!(
        calls(&f, "main").unwrap_or(0),
        0,
        "main began paused: {f:#}"
    );
}

#[test]
fn the_toggle_signal_from_another_process_pauses_and_resumes() {
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "marks_signal");
    let Some(exe) = build(&dir, "sig", SIGNALLED, INSTRUMENTED) else {
        return;
    };
    // (natively SIGUSR2 ends it: under lapse the program never sees it)
    let native = Command::new(&exe).output().expect("run");
    assert!(
        !native.status.success(),
        "SIGUSR2 ends the program natively"
    );
    let Some(out) = record(&dir, &exe, &["--signal", "SIGUSR2"], "g.lapse") else {
        return;
    };
    let out = ok(out);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("sink5 "),
        "it ran to the end"
    );
    let f = LAPSE.in_dir(&dir).report("g.lapse", "functions", &[]);
    assert_eq!(calls(&f, "before"), Some(1), "{f:#}");
    assert_eq!(calls(&f, "after"), Some(1), "{f:#}");
    assert_eq!(calls(&f, "during").unwrap_or(0), 0, "{f:#}");
    let info = LAPSE
        .in_dir(&dir)
        .json(["info", "g.lapse", "--format", "json"]);
    assert_eq!(info["paused"].as_array().map(Vec::len), Some(1), "{info:#}");

    // A program with its own handler keeps it, and lapse says so in one line.
    let Some(own) = build(&dir, "own", OWN_HANDLER, INSTRUMENTED) else {
        return;
    };
    let Some(out) = record(&dir, &own, &["--signal", "SIGUSR2"], "o.lapse") else {
        return;
    };
    let out = ok(out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("got 1"));
    let err = stderr(&out);
    let line: Vec<&str> = err.lines().filter(|l| l.contains("--signal")).collect();
    assert_eq!(line.len(), 1, "{err}");
    assert!(line[0].contains("its own handler"), "{err}");
    // a signal lapse cannot take is refused before anything runs
    let bad = LAPSE.in_dir(&dir).run([
        "record",
        "--signal",
        "SIGINT",
        "-o",
        "x.lapse",
        "--",
        "/bin/true",
    ]);
    assert!(!bad.status.success());
    assert!(stderr(&bad).contains("--signal SIGINT"), "{}", stderr(&bad));
}

/// The same API from Rust: `lapse::pause()`, `lapse::resume()`,
/// `lapse::mark()`.
const MAIN_RS: &str = r#"
#[lapse::profile]
fn step(n: u64) -> u64 { (0..n).fold(0u64, |a, i| std::hint::black_box(a.wrapping_add(i * i))) }

fn main() {
    let mut sum = step(1000);
    lapse::mark("before pause");
    lapse::pause();
    for _ in 0..10 { sum = sum.wrapping_add(step(1000)); }
    lapse::resume();
    lapse::mark("resumed");
    sum = sum.wrapping_add(step(1000));
    println!("sum {sum}");
}
"#;

#[test]
fn the_rust_crate_pauses_resumes_and_marks() {
    let Some(cargo) = lapse_testkit::tool("cargo") else {
        return;
    };
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "marks_rust");
    let lapse = std::fs::canonicalize(Path::new(env!("CARGO_MANIFEST_DIR")).join("../lapse"))
        .expect("crates/lapse");
    let manifest = format!(
        "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
         [dependencies]\nlapse = {{ path = {:?} }}\n\n[workspace]\n",
        lapse.to_str().expect("a UTF-8 path")
    );
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    std::fs::write(dir.join("src/main.rs"), MAIN_RS).unwrap();
    ok(Command::new(cargo)
        .args(["build", "--offline", "--quiet"])
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .output()
        .expect("cargo build"));
    let exe = dir.join("target/debug/app");
    let native = ok(Command::new(&exe).output().expect("run")).stdout;
    let Some(out) = record(&dir, &exe, &[], "r.lapse") else {
        return;
    };
    assert_eq!(ok(out).stdout, native, "the same output under lapse");
    let f = LAPSE.in_dir(&dir).report("r.lapse", "functions", &[]);
    assert_eq!(calls(&f, "app::step"), Some(2), "{f:#}");
    let marks = LAPSE.in_dir(&dir).report("r.lapse", "marks", &[]);
    let texts: Vec<&str> = rows(&marks)
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["before pause", "resumed"]);
}

#[test]
fn delay_and_duration_bound_what_is_recorded() {
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "marks_timed");
    let Some(exe) = build(&dir, "timed", TIMED, INSTRUMENTED) else {
        return;
    };
    let first_enter_ns = |data: &str| -> Option<f64> {
        let json = format!("{data}.json");
        ok(LAPSE
            .in_dir(&dir)
            .run(["export", data, "--format", "chrome", "-o", &json]));
        let v: Value = serde_json::from_slice(&std::fs::read(dir.join(&json)).unwrap()).unwrap();
        v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "B")
            .map(|e| e["ts"].as_f64().unwrap() * 1000.0)
            .reduce(f64::min)
    };
    // --delay 1: after (1.5 s into the program, which starts after the
    // recording does) is recorded; nothing in the first second is
    let Some(out) = record(&dir, &exe, &["--delay", "1"], "d.lapse") else {
        return;
    };
    ok(out);
    let f = LAPSE.in_dir(&dir).report("d.lapse", "functions", &[]);
    assert_eq!(calls(&f, "after"), Some(1), "{f:#}");
    let info = LAPSE
        .in_dir(&dir)
        .json(["info", "d.lapse", "--format", "json"]);
    let stretch = &info["paused"][0];
    let to = stretch["to_ns"]
        .as_u64()
        .expect("a paused stretch that ends");
    assert!(to <= 1_000_000_000, "{info:#}");
    // (a thread's timeline has its waits for the recorder cut out: its
    // calls may sit earlier than the clock by that much)
    let waits = f["session"]["recorder_wait_ns"].as_u64().unwrap_or(0) as f64;
    let first = first_enter_ns("d.lapse").expect("calls");
    assert!(
        first + waits >= to as f64,
        "a call at {first} ns, paused until {to}"
    );
    // --duration 1: the recording pauses after a second; after is not in it
    let Some(out) = record(&dir, &exe, &["--duration", "1"], "u.lapse") else {
        return;
    };
    assert!(
        String::from_utf8_lossy(&ok(out).stdout).contains("sink1 "),
        "ran to its end"
    );
    let f = LAPSE.in_dir(&dir).report("u.lapse", "functions", &[]);
    assert_eq!(calls(&f, "after").unwrap_or(0), 0, "{f:#}");
    let info = LAPSE
        .in_dir(&dir)
        .json(["info", "u.lapse", "--format", "json"]);
    assert_eq!(info["paused"][0]["from_ns"], 1_000_000_000, "{info:#}");
    assert!(info["paused"][0]["to_ns"].is_null(), "to the end: {info:#}");
}

/// Long enough spins for a thousand samples a second to see each.
const SAMPLED: &str = r#"
int main(void) {
    spin(0, 40000000);
    lapse_mark("pausing");
    lapse_pause();
    during(5);
    for (int i = 0; i < 100; i++) during(5);
    lapse_resume();
    lapse_mark("resumed");
    spin(1, 40000000);
    print_sinks();
    return 0;
}
"#;

#[test]
fn sampling_leaves_paused_stretches_out_and_keeps_marks() {
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "marks_sampled");
    // (no probes: the runtime comes in for pause, resume and marks only)
    let Some(exe) = build(&dir, "sampled", SAMPLED, &["-O1", "-g", "-pthread"]) else {
        return;
    };
    let Some(out) =
        LAPSE
            .in_dir(&dir)
            .record(&["--method", "sample"], Path::new("s.lapse"), &exe, &[])
    else {
        return;
    };
    ok(out);
    let f = LAPSE.in_dir(&dir).report("s.lapse", "functions", &[]);
    let samples = |name: &str| -> u64 {
        rows(&f)
            .iter()
            .find(|r| r["function"] == name)
            .map_or(0, |r| r["inclusive_samples"].as_u64().unwrap())
    };
    assert!(samples("spin") > 0, "{f:#}");
    assert_eq!(samples("during"), 0, "paused: {f:#}");
    let marks = LAPSE.in_dir(&dir).report("s.lapse", "marks", &[]);
    let texts: Vec<&str> = rows(&marks)
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["pausing", "resumed"]);
    // the window between the marks is the paused stretch (and the API's
    // own calls around it): nothing of the program's work
    let win = LAPSE.in_dir(&dir).report(
        "s.lapse",
        "functions",
        &["--from-mark", "pausing", "--to-mark", "resumed"],
    );
    for r in rows(&win) {
        assert!(
            r["function"] != "during" && r["function"] != "spin",
            "{win:#}"
        );
    }
}

/// A child forked while paused works after its parent resumed.
const FORKED: &str = r#"
int main(void) {
    int go[2];
    if (pipe(go) != 0) return 1;
    lapse_pause();
    pid_t c = fork();
    if (c == 0) {
        char b;
        close(go[1]);
        if (read(go[0], &b, 1) != 1) _exit(1);
        after();
        _exit(0);
    }
    close(go[0]);
    during(5);
    lapse_resume();
    if (write(go[1], "g", 1) != 1) return 1;
    int st;
    waitpid(c, &st, 0);
    print_sinks();
    return WEXITSTATUS(st);
}
"#;

#[test]
fn a_child_forked_while_paused_is_recorded_after_the_resume() {
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "marks_forked");
    let Some(exe) = build(&dir, "forked", FORKED, INSTRUMENTED) else {
        return;
    };
    let Some(out) = record(&dir, &exe, &[], "k.lapse") else {
        return;
    };
    ok(out);
    let f = LAPSE.in_dir(&dir).report("k.lapse", "functions", &[]);
    assert_eq!(calls(&f, "after"), Some(1), "the child's call: {f:#}");
    assert_eq!(calls(&f, "during").unwrap_or(0), 0, "{f:#}");
}
