//! Recording with instrumentation: the target runs with the lapse runtime
//! preloaded; its event buffers arrive over a socket, the kernel's records
//! over perf rings, and both are merged into the data file as they come.

mod address;
mod functions;
mod ipc;
mod os;
mod output;
mod session;
mod session_dir;
mod stalls;
mod threads;
mod wrapup;

pub use session::record;
