//! Taking lapse's own hand-over time out of a thread's timeline.
//!
//! When the recorder falls behind, a runtime flush waits on the socket; that
//! wait happens inside some interval of the program and would read as
//! program time (or as an OS event). The runtime counts those ticks per
//! thread; here each wait becomes a gap that is cut out: the thread's later
//! events move earlier by the total cut so far, and its OS events are mapped
//! the same way (a switch inside a cut disappears; one across a cut shrinks).
//! The probe cost measured at start-up excludes hand-overs, so nothing is
//! removed twice.

use lapse_data::{OsEvent, OsEventKind, Timestamp};

use lapse_rt::protocol::Ticks;
use smallvec::SmallVec;
use thin_vec::ThinVec;

use super::tick_clock::TickClock;

/// An OS event while it waits in a thread's queue: 16 bytes, where an
/// `OsEvent` takes 24 (in a storm, each of 100,000 threads holds a few
/// while its events are still in its buffer). The kind is in the top two
/// bits of the start: CLOCK_MONOTONIC stays below 2^62 ns for 146 years.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldOsEvent {
    kind_from: u64,
    to: u64,
}

const KIND_SHIFT: u32 = 62;
const FROM_MASK: u64 = (1 << KIND_SHIFT) - 1;

impl HeldOsEvent {
    pub fn new(e: OsEvent) -> HeldOsEvent {
        let kind: u64 = match e.kind {
            OsEventKind::Switch => 0,
            OsEventKind::Preempt => 1,
            OsEventKind::Fault => 2,
            OsEventKind::Syscall => 3,
        };
        HeldOsEvent {
            kind_from: kind << KIND_SHIFT | e.from.as_nanos().min(FROM_MASK),
            to: e.to.as_nanos(),
        }
    }

    pub fn from(self) -> Timestamp {
        Timestamp::from_nanos(self.kind_from & FROM_MASK)
    }

    pub fn get(self) -> OsEvent {
        let kind = match self.kind_from >> KIND_SHIFT {
            0 => OsEventKind::Switch,
            1 => OsEventKind::Preempt,
            2 => OsEventKind::Fault,
            _ => OsEventKind::Syscall,
        };
        OsEvent {
            from: self.from(),
            to: Timestamp::from_nanos(self.to),
            kind,
        }
    }
}

/// Cuts kept for mapping late OS events (the older half goes when there
/// are more: what they removed is still known from the oldest one kept).
const MAX_CUTS: usize = 1 << 16;

#[derive(Clone, Copy, Debug)]
struct Cut {
    /// Real (CLOCK_MONOTONIC) bounds of the wait.
    from: u64,
    to: u64,
    /// Total removed once this cut is passed.
    offset_after: u64,
}

impl Cut {
    /// Total removed before this cut.
    fn offset_before(&self) -> u64 {
        self.offset_after - (self.to - self.from)
    }
}

/// One per live thread, so it is small: 56 bytes with room for one cut
/// (in a storm of threads, most wait once for a buffer: a separate
/// allocation would take 48 bytes more); the queue of OS events gives its
/// memory back whenever it empties (tens of thousands of threads
/// blocked at once each hold one of these: `os::tests`, what a blocked
/// thread costs).
#[derive(Default)]
pub struct StallTimeline {
    /// The runtime's cumulative hand-over ticks as last reported.
    seen_ticks: Ticks,
    /// (the last one says the total removed)
    cuts: SmallVec<[Cut; 1]>,
    /// Real time up to which every cut is known (the last event's).
    known_until: u64,
    /// (a pointer while empty, which is most of the time)
    pending_os: ThinVec<HeldOsEvent>,
}

impl StallTimeline {
    /// Before a datagram's events: `cumulative_ticks` is what the runtime had
    /// spent handing over until its first event, taken at `first_real`.
    pub fn note(&mut self, cumulative_ticks: Ticks, first_real: Timestamp, clock: &TickClock) {
        let delta_ticks = cumulative_ticks.saturating_sub(self.seen_ticks);
        self.seen_ticks = self.seen_ticks.max(cumulative_ticks);
        if delta_ticks == Ticks::ZERO {
            return;
        }
        let delta_ns = clock.ticks_to_ns(delta_ticks.raw() as f64) as u64;
        self.cut(first_real.as_nanos(), delta_ns);
    }

    /// A wait of `delta_ns` that ended at real time `to`.
    fn cut(&mut self, to: u64, delta_ns: u64) {
        // (a batch whose first event is stamped before events already seen,
        // e.g. after a clock step across CPUs, cuts nothing backwards)
        let from = to.saturating_sub(delta_ns).max(self.known_until).min(to);
        let offset_after = self.offset_ns() + (to - from);
        self.cuts.push(Cut {
            from,
            to,
            offset_after,
        });
        if self.cuts.len() > MAX_CUTS {
            self.cuts.drain(..MAX_CUTS / 2);
        }
    }

    /// A new process image restarts the runtime's counter (the cut so far stays).
    pub fn restart_counter(&mut self) {
        self.seen_ticks = Ticks::ZERO;
    }

    /// Total cut so far: subtract from the real time of events being added now.
    #[inline]
    pub fn offset_ns(&self) -> u64 {
        self.cuts.last().map_or(0, |c| c.offset_after)
    }

    /// Events up to real time `real` have been added (every cut before it is known).
    pub fn seen_until(&mut self, real: Timestamp) {
        self.known_until = self.known_until.max(real.as_nanos());
    }

    /// Real → timeline time for a moment at which the runtime had spent
    /// `cumulative_ticks` handing over: what it spent since the last
    /// report (not known as a cut yet) lies before that moment too.
    pub fn map_at(&self, real: Timestamp, cumulative_ticks: Ticks, clock: &TickClock) -> Timestamp {
        let unseen = cumulative_ticks.saturating_sub(self.seen_ticks);
        let unseen_ns = clock.ticks_to_ns(unseen.raw() as f64) as u64;
        let t = self.map(real);
        Timestamp::from_nanos(t.as_nanos().saturating_sub(unseen_ns))
    }

    /// Real → timeline time for any moment whose cuts are known.
    pub fn map(&self, real: Timestamp) -> Timestamp {
        let t = real.as_nanos();
        let Some(oldest) = self.cuts.first() else {
            return real;
        };
        let i = self.cuts.partition_point(|c| c.to <= t);
        let before = match i {
            0 => oldest.offset_before(),
            _ => self.cuts[i - 1].offset_after,
        };
        let t = match self.cuts.get(i) {
            Some(c) if c.from <= t => c.from, // inside a cut: its start
            _ => t,
        };
        Timestamp::from_nanos(t.saturating_sub(before))
    }

    /// Queues OS events of this thread until the cuts before them are known.
    pub fn add_os(&mut self, events: ThinVec<HeldOsEvent>) {
        if self.pending_os.is_empty() {
            self.pending_os = events; // (taken as it is: no copy)
        } else {
            self.pending_os.extend(events);
        }
    }

    /// OS events whose place on the timeline is settled (all, at the end).
    /// Only a prefix is released, so events leave in the order they came
    /// (by start): a long system call holds back the switches inside it.
    pub fn release_os(&mut self, all: bool) -> Vec<OsEvent> {
        let known = self.known_until;
        let ready_len = if all {
            self.pending_os.len()
        } else {
            self.pending_os
                .iter()
                .position(|e| e.to > known)
                .unwrap_or(self.pending_os.len())
        };
        let ready: ThinVec<HeldOsEvent> = if ready_len == self.pending_os.len() {
            std::mem::take(&mut self.pending_os) // (its memory goes too)
        } else {
            self.pending_os.drain(..ready_len).collect()
        };
        ready
            .into_iter()
            .filter_map(|e| {
                let e = e.get();
                let (from, to) = (self.map(e.from), self.map(e.to));
                // A system call inside a cut was the runtime's own hand-over.
                let instant = e.kind == OsEventKind::Fault;
                (to > from || instant).then_some(OsEvent {
                    from,
                    to,
                    kind: e.kind,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(ns: u64) -> Timestamp {
        Timestamp::from_nanos(ns)
    }

    fn timeline_with_cut(from: u64, to: u64) -> StallTimeline {
        StallTimeline {
            known_until: from,
            cuts: SmallVec::from_buf([Cut {
                from,
                to,
                offset_after: to - from,
            }]),
            ..StallTimeline::default()
        }
    }

    #[test]
    fn times_after_a_cut_move_earlier() {
        let t = timeline_with_cut(1_000, 1_500);
        assert_eq!(t.map(ts(900)), ts(900));
        assert_eq!(t.map(ts(1_200)), ts(1_000), "inside the cut: its start");
        assert_eq!(t.map(ts(2_000)), ts(1_500));
    }

    #[test]
    fn cuts_past_the_limit_fold_into_what_the_oldest_kept_says() {
        // Waits of 10 ns every 100 ns: after the k-th (k from 1), ending at
        // 100k, 10k ns are removed. Past the limit the older half goes, and
        // times before the oldest kept still map by the total before it.
        let mut t = StallTimeline::default();
        let n = MAX_CUTS as u64 + 10;
        for k in 1..=n {
            t.cut(100 * k, 10);
            t.seen_until(ts(100 * k));
        }
        assert!(t.cuts.len() <= MAX_CUTS && t.cuts.len() > MAX_CUTS / 2);
        let oldest = t.cuts[0].to / 100;
        assert!(oldest > 1, "the older cuts went");
        // just after the k-th wait: 10k removed
        for k in [oldest - 1, oldest, oldest + 1, n - 1, n] {
            assert_eq!(t.map(ts(100 * k + 5)), ts(100 * k + 5 - 10 * k), "k {k}");
        }
        assert_eq!(t.map(ts(100 * n - 5)), ts(100 * n - 10 - 10 * (n - 1)));
        assert_eq!(t.offset_ns(), 10 * n);
    }

    #[test]
    fn a_held_os_event_keeps_its_kind_and_times() {
        for kind in [
            OsEventKind::Switch,
            OsEventKind::Preempt,
            OsEventKind::Fault,
            OsEventKind::Syscall,
        ] {
            let e = OsEvent {
                from: ts(FROM_MASK - 5),
                to: ts(u64::MAX - 1),
                kind,
            };
            assert_eq!(HeldOsEvent::new(e).get(), e);
            let e = OsEvent {
                from: ts(0),
                to: ts(7),
                kind,
            };
            assert_eq!(HeldOsEvent::new(e).get(), e);
        }
        assert_eq!(std::mem::size_of::<HeldOsEvent>(), 16);
    }

    #[test]
    fn switch_inside_a_cut_disappears_and_across_shrinks() {
        let mut t = timeline_with_cut(1_000, 1_500);
        t.known_until = 10_000;
        let sw = |a, b| OsEvent {
            from: ts(a),
            to: ts(b),
            kind: OsEventKind::Switch,
        };
        t.add_os(
            [sw(1_100, 1_400), sw(800, 1_700), sw(20_000, 20_100)]
                .map(HeldOsEvent::new)
                .into(),
        );
        let out = t.release_os(false);
        assert_eq!(out, vec![sw(800, 1_200)]);
        assert_eq!(t.release_os(true), vec![sw(19_500, 19_600)]);
    }
}
