//! How the recorder waits for the next buffer.
//!
//! A runtime thread that hands a buffer over to a recorder asleep in `poll`
//! pays for waking it inside its `sendmsg` (on this 2-core VM about 3 µs
//! instead of 1.3 µs, measured in the runtime), and that time is cut out of
//! its timeline as time spent waiting for the recorder. While buffers come
//! densely (calls.c: one every ~30 µs), the recorder therefore does not go
//! to sleep between them: it watches the arenas' hand-over counters (plain
//! memory, no system call) and, now and then, its sockets, for at most a few
//! of the recent gaps between buffers. While it is awake the threads hand
//! buffers over without a datagram at all (`arena.rs`). A recorder that
//! spins there is one that would be busy most of that time anyway; when
//! buffers come sparsely, it sleeps and costs nothing.

use std::time::{Duration, Instant};

/// Buffers that come further apart than this on average are waited for
/// asleep: spinning through such gaps would cost more of the recorder's
/// core than the wake-ups cost the target.
const DENSE_GAP: Duration = Duration::from_micros(100);
/// The longest spin, in gaps of the recent average.
const SPIN_GAPS: u32 = 3;
/// The sockets are looked at this often while spinning (the arenas'
/// counters at every turn).
const POLL_EVERY: Duration = Duration::from_micros(20);

/// The recent rhythm of data datagrams.
#[derive(Default)]
pub(super) struct Pace {
    last: Option<Instant>,
    /// Average gap between data datagrams (exponential, 1/8 weight), in ns.
    gap_ns: u64,
}

impl Pace {
    /// A datagram with events (or an arena buffer) came at `now`.
    pub(super) fn arrived(&mut self, now: Instant) {
        if let Some(last) = self.last {
            let gap = now.saturating_duration_since(last).as_nanos() as u64;
            let gap = gap.min(DENSE_GAP.as_nanos() as u64 * 16);
            self.gap_ns = match self.gap_ns {
                0 => gap,
                avg => avg - avg / 8 + gap / 8,
            };
        }
        self.last = Some(now);
    }

    /// Until when to spin for the next buffer rather than sleep, if at all.
    pub(super) fn spin_until(&self) -> Option<Instant> {
        let last = self.last?;
        let gap = Duration::from_nanos(self.gap_ns);
        if self.gap_ns == 0 || gap > DENSE_GAP {
            return None;
        }
        let until = last + gap * SPIN_GAPS;
        (Instant::now() < until).then_some(until)
    }
}

/// Why a [`spin`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Spun {
    /// A hand-over counter moved.
    Moved,
    /// One of the descriptors is readable.
    Readable,
    /// Neither came in time.
    Out,
}

/// Spins until `until`, until `moved` says a hand-over counter moved, or
/// until one of `fds` is readable (looked at every [`POLL_EVERY`]).
pub(super) fn spin(until: Instant, fds: &[i32], mut moved: impl FnMut() -> bool) -> Spun {
    let mut next_poll = Instant::now();
    loop {
        for _ in 0..64 {
            if moved() {
                return Spun::Moved;
            }
            std::hint::spin_loop();
        }
        let now = Instant::now();
        if now >= next_poll {
            if super::ipc::any_readable(fds) {
                return Spun::Readable;
            }
            next_poll = now + POLL_EVERY;
        }
        if now >= until {
            return Spun::Out;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_buffers_are_spun_for_and_sparse_ones_slept_for() {
        let t0 = Instant::now();
        let mut dense = Pace::default();
        for k in 0..20 {
            dense.arrived(t0 + Duration::from_micros(30 * k));
        }
        assert!(dense.gap_ns.abs_diff(30_000) < 100, "{}", dense.gap_ns);
        assert!(dense.spin_until().is_some());
        let mut sparse = Pace::default();
        for k in 0..20 {
            sparse.arrived(t0 + Duration::from_millis(2 * k));
        }
        assert_eq!(sparse.spin_until(), None);
        assert_eq!(Pace::default().spin_until(), None, "nothing came yet");
    }

    #[test]
    fn a_spin_ends_when_a_counter_moves_a_socket_is_readable_or_at_its_deadline() {
        let (a, b) = std::os::unix::net::UnixDatagram::pair().unwrap();
        use std::os::fd::AsRawFd;
        let fds = [b.as_raw_fd()];
        let t0 = Instant::now();
        let out = spin(t0 + Duration::from_millis(2), &fds, || false);
        assert_eq!(out, Spun::Out);
        assert!(t0.elapsed() >= Duration::from_millis(2));
        let far = Instant::now() + Duration::from_secs(5);
        let mut turns = 0;
        let moved = spin(far, &fds, || {
            turns += 1;
            turns == 10
        });
        assert_eq!(moved, Spun::Moved);
        a.send(b"x").unwrap();
        assert_eq!(spin(far, &fds, || false), Spun::Readable);
    }
}
