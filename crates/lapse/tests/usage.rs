//! The macros as a program's crate sees them, built by cargo during the
//! test (offline, no registry): every misuse is a `compile_error!` with its
//! message at the offending line (never a panic of the macro), and correct
//! use builds cleanly in an edition-2024 crate that denies warnings and
//! forbids unsafe code.

use std::path::{Path, PathBuf};
use std::process::Command;

use lapse_testkit::{tool, WorkDir};

const MISUSES: &str = r#"
struct S;

#[lapse::profile]
const fn c() -> u8 { 1 } // E: cannot go on a `const fn`

#[lapse::profile]
async fn a() {} // E: does not support `async fn`

#[lapse::profile]
struct T; // E: goes on a function, a method or an impl block

#[lapse::profile(nmae = "x")] // E: takes no argument, `name = "..."`
fn f() {}

#[lapse::profile(name = 5)] // E: the name is a string literal
fn g() {}

#[lapse::profile(name = "")] // E: must not be empty
fn e() {}

#[lapse::profile(skip)] // E: `skip` is for a method of an impl block
fn h() {}

#[lapse::profile(name = "x")] // E: names one function
impl S {}

#[lapse::profile]
impl S {
    #[lapse::profile(bogus)] // E: takes no argument, `name = "..."`
    fn m(&self) {}
}

trait Tr {
    #[lapse::profile]
    fn decl(&self); // E: needs a function with a body
}

fn main() {
    let _ = (c(), a(), f(), g(), e(), h(), S.m(), T);
}
"#;

const GOOD: &str = r#"
#![forbid(unsafe_code)]
#![deny(warnings)]

use std::fmt;

/// A profiled function in an edition-2024 crate.
#[lapse::profile]
pub fn add(a: u32, b: u32) -> u32 {
    lapse::scope!("adding");
    a + b
}

pub struct Meters(pub f64);

#[lapse::profile]
impl fmt::Display for Meters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} m", self.0)
    }
}

#[lapse::profile]
impl Meters {
    pub const fn zero() -> Meters {
        Meters(0.0)
    }

    pub async fn later(&self) -> f64 {
        self.0
    }

    #[lapse::profile(name = "Meters::double")]
    pub fn double(self) -> Meters {
        Meters(self.0 * 2.0)
    }
}

fn main() {
    let _ = Meters::zero().later();
    println!("{} {}", add(1, 2), Meters(1.5).double());
    assert!(!lapse::runtime_loaded());
}
"#;

/// A crate named `name` with `main` as its src/main.rs, depending on
/// `crates/lapse` by path; cargo's result.
fn cargo_build(dir: &Path, name: &str, edition: &str, main: &str) -> std::process::Output {
    let project = dir.join(name);
    std::fs::create_dir_all(project.join("src")).expect("mkdir");
    let lapse = std::fs::canonicalize(env!("CARGO_MANIFEST_DIR")).expect("crates/lapse");
    let manifest = format!(
        "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"{edition}\"\n\n\
         [dependencies]\nlapse = {{ path = {:?} }}\n\n[workspace]\n",
        lapse.to_str().expect("a UTF-8 path")
    );
    std::fs::write(project.join("Cargo.toml"), manifest).expect("write Cargo.toml");
    std::fs::write(project.join("src/main.rs"), main).expect("write main.rs");
    Command::new(tool("cargo").expect("checked by the caller"))
        .args(["build", "--offline", "--message-format", "short"])
        .current_dir(&project)
        // (both projects share one target directory: lapse is built once)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .output()
        .expect("run cargo")
}

fn exe(dir: &Path, name: &str) -> PathBuf {
    dir.join("target/debug").join(name)
}

#[test]
fn misuse_is_a_compile_error_and_correct_use_builds_clean() {
    if tool("cargo").is_none() {
        return;
    }
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "lapse-usage");

    let out = cargo_build(&dir, "misuses", "2021", MISUSES);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "misuses must not build: {stderr}");
    assert!(
        !stderr.contains("panicked"),
        "the macro never panics: {stderr}"
    );
    for (i, line) in MISUSES.lines().enumerate() {
        let Some((_, expected)) = line.split_once("// E: ") else {
            continue;
        };
        let at = format!("src/main.rs:{}:", i + 1);
        assert!(
            stderr
                .lines()
                .any(|l| l.starts_with(&at) && l.contains("error") && l.contains(expected)),
            "an error at {at} saying {expected:?}; cargo said:\n{stderr}"
        );
    }
    // no other error: each misused item was given back as it was
    let marked: Vec<&str> = MISUSES.lines().collect();
    for l in stderr.lines().filter(|l| l.contains(": error")) {
        let Some(n) = l
            .strip_prefix("src/main.rs:")
            .and_then(|r| r.split(':').next())
            .and_then(|n| n.parse::<usize>().ok())
        else {
            continue;
        };
        assert!(
            marked.get(n - 1).is_some_and(|m| m.contains("// E: ")),
            "an error where none belongs: {l}\n{stderr}"
        );
    }

    let out = cargo_build(&dir, "good", "2024", GOOD);
    assert!(
        out.status.success(),
        "correct use builds without a warning: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(exe(&dir, "good")).output().expect("run it");
    assert!(run.status.success());
    assert_eq!(String::from_utf8_lossy(&run.stdout), "3 3 m\n");
}
