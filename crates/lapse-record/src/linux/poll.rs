//! Waiting for descriptors to become readable (`poll`).

use std::os::fd::RawFd;
use std::time::Duration;

/// Waits until one of `fds` is readable (or hung up) or `timeout_ms`
/// passes; a signal ends the wait early.
pub fn wait_readable(fds: &[RawFd], timeout_ms: i32) {
    poll(fds, timeout_ms);
}

/// Whether one of `fds` becomes readable (or hung up) within `wait`, a
/// wait finer than a millisecond (`ppoll`; the thread's timer slack, 50 µs
/// unless [`fine_timer_slack`] set it, rounds it up). A signal ends it early.
pub fn readable_within(fds: &[RawFd], wait: Duration) -> bool {
    let mut pfds = pollfds(fds);
    let ts = libc::timespec {
        tv_sec: wait.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(wait.subsec_nanos() as i32),
    };
    // SAFETY: pfds is a valid array of pollfd and ts a valid timespec; no
    // signal mask is passed. EINTR just ends the wait early.
    let n = unsafe {
        libc::ppoll(
            pfds.as_mut_ptr(),
            pfds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
    n > 0
}

/// Lets this thread's short timed waits end on time: the kernel may delay
/// a timer by the thread's slack (50 µs by default) to batch wake-ups, and
/// a [`readable_within`] of 20 µs would become 70.
pub fn fine_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes the slack in ns and touches nothing
    // but this thread's timer slack.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1_000 as libc::c_ulong, 0, 0, 0) };
}

fn poll(fds: &[RawFd], timeout_ms: i32) -> i32 {
    let mut pfds = pollfds(fds);
    // SAFETY: pfds is a valid array of pollfd; EINTR just ends the wait early.
    unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout_ms) }
}

fn pollfds(fds: &[RawFd]) -> Vec<libc::pollfd> {
    fds.iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect()
}
