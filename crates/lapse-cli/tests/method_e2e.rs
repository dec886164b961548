//! `--method auto` (SPEC 4): probes in the executable or in any library it
//! needs choose instrumentation, and lapse says which module carries them;
//! a wrapper without probes is sampled with a hint to force instrumentation.

use lapse_testkit::{compile, perf_refused, skip, Lapse, WorkDir};
use serde_json::Value;

const LAPSE: Lapse = Lapse::new(env!("CARGO_BIN_EXE_lapse"));

#[test]
fn probes_in_a_needed_library_choose_instrumentation() {
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "method_e2e-lib");
    // Only the library is built with probes; the program is not.
    let lib = r#"
#include <stdint.h>
__attribute__((noinline)) uint64_t lib_step(uint64_t x) { return x * 6364136223846793005ULL + 1; }
uint64_t lib_work(int n) { uint64_t x = 1; for (int i = 0; i < n; i++) x = lib_step(x); return x; }
"#;
    let Some(_) = compile(
        &dir,
        "gcc",
        "libwork.so",
        lib,
        &["-shared", "-fPIC", "-O1", "-finstrument-functions"],
    ) else {
        return;
    };
    let prog = r#"
#include <stdint.h>
#include <stdio.h>
uint64_t lib_work(int n);
int main(void) { printf("%llu\n", (unsigned long long)lib_work(1000)); return 0; }
"#;
    let libdir = format!("-L{}", dir.display());
    let Some(exe) = compile(
        &dir,
        "gcc",
        "app",
        prog,
        &["-O1", &libdir, "-lwork", "-Wl,-rpath,$ORIGIN"],
    ) else {
        return;
    };
    let out = LAPSE
        .in_dir(&dir)
        .run(["record", "-o", "out.lapse", exe.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if perf_refused(&stderr) && !dir.join("out.lapse").exists() {
        return skip(stderr).unwrap_or(());
    }
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("probes found in") && stderr.contains("libwork.so"),
        "says which module has the probes: {stderr}"
    );
    let report = LAPSE.in_dir(&dir).run([
        "report",
        "out.lapse",
        "--view",
        "functions",
        "--format",
        "json",
    ]);
    let v: Value = serde_json::from_slice(&report.stdout).expect("JSON");
    assert_eq!(v["method"], "instrumentation");
    let step = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["function"] == "lib_step")
        .unwrap_or_else(|| panic!("lib_step recorded: {v}"));
    assert_eq!(step["calls"], 1000);
    assert_eq!(step["module"], "libwork.so");
}

#[test]
fn a_wrapper_without_probes_is_sampled_with_a_hint() {
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "method_e2e-wrapper");
    let out = LAPSE
        .in_dir(&dir)
        .run(["record", "-o", "out.lapse", "--", "sh", "-c", "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if perf_refused(&stderr) && !dir.join("out.lapse").exists() {
        return skip(stderr).unwrap_or(());
    }
    assert!(out.status.success(), "{stderr}");
    let hint: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("--method instrument"))
        .collect();
    assert_eq!(
        hint.len(),
        1,
        "one line saying how to force instrumentation: {stderr}"
    );
    // A program that is not a wrapper gets no such line.
    let out = LAPSE
        .in_dir(&dir)
        .run(["record", "-o", "out2.lapse", "--", "true"]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("--method instrument"));
}
