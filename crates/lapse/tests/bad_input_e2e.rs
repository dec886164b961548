//! Inputs that are not files to read (issue #13, item 15) and the error line
//! a user sees for them (item 16): `report`, `info` and `import` refuse a
//! FIFO, a directory or a device at once with one line and a non-zero exit,
//! and an I/O or JSON error names its cause once.
//!
//! Every run has a deadline, so a regression that blocks (opening a FIFO
//! waits for a writer) fails the test instead of hanging the suite.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use lapse_testkit::WorkDir;

/// Runs `lapse args` in `dir`; kills it and fails if it is still running
/// after `DEADLINE`.
fn lapse(dir: &Path, args: &[&str]) -> Output {
    const DEADLINE: Duration = Duration::from_secs(30);
    let mut child = Command::new(env!("CARGO_BIN_EXE_lapse"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run lapse");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait for lapse").is_some() {
            return child.wait_with_output().expect("lapse output");
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let out = child.wait_with_output().expect("lapse output");
            panic!(
                "lapse {args:?} still running after {DEADLINE:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(rc, 0, "mkfifo {}", path.display());
}

/// Fails unless `out` is a failure with exactly one line on stderr holding
/// `needle`, no panic, and nothing on stdout.
#[track_caller]
fn one_line_error(out: &Output, needle: &str) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "succeeded: {err}");
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.starts_with("lapse: error: "), "{err}");
    assert!(err.contains(needle), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    err
}

#[test]
fn a_fifo_is_refused_not_waited_on() {
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "bad-input-fifo");
    mkfifo(&dir.join("pipe"));
    for args in [
        &["report", "pipe"][..],
        &["report", "pipe", "--view", "functions"],
        &["info", "pipe"],
        &["import", "pipe", "-o", "out.data"],
        &["export", "pipe", "--format", "collapsed", "-o", "out.txt"],
    ] {
        let out = lapse(&dir, args);
        one_line_error(&out, "pipe: is a FIFO (named pipe), not a regular file");
    }
    assert!(!dir.join("out.data").exists());
}

#[test]
fn directories_and_devices_are_refused() {
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "bad-input-special");
    std::fs::create_dir(dir.join("sub")).unwrap();
    for cmd in ["report", "info", "import"] {
        let out = lapse(&dir, &[cmd, "sub"]);
        one_line_error(&out, "sub: is a directory, not a regular file");
        let out = lapse(&dir, &[cmd, "/dev/zero"]);
        one_line_error(&out, "/dev/zero: is a character device, not a regular file");
    }
}

#[test]
fn a_cause_is_said_once() {
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "bad-input-cause");
    let once = |err: &str, cause: &str| {
        assert_eq!(err.matches(cause).count(), 1, "{err}");
    };
    for args in [
        &["info", "missing.data"][..],
        &["report", "missing.data"],
        &["import", "missing.json"],
    ] {
        let err = one_line_error(&lapse(&dir, args), "missing.");
        once(&err, "No such file or directory");
    }
    std::fs::write(dir.join("broken.json"), "{\"traceEvents\": [").unwrap();
    let err = one_line_error(&lapse(&dir, &["import", "broken.json"]), "not valid JSON");
    once(&err, "EOF while parsing");
}
