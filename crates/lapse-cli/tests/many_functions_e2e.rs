//! A million distinct functions (#31 item 18): a recording that calls each
//! of 1,000,000 functions once under `main` (a Chrome trace made here and
//! imported) is exported in every format, and each export's peak memory
//! stays under a bound that is linear in the functions, not a multiple of
//! them: before, speedscope took 2.2 GB (a `serde_json::Value` per frame,
//! copied), and every call-tree export held the one thread's tree twice.
//!
//! Measured on the 2-core VM: 0.57 (speedscope) to 1.07 GB (html). The
//! bound, 1.25 GiB, fails the old speedscope (2.2 GB) and report paths
//! that copy per-function tables per worker.
//!
//! Peak memory is the children's `ru_maxrss`: this file holds one test, so
//! the only children of its process are the `lapse` runs below.

use std::io::Write;

use lapse_testkit::{Lapse, WorkDir, EXPORT_FORMATS};

const LAPSE: Lapse = Lapse::new(env!("CARGO_BIN_EXE_lapse")).with_env(&[("NO_COLOR", "1")]);

const FUNCTIONS: u64 = 1_000_000;
const BOUND_KIB: i64 = 1280 * 1024;

/// The largest peak resident size (KiB) of the children waited for so far.
fn children_peak_kib() -> i64 {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given.
    unsafe {
        libc::getrusage(libc::RUSAGE_CHILDREN, u.as_mut_ptr());
        u.assume_init().ru_maxrss
    }
}

#[test]
fn a_million_distinct_functions_export_in_bounded_memory() {
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "many_functions_e2e");
    let trace = dir.join("many.json");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&trace).unwrap());
        writeln!(f, "{{\"traceEvents\":[").unwrap();
        writeln!(f, r#"{{"name":"main","ph":"B","pid":1,"tid":1,"ts":0}},"#).unwrap();
        for i in 0..FUNCTIONS {
            let t = 1 + 2 * i;
            writeln!(
                f,
                r#"{{"name":"fn_{i}","ph":"B","pid":1,"tid":1,"ts":{t}}},{{"name":"fn_{i}","ph":"E","pid":1,"tid":1,"ts":{}}},"#,
                t + 1
            )
            .unwrap();
        }
        writeln!(
            f,
            r#"{{"name":"main","ph":"E","pid":1,"tid":1,"ts":{}}}]}}"#,
            2 * FUNCTIONS + 2
        )
        .unwrap();
    }
    let data = dir.join("many.data");
    LAPSE.ok([
        "import".as_ref(),
        trace.as_os_str(),
        "-o".as_ref(),
        data.as_os_str(),
    ]);
    std::fs::remove_file(&trace).unwrap();
    // (every function is in the file: the analysis sees them all)
    let v = LAPSE.report(&data, "functions", &["--limit", "3", "--sort", "calls"]);
    assert_eq!(v["rows"][0]["calls"], 1, "{v}");
    let before = children_peak_kib();
    let mut peaks = Vec::new();
    for format in EXPORT_FORMATS {
        let out = dir.join(format!("many.{format}"));
        LAPSE.ok([
            "export".as_ref(),
            "--format".as_ref(),
            format.as_ref(),
            "-o".as_ref(),
            out.as_os_str(),
            data.as_os_str(),
        ]);
        let size = std::fs::metadata(&out).unwrap().len();
        assert!(size > 0, "{format}: empty export");
        std::fs::remove_file(&out).unwrap();
        // (the maximum so far: a format's own peak when it is the largest)
        peaks.push((format, children_peak_kib()));
    }
    let peak = children_peak_kib();
    assert!(
        peak <= BOUND_KIB,
        "an export of {FUNCTIONS} functions peaked at {} MiB (bound {} MiB; the import and report before: {} MiB); running maximum after each format: {peaks:?}",
        peak / 1024,
        BOUND_KIB / 1024,
        before / 1024
    );
}
