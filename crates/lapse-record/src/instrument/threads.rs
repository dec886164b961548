//! The runtime's event streams, thread by thread: ticks become timestamps,
//! addresses become function ids, and each thread's call stack is followed
//! so that a fork child can start with the stack it inherited and an exec can
//! close the calls the old image left open.
//!
//! Dead frames: every event says where its frame is on the stack (`sp`).
//! A call still open whose `sp` lies at or below that of a new entry is
//! gone (a longjmp, an exception through code without exit probes), and so
//! is one below the target of an unwind marker (the runtime's longjmp and
//! catch wrappers): the stream gets an [`EventKind::Unwind`] for it then,
//! so the analysis closes it there, not when an outer function returns.
//!
//! Context switches: after a switch marker (the runtime's swapcontext
//! wrapper) the innermost open call, swapcontext's own (or, untraced, its
//! caller's), is a barrier: the calls that follow run on another stack, which may lie
//! anywhere (inside a live frame of the caller's, even), so their places
//! prove nothing about the calls below it until it returns. When it does
//! (its context resumed), its exit closes the calls the other context left
//! above it: an exit closes the call of its function whose frame is where
//! the exit's is, not merely the innermost of its function (coroutines
//! switch between calls of one function).

use std::collections::HashMap;

use smallvec::SmallVec;

use lapse_data::codec::{EventAppender, EventEncoder};
use lapse_data::{EventKind, FunctionId, OsEvent, ThreadKey, Timestamp};
use lapse_rt::protocol::{
    RawEvent, Ticks, DROPPED_COUNT_SHIFT, HOLE_FN, MARK_DROPPED, MARK_LIMIT, MARK_NOT_ENTRY,
    MARK_SWITCH, MARK_UNTRACED, MARK_UNWIND,
};

use super::address::AddressBook;
use super::roster::Roster;
use super::stalls::{HeldOsEvent, StallTimeline};
use super::tick_clock::TickClock;
use thin_vec::ThinVec;

/// Events per `write_events` chunk.
pub const BATCH_EVENTS: usize = 16384;
/// Deeper stacks are not followed (the events are still written).
const MAX_TRACKED_DEPTH: usize = 1 << 16;
const CACHE_SLOTS: usize = 512;

/// A thread's open calls: two fit in the record itself (tens of thousands
/// of threads blocked at once are often two calls deep), more go to the
/// heap (twice as much room each time it fills).
type Stack = SmallVec<[OpenCall; 2]>;

/// What adding one batch to a thread's stream did ([`ThreadStream::fill`]).
#[derive(Default)]
pub struct Filled {
    /// Events ready for the file (a full batch).
    pub batch: Option<EventEncoder>,
    /// Events the runtime's indices say never arrived, and holes.
    lost: u64,
    /// Events added to the stream (unwinds the recorder made included).
    appended: u64,
    untraced: u64,
    not_entry: u64,
    /// `--min-time`: calls the runtime dropped as too short, per function.
    dropped: Vec<(FunctionId, u64)>,
}

impl Filled {
    /// A batch of `n` events that could not be added: all lost.
    pub fn lost(n: u64) -> Filled {
        Filled {
            lost: n,
            ..Filled::default()
        }
    }
}

/// What turns an address into a function: the address book itself, or the
/// book shared with the recorder's worker threads (`workers.rs`).
pub trait Resolve {
    /// See [`AddressBook::version`].
    fn version(&mut self, pid: u32, gen: u32) -> u64;
    /// See [`AddressBook::resolve`].
    fn resolve(&mut self, pid: u32, gen: u32, addr: u64, time: Timestamp) -> (FunctionId, bool);
}

impl Resolve for AddressBook {
    fn version(&mut self, pid: u32, gen: u32) -> u64 {
        AddressBook::version(self, pid, gen)
    }
    fn resolve(&mut self, pid: u32, gen: u32, addr: u64, time: Timestamp) -> (FunctionId, bool) {
        AddressBook::resolve(self, pid, gen, addr, time)
    }
}

/// An open call as the recorder follows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenCall {
    pub function: FunctionId,
    /// Where its frame is on the stack (the runtime's `sp`; 0: not known).
    pub sp: u64,
    /// A context switch's call (swapcontext, after its marker): the
    /// stack-pointer rule stops here.
    pub switch: bool,
}

pub struct ThreadStream {
    /// Events not written yet, already encoded as the file holds them
    /// (none while the thread is quiet: then the pointer is all it costs).
    pending: Option<Box<EventEncoder>>,
    stack: Stack,
    /// Its thread record has been written (it sent events).
    pub announced: bool,
    /// Index of the next event the runtime will send for this thread.
    next_index: u64,
    last_ts: Timestamp,
    /// Hand-over waits cut out of this thread's timeline.
    pub stalls: StallTimeline,
}

/// address → id for one process image, direct-mapped: most events hit here,
/// not the hash maps. One per process, not per thread, so that thousands of
/// threads cost the recorder little (8 KiB each would be 40 MB for 5,000).
pub struct FnCache {
    /// The image and the version of its mappings the slots were filled
    /// from (see [`AddressBook::version`]).
    gen: u32,
    version: u64,
    slots: Box<[(u64, FunctionId); CACHE_SLOTS]>,
}

impl FnCache {
    /// `pid`'s cache in `caches`, made or emptied for image `gen` and the
    /// book's mappings `version`.
    pub fn ready(
        caches: &mut HashMap<u32, FnCache>,
        pid: u32,
        gen: u32,
        version: u64,
    ) -> &mut FnCache {
        let cache = caches
            .entry(pid)
            .or_insert_with(|| FnCache::new(gen, version));
        if (cache.gen, cache.version) != (gen, version) {
            *cache = FnCache::new(gen, version);
        }
        cache
    }

    fn new(gen: u32, version: u64) -> FnCache {
        FnCache {
            gen,
            version,
            slots: Box::new([(u64::MAX, FunctionId(0)); CACHE_SLOTS]),
        }
    }
}

impl ThreadStream {
    pub fn new() -> Self {
        ThreadStream {
            pending: None, // grows to a batch only for busy threads
            stack: Stack::new(),
            announced: false,
            next_index: 0,
            last_ts: Timestamp::default(),
            stalls: StallTimeline::default(),
        }
    }

    /// How many calls are open on the thread now.
    #[cfg(test)]
    pub fn open_calls(&self) -> usize {
        self.stack.len()
    }

    /// Whether the runtime has sent events for the thread (its next batch
    /// is not numbered 0).
    pub fn has_sent(&self) -> bool {
        self.next_index > 0
    }

    pub fn last_ts(&self) -> Timestamp {
        self.last_ts
    }

    #[inline]
    fn push(&mut self, ts: Timestamp, kind: EventKind, call: OpenCall) {
        let mut last_ts = self.last_ts;
        let pending = self.pending.get_or_insert_with(Box::default);
        append(
            &mut last_ts,
            &mut self.stack,
            &mut pending.appender(),
            ts,
            kind,
            call,
        );
        self.last_ts = last_ts;
    }

    /// Events not written yet.
    fn pending_len(&self) -> usize {
        self.pending.as_ref().map_or(0, |p| p.len())
    }

    /// Events ready for the file (a full batch, or everything when `all`).
    pub fn take_batch(&mut self, all: bool) -> Option<EventEncoder> {
        let n = self.pending_len();
        if n >= BATCH_EVENTS || (all && n > 0) {
            let batch = self.pending.take().map(|b| *b);
            // A quiet thread flushed by the timer gets no buffer back.
            if !all {
                self.pending = Some(Box::new(EventEncoder::with_capacity(BATCH_EVENTS)));
            }
            batch
        } else {
            None
        }
    }

    /// Adds a batch of the thread's events (see [`Threads::add_events`]):
    /// `cache` is its process's address cache (ready for `gen` and the
    /// book's version), `book` resolves what the cache does not hold.
    #[allow(clippy::too_many_arguments)]
    pub fn fill(
        &mut self,
        pid: u32,
        gen: u32,
        cache: &mut FnCache,
        first_index: u64,
        stalled_ticks: Ticks,
        raw: impl Iterator<Item = RawEvent> + Clone,
        book: &mut impl Resolve,
        clock: &TickClock,
    ) -> Filled {
        let s = self;
        // (indices count events: a leaf call's slot holds two)
        let mut skip = s.next_index.saturating_sub(first_index);
        let mut lost = 0;
        if first_index > s.next_index {
            lost = first_index - s.next_index;
            s.next_index = first_index;
        }
        // Events taken already (a copy sent at an exit-time flush, then the
        // buffer itself) go; a slot whose entry came in the copy and which
        // holds its leaf call's exit now gives that exit alone.
        let mut raw = raw;
        let mut exit_only = None;
        while skip > 0 {
            let Some(e) = raw.next() else { break };
            if e.events() > skip {
                exit_only = Some(e.exit_of_leaf());
                break;
            }
            skip -= e.events();
        }
        let raw = exit_only.into_iter().chain(raw);
        // The first event that is not a hole dates the batch: its stall, and
        // the base of its tick conversion. Holes (slots whose probe never
        // wrote them) are lost events.
        let Some(first) = raw.clone().find(|e| e.function != HOLE_FN) else {
            // (everything was a duplicate or a hole)
            let holes = raw.count() as u64;
            s.next_index += holes;
            return Filled::lost(lost.saturating_add(holes));
        };
        let seg = clock.segment(first.ticks);
        s.stalls
            .note(stalled_ticks, seg.to_timestamp(first.ticks), clock);
        // Real time, and timeline time (the cuts so far taken out).
        let timeline = seg.earlier_by(s.stalls.offset_ns());
        // The loop works on locals, so nothing is reloaded after each store
        // into the encoder's buffer.
        let mut last_ts = s.last_ts;
        let mut last_ticks = None;
        let mut holes = 0u64;
        let mut leaves = 0u64;
        let mut markers = 0u64;
        let mut untraced = 0u64;
        let mut not_entry = 0u64;
        let mut dropped = Vec::new();
        let mut version = cache.version;
        // (the stream's stack and encoder as locals: stores into the
        // encoder's bytes cannot then be taken to change them)
        let mut stack_local = std::mem::take(&mut s.stack);
        let mut pending_local = s.pending.take().unwrap_or_default();
        let mut appender = pending_local.appender();
        let (slots, stack, pending) = (&mut *cache.slots, &mut stack_local, &mut appender);
        let (mut calls, appended_before) = (0u64, pending.len());
        // One plain loop over the events with its state in locals (a
        // closure called per event kept reloading it from memory).
        let mut raw = raw;
        // (an event the leaf run below read and did not take)
        let mut next = None;
        while let Some(e) = next.take().or_else(|| raw.next()) {
            if e.function < MARK_LIMIT {
                match e.function {
                    HOLE_FN => holes += 1,
                    MARK_UNWIND => {
                        last_ticks = Some(e.ticks);
                        let ts = timeline.to_timestamp(e.ticks);
                        unwind_below(&mut last_ts, stack, pending, ts, e.sp);
                        markers += 1;
                    }
                    MARK_UNTRACED => {
                        untraced += 1;
                        markers += 1;
                    }
                    MARK_SWITCH => {
                        switched(stack, e.sp);
                        markers += 1;
                    }
                    MARK_NOT_ENTRY => {
                        not_entry += 1;
                        markers += 1;
                    }
                    MARK_DROPPED => {
                        // (the function's address, and how many of its calls)
                        let addr = e.sp & ((1u64 << DROPPED_COUNT_SHIFT) - 1);
                        let (f, _) = book.resolve(pid, gen, addr, seg.to_timestamp(e.ticks));
                        let now = book.version(pid, gen);
                        if now != version {
                            slots.fill((u64::MAX, FunctionId(0)));
                            version = now;
                        }
                        dropped.push((f, e.sp >> DROPPED_COUNT_SHIFT));
                        markers += 1;
                    }
                    _ => markers += 1, // (a marker this recorder does not know)
                }
                continue;
            }
            calls += 1;
            let exit_ticks = e.leaf_exit();
            last_ticks = Some(exit_ticks);
            let slot = cache_slot(e.function);
            let f = if slots[slot].0 == e.function {
                slots[slot].1
            } else {
                // (resolved at the event's own time: mappings have lifetimes)
                let real = seg.to_timestamp(e.ticks);
                let (f, always) = book.resolve(pid, gen, e.function, real);
                let now = book.version(pid, gen);
                if now != version {
                    // (a mapping read from /proc replaced one)
                    slots.fill((u64::MAX, FunctionId(0)));
                    version = now;
                }
                if always {
                    slots[slot] = (e.function, f);
                }
                f
            };
            let kind = if e.is_exit {
                EventKind::Exit
            } else {
                EventKind::Enter
            };
            let call = OpenCall {
                function: f,
                sp: e.sp,
                switch: false,
            };
            let ts = timeline.to_timestamp(e.ticks);
            if e.leaf != 0 {
                // (a leaf call in one slot: its entry, then its exit)
                leaves += 1;
                let exit = timeline.to_timestamp(exit_ticks);
                append_leaf(&mut last_ts, stack, pending, ts, exit, call);
                // Most of a call-heavy thread's slots are leaf calls in a
                // row from one frame (a loop calling small functions): the
                // same steps, in a loop that holds only what they need.
                // It stops at the first slot that is not a leaf call whose
                // function the cache holds, or whose frame proves a call
                // gone, and leaves it to the loop above.
                let keeps = frames_kept_below(stack);
                for n in raw.by_ref() {
                    let slot = cache_slot(n.function);
                    let (cached, f) = slots[slot];
                    if n.leaf == 0 || cached != n.function || n.sp > keeps {
                        next = Some(n);
                        break;
                    }
                    calls += 1;
                    leaves += 1;
                    let exit_ticks = n.leaf_exit();
                    last_ticks = Some(exit_ticks);
                    let ts = timeline.to_timestamp(n.ticks).max(last_ts);
                    let exit = timeline.to_timestamp(exit_ticks).max(ts);
                    last_ts = exit;
                    pending.push_leaf(ts, exit, f);
                }
            } else {
                append(&mut last_ts, stack, pending, ts, kind, call);
            }
        }
        let appended = (pending.len() - appended_before) as u64;
        drop(appender);
        s.stack = stack_local;
        s.pending = Some(pending_local);
        cache.version = version;
        s.last_ts = last_ts;
        s.next_index += calls + leaves + markers + holes;
        if let Some(ticks) = last_ticks {
            s.stalls.seen_until(seg.to_timestamp(ticks));
        }
        Filled {
            batch: s.take_batch(false),
            lost: lost.saturating_add(holes),
            appended,
            untraced,
            not_entry,
            dropped,
        }
    }

    /// Closes every open call at `ts` (the image is being replaced).
    pub fn close_all(&mut self, ts: Timestamp) {
        while let Some(&f) = self.stack.last() {
            self.push(ts, EventKind::Exit, f);
        }
    }
}

/// Appends one event to a thread's stream (parts passed apart, so the
/// recorder's hot loop can keep them in locals); an entry first closes the
/// calls it proves gone.
#[inline(always)]
fn append(
    last_ts: &mut Timestamp,
    stack: &mut Stack,
    pending: &mut EventAppender,
    ts: Timestamp,
    kind: EventKind,
    call: OpenCall,
) {
    // Ticks can step back by a few ns across CPUs: keep the stream ordered.
    let ts = ts.max(*last_ts);
    *last_ts = ts;
    match kind {
        EventKind::Enter => {
            // A frame below this one's place on the stack is gone. Not one
            // at the same place: a function inlined into another keeps its
            // probes and shares its frame (a sibling after a longjmp or a
            // catch at the same place is closed by the runtime's unwind
            // marker instead). A stack pointer of 0 is unknown: it proves
            // nothing.
            close_gone(stack, pending, ts, call.sp);
            if stack.len() < MAX_TRACKED_DEPTH {
                stack.push(call);
            }
        }
        EventKind::Exit => match stack.last() {
            Some(top)
                if top.function == call.function
                    && (top.sp == call.sp || top.sp == 0 || call.sp == 0) =>
            {
                stack.pop();
            }
            _ => exit_below(stack, pending, ts, call),
        },
        EventKind::Unwind => {
            if let Some(at) = stack.iter().rposition(|f| f.function == call.function) {
                stack.truncate(at);
            }
        }
    }
    pending.push(ts, kind, call.function);
}

/// Appends a leaf call (its entry at `ts`, its exit at `exit`, nothing
/// between): what [`append`] does for the two, without the stack's push
/// and pop.
#[inline(always)]
fn append_leaf(
    last_ts: &mut Timestamp,
    stack: &mut Stack,
    pending: &mut EventAppender,
    ts: Timestamp,
    exit: Timestamp,
    call: OpenCall,
) {
    let ts = ts.max(*last_ts);
    let exit = exit.max(ts);
    *last_ts = exit;
    close_gone(stack, pending, ts, call.sp);
    pending.push_leaf(ts, exit, call.function);
}

/// Where the address cache keeps function address `addr`.
#[inline(always)]
fn cache_slot(addr: u64) -> usize {
    ((addr >> 4) as usize) % CACHE_SLOTS
}

/// The highest frame an entry can have without closing a call as gone
/// (see [`close_gone`]): every frame when the top call's place is unknown
/// or the top call is a context switch's.
#[inline(always)]
fn frames_kept_below(stack: &Stack) -> u64 {
    match stack.last() {
        Some(top) if top.sp != 0 && !top.switch => top.sp,
        _ => u64::MAX,
    }
}

/// An entry at `sp` closes the open calls its frame proves gone: those
/// whose frame lies below it (see [`append`]).
#[inline(always)]
fn close_gone(stack: &mut Stack, pending: &mut EventAppender, ts: Timestamp, sp: u64) {
    while let Some(&top) = stack.last() {
        if top.sp >= sp || sp == 0 || top.sp == 0 || top.switch {
            break;
        }
        stack.pop();
        pending.push(ts, EventKind::Unwind, top.function);
    }
}

/// An exit that is not the top call's: it closes the innermost call of its
/// function whose frame is where the exit's is, closing the calls above it
/// as gone (a resumed context returns past what the other context left;
/// the analysis would take the innermost call of the function), else the
/// innermost call of its function (its own repair closes those above).
#[cold]
#[inline(never)]
fn exit_below(stack: &mut Stack, pending: &mut EventAppender, ts: Timestamp, call: OpenCall) {
    let innermost = stack.iter().rposition(|f| f.function == call.function);
    let placed = stack
        .iter()
        .rposition(|f| f.function == call.function && f.sp == call.sp && call.sp != 0);
    match (placed, innermost) {
        (Some(at), Some(inner)) if at != inner => {
            while stack.len() > at + 1 {
                if let Some(top) = stack.pop() {
                    pending.push(ts, EventKind::Unwind, top.function);
                }
            }
            stack.truncate(at);
        }
        (_, Some(inner)) => stack.truncate(inner),
        _ => {}
    }
}

/// An unwind marker: every open call whose frame lies below `floor` is gone
/// (up to a context switch's call: those below it are another context's).
fn unwind_below(
    last_ts: &mut Timestamp,
    stack: &mut Stack,
    pending: &mut EventAppender,
    ts: Timestamp,
    floor: u64,
) {
    let ts = ts.max(*last_ts);
    *last_ts = ts;
    while let Some(&top) = stack.last() {
        if top.sp >= floor || top.switch {
            break;
        }
        stack.pop();
        pending.push(ts, EventKind::Unwind, top.function);
    }
}

/// A switch marker (`sp`: the slot of swapcontext's return address): the
/// innermost open call, if its frame is there or above (swapcontext's own
/// when it was traced, its marker following its entry; else its innermost
/// traced caller), becomes a barrier to the stack-pointer rule.
fn switched(stack: &mut Stack, sp: u64) {
    if let Some(top) = stack.last_mut().filter(|top| top.sp >= sp && sp != 0) {
        top.switch = true;
    }
}

/// What a thread's stream left when it was let go (it ended long ago).
pub struct Retired {
    /// Its last events, to write.
    pub events: EventEncoder,
    /// Its OS events not written yet, on its timeline.
    pub os: Vec<OsEvent>,
    /// Its end, on its own timeline (not before its last event).
    pub end: Timestamp,
}

/// How many threads alive at once the recorder follows by default: about
/// 340 bytes of its memory each (two calls open, a wait cut, an OS event
/// held; BENCHMARKS.md), so 17 MiB of code and arena plus these stay
/// within 64 MiB with room for deeper stacks. (With the kernel's default
/// pid_max of 32,768 it is never reached.)
pub const THREADS_FOLLOWED: usize = 100_000;

/// The variable that changes [`THREADS_FOLLOWED`].
pub const ENV_MAX_THREADS: &str = "LAPSE_MAX_THREADS";

/// How many threads alive at once this recording follows: `LAPSE_MAX_THREADS`
/// when set (a whole number, at least 1), [`THREADS_FOLLOWED`] otherwise.
pub fn threads_followed() -> Result<usize, String> {
    match std::env::var_os(ENV_MAX_THREADS) {
        None => Ok(THREADS_FOLLOWED),
        Some(v) => v
            .to_str()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|&n| n >= 1)
            .ok_or_else(|| {
                format!(
                    "{ENV_MAX_THREADS}={} is not a number of threads (a whole number, at least 1)",
                    v.to_string_lossy()
                )
            }),
    }
}

/// Threads refused because the roster was full, by thread id (a bit each,
/// made at the first refusal: the kernel's ids are below 2^22, so 512 KiB
/// at most). Their later batches are refused too: a thread is followed
/// whole or not at all, and what it loses is counted once.
#[derive(Default)]
struct Refused(Vec<u64>);

impl Refused {
    const IDS: usize = 1 << 22;

    fn has(&self, tid: u32) -> bool {
        let i = tid as usize % Self::IDS;
        self.0.get(i / 64).is_some_and(|w| w >> (i % 64) & 1 == 1)
    }

    fn set(&mut self, tid: u32, refused: bool) {
        let i = tid as usize % Self::IDS;
        if self.0.is_empty() {
            if !refused {
                return;
            }
            self.0 = vec![0; Self::IDS / 64];
        }
        let bit = 1u64 << (i % 64);
        if refused {
            self.0[i / 64] |= bit;
        } else {
            self.0[i / 64] &= !bit;
        }
    }
}

/// All threads' streams plus the stacks parked at fork time.
pub struct Threads {
    /// (one of the two records a thread alive costs: `roster.rs`)
    streams: Roster<ThreadStream>,
    /// Hand-over waits cut out of the timelines of threads let go.
    retired_removed_ns: u64,
    /// (parent pid, fork ticks) → the forking thread's stack then.
    fork_stacks: HashMap<(u32, Ticks), Stack>,
    /// pid → image generation its events resolve in (see AddressBook).
    gens: HashMap<u32, u32>,
    /// pid → its address cache.
    caches: HashMap<u32, FnCache>,
    /// Events the runtime's indices say never arrived.
    pub lost_events: u64,
    pub events: u64,
    /// Threads that stopped installing return trampolines (too deep).
    pub untraced_threads: u64,
    /// Sanitizer-coverage guards that fired away from their function's
    /// entry (inlined code): the runtime recorded no call for them.
    pub non_entry_guards: u64,
    /// `--min-time`: calls the runtime dropped as too short, per function.
    pub dropped_calls: HashMap<FunctionId, u64>,
    /// Threads not followed: they began while the recorder followed as many
    /// threads as it may at once (their events are lost events).
    pub refused_threads: u64,
    refused: Refused,
    limit: usize,
}

impl Default for Threads {
    /// (no limit)
    fn default() -> Self {
        Threads::with_limit(usize::MAX)
    }
}

impl Threads {
    /// Streams for at most `limit` threads alive at once, where processes'
    /// main threads may go an eighth past it (a program's main thread often
    /// sends its first events last, at its exit: it is still followed).
    pub fn with_limit(limit: usize) -> Threads {
        Threads {
            streams: Roster::with_limit(limit.saturating_add(limit / 8)),
            retired_removed_ns: 0,
            fork_stacks: HashMap::new(),
            gens: HashMap::new(),
            caches: HashMap::new(),
            lost_events: 0,
            events: 0,
            untraced_threads: 0,
            non_entry_guards: 0,
            dropped_calls: HashMap::new(),
            refused_threads: 0,
            refused: Refused::default(),
            limit,
        }
    }

    /// How many threads alive at once it follows (main threads apart).
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The stream of `key`, made if the thread is new, it was not refused
    /// before and there is room (a thread's batch numbered 0 is its first: a
    /// thread id refused before is then a new thread's).
    fn admit(&mut self, key: ThreadKey, first_index: u64) -> Option<&mut ThreadStream> {
        if self.streams.get(key).is_none() {
            if first_index == 0 {
                self.refused.set(key.tid, false);
            }
            let refused = self.refused.has(key.tid);
            // (main threads have the roster's room past the limit)
            let room = if key.pid == key.tid {
                self.streams.limit()
            } else {
                self.limit
            };
            if refused || self.streams.len() >= room {
                if !refused {
                    self.refused_threads += 1;
                    self.refused.set(key.tid, true);
                }
                return None;
            }
        }
        self.streams.get_or_insert_with(key, ThreadStream::new)
    }

    pub fn streams_mut(&mut self) -> impl Iterator<Item = (ThreadKey, &mut ThreadStream)> {
        self.streams.iter_mut()
    }

    pub fn streams(&self) -> impl Iterator<Item = (ThreadKey, &ThreadStream)> {
        self.streams.iter()
    }

    /// Lets an ended thread's stream go, with its OS events not handed to
    /// it yet (taken from `os`): nothing of it stays (a later thread with the
    /// same id starts afresh).
    pub fn retire(
        &mut self,
        key: ThreadKey,
        real_end: Timestamp,
        os: &mut ThinVec<HeldOsEvent>,
    ) -> Option<Retired> {
        let mut s = self.streams.remove(key)?;
        if key.pid == key.tid {
            self.caches.remove(&key.pid); // (made again if its other threads go on)
        }
        s.stalls.add_os(std::mem::take(os));
        self.retired_removed_ns += s.stalls.offset_ns();
        Some(Retired {
            events: s.take_batch(true).unwrap_or_default(),
            os: s.stalls.release_os(true),
            end: s.stalls.map(real_end).max(s.last_ts),
        })
    }

    /// Hand-over waits cut out of all threads' timelines so far.
    pub fn removed_ns(&self) -> u64 {
        self.retired_removed_ns
            + self
                .streams
                .values()
                .map(|s| s.stalls.offset_ns())
                .sum::<u64>()
    }

    /// Process `pid` is gone and all its threads were let go.
    pub fn forget_process(&mut self, pid: u32) {
        self.gens.remove(&pid);
        self.caches.remove(&pid);
    }

    /// From now on, events of `pid` come from image generation `gen`.
    pub fn set_gen(&mut self, pid: u32, gen: u32) {
        self.gens.insert(pid, gen);
    }

    /// The stream of a thread the runtime has sent events for, if any.
    pub fn get(&self, key: ThreadKey) -> Option<&ThreadStream> {
        self.streams.get(key)
    }

    pub fn get_mut(&mut self, key: ThreadKey) -> Option<&mut ThreadStream> {
        self.streams.get_mut(key)
    }

    /// Adds one EVENTS datagram whose first event has index `first_index`,
    /// sent after the thread had spent `stalled_ticks` in hand-overs.
    /// Events already received (a buffer sent twice at exit) are skipped.
    /// (`raw` is cloned to find the first event that is not a hole.)
    #[allow(clippy::too_many_arguments)]
    pub fn add_events(
        &mut self,
        key: ThreadKey,
        first_index: u64,
        stalled_ticks: Ticks,
        raw: impl Iterator<Item = RawEvent> + Clone,
        book: &mut AddressBook,
        clock: &TickClock,
    ) -> Option<EventEncoder> {
        if self.admit(key, first_index).is_none() {
            // (a thread past the limit: all it sends is lost)
            // (a leaf call's slot is two events)
            let n: u64 = raw.map(|e| e.events()).sum();
            self.lost_events = self.lost_events.saturating_add(n);
            return None;
        }
        let pid = key.pid;
        let gen = self.gen_of(pid);
        let cache = FnCache::ready(&mut self.caches, pid, gen, book.version(pid, gen));
        let s = self.streams.get_mut(key)?; // (admitted above)
        let filled = s.fill(
            pid,
            gen,
            cache,
            first_index,
            stalled_ticks,
            raw,
            book,
            clock,
        );
        self.count(&filled);
        filled.batch
    }

    /// The image generation `pid`'s events resolve in now.
    fn gen_of(&self, pid: u32) -> u32 {
        self.gens.get(&pid).copied().unwrap_or(0)
    }

    /// Adds what a batch did to the counters.
    fn count(&mut self, f: &Filled) {
        self.lost_events = self.lost_events.saturating_add(f.lost);
        self.events += f.appended;
        self.untraced_threads += f.untraced;
        self.non_entry_guards += f.not_entry;
        for &(function, n) in &f.dropped {
            *self.dropped_calls.entry(function).or_default() += n;
        }
    }

    /// `--min-time`: the calls the runtime dropped, per function, as the
    /// file holds them; `None` when there were none.
    pub fn dropped_record(&self) -> Option<lapse_data::Record> {
        if self.dropped_calls.is_empty() {
            return None;
        }
        let mut dropped: Vec<lapse_data::DroppedCalls> = self
            .dropped_calls
            .iter()
            .map(|(&function, &calls)| lapse_data::DroppedCalls { function, calls })
            .collect();
        dropped.sort_by_key(|d| d.function.0);
        Some(lapse_data::Record::Dropped(dropped))
    }

    /// Takes thread `key`'s stream out, for a worker thread to add a batch
    /// of `count` events numbered from `first_index` to ([`ThreadStream::fill`];
    /// `workers.rs`), with the image generation its addresses resolve in.
    /// `None` when the thread is not followed (its events are counted lost).
    /// An empty stream stands in for it until [`Self::give_back`]: nothing
    /// else may look at the thread meanwhile.
    pub fn lend(
        &mut self,
        key: ThreadKey,
        first_index: u64,
        count: u64,
    ) -> Option<(ThreadStream, u32)> {
        let gen = self.gen_of(key.pid);
        match self.admit(key, first_index) {
            Some(s) => Some((std::mem::replace(s, ThreadStream::new()), gen)),
            None => {
                self.lost_events = self.lost_events.saturating_add(count);
                None
            }
        }
    }

    /// Puts back a stream taken by [`Self::lend`], with what its batch did.
    pub fn give_back(&mut self, key: ThreadKey, stream: ThreadStream, filled: &Filled) {
        if let Some(s) = self.streams.get_mut(key) {
            *s = stream;
        }
        self.count(filled);
    }

    /// The thread is about to fork: remember its stack for the child.
    pub fn fork(&mut self, key: ThreadKey, fork_ticks: Ticks) {
        // (a thread with no stream has no call open)
        let stack = self.streams.get(key).map(|s| s.stack.clone());
        let stack = stack.unwrap_or_default();
        self.fork_stacks.insert((key.pid, fork_ticks), stack);
    }

    /// A fork child's first message: it starts inside the calls its parent
    /// thread had open, entered at the moment of the fork. Returns how many
    /// (those enters are inherited frames, not calls: the file says so).
    pub fn child(&mut self, key: ThreadKey, ppid: u32, fork_ticks: Ticks, at: Timestamp) -> u32 {
        let stack = self
            .fork_stacks
            .remove(&(ppid, fork_ticks))
            .unwrap_or_default();
        let Some(s) = self.admit(key, 0) else {
            return 0;
        };
        let frames = stack.len() as u32;
        for f in stack {
            s.push(at, EventKind::Enter, f);
        }
        self.events += s.pending_len() as u64;
        frames
    }

    /// An exec replaced process `pid`: its threads' open calls end at `at`,
    /// and the new image starts numbering events from zero.
    pub fn exec(&mut self, pid: u32, at: Timestamp) -> Vec<(ThreadKey, EventEncoder)> {
        self.caches.remove(&pid);
        let mut out = Vec::new();
        for (key, s) in self.streams.iter_mut().filter(|(k, _)| k.pid == pid) {
            let before = s.pending_len();
            let at = s.stalls.map(at);
            s.close_all(at.max(s.last_ts));
            s.stalls.restart_counter();
            self.events += (s.pending_len() - before) as u64;
            s.next_index = 0;
            if let Some(b) = s.take_batch(true) {
                out.push((key, b));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instrument::tick_clock::TickClock;

    /// An event of a frame at the top of an (imaginary) stack at 0x7000.
    fn raw(function: u64, ticks: u64, is_exit: bool) -> RawEvent {
        at(function, ticks, is_exit, 0x7000)
    }

    fn at(function: u64, ticks: u64, is_exit: bool, sp: u64) -> RawEvent {
        RawEvent {
            function,
            ticks: Ticks::new(ticks),
            is_exit,
            sp,
            leaf: 0,
        }
    }

    /// A leaf call in one slot, as the runtime writes it.
    fn leaf(function: u64, ticks: u64, exit_after: u16, sp: u64) -> RawEvent {
        use lapse_rt::protocol::{LEAF_BIT, LEAF_SHIFT};
        let sp = sp | LEAF_BIT | (u64::from(exit_after) << LEAF_SHIFT);
        RawEvent::from_words(function, ticks << 1, sp)
    }

    /// Thread 1/1's events from index `first` (no hand-over waits).
    fn add<const N: usize>(
        t: &mut Threads,
        book: &mut AddressBook,
        clock: &TickClock,
        first: u64,
        events: [RawEvent; N],
    ) -> Option<EventEncoder> {
        let key = ThreadKey::new(1, 1);
        t.add_events(key, first, Ticks::ZERO, events.into_iter(), book, clock)
    }

    /// (kind, function) of what a thread's stream holds so far.
    fn stream_of(t: &mut Threads, pid: u32, tid: u32) -> Vec<(EventKind, FunctionId)> {
        let b = t
            .get_mut(ThreadKey::new(pid, tid))
            .expect("a stream")
            .take_batch(true)
            .unwrap_or_default();
        b.events().iter().map(|e| (e.kind, e.function)).collect()
    }

    /// What the recorder's hot loop costs per event, on `mt.c`'s pattern
    /// (a tiny function entered and left over and over under `main`), and
    /// what writing the batches costs (encoding, zstd). A timing, not a
    /// test: `cargo test --release -p lapse-record per_event_cost --
    /// --ignored --nocapture` (BENCHMARKS.md).
    #[test]
    #[ignore = "a timing (run it with --release --ignored --nocapture)"]
    fn per_event_cost() {
        // as the runtime sends it: a slot for each leaf call (its entry and
        // exit); and, for comparison, two slots a call (the runtime before
        // leaf slots, and calls that are not leaves)
        for leaves in [true, false] {
            let (decode, write, bytes) = per_event_cost_of(leaves);
            println!(
                "per event, {}: add_events {decode:.2} ns, writing {write:.2} ns ({bytes:.3} bytes)",
                if leaves { "leaf slots" } else { "a slot an event" },
            );
        }
    }

    /// (add_events, writing: ns an event; bytes an event)
    fn per_event_cost_of(leaves: bool) -> (f64, f64, f64) {
        use std::time::Instant;
        let clock = TickClock::calibrate(None);
        let mut book = AddressBook::default();
        let mut t = Threads::default();
        let key = ThreadKey::new(999_999, 1);
        let (per_buf, buffers, rounds) = (2560, 400, 10);
        let mut ticks = 1_000u64;
        let mut w = lapse_data::DataWriter::new(std::io::sink()).unwrap();
        let (mut decode, mut write) = (0u128, 0u128);
        let mut index = 0;
        for round in 0..rounds {
            let mut bufs = Vec::with_capacity(buffers);
            for b in 0..buffers {
                let first = round == 0 && b == 0;
                let mut buf = Vec::with_capacity(per_buf);
                if first {
                    buf.push(at(0x40_1000, ticks, false, 0x7ff0));
                }
                while buf.len() < per_buf {
                    ticks += 9 + (ticks % 7);
                    if leaves {
                        buf.push(leaf(0x40_1200, ticks, 9, 0x7fe0));
                        ticks += 9;
                    } else {
                        let exit = buf.len() % 2 == usize::from(first);
                        buf.push(at(0x40_1200, ticks, exit, 0x7fe0));
                    }
                }
                bufs.push(buf);
            }
            for buf in &bufs {
                let t0 = Instant::now();
                let got = t.add_events(
                    key,
                    index,
                    Ticks::ZERO,
                    buf.iter().copied(),
                    &mut book,
                    &clock,
                );
                let t1 = Instant::now();
                if let Some(b) = got {
                    w.write_encoded_events(ThreadKey::new(1, 1), &b).unwrap();
                }
                decode += t1.duration_since(t0).as_nanos();
                write += t1.elapsed().as_nanos();
                index += buf.len() as u64;
            }
        }
        let n = t.events as f64;
        assert!(n >= (rounds * buffers * per_buf) as f64);
        (
            decode as f64 / n,
            write as f64 / n,
            w.bytes_written() as f64 / n,
        )
    }

    #[test]
    fn duplicates_are_dropped_and_gaps_counted() {
        let clock = TickClock::calibrate(None);
        let mut book = AddressBook::default();
        let mut t = Threads::default();
        let evs = [raw(0x4010, 100, false), raw(0x4010, 200, true)];
        add(&mut t, &mut book, &clock, 0, evs);
        // the same buffer again (sent by an exit-time flush), plus one more
        let again = [
            raw(0x4010, 100, false),
            raw(0x4010, 200, true),
            raw(0x4020, 300, false),
        ];
        add(&mut t, &mut book, &clock, 0, again);
        assert_eq!(t.events, 3);
        add(&mut t, &mut book, &clock, 10, [raw(0x4020, 400, true)]);
        assert_eq!(t.lost_events, 7);
    }

    #[test]
    fn a_leaf_slot_is_an_entry_and_an_exit_and_proves_frames_gone_like_an_entry() {
        // main > foo (never seen to return); main calls bar, a leaf, from
        // above foo's frame: foo is gone before bar starts. Then main's exit.
        let clock = TickClock::calibrate(None);
        let mut book = AddressBook::default();
        let mut t = Threads::default();
        let evs = [
            at(0x4010, 1_000, false, 0x7000), // main
            at(0x4020, 2_000, false, 0x6f00), // foo
            leaf(0x4030, 3_000, 900, 0x6f80), // bar, 900 ticks
            at(0x4010, 10_000, true, 0x7000), // main returns
        ];
        add(&mut t, &mut book, &clock, 0, evs);
        let mut id = |a| book.resolve(1, 0, a, Timestamp::default()).0;
        let (main, foo, bar) = (id(0x4010), id(0x4020), id(0x4030));
        let events = t
            .get_mut(ThreadKey::new(1, 1))
            .and_then(|s| s.take_batch(true))
            .unwrap()
            .events();
        use EventKind::*;
        let kinds: Vec<_> = events.iter().map(|e| (e.kind, e.function)).collect();
        assert_eq!(
            kinds,
            [
                (Enter, main),
                (Enter, foo),
                (Unwind, foo),
                (Enter, bar),
                (Exit, bar),
                (Exit, main)
            ]
        );
        // bar's time is its 900 ticks, on the recorder's clock
        let (enter, exit) = (events[3].ts, events[4].ts);
        // (the batch's first event dates its conversion)
        let seg = clock.segment(Ticks::new(1_000));
        let at = |n: u64| seg.to_timestamp(Ticks::new(3_000 + n)).as_nanos();
        let took = exit.as_nanos() - enter.as_nanos();
        assert_eq!(took, at(900) - at(0));
        assert!(took > 0);
        assert_eq!(t.events, 6);
        // five events in four slots: the next batch, numbered from 5, loses
        // nothing
        add(&mut t, &mut book, &clock, 5, [raw(0x4010, 20_000, false)]);
        assert_eq!(t.lost_events, 0);
    }

    #[test]
    fn a_run_of_leaf_slots_gives_what_the_slots_give_one_buffer_each() {
        // main, then leaf calls from its frame: a run of f1, f2 (new to the
        // cache: it ends the run, and starts the next), foo's entry (not a
        // leaf), a leaf foo calls, one from above foo's frame (foo is gone:
        // it ends that run), one with an unknown frame (sp 0: proves
        // nothing), a marker, a last leaf, and main's exit (ticks after the
        // clock's reference: none saturates at time 0)
        let clock = TickClock::calibrate(None);
        let t0 = clock.calibration().ref_ticks;
        let slots = [
            at(0x4010, t0 + 1_000, false, 0x7000), // main
            leaf(0x4030, t0 + 1_100, 20, 0x6f80),  // f1 (resolved)
            leaf(0x4030, t0 + 1_200, 21, 0x6f80),  // f1 (the run)
            leaf(0x4030, t0 + 1_300, 22, 0x6f80),
            leaf(0x4040, t0 + 1_400, 23, 0x6f80), // f2: not in the cache
            leaf(0x4040, t0 + 1_500, 24, 0x6f80),
            leaf(0x4040, t0 + 1_600, 25, 0x6f80),
            at(0x4020, t0 + 1_700, false, 0x6f00), // foo
            leaf(0x4030, t0 + 1_750, 29, 0x6e80),  // f1, from foo
            leaf(0x4030, t0 + 1_800, 26, 0x6f80),  // f1 from main: foo is gone
            leaf(0x4030, t0 + 1_900, 27, 0),       // a frame not known
            at(MARK_UNTRACED, t0 + 1_950, false, 0),
            leaf(0x4030, t0 + 2_000, 28, 0x6f80),
            at(0x4010, t0 + 3_000, true, 0x7000), // main returns
        ];
        let mut book = AddressBook::default();
        let mut whole = Threads::default();
        add(&mut whole, &mut book, &clock, 0, slots);
        let mut id = |a| book.resolve(1, 0, a, Timestamp::default()).0;
        let (main, foo, f1, f2) = (id(0x4010), id(0x4020), id(0x4030), id(0x4040));
        let events = whole
            .get_mut(ThreadKey::new(1, 1))
            .and_then(|s| s.take_batch(true))
            .unwrap()
            .events();
        use EventKind::*;
        let mut want = vec![(Enter, main)];
        for f in [f1, f1, f1, f2, f2, f2] {
            want.extend([(Enter, f), (Exit, f)]);
        }
        want.extend([(Enter, foo), (Enter, f1), (Exit, f1), (Unwind, foo)]);
        for f in [f1, f1, f1] {
            want.extend([(Enter, f), (Exit, f)]);
        }
        want.push((Exit, main));
        let kinds: Vec<_> = events.iter().map(|e| (e.kind, e.function)).collect();
        assert_eq!(kinds, want);
        // 23 events from 14 slots (ten leaf calls, a marker), and the unwind
        // the recorder made; the next buffer is numbered by the runtime's
        // events and markers
        assert_eq!(whole.events, 24);
        add(
            &mut whole,
            &mut book,
            &clock,
            24,
            [raw(0x4010, t0 + 9_000, false)],
        );
        assert_eq!(whole.lost_events, 0);

        // The same slots, one buffer each (no run: a run needs a slot after
        // a leaf in the same buffer): the same events, at the same times
        // (each buffer dates its own conversion: within a nanosecond).
        let mut apart = Threads::default();
        for (i, slot) in slots.into_iter().enumerate() {
            let first = slots[..i].iter().map(|s| s.events()).sum();
            add(&mut apart, &mut book, &clock, first, [slot]);
        }
        let one_each = apart
            .get_mut(ThreadKey::new(1, 1))
            .and_then(|s| s.take_batch(true))
            .unwrap()
            .events();
        assert_eq!(one_each.len(), events.len());
        for (a, b) in one_each.iter().zip(&events) {
            assert_eq!((a.kind, a.function), (b.kind, b.function));
            assert!(
                a.ts.as_nanos().abs_diff(b.ts.as_nanos()) <= 1,
                "{a:?} {b:?}"
            );
        }
        assert_eq!(apart.lost_events, 0);
    }

    #[test]
    fn a_leaf_slot_whose_entry_came_in_a_copy_gives_its_exit_alone() {
        // An exit-time flush sent a copy of the buffer while bar was running
        // (its entry a plain slot); the buffer itself came after, with bar's
        // exit in that slot, and main's exit.
        let clock = TickClock::calibrate(None);
        let mut book = AddressBook::default();
        let mut t = Threads::default();
        let copy = [
            at(0x4010, 1_000, false, 0x7000),
            at(0x4030, 3_000, false, 0x6f80),
        ];
        add(&mut t, &mut book, &clock, 0, copy);
        let whole = [
            at(0x4010, 1_000, false, 0x7000),
            leaf(0x4030, 3_000, 900, 0x6f80),
            at(0x4010, 10_000, true, 0x7000),
        ];
        add(&mut t, &mut book, &clock, 0, whole);
        let mut id = |a| book.resolve(1, 0, a, Timestamp::default()).0;
        let (main, bar) = (id(0x4010), id(0x4030));
        use EventKind::*;
        assert_eq!(
            stream_of(&mut t, 1, 1),
            [(Enter, main), (Enter, bar), (Exit, bar), (Exit, main)]
        );
        assert_eq!((t.events, t.lost_events), (4, 0));
        // and a copy that had bar's whole call: nothing of it again
        let mut t = Threads::default();
        add(&mut t, &mut book, &clock, 0, [whole[0], whole[1]]);
        add(&mut t, &mut book, &clock, 0, whole);
        assert_eq!((t.events, t.lost_events), (4, 0));
    }

    #[test]
    fn holes_are_lost_events_that_keep_their_index() {
        let clock = TickClock::calibrate(None);
        let mut book = AddressBook::default();
        let mut t = Threads::default();
        let evs = [
            raw(HOLE_FN, 0, false),
            raw(0x4010, 100, false),
            raw(HOLE_FN, 0, false),
            raw(0x4010, 200, true),
        ];
        add(&mut t, &mut book, &clock, 0, evs);
        assert_eq!((t.events, t.lost_events), (2, 2));
        // the next batch starts at index 4: no gap
        let next = [raw(0x4020, 300, false)];
        add(&mut t, &mut book, &clock, 4, next);
        assert_eq!((t.events, t.lost_events), (3, 2));
        // a batch of holes only
        add(&mut t, &mut book, &clock, 5, [raw(HOLE_FN, 0, true)]);
        assert_eq!((t.events, t.lost_events), (3, 3));
    }

    #[test]
    fn fork_child_inherits_the_stack() {
        let clock = TickClock::calibrate(None);
        let mut book = AddressBook::default();
        let mut t = Threads::default();
        let evs = [
            at(0x4010, 100, false, 0x7000),
            at(0x4020, 200, false, 0x6f00),
        ];
        add(&mut t, &mut book, &clock, 0, evs);
        t.fork(ThreadKey::new(1, 1), Ticks::new(250));
        t.child(
            ThreadKey::new(2, 2),
            1,
            Ticks::new(250),
            Timestamp::from_nanos(5),
        );
        let child = t
            .get_mut(ThreadKey::new(2, 2))
            .expect("a stream")
            .take_batch(true)
            .unwrap_or_default()
            .events();
        let kinds: Vec<_> = child.iter().map(|e| (e.kind, e.function)).collect();
        let parent_ids: Vec<_> = t
            .get_mut(ThreadKey::new(1, 1))
            .expect("a stream")
            .stack
            .iter()
            .map(|c| c.function)
            .collect();
        assert_eq!(kinds.len(), 2);
        assert_eq!(kinds.iter().map(|k| k.1).collect::<Vec<_>>(), parent_ids);
        assert!(kinds.iter().all(|k| k.0 == EventKind::Enter));
        // (the child's frames are where the parent's were)
        let parent = t.get(ThreadKey::new(1, 1)).map(|s| s.stack.clone());
        assert_eq!(t.get(ThreadKey::new(2, 2)).map(|s| s.stack.clone()), parent);
    }

    #[test]
    fn an_entry_closes_the_calls_its_frame_proves_gone() {
        // main > foo > helper > inl, where inl is inlined into helper (its
        // probes share helper's frame); then main, its frame deeper now
        // than before, calls bar above where foo was: foo, helper and inl
        // are gone before bar starts. Only a frame strictly below proves
        // anything: inl did not close helper.
        let clock = TickClock::calibrate(None);
        let mut book = AddressBook::default();
        let mut t = Threads::default();
        let evs = [
            at(0x4010, 100, false, 0x7000), // main
            at(0x4020, 200, false, 0x6f00), // foo
            at(0x4040, 250, false, 0x6e00), // foo > helper
            at(0x4050, 260, false, 0x6e00), // helper > inl (inlined)
            at(0x4030, 300, false, 0x6f80), // bar, from main
            at(0x4030, 400, true, 0x6f80),
            at(0x4010, 500, true, 0x7000),
        ];
        add(&mut t, &mut book, &clock, 0, evs);
        let mut id = |a| book.resolve(1, 0, a, Timestamp::default()).0;
        let (main, foo, helper, inl, bar) =
            (id(0x4010), id(0x4020), id(0x4040), id(0x4050), id(0x4030));
        use EventKind::*;
        assert_eq!(
            stream_of(&mut t, 1, 1),
            [
                (Enter, main),
                (Enter, foo),
                (Enter, helper),
                (Enter, inl),
                (Unwind, inl),
                (Unwind, helper),
                (Unwind, foo),
                (Enter, bar),
                (Exit, bar),
                (Exit, main)
            ]
        );
        assert_eq!(t.events, 10, "the closing events are events of the file");
    }

    #[test]
    fn calls_on_a_context_stack_inside_a_live_frame_do_not_close_its_callers() {
        // uftrace's t014_ucontext (#31 item 20): the context's stack is a
        // local array of main's, so bar's frame lies above foo's and
        // swapcontext's. After the switch marker bar nests under
        // swapcontext, and a longjmp up the context's stack closes its calls
        // only; once swapcontext returns, the rule holds again.
        let clock = TickClock::calibrate(None);
        let mut book = AddressBook::default();
        let mut t = Threads::default();
        let evs = [
            at(0x4010, 100, false, 0x7000),      // main
            at(0x4020, 200, false, 0x6000),      // foo
            at(0x4030, 300, false, 0x5f00),      // swapcontext
            at(MARK_SWITCH, 310, false, 0x5f00), // (its wrapper)
            at(0x4040, 400, false, 0x6800),      // bar, on main's array
            at(0x4060, 450, false, 0x6700),      // bar > qux
            at(MARK_UNWIND, 500, false, 0x6900), // a longjmp up the context's stack
            at(0x4030, 600, true, 0x5f00),
            at(0x4020, 700, true, 0x6000),
            at(0x4020, 800, false, 0x6000), // foo again, then a call whose
            at(0x4050, 900, false, 0x6f00), // frame proves foo gone
            at(0x4010, 1000, true, 0x7000),
        ];
        add(&mut t, &mut book, &clock, 0, evs);
        let mut id = |a| book.resolve(1, 0, a, Timestamp::default()).0;
        let (main, foo, swap, bar, baz, qux) = (
            id(0x4010),
            id(0x4020),
            id(0x4030),
            id(0x4040),
            id(0x4050),
            id(0x4060),
        );
        use EventKind::*;
        assert_eq!(
            stream_of(&mut t, 1, 1),
            [
                (Enter, main),
                (Enter, foo),
                (Enter, swap),
                (Enter, bar),
                (Enter, qux),
                (Unwind, qux),
                (Unwind, bar),
                (Exit, swap),
                (Exit, foo),
                (Enter, foo),
                (Unwind, foo),
                (Enter, baz),
                (Exit, main)
            ]
        );
        assert_eq!(t.lost_events, 0);
    }

    #[test]
    fn a_resumed_context_returns_past_the_calls_the_other_one_left() {
        // main switches to f1's context, f1 to f2's, f2 back to f1's: f1's
        // swapcontext returns (its frame's place says which of the two open
        // swapcontext calls that is), and f2's calls are left behind.
        let clock = TickClock::calibrate(None);
        let mut book = AddressBook::default();
        let mut t = Threads::default();
        let evs = [
            at(0x4010, 100, false, 0x7000), // main
            at(0x4030, 200, false, 0x6f00), // swapcontext
            at(MARK_SWITCH, 210, false, 0x6f00),
            at(0x4020, 300, false, 0x5000), // f1, on its own stack
            at(0x4030, 400, false, 0x4f00), // swapcontext
            at(MARK_SWITCH, 410, false, 0x4f00),
            at(0x4040, 500, false, 0x3000), // f2
            at(0x4030, 600, false, 0x2f00), // swapcontext, back to f1
            at(MARK_SWITCH, 610, false, 0x2f00),
            at(0x4030, 700, true, 0x4f00), // f1's returns
            at(0x4020, 800, true, 0x5000),
            at(0x4030, 900, true, 0x6f00),
            at(0x4010, 1000, true, 0x7000),
        ];
        add(&mut t, &mut book, &clock, 0, evs);
        let mut id = |a| book.resolve(1, 0, a, Timestamp::default()).0;
        let (main, f1, swap, f2) = (id(0x4010), id(0x4020), id(0x4030), id(0x4040));
        use EventKind::*;
        assert_eq!(
            stream_of(&mut t, 1, 1),
            [
                (Enter, main),
                (Enter, swap),
                (Enter, f1),
                (Enter, swap),
                (Enter, f2),
                (Enter, swap),
                (Unwind, swap),
                (Unwind, f2),
                (Exit, swap),
                (Exit, f1),
                (Exit, swap),
                (Exit, main)
            ]
        );
        assert_eq!(t.get(ThreadKey::new(1, 1)).map(|s| s.open_calls()), Some(0));
    }

    #[test]
    fn an_unwind_marker_closes_the_calls_below_its_target() {
        // main (setjmp) > a > b, then longjmp to main's frame: a and b are
        // gone at the jump; main, whose stack pointer is the target's, stays.
        let clock = TickClock::calibrate(None);
        let mut book = AddressBook::default();
        let mut t = Threads::default();
        let evs = [
            at(0x4010, 100, false, 0x7000),
            at(0x4020, 200, false, 0x6f00),
            at(0x4030, 300, false, 0x6e00),
            at(MARK_UNWIND, 400, false, 0x7000),
            at(MARK_UNTRACED, 450, false, 0x7000),
            at(0x4010, 500, true, 0x7000),
        ];
        add(&mut t, &mut book, &clock, 0, evs);
        let mut id = |a| book.resolve(1, 0, a, Timestamp::default()).0;
        let (main, a, b) = (id(0x4010), id(0x4020), id(0x4030));
        use EventKind::*;
        assert_eq!(
            stream_of(&mut t, 1, 1),
            [
                (Enter, main),
                (Enter, a),
                (Enter, b),
                (Unwind, b),
                (Unwind, a),
                (Exit, main)
            ]
        );
        assert_eq!((t.untraced_threads, t.lost_events), (1, 0));
        // the markers kept their place in the thread's numbering
        add(&mut t, &mut book, &clock, 6, [raw(0x4050, 600, false)]);
        assert_eq!(t.lost_events, 0);
    }

    #[test]
    fn dropped_markers_count_calls_per_function_and_are_no_events() {
        // main > (3 + 2 calls of a, 4 of b dropped by --min-time) < main
        let clock = TickClock::calibrate(None);
        let mut book = AddressBook::default();
        let mut t = Threads::default();
        let dropped = |f: u64, n: u64, ticks| at(MARK_DROPPED, ticks, false, f | n << 48);
        let evs = [
            at(0x4010, 100, false, 0x7000),
            dropped(0x4020, 3, 200),
            dropped(0x4030, 4, 300),
            dropped(0x4020, 2, 400),
            at(0x4010, 500, true, 0x7000),
        ];
        add(&mut t, &mut book, &clock, 0, evs);
        let mut id = |a| book.resolve(1, 0, a, Timestamp::default()).0;
        let (main, a, b) = (id(0x4010), id(0x4020), id(0x4030));
        use EventKind::*;
        assert_eq!(stream_of(&mut t, 1, 1), [(Enter, main), (Exit, main)]);
        assert_eq!(t.dropped_calls.get(&a), Some(&5));
        assert_eq!(t.dropped_calls.get(&b), Some(&4));
        assert_eq!((t.events, t.lost_events), (2, 0));
        // the markers kept their place in the thread's numbering
        add(&mut t, &mut book, &clock, 5, [raw(0x4050, 600, false)]);
        assert_eq!(t.lost_events, 0);
    }

    #[test]
    fn threads_past_the_limit_are_left_out_whole_and_counted_once() {
        let clock = TickClock::calibrate(None);
        let mut book = AddressBook::default();
        // 8 threads, main threads one more (an eighth)
        let mut t = Threads::with_limit(8);
        let evs = [raw(0x4010, 100, false), raw(0x4010, 200, true)];
        let mut send = |t: &mut Threads, tid: u32, first: u64| {
            let key = ThreadKey::new(1, tid);
            let _ = t.add_events(key, first, Ticks::ZERO, evs.into_iter(), &mut book, &clock);
        };
        for tid in 11..19 {
            send(&mut t, tid, 0);
        }
        send(&mut t, 30, 0); // (no room)
        assert_eq!((t.refused_threads, t.lost_events, t.events), (1, 2, 16));
        send(&mut t, 30, 2); // (its second batch: still left out)
        assert_eq!((t.refused_threads, t.lost_events), (1, 4));
        // The main thread has room of its own; a second main one does not.
        send(&mut t, 1, 0);
        send(&mut t, 2, 0);
        assert_eq!((t.refused_threads, t.lost_events, t.events), (2, 6, 18));
        assert!(t.get(ThreadKey::new(1, 1)).is_some());
        // Room made (the main thread counts among the 8): thread 30 stays
        // left out, not followed from its middle (its lost events were
        // counted), and a new thread is followed.
        let mut none = ThinVec::new();
        let end = Timestamp::from_nanos(300);
        for tid in [11, 12] {
            assert!(t.retire(ThreadKey::new(1, tid), end, &mut none).is_some());
        }
        send(&mut t, 30, 4);
        assert_eq!((t.refused_threads, t.lost_events), (2, 8));
        assert!(t.get(ThreadKey::new(1, 30)).is_none());
        send(&mut t, 31, 0);
        assert!(t.get(ThreadKey::new(1, 31)).is_some());
        send(&mut t, 32, 0);
        assert_eq!((t.refused_threads, t.lost_events), (3, 10));
        // A later thread with 30's id is a new thread (its batch 0).
        let _ = t.retire(ThreadKey::new(1, 31), end, &mut none);
        send(&mut t, 30, 0);
        assert!(t.get(ThreadKey::new(1, 30)).is_some());
        assert_eq!((t.refused_threads, t.lost_events, t.events), (3, 10, 22));
    }
}
