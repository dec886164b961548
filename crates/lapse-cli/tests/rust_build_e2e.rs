//! End to end: a Rust program built by `lapse build` during the test (a tiny
//! cargo project with no dependencies, built offline) runs as it does
//! without lapse, and its recording holds every call of its own functions:
//! a CPU-time spin at the time the program measured itself, a sleep that is
//! elapsed but not application time, a recursion with its exact calls, a
//! spawned thread, a panic caught by catch_unwind through recorded frames
//! (which stay balanced), and the program's exit status, also 101 for a
//! panic nobody catches.

use std::path::PathBuf;
use std::process::Command;

use lapse_testkit::{tool, WorkDir};
use serde_json::Value;

mod probe_sources;
use probe_sources::*;

const CARGO_TOML: &str = r#"[package]
name = "app"
version = "0.1.0"
edition = "2021"

[workspace]
"#;

const MAIN_RS: &str = r#"
use std::time::Duration;

#[repr(C)]
struct Timespec { sec: i64, nsec: i64 }
extern "C" { fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32; }

/// This thread's CPU time (CLOCK_THREAD_CPUTIME_ID).
fn cpu_ms() -> f64 {
    let mut t = Timespec { sec: 0, nsec: 0 };
    unsafe { clock_gettime(3, &mut t) };
    t.sec as f64 * 1e3 + t.nsec as f64 / 1e6
}

#[inline(never)]
fn spin(ms: f64) -> u64 {
    let end = cpu_ms() + ms;
    let mut x = 88172645463325252u64;
    while cpu_ms() < end {
        for _ in 0..20000 { x ^= x << 13; x ^= x >> 7; x ^= x << 17; }
    }
    std::hint::black_box(x)
}

#[inline(never)]
fn fib(n: u32) -> u64 {
    if n < 2 { n as u64 } else { fib(n - 1) + std::hint::black_box(fib(n - 2)) }
}

#[inline(never)]
fn sleepy() { std::thread::sleep(Duration::from_millis(200)); }

#[inline(never)]
fn worker() -> f64 {
    let t0 = cpu_ms();
    std::hint::black_box(spin(30.0));
    cpu_ms() - t0
}

#[inline(never)]
fn panicky(i: u32) -> u32 {
    if i == 3 { panic!("planned") }
    std::hint::black_box(i)
}

#[inline(never)]
fn through(n: u32) -> u32 { (0..n).map(panicky).sum() }

#[inline(never)]
fn after_catch() -> f64 {
    let t0 = cpu_ms();
    std::hint::black_box(spin(5.0));
    cpu_ms() - t0
}

fn main() {
    std::panic::set_hook(Box::new(|_| {}));
    let t0 = cpu_ms();
    spin(60.0);
    let mut spun = cpu_ms() - t0;
    println!("fib {}", fib(20));
    sleepy();
    spun += std::thread::spawn(worker).join().unwrap();
    let r = std::panic::catch_unwind(|| through(6));
    println!("caught {}", r.is_err());
    spun += after_catch();
    eprintln!("spun_ms {spun:.3}");
    if std::env::args().nth(1).as_deref() == Some("panic") {
        through(6);
    }
    std::process::exit(3);
}
"#;

/// The project built by `lapse build --release`: its directory and the
/// binary's path as `lapse build` printed it. `None`: skip.
fn build(name: &str) -> Option<(WorkDir, PathBuf)> {
    let dir = project(name)?;
    let (printed, stderr) = lapse_build(&dir, &["--release", "--offline"]);
    assert_eq!(
        printed, "target/lapse/release/app",
        "lapse build prints the binary it built ({stderr})"
    );
    let exe = dir.join(&printed);
    assert!(exe.is_file(), "{}", exe.display());
    // its own target directory: an ordinary build is not touched
    assert!(!dir.join("target/release").exists());
    Some((dir, exe))
}

/// The tiny project (with an example too) in a fresh directory.
fn project(name: &str) -> Option<WorkDir> {
    tool("cargo")?;
    let dir = WorkDir::new(
        env!("CARGO_TARGET_TMPDIR"),
        &format!("rust_build_e2e-{name}"),
    );
    std::fs::create_dir_all(dir.join("src")).expect("mkdir src");
    std::fs::create_dir_all(dir.join("examples")).expect("mkdir examples");
    std::fs::write(dir.join("Cargo.toml"), CARGO_TOML).expect("write Cargo.toml");
    std::fs::write(dir.join("src/main.rs"), MAIN_RS).expect("write main.rs");
    std::fs::write(
        dir.join("examples/hello.rs"),
        "#[inline(never)] fn greet() -> &'static str { \"hello\" }\nfn main() { println!(\"{}\", greet()); }\n",
    )
    .expect("write the example");
    Some(dir)
}

/// `lapse build ARGS` in `dir`: what it printed on stdout and stderr.
fn lapse_build(dir: &WorkDir, args: &[&str]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_lapse"))
        .arg("build")
        .args(args)
        .current_dir(dir)
        // (what the test's own cargo run set must not leak into this build)
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .output()
        .expect("run lapse build");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "lapse build failed: {stderr}");
    (
        String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        stderr,
    )
}

fn spun_ms(stderr: &str) -> f64 {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("spun_ms "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("the program reports its spin: {stderr}"))
}

#[test]
fn a_rust_program_built_by_lapse_build_is_recorded_whole() {
    let Some((dir, exe)) = build("whole") else {
        return;
    };
    let data = dir.join("app.lapse");
    let Some((status, stderr)) = record_like_native(&dir, &exe, &[], &[], &data, "app") else {
        return;
    };
    assert_eq!(status, 3, "exit status passed through");
    let r = Run {
        dir,
        data,
        source: Sancov,
    };
    let v = report(&r, "functions", &[]);
    assert_eq!(
        v["method"], "instrumentation",
        "--method auto finds the probes"
    );
    // every call of the program's own functions, exactly
    assert_calls(
        &r,
        &v,
        &[
            ("app::main", 1),
            ("app::fib", 21891),
            ("app::sleepy", 1),
            ("app::worker", 1),
            ("app::spin", 3),
            ("app::through", 1),
            // 0, 1, 2 return; 3 panics (the catch_unwind's 6 stop there)
            ("app::panicky", 4),
            ("app::after_catch", 1),
        ],
    );
    for name in ["app::fib", "app::spin", "app::main"] {
        assert_eq!(row(&v, name)["module"], "app", "{name} is the program's");
    }
    // --function matches the path
    let fib = report(&r, "functions", &["--function", "^app::fib$"]);
    assert_eq!(rows(&fib).len(), 1, "{fib}");
    // CPU-time spin: its application time is the time the program measured
    let spin = ms(row(&v, "app::spin"), "application_inclusive_ns");
    let measured = spun_ms(&stderr);
    assert!(
        spin >= 0.9 * measured && spin <= 1.1 * measured + 3.0,
        "spin: {spin:.1} ms recorded, {measured:.1} ms measured by the program"
    );
    // sleeping is elapsed, not application time
    let sleepy = row(&v, "app::sleepy");
    assert!(ms(sleepy, "elapsed_inclusive_ns") >= 195.0, "{sleepy}");
    assert!(ms(sleepy, "application_inclusive_ns") < 10.0, "{sleepy}");
    // the spawned thread is a thread of its own
    let threads = report(&r, "threads", &[]);
    assert_eq!(rows(&threads).len(), 2, "{threads}");
    assert_inclusive_within_threads(&r, &v);
    // the caught panic left main's frame alone: after_catch is main's child,
    // and the frames the panic went through end at the catch
    let roots = roots(&r);
    let mut todo: Vec<&Value> = roots.iter().collect();
    let mut main = None;
    while let Some(n) = todo.pop() {
        if n["function"] == "app::main" {
            main = Some(n);
            break;
        }
        todo.extend(children(n));
    }
    let main = main.expect("app::main in the call tree");
    assert!(
        child(main, "app::after_catch").is_some(),
        "main > after_catch: {:?}",
        children(main)
            .iter()
            .map(|c| &c["function"])
            .collect::<Vec<_>>()
    );
    let through = row(&v, "app::through");
    assert_eq!(through["open_calls"], 0, "through was closed at the catch");
    assert!(
        ms(through, "elapsed_inclusive_ns")
            < ms(row(&v, "app::after_catch"), "elapsed_inclusive_ns"),
        "through ended at the catch, before after_catch's 5 ms: {through}"
    );
    let i = info(&r);
    for key in ["lost:", "unmatched:"] {
        assert_eq!(info_count(&i, key), 0, "{key}\n{i}");
    }
}

#[test]
fn a_panic_nobody_catches_exits_101_and_keeps_what_came_before() {
    let Some((dir, exe)) = build("panic") else {
        return;
    };
    let data = dir.join("panic.lapse");
    let Some((status, _)) = record_like_native(&dir, &exe, &["panic"], &[], &data, "app panic")
    else {
        return;
    };
    assert_eq!(status, 101, "Rust's exit status for a panic");
    let r = Run {
        dir,
        data,
        source: Sancov,
    };
    let v: Value = report(&r, "functions", &[]);
    assert_calls(
        &r,
        &v,
        &[
            ("app::fib", 21891),
            ("app::through", 2),
            ("app::panicky", 8),
        ],
    );
}

#[test]
fn cargo_arguments_pass_through_and_the_binaries_run_without_lapse() {
    let Some(dir) = project("args") else {
        return;
    };
    let (printed, stderr) = lapse_build(&dir, &["--offline", "--example", "hello"]);
    assert_eq!(printed, "target/lapse/debug/examples/hello", "{stderr}");
    let out = Command::new(dir.join(&printed))
        .output()
        .expect("run the example");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
    assert!(out.status.success());
    let (printed, stderr) = lapse_build(&dir, &["--offline", "-p", "app", "--bin", "app"]);
    assert_eq!(printed, "target/lapse/debug/app", "{stderr}");
    // outside a cargo project (not under this workspace either): one line,
    // cargo's reason
    let elsewhere = WorkDir::new(
        std::env::temp_dir().to_str().expect("a UTF-8 temp dir"),
        "lapse-rust_build_e2e-nowhere",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_lapse"))
        .args(["build", "--offline"])
        .current_dir(&elsewhere)
        .output()
        .expect("run lapse build");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("Cargo.toml"), "{stderr}");
}
