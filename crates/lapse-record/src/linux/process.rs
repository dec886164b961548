//! This process and others, as the OS sees them: user ids, whether a pid
//! is still there, resource limits, heap trimming, and the stop signals
//! of a recording that runs until Ctrl-C.

use std::io;
use std::sync::atomic::{AtomicI32, Ordering};

/// This process's real user id.
pub fn real_uid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

/// This process's effective user id (0: root).
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no failure mode.
    unsafe { libc::geteuid() }
}

/// Whether process `pid` exists, ours to signal or not.
pub fn process_exists(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Whether process `pid` is gone: the kernel says there is no such process
/// (one we may not signal is still there).
pub fn process_gone(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    (unsafe { libc::kill(pid as i32, 0) }) != 0
        && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// Lifts the soft limit on open files to the hard one.
pub fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid rlimit struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Gives freed heap pages back to the kernel (glibc's allocator otherwise
/// keeps its high-water mark resident); nothing elsewhere.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns unused memory; no pointers change.
    unsafe {
        libc::malloc_trim(0);
    }
}

static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn note_stop(sig: libc::c_int) {
    STOP_SIGNAL.store(sig, Ordering::SeqCst);
}

/// From now on SIGINT, SIGTERM and SIGHUP no longer end this process; they
/// are noted for [`stop_requested`].
pub fn catch_stop_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores into an atomic.
        unsafe { libc::signal(sig, note_stop as *const () as usize) };
    }
}

/// Whether a stop signal came since [`catch_stop_signals`].
pub fn stop_requested() -> bool {
    STOP_SIGNAL.load(Ordering::SeqCst) != 0
}

/// The CPU time this process has used so far (user and system, all its
/// threads), in nanoseconds.
pub fn own_cpu_ns() -> u64 {
    cpu_clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// The CPU time the calling thread has used so far, in nanoseconds.
#[cfg(test)]
pub fn thread_cpu_ns() -> u64 {
    cpu_clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn cpu_clock_ns(clock: libc::clockid_t) -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills the timespec it is given; the CPU-time
    // clocks always exist for the calling process and thread.
    let rc = unsafe { libc::clock_gettime(clock, &mut t) };
    if rc != 0 {
        return 0;
    }
    (t.tv_sec as u64).saturating_mul(1_000_000_000) + t.tv_nsec as u64
}
