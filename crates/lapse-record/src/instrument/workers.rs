//! The recorder's worker threads: buffers from different target threads are
//! decoded, encoded and compressed in parallel (issue #27).
//!
//! One core handles about 77 M events a second (SPEC 7), and one busy target
//! thread makes about 90 M: with more busy threads than that, the target
//! waited for the recorder (1 → 16 threads took 8.7 × longer on 16 cores).
//! Nothing ties the threads' streams together until the report, so:
//!
//! - The session's thread (`session.rs`) still reads the arenas and the
//!   sockets, and owns every stream. For a buffer of thread T it *lends* T's
//!   stream ([`Threads::lend`]) to a worker with the buffer: the worker adds
//!   the events ([`ThreadStream::fill`]: addresses to functions, the stack,
//!   the column encoding) and compresses a full batch into file chunks; the
//!   session's thread gives the stream back ([`Threads::give_back`]),
//!   appends the chunks to the file, and gives the buffer back to the
//!   runtime. A thread has at most one buffer at a worker: its next waits
//!   (`Session::lent`), so each thread's events stay in order in the file.
//! - Everything else that looks at streams (the periodic flush, messages
//!   about threads and processes, salvage, the end) first waits for every
//!   lent stream to come back (`Session::sync_workers`): it runs as before.
//! - The address book is shared ([`SharedBook`]): the session's thread
//!   adds mappings, workers look up addresses their caches do not hold
//!   (rare after the first buffers). Each worker keeps its own per-process
//!   caches.
//!
//! Workers sleep on the job queue: a target that makes less than one core
//! can take leaves them idle, and the session's thread does most of the
//! work. `LAPSE_RECORD_WORKERS` sets their number (0: no workers, every
//! buffer on the session's thread, as before).

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use lapse_data::{DataWriter, FunctionId, ThreadKey, Timestamp};
use lapse_rt::protocol::Ticks;

use super::address::AddressBook;
use super::arena::ArenaView;
use super::threads::{Filled, FnCache, Resolve, ThreadStream};
use super::tick_clock::TickClock;

/// The environment variable that sets the number of worker threads.
pub const ENV_WORKERS: &str = "LAPSE_RECORD_WORKERS";
/// At most this many workers, whatever the machine.
const MAX_WORKERS: usize = 8;
/// Processes whose address caches a worker keeps (8 KiB each).
const MAX_CACHES: usize = 16;
/// Buffers at the workers at once, per worker (more wait in the arena).
const IN_FLIGHT_PER_WORKER: usize = 2;

/// How many workers to start: `LAPSE_RECORD_WORKERS` when set; else one
/// for each core past the first two (the target's busiest thread and the
/// session's own), at most [`MAX_WORKERS`]. On a 2-core machine that is
/// none: there a worker only takes time from the target (BENCHMARKS.md).
pub fn workers_wanted() -> usize {
    if let Some(n) = std::env::var(ENV_WORKERS)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
    {
        return n.min(64);
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores.saturating_sub(2).min(MAX_WORKERS)
}

/// The address book, shared by the session's thread and the workers.
#[derive(Clone, Default)]
pub struct SharedBook {
    book: Arc<Mutex<AddressBook>>,
    /// Bumped whenever a process is forgotten: a later process with its
    /// id starts again at version 0, so caches keyed by pid are let go.
    forgotten: Arc<AtomicU64>,
}

impl SharedBook {
    pub fn new(book: AddressBook) -> SharedBook {
        SharedBook {
            book: Arc::new(Mutex::new(book)),
            forgotten: Arc::default(),
        }
    }

    /// The book (a worker that panicked while holding it left it as it was:
    /// the recording goes on).
    pub fn lock(&self) -> MutexGuard<'_, AddressBook> {
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Process `pid` is gone: its mappings go, and the workers' caches.
    pub fn forget(&self, pid: u32) {
        self.lock().forget(pid);
        self.forgotten.fetch_add(1, Ordering::Release);
    }
}

/// A worker's view of the book: locked for each look-up.
struct Locked<'a>(&'a SharedBook);

impl Resolve for Locked<'_> {
    fn version(&mut self, pid: u32, gen: u32) -> u64 {
        self.0.lock().version(pid, gen)
    }
    fn resolve(&mut self, pid: u32, gen: u32, addr: u64, time: Timestamp) -> (FunctionId, bool) {
        self.0.lock().resolve(pid, gen, addr, time)
    }
}

/// One buffer of one thread, with the thread's stream lent for it.
pub struct Job {
    /// The thread, as the recorder follows it...
    pub key: ThreadKey,
    /// ... and as the file names it (with its id's serial).
    pub stamped: ThreadKey,
    pub stream: ThreadStream,
    /// The image generation its addresses resolve in.
    pub gen: u32,
    pub first_index: u64,
    pub stalled: Ticks,
    pub arena: ArenaView,
    pub buf: usize,
    pub count: usize,
}

/// A job done: the stream to give back, and the file chunks it made.
pub struct Done {
    pub key: ThreadKey,
    pub stream: ThreadStream,
    pub filled: Filled,
    /// Events in `chunks`.
    pub events: u64,
    /// Whole chunks, for the file as they are.
    pub chunks: Vec<u8>,
    /// Making the chunks failed (the batch is lost; said as a write error).
    pub error: Option<io::Error>,
    pub arena: ArenaView,
    pub buf: usize,
}

/// The workers, and the jobs out with them.
pub struct Pool {
    jobs: Option<Sender<Box<Job>>>,
    done: Receiver<Done>,
    in_flight: usize,
    limit: usize,
    threads: Vec<JoinHandle<()>>,
}

impl Pool {
    /// `n` workers (none: `None`); `None` too when no thread can be made
    /// (the session then does all the work itself).
    pub fn start(n: usize, book: &SharedBook, clock: TickClock) -> Option<Pool> {
        if n == 0 {
            return None;
        }
        let (jobs_tx, jobs_rx) = mpsc::channel::<Box<Job>>();
        let (done_tx, done_rx) = mpsc::channel::<Done>();
        let jobs_rx = Arc::new(Mutex::new(jobs_rx));
        let mut threads = Vec::new();
        for i in 0..n {
            let (rx, tx, book) = (jobs_rx.clone(), done_tx.clone(), book.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("lapse-worker-{i}"))
                .spawn(move || work(&rx, &tx, &book, &clock));
            match spawned {
                Ok(t) => threads.push(t),
                Err(_) => break,
            }
        }
        if threads.is_empty() {
            return None;
        }
        let limit = threads.len() * IN_FLIGHT_PER_WORKER;
        Some(Pool {
            jobs: Some(jobs_tx),
            done: done_rx,
            in_flight: 0,
            limit,
            threads,
        })
    }

    /// Hands a job to the workers. `Err` gives it back when they are gone
    /// (the caller then does it itself).
    pub fn send(&mut self, job: Box<Job>) -> Result<(), Box<Job>> {
        let Some(jobs) = &self.jobs else {
            return Err(job);
        };
        match jobs.send(job) {
            Ok(()) => {
                self.in_flight += 1;
                Ok(())
            }
            Err(mpsc::SendError(job)) => Err(job),
        }
    }

    /// Jobs handed out and not collected yet.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// True when as many jobs are out as the workers should hold.
    pub fn full(&self) -> bool {
        self.in_flight >= self.limit
    }

    /// A finished job, waiting at most `timeout` for one (none out: `None`
    /// at once).
    pub fn done(&mut self, timeout: Duration) -> Option<Done> {
        if self.in_flight == 0 {
            return None;
        }
        let got = if timeout.is_zero() {
            self.done.try_recv().ok()
        } else {
            match self.done.recv_timeout(timeout) {
                Ok(d) => Some(d),
                Err(RecvTimeoutError::Timeout) => None,
                // (every worker gone, with jobs out: they died with them)
                Err(RecvTimeoutError::Disconnected) => {
                    self.in_flight = 0;
                    None
                }
            }
        };
        if got.is_some() {
            self.in_flight -= 1;
        }
        got
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.jobs = None; // (the workers' queue closes: they return)
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A worker's life: jobs until the queue closes.
fn work(
    jobs: &Mutex<Receiver<Box<Job>>>,
    done: &Sender<Done>,
    book: &SharedBook,
    clock: &TickClock,
) {
    let mut caches: HashMap<u32, FnCache> = HashMap::new();
    let mut forgotten = book.forgotten.load(Ordering::Acquire);
    let Ok(writer) = DataWriter::chunks_only(Vec::new()) else {
        return;
    };
    let mut writer = writer.events_lz4();
    loop {
        let job = {
            let rx = jobs.lock().unwrap_or_else(PoisonError::into_inner);
            match rx.recv() {
                Ok(job) => job,
                Err(_) => return,
            }
        };
        let now = book.forgotten.load(Ordering::Acquire);
        if now != forgotten || caches.len() >= MAX_CACHES {
            // (a program that forks child after child would otherwise have
            // each worker keep 8 KiB for every child until it is forgotten)
            caches.clear();
            forgotten = now;
        }
        let Job {
            key,
            stamped,
            mut stream,
            gen,
            first_index,
            stalled,
            arena,
            buf,
            count,
        } = *job;
        // (a panic here must not leave the session waiting for this job:
        // the thread's stream starts afresh and the buffer's events are
        // counted lost)
        let fill = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut resolver = Locked(book);
            let version = resolver.version(key.pid, gen);
            let cache = FnCache::ready(&mut caches, key.pid, gen, version);
            let filled = stream.fill(
                key.pid,
                gen,
                cache,
                first_index,
                stalled,
                arena.events(buf, count),
                &mut resolver,
                clock,
            );
            (stream, filled)
        }));
        let (stream, mut filled) = match fill {
            Ok(done) => done,
            Err(_) => {
                caches.clear();
                (ThreadStream::new(), Filled::lost(count as u64))
            }
        };
        let (mut events, mut error) = (0, None);
        if let Some(batch) = filled.batch.take() {
            events = batch.len() as u64;
            if let Err(e) = writer.write_encoded_events(stamped, &batch) {
                error = Some(e);
            }
        }
        let chunks = writer.take_chunks();
        let finished = Done {
            key,
            stream,
            filled,
            events,
            chunks,
            error,
            arena,
            buf,
        };
        if done.send(finished).is_err() {
            return;
        }
    }
}
