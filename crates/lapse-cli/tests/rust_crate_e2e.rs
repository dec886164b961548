//! End to end: a Rust program using the `lapse` crate (a tiny cargo
//! project made during the test, depending on `crates/lapse` by path, built
//! offline) runs as it does without lapse, `--method auto` records it by
//! instrumentation, and its `#[lapse::profile]` functions and
//! `lapse::scope!` blocks are functions of the program's module with: a
//! CPU-time spin at the time the program measured itself, exact calls
//! (recursion included), a spawned thread of its own, a panic caught by
//! catch_unwind through profiled frames (which stay balanced: nothing to
//! repair, the parent not closed early), and the exit status passed on.

use std::path::{Path, PathBuf};
use std::process::Command;

use lapse_testkit::{row, rows, tool, Lapse, WorkDir};
use serde_json::Value;

mod probe_sources;
use probe_sources::record_like_native;

const LAPSE: Lapse = Lapse::new(env!("CARGO_BIN_EXE_lapse"));

const MAIN_RS: &str = r#"
#[repr(C)]
struct Timespec { sec: i64, nsec: i64 }
extern "C" { fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32; }

/// This thread's CPU time (CLOCK_THREAD_CPUTIME_ID), in ms.
fn cpu_ms() -> f64 {
    let mut t = Timespec { sec: 0, nsec: 0 };
    unsafe { clock_gettime(3, &mut t) };
    t.sec as f64 * 1e3 + t.nsec as f64 / 1e6
}

mod worker {
    #[lapse::profile]
    pub fn spin(ms: f64) -> u64 {
        let end = super::cpu_ms() + ms;
        let mut x = 88172645463325252u64;
        while super::cpu_ms() < end {
            for _ in 0..20000 { x ^= x << 13; x ^= x >> 7; x ^= x << 17; }
        }
        std::hint::black_box(x)
    }

    /// The CPU time spin(ms) took, measured around the call.
    pub fn timed_spin(ms: f64) -> f64 {
        let t0 = super::cpu_ms();
        spin(ms);
        super::cpu_ms() - t0
    }
}

#[lapse::profile]
fn fib(n: u32) -> u64 {
    if n < 2 { n as u64 } else { fib(n - 1) + std::hint::black_box(fib(n - 2)) }
}

struct Counter(u64);

#[lapse::profile]
impl Counter {
    fn bump(&mut self) { self.0 = std::hint::black_box(self.0 + 1); }
}

#[lapse::profile]
fn panicky(i: u32) -> u32 {
    if i == 3 { panic!("planned") }
    std::hint::black_box(i)
}

#[lapse::profile]
fn through(n: u32) -> u32 { (0..n).map(panicky).sum() }

#[lapse::profile]
fn after_catch() -> f64 { worker::timed_spin(5.0) }

#[lapse::profile]
fn thread_main() -> f64 { worker::timed_spin(30.0) }

#[lapse::profile]
fn run() -> (f64, f64) {
    let mut spun = worker::timed_spin(60.0);
    println!("fib {}", fib(15));
    let mut c = Counter(0);
    for _ in 0..10 {
        lapse::scope!("round");
        for _ in 0..100 { c.bump(); }
    }
    println!("bumps {}", c.0);
    let phase_one = {
        lapse::scope!("phase one");
        worker::timed_spin(20.0)
    };
    spun += phase_one;
    spun += std::thread::spawn(thread_main).join().unwrap();
    let r = std::panic::catch_unwind(|| through(6));
    println!("caught {}", r.is_err());
    spun += after_catch();
    (spun, phase_one)
}

fn main() {
    std::panic::set_hook(Box::new(|_| {}));
    let (spun, phase_one) = run();
    eprintln!("spun_ms {spun:.3}");
    eprintln!("phase_one_ms {phase_one:.3}");
    std::process::exit(3);
}
"#;

/// The line of `needle` in MAIN_RS (as the file written holds it).
fn line_of(needle: &str) -> u64 {
    MAIN_RS
        .lines()
        .position(|l| l.contains(needle))
        .expect("in the program") as u64
        + 1
}

/// The tiny project, built with `cargo build --release --offline` into its
/// own target directory: its directory and the binary. `None`: skip.
fn build(name: &str) -> Option<(WorkDir, PathBuf)> {
    let cargo = tool("cargo")?;
    let dir = WorkDir::new(
        env!("CARGO_TARGET_TMPDIR"),
        &format!("rust_crate_e2e-{name}"),
    );
    let lapse = Path::new(env!("CARGO_MANIFEST_DIR")).join("../lapse");
    let lapse = std::fs::canonicalize(&lapse).expect("crates/lapse");
    let manifest = format!(
        "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
         [dependencies]\nlapse = {{ path = {:?} }}\n\n\
         # not a member of any workspace around it\n[workspace]\n",
        lapse.to_str().expect("a UTF-8 path")
    );
    std::fs::create_dir_all(dir.join("src")).expect("mkdir src");
    std::fs::write(dir.join("Cargo.toml"), manifest).expect("write Cargo.toml");
    std::fs::write(dir.join("src/main.rs"), MAIN_RS).expect("write main.rs");
    let out = Command::new(cargo)
        .args(["build", "--release", "--offline", "--quiet"])
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        // (what the test's own cargo run set must not leak into this build)
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .output()
        .expect("run cargo build");
    assert!(
        out.status.success(),
        "cargo build failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let exe = dir.join("target/release/app");
    assert!(exe.is_file(), "{}", exe.display());
    Some((dir, exe))
}

fn ms(row: &Value, key: &str) -> f64 {
    row[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing in {row}"))
        / 1e6
}

/// A number the program wrote on stderr as `key value`.
fn measured(stderr: &str, key: &str) -> f64 {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("the program reports {key}: {stderr}"))
}

/// The number `lapse info` gives on the line starting with `key`.
fn info_count(info: &str, key: &str) -> u64 {
    info.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l[key.len()..].split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {info}"))
}

fn children(node: &Value) -> &[Value] {
    node["children"].as_array().map_or(&[], Vec::as_slice)
}

fn child<'a>(node: &'a Value, name: &str) -> Option<&'a Value> {
    children(node).iter().find(|c| c["function"] == name)
}

/// `a` within `rel` (a fraction) of `b`, plus `abs` ms.
fn close(what: &str, a: f64, b: f64, rel: f64, abs: f64) {
    assert!(
        (a - b).abs() <= rel * b + abs,
        "{what}: {a:.2} ms recorded, {b:.2} ms measured by the program"
    );
}

#[test]
fn a_program_using_the_lapse_crate_is_recorded() {
    let Some((dir, exe)) = build("whole") else {
        return;
    };
    let data = dir.join("app.lapse");
    let Some((status, stderr)) =
        record_like_native(&dir, &exe, &[], &["--method", "auto"], &data, "app")
    else {
        return;
    };
    assert_eq!(status, 3, "exit status passed through");
    let v = LAPSE.in_dir(&dir).report(&data, "functions", &[]);
    assert_eq!(
        v["method"], "instrumentation",
        "--method auto finds the probes"
    );

    // exact calls; fib(15) makes 2 * fib(16) - 1 calls
    for (name, calls) in [
        ("app::run", 1),
        ("app::worker::spin", 4),
        ("app::fib", 1973),
        ("app::Counter::bump", 1000),
        ("round", 10),
        ("phase one", 1),
        ("app::thread_main", 1),
        ("app::through", 1),
        // 0, 1, 2 return; 3 panics (the 6 of the catch_unwind stop there)
        ("app::panicky", 4),
        ("app::after_catch", 1),
    ] {
        let r = row(&v, name);
        assert_eq!(r["calls"], calls, "calls of {name}: {r}");
        assert_eq!(
            r["module"], "app",
            "{name} is a function of the program: {r}"
        );
        assert_eq!(
            r["open_calls"], 0,
            "{name}: every call closed by its own exit"
        );
    }
    // nothing else of the program's (no unnamed site, main is not profiled)
    let ours = rows(&v).iter().filter(|r| r["module"] == "app").count();
    assert_eq!(ours, 10, "{v}");

    // the site's source position: the `fn` line, the scope! line
    let spin = row(&v, "app::worker::spin");
    assert_eq!(spin["source_file"], "src/main.rs");
    assert_eq!(spin["line"], line_of("pub fn spin"));
    assert_eq!(
        row(&v, "phase one")["line"],
        line_of("scope!(\"phase one\")")
    );

    // the CPU-time spin's application time is what the program measured
    // (a missing or misplaced exit would add or lose whole milliseconds)
    let spun = measured(&stderr, "spun_ms ");
    close("spin", ms(spin, "application_inclusive_ns"), spun, 0.1, 3.0);
    close(
        "spin exclusive",
        ms(spin, "application_exclusive_ns"),
        spun,
        0.1,
        3.0,
    );
    // a scope holds the block's time from the scope! on: its spin
    let phase = row(&v, "phase one");
    let phase_one = measured(&stderr, "phase_one_ms ");
    close(
        "phase one",
        ms(phase, "application_inclusive_ns"),
        phase_one,
        0.1,
        2.0,
    );
    assert!(ms(phase, "application_exclusive_ns") < 1.0, "{phase}");
    // recursion: counted once in inclusive time, within the run
    let run = row(&v, "app::run");
    let fib = row(&v, "app::fib");
    assert!(ms(fib, "elapsed_inclusive_ns") <= ms(run, "elapsed_inclusive_ns"));
    assert!(ms(fib, "max_elapsed_inclusive_ns") >= ms(fib, "avg_elapsed_inclusive_ns"));

    // the spawned thread is a thread of its own, its calls a root there
    let threads = LAPSE.in_dir(&dir).report(&data, "threads", &[]);
    assert_eq!(rows(&threads).len(), 2, "{threads}");
    let tree = LAPSE.in_dir(&dir).report(&data, "calltree", &[]);
    let roots = tree["roots"].as_array().expect("roots");
    let names: Vec<&Value> = roots.iter().map(|r| &r["function"]).collect();
    assert_eq!(names.len(), 2, "run and thread_main: {names:?}");
    let run_node = roots
        .iter()
        .find(|r| r["function"] == "app::run")
        .expect("run is a root");
    let thread_node = roots
        .iter()
        .find(|r| r["function"] == "app::thread_main")
        .expect("thread_main is a root of its thread");
    assert!(child(thread_node, "app::worker::spin").is_some());

    // the caught panic: through and panicky ended at the catch, run went on
    let kids: Vec<&Value> = children(run_node).iter().map(|c| &c["function"]).collect();
    for name in [
        "app::through",
        "app::after_catch",
        "phase one",
        "round",
        "app::fib",
    ] {
        assert!(child(run_node, name).is_some(), "run > {name}: {kids:?}");
    }
    let through = child(run_node, "app::through").expect("run > through");
    assert_eq!(through["calls"], 1);
    assert_eq!(
        child(through, "app::panicky").map(|p| &p["calls"]),
        Some(&4.into())
    );
    assert!(
        ms(row(&v, "app::through"), "elapsed_inclusive_ns") < 2.0,
        "through ended at the catch: {through}"
    );
    // (run was still open after the catch: after_catch is its child, whole)
    let after = child(run_node, "app::after_catch").expect("run > after_catch");
    assert_eq!(after["calls"], 1);
    assert!(ms(after, "application_inclusive_ns") >= 4.0, "{after}");
    let data_str = data.to_str().expect("a UTF-8 path");
    let info = LAPSE.in_dir(&dir).stdout(["info", data_str]);
    for key in ["lost:", "unmatched:", "repaired:"] {
        assert_eq!(info_count(&info, key), 0, "{key}\n{info}");
    }
}

#[test]
fn record_time_filters_apply_to_the_crates_probes() {
    let Some((dir, exe)) = build("filtered") else {
        return;
    };
    let data = dir.join("app.lapse");
    let options = ["--filter", "^app::fib$", "--exclude", "bump"];
    let Some((status, _)) = record_like_native(&dir, &exe, &[], &options, &data, "app") else {
        return;
    };
    assert_eq!(status, 3, "exit status passed through");
    let v = LAPSE.in_dir(&dir).report(&data, "functions", &[]);
    let names: Vec<&str> = rows(&v)
        .iter()
        .filter_map(|r| r["function"].as_str())
        .collect();
    assert_eq!(names, ["app::fib"], "only the filter's match: {names:?}");
    assert_eq!(row(&v, "app::fib")["calls"], 1973);
}
