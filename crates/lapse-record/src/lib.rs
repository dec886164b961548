//! The lapse recorder: launches (or attaches to) the target, collects the
//! runtime's probe buffers and the kernel's perf events, and writes the data
//! file as data arrives.

use std::path::PathBuf;
use std::time::Duration;

pub use lapse_data::Method;

/// Which collection method `record` uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MethodChoice {
    /// Instrumentation when the target carries probes, sampling otherwise.
    Auto,
    Instrument,
    Sample,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallGraph {
    Dwarf,
    FramePointer,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Launch this command line.
    Command(Vec<String>),
    /// Attach to a running process (for `duration`, or until Ctrl-C).
    Pid { pid: u32, duration: Option<Duration> },
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
    pub os_events: Vec<String>,
    pub inherit: bool,
    pub output: PathBuf,
    pub target: Target,
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

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("{0}")]
    Unsupported(String),
}

/// Records the target as `opts` says.
pub fn record(opts: &RecordOptions) -> Result<RecordOutcome, RecordError> {
    let _ = opts;
    Err(RecordError::Unsupported("recording is not built yet".into()))
}
