//! Waiting for descriptors to become readable (`poll`).

use std::os::fd::RawFd;

/// Waits until one of `fds` is readable (or hung up) or `timeout_ms`
/// passes; a signal ends the wait early.
pub fn wait_readable(fds: &[RawFd], timeout_ms: i32) {
    poll(fds, timeout_ms);
}

/// Whether one of `fds` is readable now (or hung up): a poll that does not wait.
pub fn any_readable(fds: &[RawFd]) -> bool {
    poll(fds, 0) > 0
}

fn poll(fds: &[RawFd], timeout_ms: i32) -> i32 {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: pfds is a valid array of pollfd; EINTR just ends the wait early.
    unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout_ms) }
}
