//! The lapse runtime: the code that runs inside the profiled process.
//!
//! It owns the probe hooks (`__cyg_profile_func_enter`/`_exit`; `mcount`,
//! `__fentry__`, library calls and LLVM's sanitizer coverage, whose exits
//! come from the return trampoline and its per-thread shadow stack), the per-thread event buffers and their
//! hand-off to the recorder, and keeps every event through thread exit,
//! fork, exec, `exit()` and fatal signals.
//! The runtime itself is C (`csrc/`), built by `build.rs` into
//! `liblapse_rt.so` for `LD_PRELOAD`; this crate gives the recorder the
//! library's bytes ([`RUNTIME_SO`]) and the wire protocol ([`protocol`]).
//!
//! Constraints: the probe path takes no lock, allocates nothing, makes no
//! system call, cannot fail and is async-signal-safe (a handler may run
//! probes anywhere in it); the slow path runs with signals blocked and uses
//! only async-signal-safe calls, no malloc and no thread of its own (so
//! nothing of the runtime shows up in the profile). The runtime never
//! writes to or closes a descriptor it does not own, and never holds the
//! program indefinitely (`csrc/rt.h` lists the files and what each owns).
//!
//! The `lapse` crate's guards call `lapse_scope_enter`/`_exit`
//! (`csrc/scope.c`), which record through the same probe path.
//!
//! Why C and not a Rust cdylib: the buffer pointer must sit in initial-exec
//! TLS (one `%fs` load), which stable Rust cannot ask for, and a cdylib built
//! by cargo cannot be embedded in another crate's binary without a nested
//! cargo invocation; a C library built by this build script can.

pub mod protocol;

/// The runtime shared library, ready to be written to a file and preloaded.
pub static RUNTIME_SO: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/liblapse_rt.so"));

/// File name under which the recorder writes [`RUNTIME_SO`].
pub const RUNTIME_FILE_NAME: &str = "liblapse_rt.so";

/// The object `lapse build` links into every program it builds with
/// sanitizer coverage: `__sanitizer_cov_trace_pc_guard` and its `_init`,
/// which do nothing unless the runtime is loaded (`csrc/sancov_stub.c`).
pub static SANCOV_STUB_O: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/lapse_sancov_stub.o"));
