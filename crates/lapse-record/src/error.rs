//! What can go wrong while recording, with enough context for one line.

use std::io;
use std::path::PathBuf;

use crate::linux::perf::PerfError;

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("{0}")]
    Unsupported(String),
    /// A sampling frequency above the kernel's limit
    /// (kernel.perf_event_max_sample_rate).
    #[error("{hz} Hz: the kernel samples at most {max} times a second (kernel.perf_event_max_sample_rate); sample at {max} Hz or less, or raise that limit")]
    RateAboveLimit { hz: u64, max: u64 },
    #[error("no command to record")]
    NoCommand,
    #[error("command not found: {0}")]
    CommandNotFound(String),
    #[error("no process {0} to attach to")]
    NoSuchProcess(u32),
    #[error("process {0} is a kernel thread: it has no user space to record")]
    KernelThread(u32),
    /// The target ran (and ended, or ran on past an attached window)
    /// without one event; `status` is its exit status (which `record`
    /// passes on; 0 for a process attached to), `ran` says which, `why`
    /// the likely reason.
    #[error("recorded nothing: {command} {ran} without a single instrumented call ({why}); {} was left as it was", path.display())]
    NothingRecorded {
        command: String,
        status: i32,
        ran: String,
        why: String,
        path: PathBuf,
    },
    #[error("cannot write the data file {path}: {source}")]
    Output { path: PathBuf, source: io::Error },
    /// Writing failed while the target ran (a full disk): the recording
    /// stopped there, the target was supervised to its end.
    #[error("cannot write the data file {}: {source}; the recording stopped there and the target ran to its end (exit status {exit_status})", path.display())]
    Stopped {
        path: PathBuf,
        source: io::Error,
        exit_status: i32,
    },
    #[error("cannot set up the session directory {path}: {source}")]
    SessionDir { path: PathBuf, source: io::Error },
    #[error("cannot start {command}: {source}")]
    Spawn { command: String, source: io::Error },
    #[error(transparent)]
    Perf(#[from] PerfError),
    #[error("waiting for the target: {0}")]
    Wait(io::Error),
    #[error("receiving from the runtime: {0}")]
    Receive(io::Error),
    #[error("{path}: {what}")]
    Recover { path: PathBuf, what: String },
    #[error(transparent)]
    Data(#[from] lapse_data::DataError),
}
