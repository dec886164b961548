//! Recording with instrumentation: the target runs with the lapse runtime
//! preloaded (or, attached to while it runs, has it loaded: `attach.rs`);
//! its event buffers arrive over a socket, the kernel's records over perf
//! rings, and both are merged into the data file as they come.
//!
//! Choices where the spec is silent:
//! - **Fork**: the child's stream starts with `enter` events, at the fork's
//!   time, for the calls its forking thread had open, so the child's calls
//!   nest and close like the parent's (its `main` counts as one call in each
//!   process).
//! - **Exec**: the old image's open calls are closed at the exec; the pid,
//!   its process row and its threads carry on with the new image.
//! - **Waiting for the recorder**: when the recorder falls behind, a runtime
//!   flush waits on the socket. That wait is lapse's cost, not the program's:
//!   it is cut out of the thread's timeline (events and OS events after it
//!   move earlier; the total is noted in the session header).
//! - **Transport**: each process image shares an arena of event buffers with
//!   the recorder (a memfd passed over the socket, `arena.rs`); threads fill
//!   buffers in place and hand them over with a 48-byte datagram, so events
//!   are never copied through the kernel, or, while the recorder is awake
//!   (it spins while buffers come densely, `pace.rs`), by the buffer's state
//!   in the arena alone, without a system call; every datagram says how many
//!   buffers were handed over before it, so both are read in the order they
//!   were handed over. A thread that finds no free buffer
//!   waits for the recorder to free one (the wait is cut like any
//!   hand-over), but 2 ms at most in all: then, as when none can come back
//!   (more threads than buffers), it fills a private buffer sent as a
//!   datagram. A send waits at most 2 s for room in the socket, and again
//!   (up to 30 s in all) while the recorder reads that process's datagrams
//!   (a counter in the arena moves): it is behind, not stuck. After that
//!   the events are lost (and counted), the program is never held.
//! - **SIGKILL**: the buffers a process was still filling when it died are in
//!   the arena; the recorder reads them when its connection closes, so a
//!   thread blocked in a system call loses nothing it had recorded.
//! - **Recorder gone**: the runtime appends its datagrams to `<output>.spill`
//!   (`u32` length + datagram each), arena buffers the recorder had not freed
//!   first (oldest first), instead of losing them; the target runs on.
//!   `lapse recover` merges them into the data file afterwards (`recover.rs`);
//!   a new recording removes a stale spill of the same output first.
//! - **Threads**: the runtime creates none, so none are profiled by mistake;
//!   ended threads' state is dropped after 500 ms to bound memory. A later
//!   thread with a thread id used before is a thread of its own
//!   (`serials.rs`).

mod address;
mod arena;
mod assemble;
mod attach;
mod filters;
mod functions;
mod inject;
mod ipc;
mod ns_ids;
mod os;
mod output;
mod pace;
mod patch;
mod probe_sources;
mod recover;
mod roster;
pub(crate) mod serials;
mod session;
pub(crate) mod session_dir;
mod stalls;
mod syscalls;
mod threads;
pub(crate) mod tick_clock;
mod unreached;
mod workers;
mod wrapup;

pub use attach::record_attached;
pub use filters::RecordFilters;
pub use recover::{recover, spill_path, RecoverOutcome};
pub use session::record;
