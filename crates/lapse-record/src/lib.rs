//! The lapse recorder: launches (or attaches to) the target, collects the
//! runtime's probe buffers and the kernel's perf events, and writes the data
//! file as data arrives.
//!
//! Layout: [`linux`] holds the OS layer both methods build on (perf events and
//! their ring buffers, record parsing, tracepoints, launching a held target,
//! clocks, `/proc`); `instrument` is the instrumentation method (runtime
//! transport, event streams, off-CPU periods, symbols at the end); `sample`
//! is the sampling method (perf sampling event, unwinding, stack tables,
//! symbols at the end); [`method`] decides what `--method auto` means for a
//! given binary.
//!
//! Constraints: memory stays bounded whatever the run length and the number
//! of threads (events are written in batches as they arrive; the runtime
//! waits, a bounded time, when the recorder falls behind); the file is
//! flushed at least every 100 ms; the target's exit status is passed
//! through, even when the disk fills up; no panics on anything the target
//! or the OS does.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use lapse_data::Method;
use lapse_data::OutputFile;

mod error;
mod instrument;
pub mod linux;
pub mod method;
mod notice;
mod sample;

pub use error::RecordError;
pub use instrument::{recover, spill_path, RecoverOutcome};
pub use notice::{Notice, Notices};

/// Unit tests can say how many bytes the recorder keeps (per thread alive).
#[cfg(test)]
#[global_allocator]
static ALLOC: lapse_data::alloc_count::Counting = lapse_data::alloc_count::Counting;

/// Which collection method `record` uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MethodChoice {
    /// Instrumentation when the target carries probes, sampling otherwise.
    Auto,
    Instrument,
    Sample,
}

impl MethodChoice {
    pub const ALL: [(&'static str, MethodChoice); 3] = [
        ("auto", MethodChoice::Auto),
        ("instrument", MethodChoice::Instrument),
        ("sample", MethodChoice::Sample),
    ];
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallGraph {
    Dwarf,
    FramePointer,
}

impl CallGraph {
    pub const ALL: [(&'static str, CallGraph); 2] =
        [("dwarf", CallGraph::Dwarf), ("fp", CallGraph::FramePointer)];
}

/// The OS events instrumentation records besides context switches
/// (`--os-events`; switches are always on).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OsEventSource {
    /// Context switches: when the thread was off the CPU.
    Switch,
    /// Major page faults.
    Fault,
    /// System calls (raw_syscalls tracepoints).
    Syscall,
}

impl OsEventSource {
    pub const ALL: [(&'static str, OsEventSource); 3] = [
        ("switch", OsEventSource::Switch),
        ("fault", OsEventSource::Fault),
        ("syscall", OsEventSource::Syscall),
    ];

    /// Its name on the command line and in the session header.
    pub fn name(self) -> &'static str {
        match self {
            OsEventSource::Switch => "switch",
            OsEventSource::Fault => "fault",
            OsEventSource::Syscall => "syscall",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Launch this command line.
    Command(Vec<String>),
    /// Attach to a running process (for `duration`, or until Ctrl-C).
    Pid {
        pid: u32,
        duration: Option<Duration>,
    },
}

/// Everything `lapse record` was asked to do.
#[derive(Clone, Debug)]
pub struct RecordOptions {
    pub method: MethodChoice,
    /// Sampling frequency in Hz (default 1000) ...
    pub frequency: Option<u64>,
    /// ... or a fixed period in the event's unit.
    pub period: Option<u64>,
    /// Sampling event name (`cpu-clock` by default).
    pub event: Option<String>,
    pub call_graph: CallGraph,
    /// OS event kinds: `switch` (always), `fault`, `syscall`.
    pub os_events: Vec<OsEventSource>,
    /// Sampling: also capture each thread's stack when it is switched out,
    /// and the time until it runs again (`--off-cpu`).
    pub off_cpu: bool,
    pub inherit: bool,
    /// Instrumentation: calls from instrumented modules into other shared
    /// libraries are functions of their library (`--no-libcalls`: not traced).
    pub libcalls: bool,
    pub output: PathBuf,
    pub target: Target,
    /// Counts the symbol resolution done once the target has exited, for a
    /// progress display; `None` when nobody watches.
    pub symbol_progress: Option<Arc<SymbolProgress>>,
    /// Where what the recorder has to say goes (it prints nothing itself).
    pub notices: Notices,
}

/// How far the symbol resolution at the end of a recording has got. The
/// recorder only counts (it draws nothing): `total` addresses (functions for
/// instrumentation, frames for sampling) are announced before they are
/// resolved, `done` counts the resolved ones; both only grow.
#[derive(Debug, Default)]
pub struct SymbolProgress {
    total: AtomicU64,
    done: AtomicU64,
}

impl SymbolProgress {
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// `n` more addresses are about to be resolved.
    pub(crate) fn add_work(&self, n: u64) {
        self.total.fetch_add(n, Ordering::Relaxed);
    }

    /// One more address was resolved.
    pub(crate) fn advance(&self) {
        self.done.fetch_add(1, Ordering::Relaxed);
    }
}

/// What a finished recording produced; `lapse record` prints it in one line
/// and exits with `exit_status`.
#[derive(Clone, Debug)]
pub struct RecordOutcome {
    pub output: PathBuf,
    pub method: Method,
    pub events: u64,
    pub samples: u64,
    pub bytes: u64,
    /// The target's exit status (128 + signal if it was killed); 0 for attach.
    pub exit_status: i32,
}

/// Records the target as `opts` says. Until the recording holds something,
/// it is written under a temporary name beside `opts.output`: a recording
/// that fails (or records nothing) leaves an existing output as it was.
pub fn record(opts: &RecordOptions) -> Result<RecordOutcome, RecordError> {
    check_rate(opts.frequency, opts.period, sample_rate_limit())?;
    let argv = match &opts.target {
        Target::Command(argv) => argv,
        &Target::Pid { pid, .. } => {
            if opts.method == MethodChoice::Instrument {
                return Err(RecordError::Unsupported(
                    "attaching to a running process (--pid) records by sampling; drop --method instrument".into(),
                ));
            }
            check_attachable(pid)?;
            return record_sampling(opts);
        }
    };
    let first = argv.first().ok_or(RecordError::NoCommand)?;
    let Some(program) = linux::launch::resolve_command(first) else {
        // A file of that name here is not run from PATH: say so, rather
        // than "command not found" about a file the user can see.
        if !first.contains('/') && std::path::Path::new(first).is_file() {
            return Err(RecordError::Unsupported(format!(
                "cannot run {first}: a command without a / is looked for on PATH, not here; to run the file in this directory, give ./{first}"
            )));
        }
        return Err(RecordError::CommandNotFound(first.clone()));
    };
    if let Some(why) = linux::launch::not_runnable(&program) {
        return Err(RecordError::Unsupported(format!(
            "cannot run {}: {why}",
            program.display()
        )));
    }
    let found = method::detect(&program);
    let method = match opts.method {
        MethodChoice::Instrument => Method::Instrumentation,
        MethodChoice::Sample => Method::Sampling,
        MethodChoice::Auto => match &found {
            None => {
                if method::is_wrapper(&program) {
                    opts.notices.say(Notice::Method(format!(
                        "{} carries no probes, so recording by sampling; if the program it runs was built with probes, add --method instrument",
                        program.display()
                    )));
                }
                Method::Sampling
            }
            Some(f) => {
                if f.module != program {
                    opts.notices.say(Notice::Method(format!(
                        "probes found in {} (needed by {}): recording by instrumentation",
                        f.module.display(),
                        program.display()
                    )));
                }
                Method::Instrumentation
            }
        },
    };
    match method {
        Method::Instrumentation => {
            if opts.off_cpu {
                return Err(RecordError::Unsupported(
                    "--off-cpu is for sampling (instrumentation always records when threads are off the CPU: elapsed vs application time); add --method sample".into(),
                ));
            }
            if method::is_static(&program) {
                return Err(RecordError::Unsupported(format!(
                    "{} is statically linked: the lapse runtime cannot be preloaded into it, so it cannot be recorded by instrumentation; link it dynamically, or record it with --method sample",
                    program.display()
                )));
            }
            instrument::record(opts, &program, argv)
        }
        Method::Sampling => record_sampling(opts),
    }
}

/// Sampling writes its file at the end: under a temporary name until then
/// (or in place, for an output that is not a regular file).
fn record_sampling(opts: &RecordOptions) -> Result<RecordOutcome, RecordError> {
    let err = |source| RecordError::Output {
        path: opts.output.clone(),
        source,
    };
    let (mut output, file) = OutputFile::create(&opts.output, "partial").map_err(err)?;
    let outcome = sample::record(opts, file)?;
    output.commit().map_err(err)?;
    Ok(outcome)
}

/// The kernel's highest sampling frequency (kernel.perf_event_max_sample_rate;
/// it lowers it by itself when sampling takes too long), if it says.
fn sample_rate_limit() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// A frequency or period that sampling cannot honour is refused, not
/// changed behind the user's back: 0 of either, or a frequency above the
/// kernel's limit (`limit`).
fn check_rate(
    frequency: Option<u64>,
    period: Option<u64>,
    limit: Option<u64>,
) -> Result<(), RecordError> {
    if frequency == Some(0) {
        return Err(RecordError::Unsupported(
            "-F 0: the sampling frequency is at least 1 Hz".into(),
        ));
    }
    if period == Some(0) {
        return Err(RecordError::Unsupported(
            "--period 0: the sampling period is at least 1".into(),
        ));
    }
    match (frequency, limit) {
        (Some(hz), Some(max)) if hz > max => Err(RecordError::Unsupported(format!(
            "-F {hz}: the kernel samples at most {max} times a second (kernel.perf_event_max_sample_rate); give -F {max} or less, or raise that limit"
        ))),
        _ => Ok(()),
    }
}

/// A process to attach to: it exists and has a user space (a kernel thread
/// has nothing to sample there).
fn check_attachable(pid: u32) -> Result<(), RecordError> {
    /// `PF_KTHREAD` in the flags of /proc/PID/stat.
    const PF_KTHREAD: u64 = 0x0020_0000;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|_| RecordError::NoSuchProcess(pid))?;
    // Fields after the command name (which may hold spaces and parentheses):
    // state ppid pgrp session tty_nr tpgid flags ...
    let flags = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(6))
        .and_then(|f| f.parse::<u64>().ok())
        .unwrap_or(0);
    if flags & PF_KTHREAD != 0 {
        return Err(RecordError::KernelThread(pid));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_sampling_cannot_honour_are_refused_not_changed() {
        let max = Some(100_000);
        assert!(check_rate(None, None, max).is_ok());
        assert!(check_rate(Some(1), None, max).is_ok());
        assert!(check_rate(Some(100_000), None, max).is_ok());
        assert!(check_rate(None, Some(1), max).is_ok());
        let said = |f, p, m| check_rate(f, p, m).unwrap_err().to_string();
        assert!(said(Some(0), None, max).contains("-F 0"));
        assert!(said(None, Some(0), max).contains("--period 0"));
        let above = said(Some(100_001), None, max);
        assert!(above.contains("at most 100000"), "{above}");
        // (a kernel that does not say: only 0 is refused)
        assert!(check_rate(Some(1_000_000), None, None).is_ok());
    }
}
