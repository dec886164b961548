//! What lapse's end-to-end tests share.
//!
//! Tests that need something the machine may lack (gcc, perf events, a
//! consumer such as `go tool pprof` or Chromium) call [`skip`] when it is
//! missing: on a developer's machine that prints a `SKIPPED` line in the
//! test run's output (past the test harness' capture, so it shows even
//! when the test passes) and the test passes; with `LAPSE_E2E=require`
//! (which `.ci/run` sets after installing every tool) it fails, so CI
//! cannot pass by skipping.
//!
//! [`Lapse`] runs the binary (in a directory, with variables) and reads its
//! report as JSON; [`rows`], [`row`], [`printed`] and [`stderr`] read what
//! lapse or a test program said.

mod runner;

pub use runner::{expect_rows, printed, row, rows, stderr, Lapse, INSTRUMENTED};

use std::fmt::Display;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The environment variable that turns skips into failures.
pub const REQUIRE_ENV: &str = "LAPSE_E2E";

/// True when `LAPSE_E2E=require`: every end-to-end test must really run.
pub fn required() -> bool {
    std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "require")
}

/// Skips the calling test with a message (returns `None` for `let ... else`),
/// or fails it when [`required`].
#[track_caller]
pub fn skip<T>(why: impl Display) -> Option<T> {
    if required() {
        panic!("{REQUIRE_ENV}=require, but this test would skip: {why}");
    }
    // Straight to the process's stderr, not through eprintln!, which the
    // harness captures (and shows only for failed tests): a skipped test
    // reads `ok`, and this line says it did not really run.
    let test = std::thread::current()
        .name()
        .unwrap_or("an end-to-end test")
        .to_owned();
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED {test}: {why}");
    None
}

/// `Some(())` when the test runs as root; else a skip saying `why` root
/// is needed (what the test does that only root may).
#[track_caller]
pub fn root(why: &str) -> Option<()> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    // "Uid: real effective saved fs": the effective one decides.
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1)?.parse::<u32>().ok());
    match euid {
        Some(0) => Some(()),
        _ => skip(format!("{why}: needs root")),
    }
}

/// The path of program `name` on PATH, or a skip.
#[track_caller]
pub fn tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| is_executable(p))
    });
    match found {
        Some(p) => Some(p),
        None => skip(format!("{name} is not installed")),
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// True when lapse's stderr says perf events are not to be had here (the
/// kernel refused perf_event_open, or the event does not exist).
pub fn perf_refused(stderr: &str) -> bool {
    stderr.contains("perf_event_open") || stderr.contains("not available")
}

/// A per-test directory under the test target's tmp dir, removed when the
/// test passes and kept (to look at the program and the recording) when it fails.
pub struct WorkDir(PathBuf);

impl WorkDir {
    /// `<CARGO_TARGET_TMPDIR>/<name>-<pid>`, emptied first. Pass
    /// `env!("CARGO_TARGET_TMPDIR")` as `tmp`.
    pub fn new(tmp: &str, name: &str) -> WorkDir {
        let dir = Path::new(tmp).join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create test dir");
        WorkDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl std::ops::Deref for WorkDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for WorkDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A directory under the system's temporary directory that any user may
/// use, holding a copy of the `lapse` binary at `exe` (pass
/// `env!("CARGO_BIN_EXE_lapse")`): for running lapse as another user, who
/// may not reach the build tree (a checkout under a private home).
pub fn shared_dir_with_lapse(exe: &str, name: &str) -> (WorkDir, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let tmp = std::env::temp_dir();
    let dir = WorkDir::new(tmp.to_str().expect("utf-8"), name);
    std::fs::set_permissions(&*dir, std::fs::Permissions::from_mode(0o777)).expect("chmod dir");
    let lapse = dir.join("lapse");
    std::fs::copy(exe, &lapse).expect("copy lapse");
    std::fs::set_permissions(&lapse, std::fs::Permissions::from_mode(0o755)).expect("chmod lapse");
    (dir, lapse)
}

/// Compiles `source` into `dir/name` with `compiler` (`gcc`, `g++`,
/// `clang`) and `flags`; `None` (a skip) when the compiler is missing, a
/// panic with its messages when it fails.
#[track_caller]
pub fn compile(
    dir: &Path,
    compiler: &str,
    name: &str,
    source: &str,
    flags: &[&str],
) -> Option<PathBuf> {
    let ext = if compiler.contains("++") { "cpp" } else { "c" };
    let src = dir.join(format!("{name}.{ext}"));
    std::fs::write(&src, source).expect("write source");
    let out = dir.join(name);
    let result = Command::new(compiler)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .args(flags)
        .output();
    match result {
        Ok(o) if o.status.success() => Some(out),
        Ok(o) => panic!(
            "{compiler} failed on {name}: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => skip(format!("{compiler} is not available ({e})")),
    }
}

/// Panics with the command's stderr unless it succeeded; returns it.
#[track_caller]
pub fn ok(out: Output) -> Output {
    assert!(
        out.status.success(),
        "failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// How long an end-to-end test waits for something that must happen (a
/// file to appear, a process to end) before it calls it a hang. Generous on
/// purpose: it guards against hangs, it measures nothing, and a busy CI
/// machine may take many times as long as a quiet one.
pub const HANG_GUARD: std::time::Duration = std::time::Duration::from_secs(300);

/// Polls `done` every 20 ms until it is true; panics naming `what` after
/// [`HANG_GUARD`].
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(
            start.elapsed() < HANG_GUARD,
            "{what}: still waiting after {HANG_GUARD:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// True once process `pid` is gone (or a zombie nobody reaps).
pub fn ended(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())) {
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

/// Every format `lapse export` writes (html last but one: the slowest).
pub const EXPORT_FORMATS: [&str; 9] = [
    "collapsed",
    "flamegraph",
    "speedscope",
    "chrome",
    "pprof",
    "callgrind",
    "firefox",
    "html",
    "perfetto",
];

/// Stops process `pid` (the test's own child: a recorder) for `time`, as a
/// busy machine can starve it; it is continued even when the test fails
/// meanwhile.
pub fn stop_for(pid: u32, time: std::time::Duration) {
    let signal = |sig: &str| {
        let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
    };
    struct Continue<F: Fn()>(F);
    impl<F: Fn()> Drop for Continue<F> {
        fn drop(&mut self) {
            (self.0)();
        }
    }
    let _continue = Continue(|| signal("-CONT"));
    signal("-STOP");
    std::thread::sleep(time);
}

/// Busy loops (`sh -c 'while :; do :; done'`) while alive, killed when
/// dropped: a busy machine for a test that must hold on one.
pub struct Hogs(Vec<std::process::Child>);

impl Hogs {
    /// `n` busy loops (fewer if some cannot be started).
    pub fn start(n: usize) -> Hogs {
        Hogs(
            (0..n)
                .filter_map(|_| {
                    std::process::Command::new("sh")
                        .args(["-c", "while :; do :; done"])
                        .stdout(std::process::Stdio::null())
                        .spawn()
                        .ok()
                })
                .collect(),
        )
    }

    /// One busy loop on every CPU.
    pub fn everywhere() -> Hogs {
        Hogs::start(std::thread::available_parallelism().map_or(2, |n| n.get()))
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for hog in &mut self.0 {
            let _ = hog.kill();
            let _ = hog.wait();
        }
    }
}
