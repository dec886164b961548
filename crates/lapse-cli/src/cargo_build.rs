//! `lapse build`: `cargo build` with LLVM's sanitizer coverage at every
//! function entry (the lapse runtime's probe source for Rust and clang), into
//! its own target directory, linked with lapse's stub so that the binaries
//! run without lapse too (`lapse-rt/csrc/sancov_stub.c`).

use std::ffi::OsString;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use lapse_record::method::{detect_probes, Probes};

use crate::cli::BuildArgs;

/// The flags every crate is compiled with (the link argument comes after).
/// v0 symbol names keep generic arguments (`app::parse::<u8>`): each
/// instance of a generic function is its own row, named as such.
const SANCOV_FLAGS: [&str; 4] = [
    "-Cpasses=sancov-module",
    "-Cllvm-args=-sanitizer-coverage-level=1",
    "-Cllvm-args=-sanitizer-coverage-trace-pc-guard",
    "-Csymbol-mangling-version=v0",
];

/// File name of the stub object in the build's target directory.
const STUB_NAME: &str = "lapse_sancov_stub.o";

pub fn run(args: BuildArgs) -> Result<u8> {
    if args.stub_object {
        if !args.cargo_args.is_empty() {
            bail!("--stub-object builds nothing: drop the cargo arguments");
        }
        let path = write_cached_stub()?;
        println!("{}", path.display());
        return Ok(0);
    }
    for a in &args.cargo_args {
        if a == "--message-format" || a.starts_with("--message-format=") {
            bail!("lapse build reads cargo's messages itself: drop {a}");
        }
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let user_target_dir = option_value(&args.cargo_args, "--target-dir");
    let target_dir = match &user_target_dir {
        Some(dir) => PathBuf::from(dir),
        None => workspace_target_dir(&cargo, &args.cargo_args)?.join("lapse"),
    };
    fs::create_dir_all(&target_dir)
        .with_context(|| format!("creating {}", target_dir.display()))?;
    let stub = std::path::absolute(target_dir.join(STUB_NAME))?;
    write_if_changed(&stub, lapse_rt::SANCOV_STUB_O)?;

    let mut flags: Vec<String> = SANCOV_FLAGS.iter().map(|f| f.to_string()).collect();
    flags.push(format!("-Clink-arg={}", stub.display()));

    let mut cmd = Command::new(&cargo);
    cmd.arg("build")
        .arg("--message-format=json-render-diagnostics")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if user_target_dir.is_none() {
        cmd.arg("--target-dir").arg(&target_dir);
    }
    // RUSTFLAGS in the environment replace the configured ones (cargo's
    // rule), so lapse's go at their end; otherwise they are given as
    // configuration, which cargo joins with a `build.rustflags` of the
    // project's or the user's config files.
    let encoded = std::env::var("CARGO_ENCODED_RUSTFLAGS").ok();
    let plain = std::env::var("RUSTFLAGS").ok();
    if encoded.is_some() || plain.is_some() {
        let mut all: Vec<String> = match (&encoded, &plain) {
            (Some(e), _) => e
                .split('\x1f')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
            (None, Some(p)) => p.split_whitespace().map(str::to_owned).collect(),
            (None, None) => Vec::new(),
        };
        all.extend(flags);
        cmd.env("CARGO_ENCODED_RUSTFLAGS", all.join("\x1f"))
            .env_remove("RUSTFLAGS");
    } else {
        cmd.arg("--config").arg(format!(
            "build.rustflags=[{}]",
            flags
                .iter()
                .map(|f| toml_string(f))
                .collect::<Vec<_>>()
                .join(",")
        ));
    }
    cmd.args(&args.cargo_args);

    let mut child = cmd
        .spawn()
        .with_context(|| format!("running {}", Path::new(&cargo).display()))?;
    let stdout = child.stdout.take().expect("piped");
    let mut built: Vec<PathBuf> = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.context("reading cargo's messages")?;
        if let Some(exe) = executable_of(&line) {
            if !built.contains(&exe) {
                built.push(exe);
            }
        }
    }
    let status = child.wait().context("waiting for cargo")?;
    if !status.success() {
        return Ok(status.code().map_or(1, |c| c.clamp(1, 255) as u8));
    }
    if built.is_empty() {
        eprintln!("lapse: cargo built no executable (a library only?): nothing to record");
        return Ok(0);
    }
    let cwd = std::env::current_dir().unwrap_or_default();
    for exe in &built {
        if detect_probes(exe) != Probes::Sancov {
            bail!(
                "{} was built without probes: a target.<triple>.rustflags in a cargo config overrides the flags lapse gives (build.rustflags); set them in RUSTFLAGS instead",
                exe.display()
            );
        }
        let shown = exe.strip_prefix(&cwd).unwrap_or(exe);
        println!("{}", shown.display());
    }
    if let Some(first) = built.first() {
        let shown = first.strip_prefix(&cwd).unwrap_or(first);
        eprintln!(
            "lapse: built with probes; record with: lapse record -- {}",
            shown.display()
        );
    }
    Ok(0)
}

/// The path of an executable a `compiler-artifact` message reports.
fn executable_of(line: &str) -> Option<PathBuf> {
    let msg: serde_json::Value = serde_json::from_str(line).ok()?;
    if msg.get("reason")?.as_str()? != "compiler-artifact" {
        return None;
    }
    Some(PathBuf::from(msg.get("executable")?.as_str()?))
}

/// The value of `--name VALUE` or `--name=VALUE` among cargo's arguments.
fn option_value(args: &[String], name: &str) -> Option<String> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--" {
            break;
        }
        if a == name {
            return it.next().cloned();
        }
        if let Some(v) = a.strip_prefix(name).and_then(|r| r.strip_prefix('=')) {
            return Some(v.to_owned());
        }
    }
    None
}

/// The target directory of the workspace cargo would build
/// (`cargo metadata`), honouring `--manifest-path`.
fn workspace_target_dir(cargo: &OsString, args: &[String]) -> Result<PathBuf> {
    let mut cmd = Command::new(cargo);
    cmd.args(["metadata", "--format-version", "1", "--no-deps"]);
    if let Some(m) = option_value(args, "--manifest-path") {
        cmd.arg("--manifest-path").arg(m);
    }
    let out = cmd
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("running {}", Path::new(cargo).display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let line = err
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("cargo metadata failed");
        bail!("{}", line.trim_start_matches("error: "));
    }
    let meta: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("reading cargo metadata")?;
    meta.get("target_directory")
        .and_then(|v| v.as_str())
        .map(PathBuf::from)
        .context("cargo metadata names no target directory")
}

/// `s` as a TOML basic string.
fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Writes `bytes` to `path` unless it holds them already (an unchanged
/// file keeps its time, so cargo does not link again).
fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<()> {
    if fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    let tmp = path.with_extension(format!("o.{}", std::process::id()));
    fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// The stub for C/C++ builds, kept in the user's cache directory under a
/// name that changes with its contents.
fn write_cached_stub() -> Result<PathBuf> {
    let dir = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .context("neither XDG_CACHE_HOME nor HOME is set: no place for the stub object")?
        .join("lapse");
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let bytes = lapse_rt::SANCOV_STUB_O;
    // FNV-1a: a name per content, so lapse versions never share a stub
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let path = dir.join(format!("lapse_sancov_stub-{hash:016x}.o"));
    write_if_changed(&path, bytes)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_found_in_both_spellings_and_not_after_a_double_dash() {
        let args: Vec<String> = ["--release", "--target-dir", "x", "--", "--manifest-path=y"]
            .map(String::from)
            .to_vec();
        assert_eq!(option_value(&args, "--target-dir").as_deref(), Some("x"));
        assert_eq!(option_value(&args, "--manifest-path"), None);
        let args: Vec<String> = ["--manifest-path=a/Cargo.toml"].map(String::from).to_vec();
        assert_eq!(
            option_value(&args, "--manifest-path").as_deref(),
            Some("a/Cargo.toml")
        );
    }

    #[test]
    fn toml_strings_are_quoted() {
        assert_eq!(toml_string(r#"a "b" \c"#), r#""a \"b\" \\c""#);
    }

    #[test]
    fn only_executables_are_reported() {
        let exe =
            r#"{"reason":"compiler-artifact","executable":"/t/lapse/debug/app","fresh":true}"#;
        let lib = r#"{"reason":"compiler-artifact","executable":null}"#;
        let other = r#"{"reason":"build-finished","success":true}"#;
        assert_eq!(
            executable_of(exe),
            Some(PathBuf::from("/t/lapse/debug/app"))
        );
        assert_eq!(executable_of(lib), None);
        assert_eq!(executable_of(other), None);
        assert_eq!(executable_of("not json"), None);
    }
}
