//! Linux-specific collection: perf events, launching targets, clocks.

pub mod clock;
pub mod launch;
pub mod perf;
pub mod records;
pub mod tracepoint;

// Sampling (`--method sample`, `--pid`).
pub(crate) mod proc_info;
mod proc_scan;
pub(crate) mod sample;
mod sample_attr;
mod sample_parse;
mod sample_rings;
mod sample_session;
mod sample_symbols;
mod stack_table;
mod unwind_glue;
