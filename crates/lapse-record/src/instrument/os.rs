//! What the kernel tells about the target: context switches (→ off-CPU
//! `OsEvent`s), forks, exits, thread names and executable mappings, from one
//! software "dummy" perf event per CPU that follows every thread and child
//! (`inherit`) and is armed at exec (`enable_on_exec`). Optional major page
//! faults go into the same rings; optional system calls come from their own
//! rings (`syscalls.rs`) and are paired enter → exit into periods here.
//!
//! Records from different CPUs' rings are merged in time order before use
//! (a thread's switch-out and switch-in may be on two CPUs): each round only
//! records older than the moment the round began, less a margin, are applied.
//!
//! A thread's OS events leave here ordered by start, which the analysis relies
//! on: while a thread is inside a system call, the switches and faults within
//! it wait until the call's own period (which starts earlier) is complete.

use std::collections::HashMap;

use lapse_data::{OsEvent, OsEventKind, ThreadKey, Timestamp};
use perf_event_open_sys::bindings as b;
use thin_vec::ThinVec;

use super::address::{AddressBook, NewMapping};
use super::roster::Roster;
use super::stalls::HeldOsEvent;
use super::syscalls::{SyscallEvents, SyscallRecord};
use crate::linux::clock;
use crate::linux::perf::{self, KernelTscScale, PerfError, PerfEvent};
use crate::linux::perf_attr::target_attr;
use crate::linux::records::{self, PerfRecord, SampleIdLayout};

/// The kernel's records of all CPUs together may wait in up to this many
/// pages of ring: 4 MiB a CPU on a 2-core machine, less on bigger ones
/// (where more CPUs read the storm's records into more rings). A
/// storm of tens of thousands of threads waking at once leaves the recorder
/// one thread among them, with a small share of the CPUs: with 1 MiB a CPU,
/// 60,000 threads lost 159,000 switch records, with 4 MiB none (BENCHMARKS.md).
/// The pages are the kernel's: the recorder's peak grew from 20.4 to 21.1
/// MiB for 600,000 switches between two threads.
const RING_BUDGET_PAGES: usize = 2048;

/// Ring size per CPU, in pages (a power of two, 1 MiB to 4 MiB: never less
/// than before the budget, on machines with many CPUs).
fn ring_pages(cpus: usize) -> usize {
    let share = RING_BUDGET_PAGES / cpus.max(1);
    let pages = if share.is_power_of_two() {
        share
    } else {
        share.next_power_of_two() / 2
    };
    pages.clamp(256, 1024)
}

/// Records read from a ring at a time (about 0.4 MB of queue each).
const SLICE_RECORDS: usize = 8192;
/// Slices read in one go at most (more than a full ring holds).
const MAX_SLICES: usize = 256;
/// Records younger than this stay queued for one more round.
const ORDER_MARGIN_NS: u64 = 2_000_000;

/// A moment the kernel may not have told of yet, in 8 bytes where an
/// `Option<Timestamp>` takes 16 (each of tens of thousands of threads keeps
/// four of these).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaybeTime(u64);

impl MaybeTime {
    /// (CLOCK_MONOTONIC does not reach it in 584 years)
    pub const NONE: MaybeTime = MaybeTime(u64::MAX);

    pub fn get(self) -> Option<Timestamp> {
        (self != Self::NONE).then_some(Timestamp::from_nanos(self.0))
    }

    pub fn take(&mut self) -> Option<Timestamp> {
        std::mem::replace(self, Self::NONE).get()
    }

    pub fn is_none(self) -> bool {
        self == Self::NONE
    }
}

impl Default for MaybeTime {
    fn default() -> Self {
        Self::NONE
    }
}

impl From<Timestamp> for MaybeTime {
    fn from(t: Timestamp) -> Self {
        MaybeTime(t.as_nanos().min(u64::MAX - 1))
    }
}

#[derive(Debug, Default, Clone)]
pub struct ThreadLife {
    /// (the bytes of a `String`: 8 bytes where a `Box<str>` takes 16)
    pub name: Option<ThinVec<u8>>,
    pub start: MaybeTime,
    pub end: MaybeTime,
}

#[derive(Debug, Default, Clone)]
pub struct ProcessLife {
    pub ppid: Option<u32>,
    pub start: Option<Timestamp>,
    pub end: Option<Timestamp>,
}

/// What the collector keeps of one thread: what the kernel said of its
/// life, and its time off the CPU (the recorder's memory with 100,000
/// threads alive is mostly these and the threads' streams).
#[derive(Default)]
struct Census {
    life: ThreadLife,
    off: OffCpu,
}

#[derive(Default)]
struct OffCpu {
    /// Off the CPU since this time (none: on it, or not known)...
    since: MaybeTime,
    /// ... and that began with a preemption.
    preempted: bool,
    /// A switch of this thread was seen (so a switch-in without a
    /// switch-out before it is the thread's first time on a CPU).
    switched: bool,
    /// Inside a system call since this time.
    in_syscall: MaybeTime,
    /// (a pointer while empty, which is most of the time)
    done: ThinVec<HeldOsEvent>,
}

impl OffCpu {
    fn add(&mut self, event: OsEvent) {
        if self.done.capacity() == 0 {
            // (most threads have one between two flushes: a storm of new
            // threads each waiting for its first CPU)
            self.done.reserve_exact(1);
        }
        self.done.push(HeldOsEvent::new(event));
    }
}

enum Queued {
    Switch {
        thread: ThreadKey,
        out: bool,
        preempted: bool,
    },
    Fault {
        thread: ThreadKey,
    },
    Syscall {
        thread: ThreadKey,
        enter: bool,
    },
    /// System-call samples were lost here: forget every open call.
    SyscallGap,
    Fork {
        thread: ThreadKey,
        ppid: u32,
    },
    Exit {
        thread: ThreadKey,
    },
    Comm {
        thread: ThreadKey,
        name: String,
        /// The thread's process exec'd (the name is the new image's).
        exec: bool,
    },
}

impl Queued {
    /// The thread the record is of (none for a gap in system calls).
    fn thread(&self) -> Option<ThreadKey> {
        match *self {
            Queued::SyscallGap => None,
            Queued::Switch { thread, .. }
            | Queued::Fault { thread }
            | Queued::Syscall { thread, .. }
            | Queued::Fork { thread, .. }
            | Queued::Exit { thread }
            | Queued::Comm { thread, .. } => Some(thread),
        }
    }
}

pub struct OsCollector {
    events: Vec<PerfEvent>,
    /// Extra events (faults) whose output goes to `events`' rings.
    _redirected: Vec<PerfEvent>,
    syscalls: Option<SyscallEvents>,
    /// Why system calls were asked for but are not collected.
    pub syscalls_refused: Option<String>,
    layout: SampleIdLayout,
    queue: Vec<(u64, Queued)>,
    /// (one of the two records a thread alive costs: `roster.rs`)
    census: Roster<Census>,
    pub processes: HashMap<u32, ProcessLife>,
    pub lost_records: u64,
    /// Records of threads past the census's limit, left out (lost events).
    pub refused_records: u64,
    scratch: Vec<u8>,
    /// Threads the kernel said began since the session last took them
    /// (for runtimes in another PID namespace: see ns_ids.rs).
    pub born: Vec<ThreadKey>,
    /// Records of a thread that began with the id of an ended thread the
    /// recorder still holds (the kernel hands ids out again): kept back, in
    /// order, until the session lets the ended one go ([`Self::unpark`]),
    /// so that they start a census of their own instead of landing on it.
    parked: HashMap<ThreadKey, Vec<(u64, Queued)>>,
}

impl OsCollector {
    /// Opens the per-CPU events on `pid` (disabled until it execs), following
    /// its threads and children when `inherit`. System calls are optional
    /// even when asked for: where the kernel refuses them, the reason is kept
    /// in `syscalls_refused` and recording goes on without them.
    /// It keeps what the kernel says of at most `max_threads` threads alive
    /// at once (records of others are lost records).
    pub fn open(
        pid: i32,
        faults: bool,
        syscalls: bool,
        inherit: bool,
        max_threads: usize,
    ) -> Result<OsCollector, PerfError> {
        let mut os = Self::open_threads(&[pid], false, faults, inherit, max_threads)?;
        if syscalls {
            match SyscallEvents::open(pid, inherit) {
                Ok(s) => os.syscalls = Some(s),
                Err(why) => os.syscalls_refused = Some(why),
            }
        }
        Ok(os)
    }

    /// The same events on threads `tids` (each followed with the threads it
    /// creates), counting at once when `running` (a process attached to:
    /// no exec to wait for). A thread that ended meanwhile is left out;
    /// system calls are not followed.
    pub fn open_threads(
        tids: &[i32],
        running: bool,
        faults: bool,
        inherit: bool,
        max_threads: usize,
    ) -> Result<OsCollector, PerfError> {
        let sample_type = u64::from(b::PERF_SAMPLE_TID | b::PERF_SAMPLE_TIME);
        let mut events = Vec::new();
        let mut redirected = Vec::new();
        let cpus = perf::online_cpus();
        let pages = ring_pages(cpus.len());
        for cpu in cpus {
            let mut ring: Option<PerfEvent> = None;
            for &pid in tids {
                let mut attr = target_attr(
                    b::PERF_TYPE_SOFTWARE,
                    u64::from(b::PERF_COUNT_SW_DUMMY),
                    sample_type,
                    inherit,
                );
                if running {
                    attr.set_disabled(0);
                    attr.set_enable_on_exec(0);
                }
                attr.set_context_switch(1);
                attr.set_comm(1);
                attr.set_comm_exec(1);
                attr.set_task(1);
                attr.set_mmap(1);
                attr.set_mmap2(1);
                attr.set_sample_id_all(1);
                attr.set_exclude_kernel(1);
                attr.set_exclude_hv(1);
                let ev = match PerfEvent::open(
                    &mut attr,
                    pid,
                    cpu,
                    if ring.is_some() { 0 } else { pages },
                ) {
                    Ok(ev) => ev,
                    // (a thread of a running process that ended meanwhile)
                    Err(_) if running && ring.is_some() => continue,
                    Err(e) => return Err(e),
                };
                let out = ring.as_ref().unwrap_or(&ev);
                if faults {
                    let mut fa = target_attr(
                        b::PERF_TYPE_SOFTWARE,
                        u64::from(b::PERF_COUNT_SW_PAGE_FAULTS_MAJ),
                        sample_type,
                        inherit,
                    );
                    if running {
                        fa.set_disabled(0);
                        fa.set_enable_on_exec(0);
                    }
                    fa.__bindgen_anon_1.sample_period = 1;
                    fa.set_sample_id_all(1);
                    let f = PerfEvent::open(&mut fa, pid, cpu, 0)?;
                    f.set_output(out)?;
                    redirected.push(f);
                }
                match &ring {
                    Some(r) => {
                        ev.set_output(r)?;
                        redirected.push(ev);
                    }
                    None => ring = Some(ev),
                }
            }
            events.extend(ring);
        }
        Ok(OsCollector {
            events,
            _redirected: redirected,
            syscalls: None,
            syscalls_refused: None,
            layout: SampleIdLayout::new(sample_type),
            queue: Vec::new(),
            census: Roster::with_limit(max_threads),
            processes: HashMap::new(),
            lost_records: 0,
            refused_records: 0,
            scratch: Vec::new(),
            born: Vec::new(),
            parked: HashMap::new(),
        })
    }

    pub fn tsc_scale(&self) -> Option<KernelTscScale> {
        self.events.iter().find_map(PerfEvent::tsc_scale)
    }

    /// Reads every ring. Mappings and execs take effect at once (events that
    /// arrive right after need them); everything else waits in time order.
    /// A ring is read a slice at a time: when one held more (the recorder
    /// was starved while a storm of threads switched), what is safe to apply
    /// is applied before the next slice, so the queue stays small.
    pub fn drain(&mut self, book: &mut AddressBook) {
        for _ in 0..MAX_SLICES {
            // The time now, not when the reading began: while a starved
            // recorder reads, the rings fill on, and what is older than the
            // margin by then can go. Everything older is in the rings by
            // now: system calls are read whole first, then a slice of the
            // others.
            let now = clock::monotonic_now().as_nanos();
            self.read_syscalls();
            let Some(held_back) = self.read_slice(book) else {
                break;
            };
            self.apply_ready(held_back.min(now.saturating_sub(ORDER_MARGIN_NS)), book);
        }
    }

    /// One slice of every ring into the queue. When a ring had more: the
    /// time of the last record taken from such a ring, the earliest of
    /// them (the rest of each ring is later; 0 when a slice was only
    /// mappings).
    fn read_slice(&mut self, book: &mut AddressBook) -> Option<u64> {
        let layout = self.layout;
        let queue = &mut self.queue;
        let born = &mut self.born;
        let mut lost = 0;
        let mut held_back = None;
        for ev in &mut self.events {
            let mut last = 0;
            let more = ev.drain_some(
                &mut self.scratch,
                SLICE_RECORDS,
                |rec| match records::parse(rec, &layout) {
                    Some(PerfRecord::Mmap2 {
                        pid,
                        addr,
                        len,
                        pgoff,
                        prot,
                        build_id,
                        path,
                        id,
                        ..
                    }) => {
                        if records::is_executable(prot) {
                            book.add_mapping(NewMapping {
                                pid,
                                start: addr,
                                len,
                                pgoff,
                                path: &path,
                                build_id,
                                time: Timestamp::from_nanos(id.time),
                            });
                        }
                    }
                    Some(r) => {
                        if let PerfRecord::Comm {
                            pid,
                            exec: true,
                            id,
                            ..
                        } = r
                        {
                            book.exec(pid, Timestamp::from_nanos(id.time));
                        }
                        if let Some(q) = queued(r, &mut lost) {
                            last = q.0;
                            if let Queued::Fork { thread, .. } = q.1 {
                                born.push(thread);
                            }
                            queue.push(q);
                        }
                    }
                    None => lost += 1,
                },
            );
            if more {
                held_back = Some(held_back.map_or(last, |h: u64| h.min(last)));
            }
        }
        self.lost_records += lost;
        held_back
    }

    fn read_syscalls(&mut self) {
        let queue = &mut self.queue;
        let mut lost = 0;
        if let Some(sys) = &mut self.syscalls {
            let lost_before = sys.lost;
            sys.drain(&mut self.scratch, |r| {
                queue.push(match r {
                    SyscallRecord::Edge {
                        time,
                        pid,
                        tid,
                        enter,
                    } => (
                        time,
                        Queued::Syscall {
                            thread: ThreadKey::new(pid, tid),
                            enter,
                        },
                    ),
                    SyscallRecord::Gap { time } => (time, Queued::SyscallGap),
                });
            });
            lost += sys.lost - lost_before;
        }
        self.lost_records += lost;
    }

    /// True when system calls are being collected.
    pub fn has_syscalls(&self) -> bool {
        self.syscalls.is_some()
    }

    /// Descriptors that become readable when a ring wants draining soon.
    pub fn wake_fds(&self) -> Vec<i32> {
        self.syscalls
            .iter()
            .flat_map(SyscallEvents::wake_fds)
            .collect()
    }

    /// Frees what reading the rings needed (the recording is over).
    pub fn release_buffers(&mut self) {
        self.queue = Vec::new();
        self.scratch = Vec::new();
    }

    /// Drains the rings, then applies the queued records older than `upto_ns`.
    pub fn poll(&mut self, upto_ns: u64, book: &mut AddressBook) {
        self.drain(book);
        self.apply_ready(upto_ns.saturating_sub(ORDER_MARGIN_NS), book);
        // A burst (thousands of threads switching at once) does not keep
        // its memory for the rest of the recording.
        let keep = self.queue.len().max(4096);
        if self.queue.capacity() > 4 * keep {
            self.queue.shrink_to(keep);
        }
    }

    /// Applies the queued records up to `bound`, in time order.
    fn apply_ready(&mut self, bound: u64, book: &mut AddressBook) {
        self.queue.sort_by_key(|q| q.0);
        let ready = self.queue.partition_point(|q| q.0 <= bound);
        // (applied where they are: a burst is not copied once more)
        let mut queue = std::mem::take(&mut self.queue);
        for (time, q) in queue.drain(..ready) {
            self.apply(time, q, book);
        }
        self.queue = queue;
    }

    fn apply(&mut self, time: u64, q: Queued, book: &mut AddressBook) {
        let ts = Timestamp::from_nanos(time);
        let Some(thread) = q.thread() else {
            // (a gap in system calls)
            for c in self.census.values_mut() {
                c.off.in_syscall = MaybeTime::NONE;
            }
            return;
        };
        // A thread id the kernel gave out again while its ended thread is
        // still held: the new thread's records wait for that one to go.
        // (Not a fork before the end: the runtime may tell of a thread's
        // end, at an exec, before its fork record is applied.)
        let begins_again = matches!(q, Queued::Fork { .. })
            && self
                .census
                .get(thread)
                .is_some_and(|c| c.life.end.get().is_some_and(|end| end.as_nanos() <= time));
        if begins_again || self.is_parked(thread) {
            self.parked.entry(thread).or_default().push((time, q));
            return;
        }
        let Some(c) = self.census.entry_or_default(thread) else {
            // (past the threads followed at once: not followed)
            self.refused_records += 1;
            return;
        };
        match q {
            Queued::SyscallGap => {}
            Queued::Switch { out, preempted, .. } => {
                let oc = &mut c.off;
                let first = !std::mem::replace(&mut oc.switched, true);
                // A new thread waits, runnable, from its creation until a
                // CPU takes it; the kernel reports no switch-out for that
                // wait, only the first switch-in. (Under load it can be tens
                // of milliseconds, which were counted as application time.)
                let created = c.life.start.get();
                if !out && first && oc.since.is_none() {
                    if let Some(start) = created.filter(|s| s.as_nanos() < time) {
                        (oc.since, oc.preempted) = (start.into(), true);
                    }
                }
                if out {
                    (oc.since, oc.preempted) = (ts.into(), preempted);
                } else if let Some(from) = oc.since.take() {
                    let kind = if oc.preempted {
                        OsEventKind::Preempt
                    } else {
                        OsEventKind::Switch
                    };
                    oc.add(OsEvent { from, to: ts, kind });
                }
            }
            Queued::Fault { .. } => {
                c.off.add(OsEvent {
                    from: ts,
                    to: ts,
                    kind: OsEventKind::Fault,
                });
            }
            Queued::Syscall { enter, .. } => {
                let oc = &mut c.off;
                if enter {
                    // (an enter without an exit was a lost record, or exit())
                    oc.in_syscall = ts.into();
                } else if let Some(from) = oc.in_syscall.take() {
                    oc.add(OsEvent {
                        from,
                        to: ts,
                        kind: OsEventKind::Syscall,
                    });
                }
            }
            Queued::Fork { ppid, .. } => {
                let pid = thread.pid;
                c.life.start = ts.into();
                if pid == thread.tid && pid != ppid {
                    // (a new process: an ended one with its id was let go)
                    let life = ProcessLife {
                        ppid: Some(ppid),
                        start: Some(ts),
                        end: None,
                    };
                    self.processes.insert(pid, life);
                    book.fork(ppid, pid, ts);
                }
            }
            Queued::Exit { .. } => {
                let pid = thread.pid;
                c.off.in_syscall = MaybeTime::NONE; // exit() never returns
                c.life.end = ts.into();
                if pid == thread.tid {
                    self.processes.entry(pid).or_default().end = Some(ts);
                }
            }
            Queued::Comm { name, exec, .. } => {
                let pid = thread.pid;
                if exec {
                    // An exec from a thread other than the main one: the
                    // kernel ended the old main thread (an exit record for
                    // pid/pid), and the exec'ing thread goes on as pid/pid.
                    // Neither that thread nor the process has ended.
                    c.life.end = MaybeTime::NONE;
                    if thread.tid == pid {
                        if let Some(p) = self.processes.get_mut(&pid) {
                            p.end = None;
                        }
                    }
                }
                c.life.name = Some(ThinVec::from(name.as_bytes()));
            }
        }
    }

    /// Lets a thread go (it ended long ago): what the kernel said of it,
    /// and its OS events not taken yet.
    pub fn forget(&mut self, thread: ThreadKey) -> (ThreadLife, ThinVec<HeldOsEvent>) {
        let Some(Census { life, off }) = self.census.remove(thread) else {
            return Default::default();
        };
        let mut events = off.done;
        events.sort_by_key(|e| e.from());
        (life, events)
    }

    /// Whether thread `thread`'s id began again while its ended thread is
    /// held: the new one's records are kept back until [`Self::unpark`].
    pub fn is_parked(&self, thread: ThreadKey) -> bool {
        self.parked.contains_key(&thread)
    }

    /// The threads whose ids began again while their ended threads are held.
    pub fn parked_threads(&self) -> Vec<ThreadKey> {
        let mut keys: Vec<ThreadKey> = self.parked.keys().copied().collect();
        keys.sort_unstable();
        keys
    }

    /// The ended thread with `thread`'s id was let go ([`Self::forget`]):
    /// the records of the one that began with its id since are applied now,
    /// in their order.
    pub fn unpark(&mut self, thread: ThreadKey, book: &mut AddressBook) {
        for (time, q) in self.parked.remove(&thread).unwrap_or_default() {
            self.apply(time, q, book);
        }
    }

    /// What the kernel said of a thread so far.
    pub fn thread(&self, thread: ThreadKey) -> Option<&ThreadLife> {
        self.census.get(thread).map(|c| &c.life)
    }

    /// The same, to change (made if the thread is new and there is room).
    pub fn thread_mut(&mut self, thread: ThreadKey) -> Option<&mut ThreadLife> {
        self.census.entry_or_default(thread).map(|c| &mut c.life)
    }

    /// Every thread the kernel told of, with what it said.
    pub fn threads(&self) -> impl Iterator<Item = (ThreadKey, &ThreadLife)> {
        self.census.iter().map(|(k, c)| (k, &c.life))
    }

    /// Hands over the OS events collected so far, thread by thread, each
    /// thread's in order of start (as they were kept: nothing is copied, so
    /// a storm of threads costs no second list of them). A thread inside a
    /// system call keeps its events until the call ends (or `all`, at the
    /// end of the recording).
    pub fn take_blocks<E>(
        &mut self,
        all: bool,
        mut f: impl FnMut(ThreadKey, ThinVec<HeldOsEvent>) -> Result<(), E>,
    ) -> Result<(), E> {
        for (key, c) in self.census.iter_mut() {
            let oc = &mut c.off;
            if !oc.done.is_empty() && (all || oc.in_syscall.is_none()) {
                let mut events = std::mem::take(&mut oc.done);
                events.sort_by_key(|e| e.from());
                f(key, events)?;
            }
        }
        Ok(())
    }
}

fn queued(r: PerfRecord<'_>, lost: &mut u64) -> Option<(u64, Queued)> {
    Some(match r {
        PerfRecord::Switch { out, preempted, id } => (
            id.time,
            Queued::Switch {
                thread: ThreadKey::new(id.pid, id.tid),
                out,
                preempted,
            },
        ),
        PerfRecord::Fork {
            pid,
            ppid,
            tid,
            time,
            ..
        } => (
            time,
            Queued::Fork {
                thread: ThreadKey::new(pid, tid),
                ppid,
            },
        ),
        PerfRecord::Exit { pid, tid, time, .. } => (
            time,
            Queued::Exit {
                thread: ThreadKey::new(pid, tid),
            },
        ),
        PerfRecord::Comm {
            pid,
            tid,
            name,
            exec,
            id,
        } => (
            id.time,
            Queued::Comm {
                thread: ThreadKey::new(pid, tid),
                name,
                exec,
            },
        ),
        PerfRecord::Mmap2 { .. } => return None, // applied at once in drain
        PerfRecord::Sample { body, .. } => {
            // sample_type TID|TIME: pid, tid, time
            let mut r = records::Reader::new(body, 0);
            let (pid, tid, time) = (r.u32()?, r.u32()?, r.u64()?);
            (
                time,
                Queued::Fault {
                    thread: ThreadKey::new(pid, tid),
                },
            )
        }
        PerfRecord::Lost { lost: n } => {
            *lost += n;
            return None;
        }
        PerfRecord::Other { .. } => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instrument::threads::Threads;
    use crate::instrument::tick_clock::TickClock;
    use lapse_data::alloc_count::held;
    use lapse_rt::protocol::{RawEvent, Ticks};

    #[test]
    fn rings_share_one_budget_between_the_cpus() {
        // 4 MiB a CPU on 1 or 2, a power of two below the share on more,
        // never under 1 MiB
        let sizes: Vec<usize> = [1, 2, 3, 4, 5, 8, 64].map(ring_pages).into();
        assert_eq!(sizes, [1024, 1024, 512, 512, 256, 256, 256]);
    }

    impl OsCollector {
        /// A collector with no perf events, fed through `apply`.
        fn empty(max_threads: usize) -> OsCollector {
            OsCollector {
                events: Vec::new(),
                _redirected: Vec::new(),
                syscalls: None,
                syscalls_refused: None,
                layout: SampleIdLayout::new(0),
                queue: Vec::new(),
                census: Roster::with_limit(max_threads),
                processes: HashMap::new(),
                lost_records: 0,
                refused_records: 0,
                scratch: Vec::new(),
                born: Vec::new(),
                parked: HashMap::new(),
            }
        }
    }

    #[test]
    fn a_process_id_given_out_again_while_its_ended_process_is_held_waits_for_it() {
        // Process 7 (a child of 1) runs 1,000-2,000 ns; the recorder still
        // holds it (it has not read all it sent) when the kernel gives 7 to
        // a new child at 5,000. The new one's records wait; once the old one
        // is let go they make a process and a thread of their own, not the
        // old one's with a second start.
        let mut book = AddressBook::default();
        let mut os = OsCollector::empty(usize::MAX);
        let main = ThreadKey::new(7, 7);
        let fork = || Queued::Fork {
            thread: main,
            ppid: 1,
        };
        let switch = |out| Queued::Switch {
            thread: main,
            out,
            preempted: false,
        };
        os.apply(1_000, fork(), &mut book);
        os.apply(2_000, Queued::Exit { thread: main }, &mut book);
        assert!(!os.is_parked(main));
        os.apply(5_000, fork(), &mut book);
        os.apply(6_000, switch(true), &mut book);
        os.apply(7_000, switch(false), &mut book);
        assert!(os.is_parked(main));
        assert_eq!(os.parked_threads(), vec![main]);
        // (the old one, as the session lets it go)
        let life = os.thread(main).expect("the old thread").clone();
        assert_eq!(life.start.get(), Some(Timestamp::from_nanos(1_000)));
        assert_eq!(life.end.get(), Some(Timestamp::from_nanos(2_000)));
        assert_eq!(os.processes[&7].end, Some(Timestamp::from_nanos(2_000)));
        let (_, off) = os.forget(main);
        assert!(off.is_empty());
        os.processes.remove(&7);
        os.unpark(main, &mut book);
        assert!(!os.is_parked(main));
        let life = os.thread(main).expect("the new thread").clone();
        assert_eq!(life.start.get(), Some(Timestamp::from_nanos(5_000)));
        assert_eq!(life.end.get(), None);
        let p = &os.processes[&7];
        assert_eq!((p.start, p.end), (Some(Timestamp::from_nanos(5_000)), None));
        // (its time off the CPU is its own)
        let mut off = Vec::new();
        let none: Result<(), ()> = os.take_blocks(true, |key, events| {
            off.extend(events.into_iter().map(|e| (key, e.get())));
            Ok(())
        });
        assert_eq!(none, Ok(()));
        let (from, to) = (Timestamp::from_nanos(6_000), Timestamp::from_nanos(7_000));
        assert_eq!(off.len(), 1);
        assert_eq!((off[0].1.from, off[0].1.to), (from, to));
        // A thread whose end the runtime told first (it exec'd at 9,000)
        // and whose fork record (8,000) comes after is one thread.
        let execer = ThreadKey::new(7, 8);
        os.thread_mut(execer).expect("room").end = Timestamp::from_nanos(9_000).into();
        let fork = Queued::Fork {
            thread: execer,
            ppid: 7,
        };
        os.apply(8_000, fork, &mut book);
        assert!(!os.is_parked(execer));
        let life = os.thread(execer).expect("the thread");
        assert_eq!(life.start.get(), Some(Timestamp::from_nanos(8_000)));
        assert_eq!(life.end.get(), Some(Timestamp::from_nanos(9_000)));
    }

    /// Threads `tids` of process 1 as a barrier leaves them, recorded the
    /// way the session does: each made, run, inside two calls (having
    /// waited once for a buffer), switched out, then the periodic flush.
    /// Returns how many threads had OS events to hand over.
    fn block_threads(
        threads: &mut Threads,
        os: &mut OsCollector,
        tids: std::ops::Range<u32>,
        book: &mut AddressBook,
        clock: &TickClock,
    ) -> usize {
        let ev = |function, ticks, is_exit, sp| RawEvent {
            function,
            ticks: Ticks::new(ticks),
            is_exit,
            sp,
            leaf: 0,
        };
        let events = [
            ev(0x4010, 100, false, 0x7000), // body
            ev(0x4020, 200, false, 0x6f00), // work
            ev(0x4020, 300, true, 0x6f00),
            ev(0x4030, 400, false, 0x6f00), // pthread_barrier_wait
        ];
        for tid in tids {
            let key = ThreadKey::new(1, tid);
            let fork = Queued::Fork {
                thread: key,
                ppid: 1,
            };
            os.apply(1_000, fork, book);
            let switch = |out| Queued::Switch {
                thread: key,
                out,
                preempted: false,
            };
            os.apply(2_000, switch(false), book);
            // (it waited 1,000 ticks for a buffer before these)
            let stalled = Ticks::new(1_000);
            threads.add_events(key, 0, stalled, events.into_iter(), book, clock);
            os.apply(3_000, switch(true), book);
        }
        // The periodic flush, as the session does it.
        for (_, s) in threads.streams_mut() {
            let _ = s.take_batch(true);
        }
        // (each thread's wait from its creation to its first run)
        let mut blocks = 0;
        let none: Result<(), ()> = os.take_blocks(false, |key, events| {
            if let Some(s) = threads.get_mut(key) {
                blocks += 1;
                s.stalls.add_os(events);
            }
            Ok(())
        });
        assert_eq!(none, Ok(()));
        for (_, s) in threads.streams_mut() {
            s.stalls.release_os(true);
        }
        blocks
    }

    #[test]
    fn a_thread_blocked_with_calls_open_costs_the_recorder_few_bytes() {
        // Tens of thousands of threads blocked at once (in a barrier, each
        // inside two calls, each having waited once for a buffer) are what
        // the recorder keeps the most of: its memory must stay within
        // 64 MiB whatever the thread count. 7,200 threads are just past the
        // point where the tables' indexes double, so half their buckets are
        // empty.
        // About 1,000 bytes a thread at first (streams and the kernel's
        // census inline in their tables, a batch buffer kept by each idle
        // thread, the OS-event queue's capacity kept once empty); 469 with
        // those fixed; 317 since the idle parts of both records are
        // pointers, optional times take 8 bytes, and a stack, a wait or an
        // OS event first gets room for itself only; 272 since both tables
        // keep their records side by side, indexed by 4-byte slot numbers
        // (`roster.rs`: no malloc header and no pointer per record, 5 bytes
        // a bucket), and two open calls fit in the stream itself; 250 with
        // the first wait kept in the timeline and names in 8 bytes. (The
        // count includes the slabs' unused capacity, 12 % here, which costs
        // no memory until it is used.)
        const N: u32 = 7_200;
        let clock = TickClock::calibrate(None);
        let mut book = AddressBook::default();
        let mut os = OsCollector::empty(usize::MAX);
        let mut threads = Threads::default();
        let (book, clock) = (&mut book, &clock);
        // (the caches and the names of the functions are not per thread)
        block_threads(&mut threads, &mut os, 2..3, book, clock);
        let before = held();
        let made = block_threads(&mut threads, &mut os, 3..N + 2, book, clock);
        assert_eq!(made, N as usize - 1);
        let per_thread = (held() - before) / (N as isize - 1);
        let open: usize = threads.streams().map(|(_, s)| s.open_calls()).sum();
        assert_eq!(open, 2 * N as usize, "each inside body and the wait");
        assert!(
            per_thread <= 260,
            "{per_thread} bytes kept per blocked thread"
        );
    }

    #[test]
    fn threads_past_the_limit_cost_the_recorder_nothing() {
        // "Recorder memory at most 64 MiB whatever the thread count": past
        // the threads it follows at once, a new thread costs no record in
        // either table; what is kept of those refused is a bit each, in a
        // map of thread ids made once (512 KiB).
        const LIMIT: u32 = 2_000;
        let clock = TickClock::calibrate(None);
        let mut book = AddressBook::default();
        let (book, clock) = (&mut book, &clock);
        let mut os = OsCollector::empty(LIMIT as usize + LIMIT as usize / 4);
        let mut threads = Threads::with_limit(LIMIT as usize);
        let made = block_threads(&mut threads, &mut os, 2..LIMIT + 2, book, clock);
        assert_eq!(made, LIMIT as usize);
        let before = held();
        // Five times as many more, all alive at once.
        let made = block_threads(&mut threads, &mut os, LIMIT + 2..6 * LIMIT + 2, book, clock);
        let grown = held() - before;
        assert_eq!(made, 0, "OS events handed to threads not followed");
        assert_eq!(threads.streams().count(), LIMIT as usize);
        assert_eq!(threads.refused_threads, 5 * u64::from(LIMIT));
        assert_eq!(threads.lost_events, 4 * 5 * u64::from(LIMIT));
        // (a quarter more census room: 500 threads' records, then none)
        assert_eq!(os.threads().count(), LIMIT as usize * 5 / 4);
        assert_eq!(os.refused_records, 3 * (5 * u64::from(LIMIT) - 500));
        // (measured: the map of ids, and the census's slab doubled for its
        // 500 more records, 128 KiB; 10,000 threads followed take 2.5 MB)
        assert!(
            grown <= 512 * 1024 + 500 * 300,
            "{grown} bytes more for 10,000 threads past the limit"
        );
    }
}
