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

pub use lapse_data::Method;
use lapse_data::OutputFile;

mod control;
mod error;
mod instrument;
pub mod linux;
pub mod method;
mod notice;
mod options;
mod sample;

pub use error::RecordError;
pub use instrument::{recover, spill_path, RecordFilters, RecoverOutcome};
pub use notice::{Notice, Notices};
pub use options::{
    BufferSize, CallGraph, ControlOptions, MethodChoice, OsEventSource, PatchSelection, RateError,
    RecordOptions, RecordOutcome, SampleRate, SymbolProgress, Target,
};

/// Unit tests can say how many bytes the recorder keeps (per thread alive).
#[cfg(test)]
#[global_allocator]
static ALLOC: lapse_data::alloc_count::Counting = lapse_data::alloc_count::Counting;

/// Records the target as `opts` says. Until the recording holds something,
/// it is written under a temporary name beside `opts.output`: a recording
/// that fails (or records nothing) leaves an existing output as it was.
pub fn record(opts: &RecordOptions) -> Result<RecordOutcome, RecordError> {
    check_rate(opts.rate, sample_rate_limit())?;
    let argv = match &opts.target {
        Target::Command(argv) => argv,
        &Target::Pid { pid, duration } => {
            check_attachable(pid)?;
            if !opts.filters.is_empty() {
                return Err(RecordError::Unsupported(
                    "--filter, --exclude, --depth and --min-time are for instrumentation of a launched command, not with --pid".into(),
                ));
            }
            let c = &opts.control;
            if c.start_paused || c.delay.is_some() || c.signal.is_some() {
                return Err(RecordError::Unsupported(
                    "--start-paused, --delay and --signal need lapse to start the program, not --pid".into(),
                ));
            }
            if opts.method == MethodChoice::Instrument {
                return instrument::record_attached(opts, pid, duration);
            }
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
            // (a program without probes of its own is patched at run time;
            // a wrapper's child may carry probes, and is not the program)
            let patch = method::detect_probes(&program) == method::Probes::None
                && !method::is_wrapper(&program);
            instrument::record(opts, &program, argv, patch)
        }
        Method::Sampling if !opts.filters.is_empty() => Err(RecordError::Unsupported(
            "--filter, --exclude, --depth and --min-time are for instrumentation (sampling records every stack); add --method instrument, or leave them out".into(),
        )),
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

/// A frequency above the kernel's limit (`limit`) is refused, not lowered
/// behind the user's back (0 cannot be a [`SampleRate`]).
fn check_rate(rate: SampleRate, limit: Option<u64>) -> Result<(), RecordError> {
    match (rate.hz(), limit) {
        (Some(hz), Some(max)) if hz > max => Err(RecordError::RateAboveLimit { hz, max }),
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
    let flags = linux::proc_scan::stat_fields(&stat)
        .and_then(|f| f.get(6)?.parse::<u64>().ok())
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
        let hz = |n| SampleRate::frequency(n).expect("not 0");
        assert!(check_rate(SampleRate::DEFAULT, max).is_ok());
        assert!(check_rate(hz(1), max).is_ok());
        assert!(check_rate(hz(100_000), max).is_ok());
        assert!(check_rate(SampleRate::period(1).expect("not 0"), max).is_ok());
        assert_eq!(SampleRate::frequency(0), Err(RateError::ZeroFrequency));
        assert_eq!(SampleRate::period(0), Err(RateError::ZeroPeriod));
        let above = check_rate(hz(100_001), max).unwrap_err().to_string();
        assert!(above.contains("at most 100000"), "{above}");
        // (a kernel that does not say: any frequency goes)
        assert!(check_rate(hz(1_000_000), None).is_ok());
    }
}
