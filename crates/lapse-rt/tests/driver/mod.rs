//! Builds a C driver against the runtime's sources (`csrc/`): the tests of
//! this directory test one piece of the runtime alone through one.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `source` written as `driver.c` in `dir` and compiled with `csrc/` on
/// the include path and the runtime files `with` (names in `csrc/`) beside
/// it, into `dir/name`.
pub fn build(dir: &Path, name: &str, source: &str, with: &[&str]) -> PathBuf {
    let csrc = Path::new(env!("CARGO_MANIFEST_DIR")).join("csrc");
    let driver = dir.join("driver.c");
    std::fs::write(&driver, source).unwrap();
    let exe = dir.join(name);
    let out = Command::new("cc")
        .args(["-O2", "-std=gnu11", "-Wall", "-I"])
        .arg(&csrc)
        .arg(&driver)
        .args(with.iter().map(|f| csrc.join(f)))
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("a C compiler (cc) runs");
    assert!(
        out.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// What the driver printed, run with `args` (it must succeed).
pub fn output(exe: &Path, args: &[String]) -> String {
    let out = Command::new(exe).args(args).output().unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}
