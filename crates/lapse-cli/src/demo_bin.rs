//! The demo workload, built from `demo/demo.c` by `build.rs` with
//! `-finstrument-functions` and embedded here; empty when the build machine
//! had no C compiler.

/// The demo program's ELF bytes: write them to a file, make it executable,
/// and record it.
pub const DEMO_ELF: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/lapse-demo"));
