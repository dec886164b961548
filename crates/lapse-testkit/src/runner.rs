//! Running the `lapse` binary as the end-to-end tests do, and reading what
//! it said: one runner instead of a `fn lapse` per test file.
//!
//! A test file names the binary once (only its own crate knows the path):
//!
//! ```ignore
//! const LAPSE: Lapse = Lapse::new(env!("CARGO_BIN_EXE_lapse"));
//! let v = LAPSE.in_dir(&dir).report(&data, "functions", &[]);
//! ```
//!
//! Whether a call checks lapse's exit status is in its name: [`Lapse::run`]
//! takes any status, [`Lapse::ok`] and what is built on it fail the test
//! unless lapse succeeded.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{perf_refused, skip};

/// How to run `lapse`: the binary, the working directory, variables set.
/// Cheap to copy; each setter returns a changed copy.
#[derive(Clone, Copy, Debug)]
pub struct Lapse<'a> {
    exe: &'a str,
    dir: Option<&'a Path>,
    env: &'a [(&'a str, &'a str)],
}

impl<'a> Lapse<'a> {
    /// The binary at `exe` (pass `env!("CARGO_BIN_EXE_lapse")`), run in the
    /// test's own working directory with its environment.
    pub const fn new(exe: &'a str) -> Lapse<'a> {
        Lapse {
            exe,
            dir: None,
            env: &[],
        }
    }

    /// The same, run in `dir`.
    pub fn in_dir(self, dir: &'a Path) -> Lapse<'a> {
        Lapse {
            dir: Some(dir),
            ..self
        }
    }

    /// The same, with these variables set (in place of any set before).
    pub const fn with_env(self, env: &'a [(&'a str, &'a str)]) -> Lapse<'a> {
        Lapse { env, ..self }
    }

    /// The path of the binary.
    pub fn exe(&self) -> &'a str {
        self.exe
    }

    /// `lapse args`, not started: for a test that spawns it, or pipes.
    pub fn command<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = Command::new(self.exe);
        cmd.args(args).envs(self.env.iter().copied());
        if let Some(dir) = self.dir {
            cmd.current_dir(dir);
        }
        cmd
    }

    /// Runs `lapse args` to its end, whatever its exit status.
    pub fn run<I, S>(&self, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.command(args).output().expect("run lapse")
    }

    /// Runs `lapse args` with nothing on stdin, whatever its exit status;
    /// `None` (after killing it) when it is still running after `deadline`.
    pub fn run_within<I, S>(&self, args: I, deadline: Duration) -> Option<Output>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut child = self
            .command(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run lapse");
        let start = Instant::now();
        while child.try_wait().expect("wait for lapse").is_none() {
            if start.elapsed() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(child.wait_with_output().expect("lapse output"))
    }

    /// [`Lapse::run_within`], failing the test when lapse is still running
    /// after `deadline`.
    #[track_caller]
    pub fn run_in_time<I, S>(&self, args: I, deadline: Duration) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<OsString> = args.into_iter().map(|a| a.as_ref().into()).collect();
        self.run_within(&args, deadline)
            .unwrap_or_else(|| panic!("lapse {args:?} still running after {deadline:?}"))
    }

    /// Runs `lapse args`; fails the test (with lapse's stderr) unless it
    /// succeeded.
    #[track_caller]
    pub fn ok<I, S>(&self, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<OsString> = args.into_iter().map(|a| a.as_ref().into()).collect();
        let out = self.run(&args);
        assert!(
            out.status.success(),
            "lapse {args:?} failed ({}): {}",
            out.status,
            stderr(&out)
        );
        out
    }

    /// What `lapse args` printed on stdout; it must succeed.
    #[track_caller]
    pub fn stdout<I, S>(&self, args: I) -> String
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        String::from_utf8_lossy(&self.ok(args).stdout).into_owned()
    }

    /// The JSON `lapse args` printed; it must succeed.
    #[track_caller]
    pub fn json<I, S>(&self, args: I) -> Value
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        serde_json::from_slice(&self.ok(args).stdout).expect("lapse printed JSON")
    }

    /// `lapse report data --view view --format json extra...`, which must
    /// succeed: its JSON.
    #[track_caller]
    pub fn report(&self, data: impl AsRef<Path>, view: &str, extra: &[&str]) -> Value {
        let mut args: Vec<&OsStr> = vec![
            OsStr::new("report"),
            data.as_ref().as_os_str(),
            OsStr::new("--view"),
            OsStr::new(view),
            OsStr::new("--format"),
            OsStr::new("json"),
        ];
        args.extend(extra.iter().map(OsStr::new));
        self.json(args)
    }

    /// `lapse record options -o data -- exe args`, whatever its exit
    /// status; `None` (a skip) when perf events were refused and no data
    /// file was written.
    #[track_caller]
    pub fn record(
        &self,
        options: &[&str],
        data: &Path,
        exe: &Path,
        args: &[&str],
    ) -> Option<Output> {
        let mut all: Vec<&OsStr> = vec![OsStr::new("record")];
        all.extend(options.iter().map(OsStr::new));
        all.extend([OsStr::new("-o"), data.as_os_str(), OsStr::new("--")]);
        all.push(exe.as_os_str());
        all.extend(args.iter().map(OsStr::new));
        let out = self.run(all);
        let stderr = stderr(&out);
        // (a relative `data` is in the directory lapse ran in)
        let written = self
            .dir
            .map_or(data.to_path_buf(), |d| d.join(data))
            .exists();
        if perf_refused(&stderr) && !written {
            return skip(format!("perf events are not available here: {stderr}"));
        }
        Some(out)
    }
}

/// The flags the instrumentation tests build their C programs with: a
/// probe at every function's entry and exit, threads, debug information.
pub const INSTRUMENTED: &[&str] = &["-finstrument-functions", "-O1", "-pthread", "-g"];

/// What a command wrote on stderr, as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The `key value` pairs a test program printed on stdout (words that do
/// not pair up, or values that do not parse as `T`, are left out).
pub fn printed<T: FromStr>(out: &Output) -> HashMap<String, T> {
    let text = String::from_utf8_lossy(&out.stdout);
    let words: Vec<&str> = text.split_whitespace().collect();
    words
        .chunks(2)
        .filter_map(|kv| Some((kv.first()?.to_string(), kv.get(1)?.parse().ok()?)))
        .collect()
}

/// A report's rows (none when it has no `rows`, as a call tree).
pub fn rows(report: &Value) -> &[Value] {
    report["rows"].as_array().map_or(&[], Vec::as_slice)
}

/// A report's rows; fails the test when it has no `rows` at all (for a
/// test where a missing list must not pass as an empty one).
#[track_caller]
pub fn expect_rows(report: &Value) -> &[Value] {
    report["rows"].as_array().expect("rows")
}

/// The row of function `name`; fails the test when there is none.
#[track_caller]
pub fn row<'v>(report: &'v Value, name: &str) -> &'v Value {
    rows(report)
        .iter()
        .find(|r| r["function"] == name)
        .unwrap_or_else(|| panic!("no row for {name} in {report:#}"))
}
