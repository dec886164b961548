//! Linux-specific collection that both methods build on: perf events and
//! their records, tracepoints, launching a held target, clocks, and what a
//! running process already has (`/proc`). Every system call the recorder
//! makes, and every `unsafe` that goes with one, is here, behind a safe
//! call: `instrument` and `sample` hold none.

pub mod clock;
pub(crate) mod fs;
pub mod launch;
pub mod mapped;
pub mod perf;
pub mod perf_attr;
pub(crate) mod poll;
pub(crate) mod proc_scan;
pub(crate) mod process;
pub(crate) mod ptrace;
pub mod records;
pub(crate) mod shm;
pub mod signals;
pub(crate) mod socket;
pub mod tracepoint;
