//! The recorder's side of the runtime's shared arena (`struct lapse_arena`
//! in the runtime's `csrc/lapse_rt.h`): each process image maps a memfd of
//! event buffers and passes it over the socket; its threads fill buffers in
//! place and hand them over with a `ShmEvents` datagram, or, while the
//! recorder says it is reading the arena, by the slot's state alone
//! ([`Arena::take_quiet`]). The recorder reads the events where they are and
//! frees the buffer, waking any thread that waits for one. It never writes
//! to a buffer, so the cache lines the probe writes next are not dirty in
//! the recorder's core.
//!
//! A thread's buffers are read in the order it handed them over, whichever
//! way they came: every datagram says how many buffers had been handed over
//! before it was sent ([`lapse_rt::protocol::arena_seq`]), every quiet buffer
//! its number in that order. The session reads the quiet buffers numbered
//! below a datagram's count before the datagram, the others once it has read
//! every datagram that was queued when it took them (any sent before them
//! was). A look at the slots is not a snapshot: it can find a thread's
//! buffer and miss the one the thread handed over just before, in a slot
//! looked at earlier. The next look finds that one (it was handed over
//! before the one found), so a quiet buffer is read only once a look has
//! ended after the one that took it ([`Quiet::confirmed`]).
//!
//! A process whose connection closed while it lives on (it closed every
//! descriptor and cannot open another, or a seccomp filter forbids sendmsg)
//! keeps its arena: the recorder marks it [`Arena::orphan`], stamps its
//! heartbeat at every look and takes the buffers its threads queue there
//! for want of a datagram, as if handed over quietly (no datagram can come
//! for them any more). Events that found no room are counted by the runtime
//! ([`Arena::undelivered`]).
//!
//! The buffers a process was still filling when it died without handing them
//! over (SIGKILL, or a thread blocked in a system call when another one
//! called `_exit`) are read up to the first event stamped before the buffer
//! was claimed (left from its previous use) or empty: [`Arena::salvage`].

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use lapse_rt::protocol::{arena, at, Batch, RawEvent, Ticks, BUF_EVENTS, EVENT_LEN};

use crate::linux::shm::{self, SharedMapping};

/// The words of one event, as the runtime lays them out (`at::EVENT_*`).
type EventWords = [AtomicU64; EVENT_LEN / 8];
const _: () = assert!(EVENT_LEN.is_multiple_of(8) && at::EVENT_SP + 8 <= EVENT_LEN);
const _: () = assert!(at::EVENT_FN + 8 <= EVENT_LEN && at::EVENT_STAMP + 8 <= EVENT_LEN);

pub struct Arena {
    view: ArenaView,
    /// Quiet buffers taken and not read yet, lowest number first.
    quiet: Vec<Quiet>,
    /// Its connection is gone while its process lives on.
    orphan: bool,
    /// Buffers taken that were queued for want of a connection.
    queued_taken: u64,
}

/// A buffer its thread handed over quietly, which the recorder took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quiet {
    pub buf: usize,
    /// Its number in the arena's hand-over order.
    pub seq: u64,
    pub tid: u32,
    pub batch: Batch,
    /// A look at the slots has ended since it was taken: every buffer its
    /// thread handed over quietly before it has been taken too.
    pub confirmed: bool,
}

/// A buffer a dead process left behind: its thread, the index of its first
/// event, and the events written before the process died.
pub struct Salvaged {
    pub tid: u32,
    pub first: u64,
    pub events: Vec<RawEvent>,
}

impl Arena {
    /// Maps the arena the runtime announced (`bytes`, `bufs` buffers of
    /// `events` events). `None` when its layout is not the one this recorder
    /// knows, or the memfd is not that big, or mapping fails.
    pub fn map(fd: &OwnedFd, bytes: u64, bufs: u32, events: u32) -> Option<Arena> {
        let nbufs = bufs as usize;
        if !(1..=arena::MAX_BUFS).contains(&nbufs)
            || bytes != arena::bytes(nbufs) as u64
            || events as usize != BUF_EVENTS
        {
            return None;
        }
        let a = Arena {
            view: ArenaView {
                map: Arc::new(SharedMapping::map(fd, arena::bytes(nbufs))?),
                nbufs,
            },
            quiet: Vec::new(),
            orphan: false,
            queued_taken: 0,
        };
        (a.u32_at(arena::OFF_MAGIC).load(Ordering::Acquire) == arena::MAGIC
            && a.u32_at(arena::OFF_NBUFS).load(Ordering::Acquire) as usize == nbufs)
            .then_some(a)
    }

    #[inline(always)]
    fn u32_at(&self, off: usize) -> &AtomicU32 {
        self.view.map.u32_at(off)
    }

    #[inline(always)]
    fn u64_at(&self, off: usize) -> &AtomicU64 {
        self.view.map.u64_at(off)
    }

    /// What a worker thread needs to read this arena's buffers and give
    /// them back: the mapping stays while a view of it does.
    pub fn view(&self) -> ArenaView {
        self.view.clone()
    }

    fn slot(buf: usize) -> usize {
        arena::OFF_SLOTS + buf * arena::SLOT_LEN
    }

    /// The buffers that can have been used: those below the highest one a
    /// thread ever claimed (the runtime raises the mark before a claim).
    fn used(&self) -> std::ops::Range<usize> {
        let high = self.u32_at(arena::OFF_HIGH).load(Ordering::Acquire) as usize;
        0..high.min(self.view.nbufs)
    }

    fn event_at(&self, buf: usize, k: usize) -> RawEvent {
        let at = arena::HEAD + buf * arena::BUF_BYTES + k * EVENT_LEN;
        RawEvent::from_words(
            self.u64_at(at + at::EVENT_FN).load(Ordering::Relaxed),
            self.u64_at(at + at::EVENT_STAMP).load(Ordering::Relaxed),
            self.u64_at(at + at::EVENT_SP).load(Ordering::Relaxed),
        )
    }

    /// The first `count` events of buffer `buf` (see [`ArenaView::events`]).
    #[inline]
    pub fn events(&self, buf: usize, count: usize) -> BufferEvents<'_> {
        self.view.events(buf, count)
    }

    /// How many buffers the runtime has handed over so far: it moves
    /// before their datagrams come.
    pub fn handed_over(&self) -> u64 {
        self.u64_at(arena::OFF_SEQ).load(Ordering::Relaxed)
    }

    /// Counts `n` more datagrams read from the process's connection, which
    /// its threads waiting for room in the socket watch (`lapse_try_send`).
    pub fn note_received(&self, n: u64) {
        self.u64_at(arena::OFF_RECEIVED)
            .fetch_add(n, Ordering::Release);
    }

    /// Says whether the recorder is awake and reading this arena (then the
    /// runtime hands buffers over quietly), followed by a full fence: a
    /// recorder that clears it and then looks at the slots
    /// ([`Self::take_quiet`]) finds every buffer handed over quietly before
    /// (`hand_over_quietly` in the runtime's `csrc/arena.c`).
    pub fn set_reading(&self, on: bool) {
        let word = self.u32_at(arena::OFF_READING);
        if word.load(Ordering::Relaxed) != u32::from(on) {
            word.store(u32::from(on), Ordering::SeqCst);
        }
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    /// The arena's connection is gone while its process lives on: from
    /// now on, buffers queued in it are taken as if handed over quietly
    /// (their datagrams cannot come), and the runtime is told at every
    /// [`Self::heartbeat`] that the recorder still reads it.
    pub fn orphan(&mut self) {
        self.orphan = true;
        self.set_reading(false);
    }

    /// Whether its process went on without a connection: buffers came
    /// through it queued for want of one (not just because the process
    /// closed the connection as it ended or connected again).
    pub fn carried_a_cut(&self) -> bool {
        self.queued_taken > 0
    }

    pub fn is_orphan(&self) -> bool {
        self.orphan
    }

    /// Stamps the recorder's `CLOCK_MONOTONIC` time (nanoseconds) in an
    /// orphan's header: while it is recent, its threads queue buffers here.
    pub fn heartbeat(&self, now_ns: u64) {
        self.u64_at(arena::OFF_HEARTBEAT)
            .store(now_ns, Ordering::Release);
    }

    /// Events the runtime could not hand over, spill nor leave here, that
    /// no later buffer of theirs shows as a gap.
    pub fn undelivered(&self) -> u64 {
        self.u64_at(arena::OFF_UNDELIVERED).load(Ordering::Acquire)
    }

    /// Why the runtime's last attempt to open a connection or the spill
    /// failed (an `errno`), if one did.
    pub fn cut_errno(&self) -> Option<i32> {
        let e = self.u32_at(arena::OFF_CUT_ERRNO).load(Ordering::Acquire) as i32;
        (e != 0).then_some(e)
    }

    /// Takes the buffers handed over quietly since the last look (they
    /// become the recorder's to read: [`Self::next_quiet`]), and an
    /// orphan's queued ones; how many. The ones taken before are confirmed.
    pub fn take_quiet(&mut self) -> usize {
        for q in &mut self.quiet {
            q.confirmed = true;
        }
        let before = self.quiet.len();
        for buf in self.used() {
            let slot = Self::slot(buf);
            let state = self.u32_at(slot + arena::SLOT_STATE);
            let now = state.load(Ordering::Relaxed);
            if !(now == arena::QUIET || (self.orphan && now == arena::QUEUED))
                || state
                    .compare_exchange(now, arena::TAKEN, Ordering::AcqRel, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            self.queued_taken += u64::from(now == arena::QUEUED);
            let word = |off| self.u64_at(slot + off).load(Ordering::Acquire);
            let flags = self
                .u32_at(slot + arena::SLOT_FLAGS)
                .load(Ordering::Acquire);
            self.quiet.push(Quiet {
                buf,
                seq: word(arena::SLOT_SEQ),
                tid: self.u32_at(slot + arena::SLOT_TID).load(Ordering::Acquire),
                batch: Batch {
                    first_index: word(arena::SLOT_FIRST),
                    stalled_ticks: Ticks::new(word(arena::SLOT_STALLED)),
                    count: self
                        .u32_at(slot + arena::SLOT_COUNT)
                        .load(Ordering::Acquire)
                        .min(BUF_EVENTS as u32),
                    discard: flags & u32::from(lapse_rt::protocol::FLAG_DISCARD) != 0,
                },
                confirmed: false,
            });
        }
        let took = self.quiet.len() - before;
        if took > 0 {
            self.quiet.sort_unstable_by_key(|q| q.seq);
        }
        took
    }

    /// Whether a buffer of thread `tid` is still in the arena: being filled,
    /// handed over and not read, or taken and not read. (A thread that ended
    /// with none has all its events in.)
    pub fn holds(&self, tid: u32) -> bool {
        self.quiet.iter().any(|q| q.tid == tid)
            || self.used().any(|buf| {
                let slot = Self::slot(buf);
                self.u32_at(slot + arena::SLOT_STATE)
                    .load(Ordering::Acquire)
                    != arena::FREE
                    && self.u32_at(slot + arena::SLOT_TID).load(Ordering::Acquire) == tid
            })
    }

    /// Whether quiet buffers were taken and not read yet.
    pub fn has_quiet(&self) -> bool {
        !self.quiet.is_empty()
    }

    /// The taken quiet buffer to read next: the lowest numbered one below
    /// `before` whose thread has no unconfirmed one before it (that one's
    /// own predecessor may not be taken yet). `sender`'s are read even
    /// unconfirmed: it sent a datagram numbered `before` after handing them
    /// over, so they were all there to take. The caller reads the buffer and
    /// [`Self::release`]s it.
    pub fn next_quiet(&mut self, before: u64, sender: Option<u32>) -> Option<Quiet> {
        let mut held: Vec<u32> = Vec::new(); // (threads waiting for a look)
        for (i, q) in self.quiet.iter().enumerate() {
            if q.seq >= before {
                break;
            }
            if held.contains(&q.tid) {
                continue;
            }
            if !q.confirmed && sender != Some(q.tid) {
                held.push(q.tid);
                continue;
            }
            return Some(self.quiet.remove(i));
        }
        None
    }

    /// Gives buffer `buf` back to the runtime.
    pub fn release(&self, buf: usize) {
        self.view.release(buf);
    }

    /// The buffers threads were still filling, each up to its first empty
    /// event; for a process that is gone (nothing writes them any more).
    pub fn salvage(&self) -> Vec<Salvaged> {
        let mut out = Vec::new();
        for buf in self.used() {
            let slot = Self::slot(buf);
            if self
                .u32_at(slot + arena::SLOT_STATE)
                .load(Ordering::Acquire)
                != arena::FILLING
            {
                continue;
            }
            let claimed = self
                .u64_at(slot + arena::SLOT_CLAIMED)
                .load(Ordering::Acquire);
            let events: Vec<RawEvent> = (0..BUF_EVENTS)
                .map(|k| self.event_at(buf, k))
                .take_while(|e| {
                    e.function != 0 && e.ticks.raw() >= claimed && e.ticks != Ticks::ZERO
                })
                .collect();
            if !events.is_empty() {
                out.push(Salvaged {
                    tid: self.u32_at(slot + arena::SLOT_TID).load(Ordering::Acquire),
                    first: self
                        .u64_at(slot + arena::SLOT_FIRST)
                        .load(Ordering::Acquire),
                    events,
                });
            }
        }
        out.sort_by_key(|s| (s.tid, s.first));
        out
    }
}

/// An arena's buffers, for the thread that reads one and gives it back
/// (see `workers.rs`).
#[derive(Clone)]
pub struct ArenaView {
    map: Arc<SharedMapping>,
    /// Its buffers (the runtime chose how many).
    nbufs: usize,
}

impl ArenaView {
    /// The first `count` events of buffer `buf` (which its thread handed
    /// over), read in place (its bounds are checked here, once).
    #[inline]
    pub fn events(&self, buf: usize, count: usize) -> BufferEvents<'_> {
        let (buf, count) = (buf.min(self.nbufs - 1), count.min(BUF_EVENTS));
        let at = arena::HEAD + buf * arena::BUF_BYTES;
        let events = self.map.u64_arrays(at, count);
        BufferEvents {
            events: events.iter(),
            last: events.as_ptr().wrapping_add(count.saturating_sub(1)),
        }
    }

    /// Gives buffer `buf` back to the runtime.
    pub fn release(&self, buf: usize) {
        let buf = buf.min(self.nbufs - 1);
        self.map
            .u32_at(Arena::slot(buf) + arena::SLOT_STATE)
            .store(arena::FREE, Ordering::Release);
        self.map
            .u32_at(arena::OFF_GEN)
            .fetch_add(1, Ordering::AcqRel);
        if self.map.u32_at(arena::OFF_WAITERS).load(Ordering::Acquire) > 0 {
            // (one buffer freed: one waiter can have it)
            shm::futex_wake(self.map.u32_at(arena::OFF_GEN), 1);
        }
    }
}

/// The events of one arena buffer, read in place: [`Arena::events`].
#[derive(Clone)]
pub struct BufferEvents<'a> {
    /// The events not read yet (their bounds were checked once, in
    /// [`Arena::events`]: none per event).
    events: std::slice::Iter<'a, EventWords>,
    /// Where the last event is: prefetches go no further.
    last: *const EventWords,
}

/// How far ahead of the event being read (in events) its lines are asked for.
const PREFETCH_AHEAD: usize = 64;

impl Iterator for BufferEvents<'_> {
    type Item = RawEvent;

    #[inline(always)]
    fn next(&mut self) -> Option<RawEvent> {
        let e = self.events.next()?;
        // The lines were just written on another core: ask for them well
        // ahead (up to the buffer's last event) instead of waiting for each
        // in turn. Every event asks (a line is asked for two or three times,
        // which costs less than deciding which event should).
        shm::prefetch(
            std::ptr::from_ref(e)
                .wrapping_add(PREFETCH_AHEAD)
                .min(self.last),
        );
        let word = |off: usize| e[off / 8].load(Ordering::Relaxed);
        Some(RawEvent::from_words(
            word(at::EVENT_FN),
            word(at::EVENT_STAMP),
            word(at::EVENT_SP),
        ))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.events.len();
        (n, Some(n))
    }

    fn nth(&mut self, n: usize) -> Option<RawEvent> {
        if n > 0 {
            self.events.nth(n - 1);
        }
        self.next()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A memfd laid out as the runtime makes it, and the runtime's own
    /// mapping of it (a second one, as in another process).
    struct Runtime {
        fd: OwnedFd,
        map: SharedMapping,
    }

    impl Runtime {
        /// The recorder's view of this arena.
        fn arena(&self) -> Arena {
            Arena::map(
                &self.fd,
                arena::bytes(arena::BUFS) as u64,
                arena::BUFS as u32,
                BUF_EVENTS as u32,
            )
            .expect("maps")
        }

        fn new() -> Runtime {
            let fd = shm::memfd(arena::bytes(arena::BUFS)).expect("memfd");
            let map = SharedMapping::map(&fd, arena::bytes(arena::BUFS)).expect("maps");
            let rt = Runtime { fd, map };
            rt.put32(arena::OFF_MAGIC, arena::MAGIC);
            rt.put32(arena::OFF_NBUFS, arena::BUFS as u32);
            rt
        }

        fn put32(&self, off: usize, v: u32) {
            self.map.u32_at(off).store(v, Ordering::Release);
        }

        fn put64(&self, off: usize, v: u64) {
            self.map.u64_at(off).store(v, Ordering::Release);
        }

        fn get32(&self, off: usize) -> u32 {
            self.map.u32_at(off).load(Ordering::Acquire)
        }

        /// Hands buffer `buf` over as thread `tid` would, `seq`-th.
        fn hand_over(&self, buf: usize, seq: u64, tid: u32, first: u64, count: u32, quiet: bool) {
            let slot = Arena::slot(buf);
            // (the runtime raises the mark before it claims a buffer)
            let high = self.get32(arena::OFF_HIGH).max(buf as u32 + 1);
            self.put32(arena::OFF_HIGH, high);
            self.put32(slot + arena::SLOT_TID, tid);
            self.put32(slot + arena::SLOT_COUNT, count);
            self.put64(slot + arena::SLOT_FIRST, first);
            self.put64(slot + arena::SLOT_SEQ, seq);
            let state = if quiet { arena::QUIET } else { arena::QUEUED };
            self.put32(slot + arena::SLOT_STATE, state);
        }

        fn state(&self, buf: usize) -> u32 {
            self.get32(Arena::slot(buf) + arena::SLOT_STATE)
        }
    }

    #[test]
    fn an_arena_is_as_big_as_its_runtime_says_up_to_the_most_slots_the_header_holds() {
        for bufs in [1, 7, arena::MAX_BUFS] {
            let fd = shm::memfd(arena::bytes(bufs)).expect("memfd");
            let rt = SharedMapping::map(&fd, arena::bytes(bufs)).expect("maps");
            rt.u32_at(arena::OFF_MAGIC)
                .store(arena::MAGIC, Ordering::Release);
            rt.u32_at(arena::OFF_NBUFS)
                .store(bufs as u32, Ordering::Release);
            let map = |bytes: usize, n: usize| {
                Arena::map(&fd, bytes as u64, n as u32, BUF_EVENTS as u32).is_some()
            };
            assert!(map(arena::bytes(bufs), bufs), "{bufs} buffers");
            // a header that says otherwise, or a size that does not add up
            assert!(!map(arena::bytes(bufs + 1), bufs + 1), "{bufs} + 1 buffers");
            assert!(!map(arena::bytes(bufs) - 1, bufs), "a byte short");
            // the last buffer is readable and can be given back
            let a = Arena::map(
                &fd,
                arena::bytes(bufs) as u64,
                bufs as u32,
                BUF_EVENTS as u32,
            )
            .expect("maps");
            assert_eq!(a.events(bufs - 1, BUF_EVENTS).count(), BUF_EVENTS);
            a.release(bufs - 1);
        }
        // more buffers than the header has slots for
        let n = arena::MAX_BUFS + 1;
        let fd = shm::memfd(arena::bytes(n)).expect("memfd");
        assert!(Arena::map(&fd, arena::bytes(n) as u64, n as u32, BUF_EVENTS as u32).is_none());
    }

    #[test]
    fn buffers_above_the_high_mark_are_never_looked_at() {
        let rt = Runtime::new();
        let mut a = rt.arena();
        rt.hand_over(2, 0, 7, 0, 10, true);
        // a slot that says quiet above the mark (no runtime writes one)
        let slot = Arena::slot(40);
        rt.put32(slot + arena::SLOT_STATE, arena::QUIET);
        assert_eq!(a.take_quiet(), 1, "buffer 2 only");
        assert_eq!(rt.state(40), arena::QUIET, "untouched");
        rt.hand_over(41, 1, 7, 10, 10, true);
        assert_eq!(a.take_quiet(), 2, "the mark moved past both");
    }

    #[test]
    fn quiet_buffers_come_in_hand_over_order_split_by_a_datagrams_count() {
        let rt = Runtime::new();
        let mut a = rt.arena();
        a.set_reading(true);
        assert_eq!(rt.get32(arena::OFF_READING), 1, "the runtime sees it");
        // Buffers 9, 3 and 5 are handed over quietly, numbers 4, 2 and 6;
        // buffer 7 (number 5) with a datagram: not the recorder's to take.
        rt.hand_over(9, 4, 11, 300, 10, true);
        rt.hand_over(3, 2, 11, 100, 10, true);
        rt.hand_over(5, 6, 12, 0, 10, true);
        rt.hand_over(7, 5, 11, 400, 10, false);
        assert_eq!(a.take_quiet(), 3);
        assert!([3, 5, 9].iter().all(|&b| rt.state(b) == arena::TAKEN));
        assert_eq!(rt.state(7), arena::QUEUED);
        // Not confirmed yet: read only as a datagram's sender's.
        assert_eq!(a.next_quiet(u64::MAX, None), None);
        // Buffer 7's datagram went when 6 buffers (numbers 0-5, its own
        // included) had been handed over: 3 and 9 come before it, 5 after.
        let before: Vec<_> = std::iter::from_fn(|| a.next_quiet(6, Some(11))).collect();
        assert_eq!(
            before
                .iter()
                .map(|q| (q.buf, q.seq, q.tid))
                .collect::<Vec<_>>(),
            [(3, 2, 11), (9, 4, 11)]
        );
        assert_eq!(
            before[1].batch,
            Batch {
                first_index: 300,
                stalled_ticks: Ticks::ZERO,
                count: 10,
                discard: false
            }
        );
        assert_eq!(a.take_quiet(), 0, "taken once");
        assert_eq!(a.next_quiet(u64::MAX, None).map(|q| q.buf), Some(5));
        assert!(!a.has_quiet());
        for b in [3, 5, 9] {
            a.release(b);
            assert_eq!(rt.state(b), arena::FREE);
        }
        a.set_reading(false);
        assert_eq!(rt.get32(arena::OFF_READING), 0);
    }

    #[test]
    fn a_thread_whose_earlier_buffer_was_just_taken_waits_for_the_next_look() {
        let rt = Runtime::new();
        let mut a = rt.arena();
        // The first look found thread 11's second buffer and thread 12's,
        // and missed thread 11's first (in a slot it had looked at already).
        rt.hand_over(1, 8, 11, 2560, 10, true);
        rt.hand_over(2, 9, 12, 0, 10, true);
        a.take_quiet();
        rt.hand_over(0, 7, 11, 0, 10, true);
        assert_eq!(a.take_quiet(), 1);
        // Thread 11's first is not confirmed: its second waits with it;
        // thread 12's goes.
        let now: Vec<_> = std::iter::from_fn(|| a.next_quiet(u64::MAX, None)).collect();
        assert_eq!(now.iter().map(|q| q.buf).collect::<Vec<_>>(), [2]);
        a.take_quiet();
        let next: Vec<_> = std::iter::from_fn(|| a.next_quiet(u64::MAX, None)).collect();
        assert_eq!(next.iter().map(|q| q.buf).collect::<Vec<_>>(), [0, 1]);
    }
}
