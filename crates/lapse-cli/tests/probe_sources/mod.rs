//! What the end-to-end tests of probe sources share: building a program
//! with a given source's probes, running it as built and under `lapse
//! record` (same output, same exit status), and reading the recording.

#![allow(dead_code)] // (each test file uses its own part)

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use lapse_testkit::{compile, stderr, Lapse, WorkDir};
#[allow(unused_imports)] // (for the files that glob-import this module)
pub use lapse_testkit::{row, rows};
use serde_json::Value;

const LAPSE: Lapse = Lapse::new(env!("CARGO_BIN_EXE_lapse"));

/// How a test program gets its probes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// `-finstrument-functions`: entry and exit compiled in.
    Cyg,
    /// `-pg`: mcount at entry, the trampoline at exit.
    Pg,
    /// `-pg -mfentry`: __fentry__ at entry, the trampoline at exit.
    Fentry,
    /// clang's `-fsanitize-coverage=func,trace-pc-guard` with lapse's stub
    /// (`lapse build --stub-object`): the hook after the prologue, the
    /// trampoline at exit. Built by clang/clang++ whatever the test names.
    Sancov,
    /// No probes at all: `--method instrument` patches the function
    /// entries at run time, exits through the trampoline.
    Patch,
}

pub use Source::{Cyg, Fentry, Patch, Pg, Sancov};

/// The sources whose exits are the trampoline's.
pub const TRAMPOLINED: [Source; 3] = [Pg, Fentry, Sancov];
/// The same, and run-time patching of a program built without probes.
pub const TRAMPOLINED_OR_PATCHED: [Source; 4] = [Pg, Fentry, Sancov, Patch];

impl Source {
    pub fn flags(self) -> &'static [&'static str] {
        match self {
            Cyg => &["-finstrument-functions"],
            Pg => &["-pg"],
            Fentry => &["-pg", "-mfentry"],
            Sancov => &["-fsanitize-coverage=func,trace-pc-guard"],
            Patch => &[],
        }
    }

    /// The compiler for a test that names gcc or g++.
    pub fn compiler(self, named: &str) -> &str {
        match (self, named) {
            (Sancov, "g++") => "clang++",
            (Sancov, _) => "clang",
            (_, named) => named,
        }
    }

    pub fn tag(self) -> &'static str {
        match self {
            Cyg => "cyg",
            Pg => "pg",
            Fentry => "fentry",
            Sancov => "sancov",
            Patch => "patch",
        }
    }

    /// The name the session's `probe_sources` gives the source.
    pub fn probe_source(self) -> &'static str {
        match self {
            Cyg => "finstrument-functions",
            Pg => "pg",
            Fentry => "fentry",
            Sancov => "sancov",
            Patch => "patched",
        }
    }

    /// What `lapse record` needs besides: a program without probes is
    /// only patched on request (`--method auto` samples it).
    pub fn record_options(self) -> &'static [&'static str] {
        match self {
            Patch => &["--method", "instrument"],
            _ => &[],
        }
    }
}

/// C and C++ helpers shared by the programs. NOIPA keeps gcc (and clang)
/// from inlining or cloning a function, so every call in the source is a
/// call.
pub const PRELUDE: &str = r#"
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#ifdef __clang__
#define noipa noinline, optnone
#endif
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#define NOIPA __attribute__((noipa))
static volatile uint64_t sink;
NOIPA double cpu_ms(void) {
    struct timespec ts; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
NOIPA uint64_t spin(double ms) {
    uint64_t x = 88172645463325252ULL; double end = cpu_ms() + ms;
    while (cpu_ms() < end) for (int i = 0; i < 20000; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; }
    return x;
}
NOIPA long leaf(long x) { sink += (uint64_t)x; return x + 1; }
"#;

/// A program run as built and under `lapse record`.
pub struct Run {
    pub dir: WorkDir,
    pub data: PathBuf,
    pub source: Source,
}

/// Builds `body` with `source`'s probes (`compiler` is gcc or g++, `extra`
/// more flags), runs it as built and under `lapse record`, and checks that
/// both print the same and exit the same. `None` means skip.
pub fn run(name: &str, compiler: &str, source: Source, body: &str, extra: &[&str]) -> Option<Run> {
    run_with(name, compiler, source, body, extra, &[])
}

/// [`run`], with `options` for `lapse record`.
pub fn run_with(
    name: &str,
    compiler: &str,
    source: Source,
    body: &str,
    extra: &[&str],
    options: &[&str],
) -> Option<Run> {
    let name = format!("{name}-{}", source.tag());
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), &format!("probes-{name}"));
    let mut flags = vec!["-O2", "-g", "-pthread"];
    flags.extend_from_slice(source.flags());
    flags.extend_from_slice(extra);
    let stub = (source == Sancov).then(stub_object);
    if let Some(stub) = &stub {
        flags.push(stub.to_str().expect("a UTF-8 path"));
    }
    let compiler = source.compiler(compiler);
    let exe = compile(&dir, compiler, &name, &format!("{PRELUDE}\n{body}"), &flags)?;
    let data = dir.join("out.lapse");
    let mut options = options.to_vec();
    options.extend_from_slice(source.record_options());
    record_like_native(&dir, &exe, &[], &options, &data, &name)?;
    Some(Run { dir, data, source })
}

/// Runs `exe args` as it is and under `lapse record options` into `data`
/// (in `dir`): both must print the same and exit the same, and the data
/// file must exist. The exit status and lapse's stderr; `None`: skip
/// (perf events refused).
pub fn record_like_native(
    dir: &Path,
    exe: &Path,
    args: &[&str],
    options: &[&str],
    data: &Path,
    name: &str,
) -> Option<(i32, String)> {
    let native = Command::new(exe)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run the program");
    let traced = LAPSE.in_dir(dir).record(options, data, exe, args)?;
    let stderr = stderr(&traced);
    assert_eq!(
        String::from_utf8_lossy(&traced.stdout),
        String::from_utf8_lossy(&native.stdout),
        "{name}: the program printed something else under lapse (lapse said: {stderr})"
    );
    assert_eq!(
        traced.status.code(),
        native.status.code(),
        "{name}: the program exited otherwise under lapse ({stderr})"
    );
    assert!(data.exists(), "{name}: no data file; lapse said: {stderr}");
    Some((traced.status.code().unwrap_or(-1), stderr))
}

/// The stub object clang-built programs link (`lapse build --stub-object`).
pub fn stub_object() -> PathBuf {
    PathBuf::from(LAPSE.stdout(["build", "--stub-object"]).trim())
}

/// `lapse report` of the run as JSON (`filter`: more options); it must succeed.
pub fn report(r: &Run, view: &str, filter: &[&str]) -> Value {
    LAPSE.in_dir(&r.dir).report(&r.data, view, filter)
}

/// Calls of `name` (0 when it has no row).
pub fn calls(v: &Value, name: &str) -> u64 {
    rows(v)
        .iter()
        .find(|r| r["function"] == name)
        .map_or(0, |r| r["calls"].as_u64().unwrap_or(0))
}

/// Every function's call count is `expected` (name, calls).
pub fn assert_calls(r: &Run, v: &Value, expected: &[(&str, u64)]) {
    for &(name, n) in expected {
        assert_eq!(
            calls(v, name),
            n,
            "{:?}: calls of {name} in {}",
            r.source,
            r.data.display()
        );
    }
}

/// No function's inclusive time exceeds the time of all threads together,
/// and in a one-thread process, that thread's.
pub fn assert_inclusive_within_threads(r: &Run, functions: &Value) {
    let threads = report(r, "threads", &[]);
    let total: f64 = rows(&threads)
        .iter()
        .map(|t| t["elapsed_inclusive_ns"].as_f64().unwrap_or(0.0))
        .sum();
    for f in rows(functions) {
        let inc = f["elapsed_inclusive_ns"].as_f64().unwrap_or(0.0);
        assert!(
            inc <= total,
            "{:?}: {} inclusive {inc} ns > all threads' {total} ns",
            r.source,
            f["function"]
        );
    }
}

/// `lapse info` of the run (any exit status).
pub fn info(r: &Run) -> String {
    let out = LAPSE.run([OsStr::new("info"), r.data.as_os_str()]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The number `lapse info` gives on the line starting with `key`.
pub fn info_count(info: &str, key: &str) -> u64 {
    info.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l[key.len()..].split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {info}"))
}

/// The values programs' CPU-time spins as every source must see them:
/// `outer_spin` 40 ms, `many_calls` 20 ms beside 200,000 calls (a busy
/// machine stretches elapsed time, not application time).
pub fn assert_spins(source: Source, outer: f64, many: f64) {
    assert!(
        (36.0..=52.0).contains(&outer),
        "{source:?}: outer_spin {outer:.1} ms of 40"
    );
    assert!(
        (18.0..=45.0).contains(&many),
        "{source:?}: many_calls {many:.1} ms of 20 + 200,000 calls"
    );
}

pub fn ms(row: &Value, key: &str) -> f64 {
    row[key].as_f64().unwrap_or(0.0) / 1e6
}

/// The row of `name` in module `module` (a file name), if any.
pub fn row_in<'a>(v: &'a Value, name: &str, module: &str) -> Option<&'a Value> {
    rows(v)
        .iter()
        .find(|r| r["function"] == name && r["module"] == module)
}

/// The calltree's roots (all threads).
pub fn roots(r: &Run) -> Vec<Value> {
    report(r, "calltree", &[])["roots"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

pub fn children(node: &Value) -> &[Value] {
    node["children"].as_array().map_or(&[], Vec::as_slice)
}

pub fn child<'a>(node: &'a Value, name: &str) -> Option<&'a Value> {
    children(node).iter().find(|c| c["function"] == name)
}

/// The deepest path of the tree under `node`, in calls (node = 1).
pub fn depth(node: &Value) -> usize {
    let mut deepest = 0;
    let mut todo = vec![(node, 1)];
    while let Some((n, d)) = todo.pop() {
        deepest = deepest.max(d);
        todo.extend(children(n).iter().map(|c| (c, d + 1)));
    }
    deepest
}
