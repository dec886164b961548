//! Linux-specific collection that both methods build on: perf events and
//! their records, tracepoints, launching a held target, clocks, and what a
//! running process already has (`/proc`).

pub mod clock;
pub mod launch;
pub mod mapped;
pub mod perf;
pub(crate) mod proc_scan;
pub mod records;
pub mod tracepoint;
