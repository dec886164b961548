//! End to end: a word count in iterator chains built by `lapse build
//! --release` during the test, once as cargo's release profile has it and
//! once with fat LTO. Either way LLVM goes on optimising after it put a
//! guard at each function's entry: LTO inlines functions into `main`,
//! guards and all, and a function with nothing else to do (a generic
//! `drop`) jumps to the hook, which then returns into its caller. Neither is
//! a call of the function around it: one row per function, `main` called
//! once, an `#[inline(never)]` function its exact count, the callers view
//! agreeing with the functions view, and the guards that fired away from an
//! entry counted in `lapse info` and the session.

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

/// Words of the text, passes over it: `tally` is called WORDS × PASSES times.
const WORDS: u64 = 20_000;
const PASSES: u64 = 3;

const MAIN_RS: &str = r#"
use std::collections::HashMap;

const WORDS: usize = 20_000;
const PASSES: usize = 3;

/// A text of `n` words from a small vocabulary.
fn text(n: usize) -> String {
    let words = ["Alpha", "beta,", "gamma", "delta.", "epsilon", "zeta", "eta"];
    let mut x = 12345u32;
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(1103515245).wrapping_add(12345);
            words[(x >> 16) as usize % words.len()]
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Small enough to be inlined into main.
fn normalize(w: &str) -> String {
    w.chars().filter(|c| c.is_alphanumeric()).map(|c| c.to_ascii_lowercase()).collect()
}

fn is_vowel(c: char) -> bool {
    matches!(c, 'a' | 'e' | 'i' | 'o' | 'u')
}

#[inline(never)]
fn tally(counts: &mut HashMap<String, usize>, word: String) {
    *counts.entry(word).or_insert(0) += 1;
}

fn main() {
    let t = text(WORDS);
    let mut counts = HashMap::new();
    for _ in 0..PASSES {
        for w in t.split_whitespace() {
            tally(&mut counts, normalize(w));
        }
    }
    let vowels: usize = t
        .split_whitespace()
        .map(|w| w.chars().filter(|&c| is_vowel(c)).count())
        .sum();
    let longest = t.split(' ').map(str::len).max().unwrap_or(0);
    let mut top: Vec<_> = counts.into_iter().collect();
    top.sort();
    println!("{top:?} {vowels} {longest}");
}
"#;

/// The project built by `lapse build --release` (`lto`: with fat LTO) in a
/// fresh directory: its directory and binary. `None`: skip.
fn build(name: &str, lto: bool) -> Option<(WorkDir, PathBuf)> {
    tool("cargo")?;
    let dir = WorkDir::new(
        env!("CARGO_TARGET_TMPDIR"),
        &format!("rust_inline_e2e-{name}"),
    );
    std::fs::create_dir_all(dir.join("src")).expect("mkdir src");
    std::fs::write(dir.join("Cargo.toml"), CARGO_TOML).expect("write Cargo.toml");
    std::fs::write(dir.join("src/main.rs"), MAIN_RS).expect("write main.rs");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lapse"));
    cmd.args(["build", "--release", "--offline"])
        .current_dir(&dir)
        // (what the test's own cargo run set must not leak into this build)
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .env_remove("CARGO_PROFILE_RELEASE_LTO");
    if lto {
        cmd.env("CARGO_PROFILE_RELEASE_LTO", "fat");
    }
    let out = cmd.output().expect("run lapse build");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "lapse build failed: {stderr}");
    let exe = dir.join(String::from_utf8_lossy(&out.stdout).trim());
    assert!(exe.is_file(), "{} ({stderr})", exe.display());
    Some((dir, exe))
}

/// Builds and records the program; the functions view and the run.
fn recorded(name: &str, lto: bool) -> Option<(Run, Value)> {
    let (dir, exe) = build(name, lto)?;
    let data = dir.join("app.lapse");
    record_like_native(&dir, &exe, &[], &[], &data, name)?;
    let r = Run {
        dir,
        data,
        source: Sancov,
    };
    let v = report(&r, "functions", &[]);
    Some((r, v))
}

/// Each function (name and module) has one row.
fn assert_one_row_per_function(v: &Value) {
    let mut seen = std::collections::HashMap::new();
    for r in rows(v) {
        let key = (r["function"].to_string(), r["module"].to_string());
        *seen.entry(key).or_insert(0) += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, &n)| n > 1).collect();
    assert!(twice.is_empty(), "functions with several rows: {twice:?}");
}

/// The callers view of `name` agrees with the functions view: its own row
/// has the same calls, and its callers' calls add up to them.
fn assert_callers_agree(r: &Run, v: &Value, name: &str) {
    let focus = report(r, "callers", &["--function", &format!("^{name}$")]);
    let calls = row(v, name)["calls"].as_u64().expect("calls");
    assert_eq!(
        focus["function"]["calls"].as_u64(),
        Some(calls),
        "{name}: callers view's own row against the functions view: {focus}"
    );
    let by_callers: u64 = focus["callers"]
        .as_array()
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .map(|c| c["calls"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(by_callers, calls, "{name}: calls by its callers: {focus}");
}

fn check(name: &str, lto: bool) -> Option<(Run, Value)> {
    let (r, v) = recorded(name, lto)?;
    assert_one_row_per_function(&v);
    assert_calls(&r, &v, &[("app::main", 1), ("app::tally", WORDS * PASSES)]);
    assert_callers_agree(&r, &v, "app::tally");
    assert_callers_agree(&r, &v, "app::main");
    let i = info(&r);
    for key in ["lost:", "unmatched:", "open calls:"] {
        assert_eq!(info_count(&i, key), 0, "{key}\n{i}");
    }
    Some((r, v))
}

#[test]
fn inlined_code_is_no_call_of_the_function_it_is_in() {
    let Some((r, v)) = check("lto", true) else {
        return;
    };
    // (fat LTO inlines guarded functions into main: the test has teeth)
    let guards = v["session"]["non_entry_guards"].as_u64();
    assert!(
        guards.is_some_and(|n| n > 0),
        "guards away from an entry are counted in the session: {}",
        v["session"]
    );
    assert_eq!(
        Some(info_count(&info(&r), "non-entry:")),
        guards,
        "lapse info says as many"
    );
}

#[test]
fn functions_that_only_jump_to_the_hook_do_not_split_their_callers() {
    check("release", false);
}
