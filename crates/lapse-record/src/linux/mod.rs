//! Linux-specific collection: perf events, launching targets, clocks.

pub mod clock;
pub mod launch;
pub mod perf;
pub mod records;
