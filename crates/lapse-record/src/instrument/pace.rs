//! How the recorder waits for the next buffer.
//!
//! A runtime thread that hands a buffer over to a recorder asleep in `poll`
//! pays for waking it inside its `sendmsg` (on this 2-core VM about 3 µs
//! instead of 1.3 µs, measured in the runtime), and that time is cut out of
//! its timeline as time spent waiting for the recorder. While buffers come
//! densely (calls.c: one every ~30 µs), the recorder therefore stays awake
//! between them: it watches the arenas' hand-over counters (plain memory,
//! no system call) and its sockets, for at most a few of the recent gaps
//! between buffers. While it is awake the threads hand buffers over without
//! a datagram at all (`arena.rs`). When buffers come sparsely, it sleeps in
//! `poll` and costs nothing.
//!
//! Awake is not busy: between looks at the counters the recorder naps for
//! [`NAP`] in `ppoll` on its sockets (a datagram or a connection ends the
//! nap). Spinning through the gaps instead cost the recorder 10-30 % of its
//! CPU time when it kept up (up to 110 ms of a 200 ms `mt 2` recording),
//! time taken from the target's threads on a machine with no core to
//! spare. A nap notices a buffer at most about [`NAP`] late, while the
//! thread fills another of its arena's buffers (BENCHMARKS.md, twenty-first
//! session).

use std::time::{Duration, Instant};

/// Buffers that come further apart than this on average are waited for
/// asleep: spinning through such gaps would cost more of the recorder's
/// core than the wake-ups cost the target.
const DENSE_GAP: Duration = Duration::from_micros(100);
/// The longest watch, in gaps of the recent average.
const WATCH_GAPS: u32 = 3;
/// The nap between looks at the counters (a buffer takes a busy thread
/// 30-60 µs to fill).
pub(super) const NAP: Duration = Duration::from_micros(20);
/// Looks at the counters before each nap (a buffer that comes at once is
/// taken without a system call).
const LOOKS: usize = 16;

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

    /// Until when to watch for the next buffer rather than sleep, if at all.
    pub(super) fn watch_until(&self) -> Option<Instant> {
        let last = self.last?;
        let gap = Duration::from_nanos(self.gap_ns);
        if self.gap_ns == 0 || gap > DENSE_GAP {
            return None;
        }
        let until = last + gap * WATCH_GAPS;
        (Instant::now() < until).then_some(until)
    }
}

/// Why a [`watch`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Seen {
    /// A hand-over counter moved.
    Moved,
    /// One of the descriptors is readable.
    Readable,
    /// Neither came in time.
    Nothing,
}

/// Watches until `until`, until `moved` says a hand-over counter moved, or
/// until one of `fds` is readable; naps of [`NAP`] between looks (the
/// thread should have called `fine_timer_slack`).
pub(super) fn watch(until: Instant, fds: &[i32], mut moved: impl FnMut() -> bool) -> Seen {
    loop {
        for _ in 0..LOOKS {
            if moved() {
                return Seen::Moved;
            }
            std::hint::spin_loop();
        }
        if super::ipc::readable_within(fds, NAP) {
            return Seen::Readable;
        }
        if moved() {
            return Seen::Moved;
        }
        if Instant::now() >= until {
            return Seen::Nothing;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_buffers_are_watched_for_and_sparse_ones_slept_for() {
        let t0 = Instant::now();
        let mut dense = Pace::default();
        for k in 0..20 {
            dense.arrived(t0 + Duration::from_micros(30 * k));
        }
        assert!(dense.gap_ns.abs_diff(30_000) < 100, "{}", dense.gap_ns);
        assert!(dense.watch_until().is_some());
        let mut sparse = Pace::default();
        for k in 0..20 {
            sparse.arrived(t0 + Duration::from_millis(2 * k));
        }
        assert_eq!(sparse.watch_until(), None);
        assert_eq!(Pace::default().watch_until(), None, "nothing came yet");
    }

    #[test]
    fn a_watch_ends_when_a_counter_moves_a_socket_is_readable_or_at_its_deadline() {
        let (a, b) = std::os::unix::net::UnixDatagram::pair().unwrap();
        use std::os::fd::AsRawFd;
        let fds = [b.as_raw_fd()];
        let t0 = Instant::now();
        let out = watch(t0 + Duration::from_millis(2), &fds, || false);
        assert_eq!(out, Seen::Nothing);
        assert!(t0.elapsed() >= Duration::from_millis(2));
        let far = Instant::now() + Duration::from_secs(5);
        let mut turns = 0;
        let moved = watch(far, &fds, || {
            turns += 1;
            turns == 10
        });
        assert_eq!(moved, Seen::Moved);
        a.send(b"x").unwrap();
        assert_eq!(watch(far, &fds, || false), Seen::Readable);
    }

    #[test]
    fn a_watch_naps_between_looks_instead_of_spinning() {
        // 50 ms with nothing coming: the thread's CPU time is a small part
        // of it (a spinning watch takes all of it that the scheduler gives,
        // two thirds of a core beside two busy threads on two cores)
        crate::linux::poll::fine_timer_slack();
        let cpu = || Duration::from_nanos(crate::linux::process::thread_cpu_ns());
        let (t0, c0) = (Instant::now(), cpu());
        let mut looks = 0u64;
        let out = watch(t0 + Duration::from_millis(50), &[], || {
            looks += 1;
            false
        });
        let (wall, busy) = (t0.elapsed(), cpu() - c0);
        assert_eq!(out, Seen::Nothing);
        assert!(busy < wall / 2, "{busy:?} of CPU in {wall:?}");
        // ...and it looked often: at least once a millisecond, however
        // late the naps ended on a busy machine
        assert!(looks >= 50 * LOOKS as u64 / 2, "{looks} looks");
    }
}
