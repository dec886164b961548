//! End to end: run-time patching of shared libraries, those a program
//! needs and those it loads with `dlopen` (`--patch REGEX@MODULE`). Each
//! program and its libraries are built during the test, run as they are
//! and under `lapse record`: same output, same exit status, and every call
//! of a library function that is not inlined counted.

use std::path::Path;

use lapse_testkit::{compile, WorkDir};
use serde_json::Value;

mod probe_sources;
use probe_sources::*;

/// Builds `lib` as `lib<name>.so` and `main` linked with it (`-l<name>`,
/// found beside it at run time), both with `flags`; `None`: skip.
fn build_pair(
    dir: &Path,
    name: &str,
    lib: &str,
    main: &str,
    flags: &[&str],
) -> Option<std::path::PathBuf> {
    let mut lib_flags = vec!["-O1", "-g", "-shared", "-fPIC", "-pthread"];
    lib_flags.extend_from_slice(flags);
    compile(
        dir,
        "gcc",
        &format!("lib{name}.so"),
        &format!("{PRELUDE}\n{lib}"),
        &lib_flags,
    )?;
    let link = format!("-L{}", dir.display());
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    let lname = format!("-l{name}");
    let mut main_flags = vec!["-O1", "-g", "-pthread", &link, &rpath, &lname, "-ldl"];
    main_flags.extend_from_slice(flags);
    compile(
        dir,
        "gcc",
        "app",
        &format!("{PRELUDE}\n{main}"),
        &main_flags,
    )
}

/// Every function's calls in `module` (a file name), by name.
fn calls_in(v: &Value, module: &str) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = rows(v)
        .iter()
        .filter(|r| r["module"] == module)
        .map(|r| {
            (
                r["function"].as_str().unwrap_or("").to_owned(),
                r["calls"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    out.sort();
    out
}

const LIB: &str = r#"
NOIPA long lib_small(long x) { long r = x * 3; __asm__ volatile("" : "+r"(r)); return r + 1; }
NOIPA long lib_rec(int d) { if (d == 0) return 1; long r = lib_rec(d - 1); __asm__ volatile("" : "+r"(r)); return r + 1; }
NOIPA long lib_each(long n, long (*f)(long)) { long s = 0; for (long i = 0; i < n; i++) s += f(i); return s; }
NOIPA void *lib_worker(void *a) { long s = 0; for (long i = 0; i < 5000; i++) s += lib_small(i); return (void *)(s + (long)a); }
"#;

const MAIN: &str = r#"
long lib_small(long); long lib_rec(int); long lib_each(long, long (*)(long)); void *lib_worker(void *);
NOIPA long twice(long x) { return leaf(x) * 2; }
int main(void) {
    long s = 0;
    for (long i = 0; i < 20000; i++) s += lib_small(i);
    s += lib_rec(30) + lib_each(1000, twice);
    pthread_t t[2];
    for (long i = 0; i < 2; i++) pthread_create(&t[i], 0, lib_worker, (void *)i);
    for (int i = 0; i < 2; i++) { void *r; pthread_join(t[i], &r); s += (long)r; }
    printf("%ld\n", s);
    return 3;
}
"#;

#[test]
fn a_needed_library_is_patched_and_counts_as_finstrument_functions() {
    let mut counts = Vec::new();
    for source in [Cyg, Patch] {
        let dir = WorkDir::new(
            env!("CARGO_TARGET_TMPDIR"),
            &format!("patchlib-needed-{}", source.tag()),
        );
        let Some(exe) = build_pair(&dir, "vals", LIB, MAIN, source.flags()) else {
            return;
        };
        let data = dir.join("out.lapse");
        let options: &[&str] = match source {
            Patch => &[
                "--method",
                "instrument",
                "--patch",
                ".",
                "--patch",
                ".@^libvals",
            ],
            _ => &[],
        };
        if record_like_native(&dir, &exe, &[], options, &data, "needed").is_none() {
            return;
        }
        let r = Run { dir, data, source };
        let v = report(&r, "functions", &[]);
        assert_calls(
            &r,
            &v,
            &[
                ("lib_small", 30_000),
                ("lib_rec", 31),
                ("lib_each", 1),
                ("lib_worker", 2),
                ("twice", 1000),
                ("leaf", 1000),
                ("main", 1),
            ],
        );
        let sources = &v["session"]["probe_sources"];
        let expected = source.probe_source();
        assert_eq!(sources["libvals.so"], expected, "{sources}");
        assert_eq!(sources["app"], expected, "{sources}");
        assert_inclusive_within_threads(&r, &v);
        counts.push((calls_in(&v, "libvals.so"), calls_in(&v, "app")));
    }
    assert_eq!(counts[0], counts[1], "-finstrument-functions vs patched");
}

const PLUGIN: &str = r#"
NOIPA long plug_leaf(long x) { long r = x * 5; __asm__ volatile("" : "+r"(r)); return r + 2; }
NOIPA long plug_work(long n) { long s = 0; for (long i = 0; i < n; i++) s += plug_leaf(i); return s; }
"#;

/// Loads the plugin while another thread of the program runs.
const LOADER: &str = r#"
#include <dlfcn.h>
static volatile int stop;
NOIPA void *busy(void *a) { long s = 0; while (!stop) s += leaf(s); return (void *)(s & 1) + (long)a; }
int main(void) {
    pthread_t t; pthread_create(&t, 0, busy, 0);
    void *h = dlopen("./libplug.so", RTLD_NOW);
    if (!h) { printf("no plugin: %s\n", dlerror()); return 1; }
    long (*work)(long) = (long (*)(long))dlsym(h, "plug_work");
    long s = work(3000) + work(10);
    stop = 1; pthread_join(t, 0);
    printf("%ld\n", s);
    return 0;
}
"#;

#[test]
fn a_dlopened_library_is_patched_when_selected_and_left_alone_when_not() {
    dlopened();
}

/// (`None`: skipped)
fn dlopened() -> Option<()> {
    let selected = [
        "--method",
        "instrument",
        "--patch",
        ".",
        "--patch",
        ".@libplug",
    ];
    let not = ["--method", "instrument"];
    for (options, name) in [(&selected[..], "selected"), (&not[..], "not")] {
        let dir = WorkDir::new(
            env!("CARGO_TARGET_TMPDIR"),
            &format!("patchlib-dlopen-{name}"),
        );
        // (-O2 aligns functions to 16 bytes: each jump fits in one
        // 16-byte store, as it must with another thread running)
        let lib_flags = ["-O2", "-g", "-shared", "-fPIC"];
        compile(
            &dir,
            "gcc",
            "libplug.so",
            &format!("{PRELUDE}\n{PLUGIN}"),
            &lib_flags,
        )?;
        let main_flags = ["-O1", "-g", "-pthread", "-ldl"];
        let exe = compile(
            &dir,
            "gcc",
            "loader",
            &format!("{PRELUDE}\n{LOADER}"),
            &main_flags,
        )?;
        let data = dir.join("out.lapse");
        record_like_native(&dir, &exe, &[], options, &data, name)?;
        let r = Run {
            dir,
            data,
            source: Patch,
        };
        let v = report(&r, "functions", &[]);
        let sources = &v["session"]["probe_sources"];
        assert_eq!(sources["loader"], "patched", "{sources}");
        assert_eq!(calls(&v, "main"), 1);
        assert_eq!(calls(&v, "busy"), 1);
        if name == "selected" {
            assert_calls(&r, &v, &[("plug_work", 2), ("plug_leaf", 3010)]);
            assert_eq!(sources["libplug.so"], "patched", "{sources}");
            let i = info(&r);
            assert!(
                i.contains("function(s) of libplug.so patched at entry"),
                "{i}"
            );
        } else {
            assert!(calls_in(&v, "libplug.so").is_empty(), "not selected: {v}");
            assert!(sources.get("libplug.so").is_none(), "{sources}");
        }
    }
    Some(())
}
