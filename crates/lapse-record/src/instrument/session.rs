//! One instrumentation recording from launch to footer.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use lapse_data::{Method, OsEventBlock, Record, SessionHeader, Timestamp};
use lapse_rt::protocol::{self, Batch, Msg, Sender, Ticks, MAX_DATAGRAM};

use super::address::AddressBook;
use super::arena::Arena;
use super::arena::ArenaView;
use super::assemble::thread_of;
use super::assemble::{Assembler, Proc, Took};
use super::ipc::{wait_readable, Conn, Listener, Recv};
use super::ns_ids::NsIds;
use super::os::OsCollector;
use super::output::{Output, FLUSH_EVERY};
use super::pace::{self, Pace, Seen};
use super::patch::Patching;
use super::session_dir::SessionDir;
use super::stalls::HeldOsEvent;
use super::threads;
use super::tick_clock::TickClock;
use super::workers::{self, Job, Pool};
use crate::linux::clock;
use crate::linux::launch::{self, HeldChild};
use crate::linux::proc_scan::{self, hostname, read_cmdline};
use crate::{Notice, Notices, OsEventSource, RecordError, RecordOptions, RecordOutcome};
use lapse_data::ThreadKey;
use std::collections::VecDeque;

/// A probe-cost calibration whose trials spread wider than this (90th over
/// 10th percentile, in percent) ran on a machine too busy to trust it.
const UNRELIABLE_SPREAD_PCT: u32 = 400;
/// How long to wait for the runtime's first hello before writing the header anyway.
const HELLO_WAIT: Duration = Duration::from_millis(500);
/// After the target exited, how long descendants may keep the session open silently.
const LINGER: Duration = Duration::from_secs(2);
/// An ended thread or process is let go once everything it sent is read
/// (each of its connections read through a time after its end, see
/// `Conn::read_through`; nothing of it left in an arena) and at least this
/// long after its end. Its OS
/// events are in by then: the kernel's records are applied in time order
/// only once every ring was read past them and a margin (2 ms), and its
/// `perf` events leave it at its exit record. (500 ms before the reads were
/// known to have begun after the end: the recorder then held the last half
/// second's processes of a program that forks child after child.)
pub(super) const RETIRE_AFTER: Duration = Duration::from_millis(20);
/// More arenas than this are looked through for ended processes' at every
/// turn of the loop, not only every [`LOOK_EVERY`].
const ARENAS_LOOKED_THROUGH: usize = 8;
/// Datagrams read from one connection before looking at the others.
const READ_BURST: usize = 256;
/// While buffers keep coming, new connections and the target's exit are
/// looked for this often (an `accept4` that finds none costs ~1.4 µs here:
/// the kernel makes a socket and a file before it knows; once per buffer,
/// that was 5 % of the recorder's time on calls.c, and `waitpid` 1.5 %).
/// After a wait that something woke they are looked for at once.
const LOOK_EVERY: Duration = Duration::from_millis(1);

/// The recorder's side of a recording: sockets, perf rings and the loop
/// around the [`Assembler`], which turns what arrives into records.
pub(super) struct Session {
    pub(super) out: Output,
    pub(super) asm: Assembler,
    pub(super) os: OsCollector,
    pub(super) listener: Listener,
    pub(super) conns: Vec<(Conn, bool)>,
    /// When the last look for new connections that found none began: a
    /// program that connected before then has its connection in `conns`.
    pub(super) accepted_through: Timestamp,
    pub(super) buf: Vec<u8>,
    pub(super) last_data: Instant,
    pub(super) bad_datagrams: u64,
    pub(super) root: u32,
    pub(super) header: Option<SessionHeader>,
    pub(super) flushes: u64,
    pub(super) inherit: bool,
    /// Functions, processes and threads already written.
    pub(super) announced_functions: usize,
    pub(super) announced_procs: HashSet<u32>,
    /// Each process's latest end among its threads let go (their records
    /// are written; the process's end is not known before the last).
    pub(super) retired_end: HashMap<u32, Timestamp>,
    /// Shared arenas by (connection id, pid).
    pub(super) arenas: HashMap<(u64, u32), Arena>,
    /// Counts the functions named at the end, for a progress display.
    pub(super) progress: Option<std::sync::Arc<crate::SymbolProgress>>,
    /// When buffers came lately: whether to spin or sleep for the next.
    pub(super) pace: Pace,
    /// When the running loop looks for new connections and the target's
    /// exit next.
    pub(super) next_look: Instant,
    /// [`Session::handed_over`] when the arenas were last looked at.
    pub(super) handed_over_seen: u64,
    /// The target runs set-user-ID (or the like): the runtime cannot be
    /// preloaded into it, which is why it would record nothing.
    pub(super) privileged_target: bool,
    /// Ids of runtimes in another PID namespace, in the recorder's.
    pub(super) ns: NsIds,
    /// Processes whose images never loaded the runtime.
    pub(super) without_runtime: super::unreached::WithoutRuntime,
    /// Processes that lost their connection while they lived on.
    pub(super) cut_off: super::unreached::CutOff,
    pub(super) notices: Notices,
    /// The worker threads, when there are any (`workers.rs`).
    pub(super) pool: Option<Pool>,
    /// Threads whose stream is at a worker, with their buffers that came
    /// meanwhile (they follow in order).
    pub(super) lent: HashMap<ThreadKey, VecDeque<Waiting>>,
    /// The run-time patching plans handed to the runtime.
    pub(super) patching: Vec<Patching>,
    /// The program has no probes: it was to be patched at run time.
    pub(super) patch_wanted: bool,
    /// Record-time filters were given (they may leave everything out).
    pub(super) filtered: bool,
    /// Pauses and resumes the recorder makes itself (`--start-paused`,
    /// `--delay`, `--duration`), written at the end.
    pub(super) toggles: Vec<lapse_data::ControlEvent>,
    /// `--signal`'s number, for what is said when a program takes it.
    pub(super) toggle_signal: Option<i32>,
    /// The recording started paused (`--start-paused`, `--delay`).
    pub(super) started_paused: bool,
}

/// A buffer waiting for its thread's stream to come back from a worker.
pub(super) struct Waiting {
    from: Sender,
    batch: Batch,
    arena: ArenaView,
    buf: usize,
}

/// Records `argv` (resolved to `program`) with the runtime preloaded; with
/// `patch`, the program's functions are patched at run time.
pub fn record(
    opts: &RecordOptions,
    program: &Path,
    argv: &[String],
    patch: bool,
) -> Result<RecordOutcome, RecordError> {
    let max_threads = threads::threads_followed().map_err(RecordError::Unsupported)?;
    let dir = SessionDir::create()?;
    let listener =
        Listener::bind(&dir.socket_path()).map_err(|source| RecordError::SessionDir {
            path: dir.socket_path(),
            source,
        })?;
    let out = Output::create(&opts.output, opts.notices.clone())?;
    let mut preload = dir.runtime_path().display().to_string();
    if let Ok(old) = std::env::var("LD_PRELOAD") {
        if !old.is_empty() {
            preload = format!("{preload} {old}");
        }
    }
    let spill_path = fresh_spill_path(&out, &dir, &opts.output)?;
    let spill = spill_path.display().to_string();
    // The session's start (wall clock) is its id: the runtime writes it in
    // the spill, and `lapse recover` merges a spill only into its recording.
    let start_unix_ns = clock::realtime_unix_ns();
    let ticks_per_sec = TickClock::rough_ticks_per_sec(3);
    let mut env = vec![
        ("LD_PRELOAD".to_owned(), preload),
        (
            protocol::ENV_SOCKET.to_owned(),
            dir.socket_path().display().to_string(),
        ),
        (protocol::ENV_SPILL.to_owned(), spill),
        (protocol::ENV_SESSION.to_owned(), start_unix_ns.to_string()),
        (protocol::ENV_CALIBRATE.to_owned(), "1".to_owned()),
        (
            protocol::ENV_FLUSH_TICKS.to_owned(),
            format!("{:.0}", ticks_per_sec * FLUSH_EVERY.as_secs_f64()),
        ),
    ];
    if !opts.inherit {
        // The runtime takes itself and its variables out of what children get.
        env.push((protocol::ENV_NO_INHERIT.to_owned(), "1".to_owned()));
    }
    if !opts.libcalls {
        env.push((protocol::ENV_NO_LIBCALLS.to_owned(), "1".to_owned()));
    }
    if let Some(bytes) = opts.buffer_size {
        env.push((
            protocol::ENV_BUFFERS.to_owned(),
            bytes.buffers().to_string(),
        ));
    }
    if !opts.filters.is_empty() {
        let path = filter_table(&dir, program, &opts.filters, ticks_per_sec, &opts.notices)?;
        env.push((protocol::ENV_FILTER.to_owned(), path.display().to_string()));
    }
    let control = &opts.control;
    let (control_env, resume_at) = control.runtime_env();
    env.extend(control_env);
    let patching = if patch {
        super::patch::plan_patching(&dir, program, &mut env, opts)
    } else {
        Vec::new()
    };
    let mut child =
        launch::spawn_held(program, argv, &env).map_err(|source| RecordError::Spawn {
            command: argv.join(" "),
            source,
        })?;
    let faults = opts.os_events.contains(&OsEventSource::Fault);
    let syscalls = opts.os_events.contains(&OsEventSource::Syscall);
    // (the kernel's census also keeps threads that never call an
    // instrumented function, and the streams' room for main threads)
    let census_max = max_threads.saturating_add(max_threads / 4);
    let os = match OsCollector::open(child.pid, faults, syscalls, opts.inherit, census_max) {
        Ok(os) => os,
        Err(e) => {
            child.abandon();
            return Err(e.into());
        }
    };
    let clock = TickClock::calibrate(os.tsc_scale());
    launch::catch_termination_signals();
    let mut s = Session::new(
        out,
        os,
        listener,
        clock,
        max_threads,
        child.pid as u32,
        opts,
    );
    s.privileged_target = crate::method::runs_privileged(program);
    s.patching = patching;
    s.patch_wanted = patch;
    s.filtered = !opts.filters.is_empty();
    s.toggle_signal = control.signal;
    s.started_paused = control.start_paused || resume_at.is_some();
    let start = clock::monotonic_now();
    s.asm.procs.insert(
        s.root,
        Proc {
            command: argv.to_vec(),
            start: Some(start),
            ..Proc::default()
        },
    );
    let by_recorder = |at| lapse_data::Toggle { pid: 0, tid: 0, at };
    if control.start_paused || resume_at.is_some() {
        s.toggles
            .push(lapse_data::ControlEvent::Pause(by_recorder(start)));
    }
    if let (Some(at), false) = (resume_at, control.start_paused) {
        s.toggles
            .push(lapse_data::ControlEvent::Resume(by_recorder(at)));
    }
    if let Some(d) = control.duration {
        let at = Timestamp::from_nanos(start.as_nanos() + d.as_nanos() as u64);
        s.toggles
            .push(lapse_data::ControlEvent::Pause(by_recorder(at)));
    }
    child.release();
    let run = s.run(opts, &mut child, start, start_unix_ns, faults);
    drop(dir);
    // An empty spill (the runtime could open it but not write: a full disk)
    // holds nothing to recover.
    if std::fs::symlink_metadata(&spill_path).is_ok_and(|m| m.is_file() && m.len() == 0) {
        let _ = std::fs::remove_file(&spill_path);
    }
    run
}

impl Session {
    /// A session of the process `root` (launched or attached to), with
    /// nothing seen yet and its worker threads started; what only a
    /// launch knows (patching, filters, a paused start) is the caller's
    /// to set.
    pub(super) fn new(
        out: Output,
        os: OsCollector,
        listener: Listener,
        clock: TickClock,
        max_threads: usize,
        root: u32,
        opts: &RecordOptions,
    ) -> Session {
        let mut s = Session {
            out,
            asm: Assembler::new(AddressBook::default(), clock, max_threads),
            os,
            listener,
            conns: Vec::new(),
            buf: Vec::new(),
            last_data: Instant::now(),
            accepted_through: Timestamp::from_nanos(0),
            bad_datagrams: 0,
            root,
            header: None,
            flushes: 0,
            inherit: opts.inherit,
            announced_functions: 0,
            announced_procs: HashSet::new(),
            retired_end: HashMap::new(),
            arenas: HashMap::new(),
            progress: opts.symbol_progress.clone(),
            pace: Pace::default(),
            next_look: Instant::now(),
            handed_over_seen: 0,
            privileged_target: false,
            ns: NsIds::default(),
            without_runtime: Default::default(),
            cut_off: Default::default(),
            notices: opts.notices.clone(),
            pool: None,
            lent: HashMap::new(),
            patching: Vec::new(),
            patch_wanted: false,
            filtered: false,
            toggles: Vec::new(),
            toggle_signal: None,
            started_paused: false,
        };
        s.pool = Pool::start(workers::workers_wanted(), &s.asm.book, clock);
        s
    }
}

/// Where the runtime spills what it cannot hand over, with no spill of an
/// earlier recording to the same output left there (it is not this one's).
/// The path is absolute (a target that changes directory still finds it);
/// an output written in place (/dev/null, a pipe) has no neighbour to
/// recover into, so its spill stays in the session directory.
pub(super) fn fresh_spill_path(
    out: &Output,
    dir: &SessionDir,
    output: &Path,
) -> Result<std::path::PathBuf, RecordError> {
    let path = if out.is_in_place() {
        dir.spill_path()
    } else {
        std::path::absolute(super::recover::spill_path(output)).map_err(|source| {
            RecordError::Output {
                path: output.to_owned(),
                source,
            }
        })?
    };
    let _ = std::fs::remove_file(&path);
    Ok(path)
}

/// The record-time filter table for `program`, written to the session
/// directory: its path.
fn filter_table(
    dir: &SessionDir,
    program: &Path,
    filters: &super::RecordFilters,
    ticks_per_sec: f64,
    notices: &crate::Notices,
) -> Result<std::path::PathBuf, RecordError> {
    use std::os::unix::fs::MetadataExt;
    let err = |e: std::io::Error| {
        RecordError::Unsupported(format!(
            "cannot read {} to apply the record-time filters: {e}",
            program.display()
        ))
    };
    let data = std::fs::read(program).map_err(err)?;
    let meta = std::fs::metadata(program).map_err(err)?;
    let (table, matched) = filters.table(&data, meta.dev(), meta.ino(), ticks_per_sec);
    if let (Some(r), 0) = (filters.filter_regex(), matched) {
        notices.say(Notice::Warning(format!(
            "--filter {r} matches no function of {}: nothing of it will be recorded (the filters apply to the program lapse starts, not to other programs it runs)",
            program.display()
        )));
    }
    dir.write_filter(&table)
        .map_err(|source| RecordError::SessionDir {
            path: program.to_owned(),
            source,
        })
}

/// Where a recording is.
#[derive(Clone, Copy)]
enum Phase {
    /// Until the first runtime says hello (its probe cost goes into the
    /// header), at most HELLO_WAIT or until the target exits.
    AwaitHello { deadline: Instant },
    /// The header is written; the target runs.
    Running,
    /// The target exited at `since`; descendants may still send (LINGER).
    Lingering { since: Instant },
    /// Whatever is still queued, left in arenas or in the kernel's rings is
    /// taken; then the tables and the footer.
    Draining,
}

/// What a recording follows to its end: a launched target (it exits), or
/// a process attached to (the window ends: duration, Ctrl-C, its exit).
pub(super) trait Watched {
    /// `Some(status)` once the target is done with: for an attached
    /// process, after the window ended and it was detached (`procs`: the
    /// processes known, its children among them).
    fn poll_end(&mut self, procs: &HashMap<u32, Proc>) -> Result<Option<i32>, RecordError>;
    /// Whether a termination signal came for the recorder (passed on to a
    /// launched target).
    fn stop_pending(&mut self) -> bool;
}

impl Watched for HeldChild {
    fn poll_end(&mut self, _: &HashMap<u32, Proc>) -> Result<Option<i32>, RecordError> {
        launch::wait(self.pid, false).map_err(RecordError::Wait)
    }

    fn stop_pending(&mut self) -> bool {
        launch::forward_pending_signal(self.pid)
    }
}

impl Session {
    pub(super) fn run(
        &mut self,
        opts: &RecordOptions,
        child: &mut dyn Watched,
        start: Timestamp,
        start_unix_ns: u64,
        faults: bool,
    ) -> Result<RecordOutcome, RecordError> {
        // (the naps of pace::watch end on time)
        crate::linux::poll::fine_timer_slack();
        let mut exit_status = None;
        let mut phase = Phase::AwaitHello {
            deadline: Instant::now() + HELLO_WAIT,
        };
        loop {
            phase = match phase {
                Phase::AwaitHello { deadline } => {
                    let exited = exit_status.is_some();
                    if self.asm.probe_cost_ns.is_some() || Instant::now() >= deadline || exited {
                        // A target that ended this fast may still have its
                        // hello queued: read up to it.
                        if self.asm.probe_cost_ns.is_none() && exited {
                            self.accept()?;
                            for i in 0..self.conns.len() {
                                while self.asm.probe_cost_ns.is_none() && self.read_conn(i, 1)? {}
                            }
                        }
                        self.write_header(opts, start, start_unix_ns, faults)?;
                        // On disk at once (under the temporary name), with
                        // the mappings known so far: a recorder killed
                        // before its first flush leaves what `lapse recover`
                        // needs to merge the spill into.
                        self.asm.write_book(&mut self.out)?;
                        self.out.flush(true)?;
                        match exited {
                            true => Phase::Lingering {
                                since: Instant::now(),
                            },
                            false => Phase::Running,
                        }
                    } else {
                        self.accept()?;
                        let first = self.conns.first().map(|c| c.0.raw_fd());
                        let got = first.is_some() && self.read_conn(0, 1)?;
                        if !got {
                            let fds: Vec<i32> =
                                first.into_iter().chain([self.listener.raw_fd()]).collect();
                            wait_readable(&fds, 5);
                        }
                        exit_status = child.poll_end(&self.asm.procs)?;
                        phase
                    }
                }
                Phase::Running | Phase::Lingering { .. } => {
                    let lingering = matches!(phase, Phase::Lingering { .. });
                    if child.stop_pending() && lingering {
                        // interrupted while descendants linger: finish the file now
                        phase = Phase::Draining;
                        continue;
                    }
                    let look = Instant::now() >= self.next_look;
                    if look {
                        self.next_look = Instant::now() + LOOK_EVERY;
                    }
                    let busy = self.pump(look)?;
                    if look && exit_status.is_none() {
                        exit_status = child.poll_end(&self.asm.procs)?;
                    }
                    let next = match phase {
                        Phase::Running if exit_status.is_some() => Phase::Lingering {
                            since: Instant::now(),
                        },
                        Phase::Lingering { since } if self.lingered(since)? => Phase::Draining,
                        other => other,
                    };
                    if !busy && !matches!(next, Phase::Draining) {
                        self.idle();
                    }
                    next
                }
                Phase::Draining => {
                    // Whatever is still queued on open connections, then
                    // what processes that died left in their arenas.
                    for i in 0..self.conns.len() {
                        self.read_conn(i, usize::MAX)?;
                    }
                    self.salvage(|_| true)?;
                    self.poll_os(true)?;
                    self.flush_periodic(true)?;
                    return self.finish(exit_status);
                }
            };
        }
    }

    /// One round of the running loop: new connections, up to a burst of
    /// datagrams from each, the kernel's records, the periodic flush. True
    /// if any datagram came.
    fn pump(&mut self, accept: bool) -> Result<bool, RecordError> {
        if accept {
            self.accept()?;
        }
        // (before the arenas are looked at: a buffer whose count moved
        // after this is looked for again, see idle)
        self.handed_over_seen = self.handed_over();
        let mut busy = self.collect_workers(Duration::ZERO)?;
        for i in 0..self.conns.len() {
            busy |= self.read_conn_and_arenas(i)?;
        }
        self.conns.retain(|c| !c.1);
        if accept {
            busy |= self.read_orphans(|_| true)?;
        }
        self.poll_os(false)?;
        if accept || self.arenas.len() > ARENAS_LOOKED_THROUGH {
            // (an ended process's arena is looked through at every turn
            // until it is let go: not for up to a flush's 100 ms, and not
            // a whole burst's worth of short processes at once)
            self.release_ended_arenas()?;
        }
        self.flush_periodic(false)?;
        Ok(busy)
    }

    /// Connection `i` and the arenas of its processes: the buffers handed
    /// over quietly are taken first, then up to a burst of datagrams is read
    /// (each after the quiet buffers handed over before it), then, if that
    /// emptied the connection, the arenas are looked at again and the quiet
    /// buffers taken are read (every datagram sent before them has been;
    /// see arena.rs for why the second look). True if anything came.
    fn read_conn_and_arenas(&mut self, i: usize) -> Result<bool, RecordError> {
        let id = self.conns[i].0.id;
        let keys: Vec<(u64, u32)> = self.arenas.keys().filter(|k| k.0 == id).copied().collect();
        let mut took = 0;
        for key in &keys {
            if let Some(arena) = self.arenas.get_mut(key) {
                arena.set_reading(true);
                took += arena.take_quiet();
            }
        }
        let mut got = self.read_conn(i, READ_BURST)?;
        if self.conns[i].0.drained {
            for key in keys {
                if let Some(arena) = self.arenas.get_mut(&key) {
                    took += arena.take_quiet();
                }
                got |= self.read_quiet(key, u64::MAX, None)?;
            }
        }
        Ok(got || took > 0)
    }

    /// Reads the quiet buffers taken from arena `key` whose number is below
    /// `before`, in order (see [`Arena::next_quiet`]); true if there were any.
    fn read_quiet(
        &mut self,
        key: (u64, u32),
        before: u64,
        sender: Option<u32>,
    ) -> Result<bool, RecordError> {
        if !self.arenas.get(&key).is_some_and(Arena::has_quiet) {
            return Ok(false);
        }
        let Some(mut arena) = self.arenas.remove(&key) else {
            return Ok(false);
        };
        let r = self.read_quiet_of(key.1, &mut arena, before, sender);
        self.arenas.insert(key, arena);
        r
    }

    fn read_quiet_of(
        &mut self,
        pid: u32,
        arena: &mut Arena,
        before: u64,
        sender: Option<u32>,
    ) -> Result<bool, RecordError> {
        let mut got = false;
        while let Some(q) = arena.next_quiet(before, sender) {
            got = true;
            self.pace.arrived(Instant::now());
            // (mappings the kernel reported before these events)
            self.os.drain(&mut self.asm.book.lock());
            let from = Sender {
                pid,
                tid: self.ns.tid(pid, q.tid),
            };
            let backlog = arena.has_quiet();
            self.take_buffer(from, &q.batch, arena, q.buf, backlog)?;
        }
        Ok(got)
    }

    /// Nothing came in the last round: waits for the next datagram, the
    /// kernel's records or a new connection, watching while buffers come
    /// densely (see `pace.rs`), else asleep for at most 20 ms.
    fn idle(&mut self) {
        let mut fds: Vec<i32> = self.conns.iter().map(|c| c.0.raw_fd()).collect();
        fds.push(self.listener.raw_fd());
        fds.extend(self.os.wake_fds());
        if self.pool.as_ref().is_some_and(|p| p.in_flight() > 0) {
            // (a job coming back frees a buffer the runtime may wait for)
            let _ = self.collect_workers(Duration::from_micros(200));
            return;
        }
        if let Some(until) = self.pace.watch_until() {
            let seen = self.handed_over_seen;
            match pace::watch(until, &fds, || self.handed_over() != seen) {
                Seen::Moved => return,
                Seen::Readable => {
                    self.next_look = Instant::now(); // (it may be a connection)
                    return;
                }
                Seen::Nothing => {}
            }
        }
        // Asleep, the recorder is woken by datagrams: the runtime is told to
        // send them again, and what it handed over quietly until then is
        // looked for once more (see Arena::set_reading).
        let mut quiet = false;
        let mut orphans = false;
        for arena in self.arenas.values_mut() {
            arena.set_reading(false);
            quiet |= arena.take_quiet() > 0 || arena.has_quiet();
            orphans |= arena.is_orphan();
        }
        if !quiet {
            // (nothing wakes the recorder for an orphan's buffers: it looks
            // every millisecond, so that its threads seldom wait)
            wait_readable(&fds, if orphans { 1 } else { 20 });
            self.next_look = Instant::now();
        }
    }

    /// Buffers handed over so far, all arenas together: it moves just
    /// before a buffer is handed over, quietly or with a datagram.
    fn handed_over(&self) -> u64 {
        self.arenas.values().map(Arena::handed_over).sum()
    }

    /// After the target exited at `since`: true once nothing is connected,
    /// or descendants have been silent (and the target gone) for LINGER,
    /// or those still sending are daemons (they left lapse's session with
    /// `setsid`) and have had LINGER: `record` does not wait for them.
    fn lingered(&mut self, since: Instant) -> Result<bool, RecordError> {
        if since.elapsed() > LINGER && self.only_daemons_left() {
            return Ok(true);
        }
        if self.conns.is_empty() || (self.last_data.elapsed() > LINGER && since.elapsed() > LINGER)
        {
            self.accept()?;
            return Ok(self.conns.is_empty() || since.elapsed() > LINGER);
        }
        Ok(false)
    }

    /// True when every live process that has sent on an open connection
    /// is in another session than lapse's (a daemon).
    fn only_daemons_left(&self) -> bool {
        let Some(ours) = proc_scan::own_session() else {
            return false;
        };
        self.conns
            .iter()
            .flat_map(|(c, _)| c.pids.iter())
            .filter_map(|&pid| proc_scan::session_of(pid))
            .all(|session| session != ours)
    }

    /// The session header: written once the first runtime said hello (its
    /// probe cost) or the wait for it ended.
    fn write_header(
        &mut self,
        opts: &RecordOptions,
        start: Timestamp,
        start_unix_ns: u64,
        faults: bool,
    ) -> Result<(), RecordError> {
        let mut os_events = vec![OsEventSource::Switch.name().to_owned()];
        if faults {
            os_events.push(OsEventSource::Fault.name().to_owned());
        }
        let mut notes = Vec::new();
        if self.asm.probe_spread_pct > 0 {
            notes.push(format!(
                "probe cost: the 10th percentile of 301 short trials at start-up (their 90th percentile: {:.2}x that)",
                f64::from(self.asm.probe_spread_pct) / 100.0
            ));
            if self.asm.probe_spread_pct > UNRELIABLE_SPREAD_PCT {
                let why = "the machine was very busy while lapse measured its probe cost at start-up, so the probe cost it subtracts with --compensate may be off";
                self.notices.say(Notice::Warning(why.to_owned()));
                notes.push(format!("warning: {why}"));
            }
        }
        if self.os.has_syscalls() {
            os_events.push(OsEventSource::Syscall.name().to_owned());
        }
        if let Some(why) = &self.os.syscalls_refused {
            // One line now (the run goes on), and the same in the header.
            self.notices.say(Notice::Warning(format!(
                "recording without syscall OS events: {why}"
            )));
            notes.push(format!(
                "syscall OS events were asked for but not recorded: {why}"
            ));
        }
        notes.extend(opts.filters.note());
        let header = SessionHeader {
            command: match &opts.target {
                crate::Target::Command(c) => c.clone(),
                crate::Target::Pid { pid, .. } => vec!["--pid".into(), pid.to_string()],
            },
            start_unix_ns,
            start,
            clock: "monotonic".into(),
            host: hostname(),
            method: Method::Instrumentation,
            probe_cost_ns: self.asm.probe_cost_ns.unwrap_or(0.0),
            os_events,
            sample_event: None,
            sample_period: None,
            sample_period_is_time: false,
            lapse_version: env!("CARGO_PKG_VERSION").into(),
            notes,
            tsc: Some(self.asm.clock.calibration()),
        };
        self.out.record(&Record::Session(header.clone()))?;
        self.header = Some(header);
        Ok(())
    }

    fn accept(&mut self) -> Result<(), RecordError> {
        let began = clock::monotonic_now();
        while let Some(c) = self.listener.accept().map_err(RecordError::Receive)? {
            self.conns.push((c, false));
        }
        self.accepted_through = began;
        Ok(())
    }

    /// Reads up to `max` datagrams from connection `i`; true if any came.
    fn read_conn(&mut self, i: usize, max: usize) -> Result<bool, RecordError> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.resize(MAX_DATAGRAM + 64, 0);
        let mut got = false;
        let mut n = 0;
        let began = clock::monotonic_now();
        self.conns[i].0.drained = false;
        while n < max && !self.conns[i].1 {
            let got_one = self.conns[i]
                .0
                .recv_with_fd(&mut buf)
                .map_err(RecordError::Receive)?;
            match got_one.recv {
                Recv::Datagram(len) => {
                    got = true;
                    n += 1;
                    self.handle(i, &buf[..len], got_one.fd, got_one.sender_pid)?;
                }
                Recv::WouldBlock => {
                    self.conns[i].0.drained = true;
                    self.conns[i].0.emptied_at = began;
                    break;
                }
                Recv::Closed => {
                    self.conns[i].1 = true;
                    self.conns[i].0.drained = true;
                    self.conns[i].0.emptied_at = began;
                    let id = self.conns[i].0.id;
                    self.orphan_or_salvage(id)?;
                }
            }
        }
        if got {
            self.last_data = Instant::now();
            // (threads waiting for room in the socket see the recorder move)
            let id = self.conns[i].0.id;
            for (_, arena) in self.arenas.iter().filter(|(k, _)| k.0 == id) {
                arena.note_received(n as u64);
            }
        }
        self.buf = buf;
        Ok(got)
    }

    fn handle(
        &mut self,
        conn: usize,
        datagram: &[u8],
        fd: Option<std::os::fd::OwnedFd>,
        sender_pid: Option<u32>,
    ) -> Result<(), RecordError> {
        let Ok(msg) = Msg::parse(datagram) else {
            self.bad_datagrams += 1;
            return Ok(());
        };
        // The runtime's own ids (its arena speaks them), then the message
        // in the ids of the recorder's PID namespace (see ns_ids.rs).
        let local = msg.from();
        let id = self.conns[conn].0.id;
        self.ns.learn(id, local.pid, sender_pid);
        let ns = &mut self.ns;
        let msg = if ns.pid(id, local.pid) == local.pid {
            msg
        } else {
            let pids: Vec<(u32, u32)> = [local.pid]
                .into_iter()
                .chain(match msg {
                    Msg::Hello { ppid, .. } | Msg::Child { ppid, .. } => Some(ppid),
                    _ => None,
                })
                .map(|p| (p, ns.pid(id, p)))
                .collect();
            let pid = |p: u32| pids.iter().find(|m| m.0 == p).map_or(p, |m| m.1);
            msg.map_ids(pid, |p, t| ns.tid(p, t))
        };
        let from = msg.from();
        // (taken before it was sent: everything sent before then is read)
        if let Msg::Hello { ticks, .. }
        | Msg::Fork { ticks, .. }
        | Msg::Exec { ticks, .. }
        | Msg::Control { ticks, .. } = msg
        {
            let at = self.sent_after(ticks);
            let c = &mut self.conns[conn].0;
            c.stamped_at = c.stamped_at.max(at);
        }
        if !self.inherit && from.pid != self.root {
            return Ok(()); // --no-inherit: only the command's own process
        }
        if !self.conns[conn].0.pids.contains(&from.pid) {
            // A process on a new connection (a new exec image, or the
            // runtime connected again after the program closed or dup2-ed
            // over its descriptor): what it sent on its old connection came
            // first, so it is read first.
            for j in 0..self.conns.len() {
                if j != conn && self.conns[j].0.pids.contains(&from.pid) {
                    self.read_conn(j, usize::MAX)?;
                }
            }
            let pid = from.pid;
            self.read_orphans(|k| k.1 == pid)?;
            self.note_pid(conn, from.pid);
        }
        // The buffers its process handed over quietly before it was sent
        // come first.
        let key = (self.conns[conn].0.id, from.pid);
        if let Some(arena) = self.arenas.get_mut(&key) {
            arena.take_quiet();
            self.read_quiet(key, protocol::arena_seq(datagram), Some(local.tid))?;
        }
        // Mappings and execs the kernel reported must be known before the
        // addresses in this datagram are looked up.
        self.os.drain(&mut self.asm.book.lock());
        self.note_born();
        match msg {
            Msg::Arena {
                bytes,
                bufs,
                buf_events,
                ..
            } => {
                let id = self.conns[conn].0.id;
                match fd.and_then(|fd| Arena::map(&fd, bytes, bufs, buf_events)) {
                    Some(a) => {
                        self.arenas.insert((id, from.pid), a);
                    }
                    // the runtime's events would be lost: they are not
                    // (it falls back to sending them), but say so
                    None => self.bad_datagrams += 1,
                }
            }
            Msg::ShmEvents { batch, buf, .. } => {
                self.pace.arrived(Instant::now());
                let id = self.conns[conn].0.id;
                if let Some(arena) = self.arenas.remove(&(id, from.pid)) {
                    // (a datagram: the recorder was asleep, buffers come sparsely)
                    let r = self.take_buffer(from, &batch, &arena, buf as usize, false);
                    self.arenas.insert((id, from.pid), arena);
                    r?;
                } else {
                    self.bad_datagrams += 1;
                }
            }
            _ => {
                // (what follows may look at any thread's stream)
                self.sync_workers()?;
                if let Some(thread) = self.begins_again(&msg, datagram) {
                    self.replace(thread)?;
                }
                let hello = matches!(msg, Msg::Hello { .. });
                if hello && self.asm.is_exec(from.pid) {
                    // The old image's last datagrams are on its own (now
                    // closed) connection: take them before its calls close.
                    for j in 0..self.conns.len() {
                        if j != conn && self.conns[j].0.pids.contains(&from.pid) {
                            self.read_conn(j, usize::MAX)?;
                        }
                    }
                    // (and the old image's arena, now that it is gone)
                    let (pid, id) = (from.pid, self.conns[conn].0.id);
                    self.salvage(|k| k.1 == pid && k.0 != id)?;
                }
                let took = self.asm.message(
                    msg,
                    protocol::events(datagram),
                    protocol::control_text(datagram),
                    &mut self.out,
                )?;
                if let Took::ThreadEnded { thread, at } = took {
                    if let Some(t) = self.os.thread_mut(thread) {
                        t.end = at.into();
                    }
                }
                if hello {
                    if let Some(cmd) = read_cmdline(from.pid) {
                        self.asm.procs.entry(from.pid).or_default().command = cmd;
                    }
                }
                self.note_pid(conn, from.pid);
            }
        }
        Ok(())
    }

    /// The ended thread the recorder still holds whose id `msg` shows
    /// given out again (the kernel hands ids out again), if any: a fork
    /// child's first message, or a new program's hello (not an exec: that
    /// one announced itself), sent after the process with its pid ended
    /// (its main thread, and with it the process); or a thread's first
    /// events, after the thread with its id ended. (A starved recorder
    /// often reads a process's first message after the kernel told of its
    /// end: the times tell the two apart.)
    fn begins_again(&self, msg: &Msg, datagram: &[u8]) -> Option<ThreadKey> {
        let from = msg.from();
        let process = ThreadKey::new(from.pid, from.pid);
        let ended_before = |ticks: Ticks| {
            let end = self.os.processes.get(&from.pid).and_then(|p| p.end);
            end.is_some_and(|end| self.sent_after(ticks) > end)
        };
        match *msg {
            Msg::Child { fork_ticks, .. } => ended_before(fork_ticks).then_some(process),
            Msg::Hello { ticks, .. } => {
                let old = self.asm.procs.get(&from.pid);
                let image = old.is_some_and(|p| p.said_hello && p.exec_at.is_none());
                (image && ended_before(ticks)).then_some(process)
            }
            Msg::Events { batch, .. } => {
                let events = protocol::events(datagram);
                let again = self.thread_begins_again(from, &batch, events);
                again.then(|| thread_of(from))
            }
            _ => None,
        }
    }

    /// Whether `batch` is the first of a new thread with the id of one
    /// still held (see [`Self::begins_again`]).
    fn thread_begins_again(
        &self,
        from: Sender,
        batch: &Batch,
        mut events: impl Iterator<Item = protocol::RawEvent>,
    ) -> bool {
        let key = thread_of(from);
        // (a main thread begins with its process: its child or hello message)
        if from.pid == from.tid
            || batch.first_index != 0
            || !self.asm.threads.get(key).is_some_and(|s| s.has_sent())
        {
            return false;
        }
        // (a buffer the old thread sent twice has its events before its end)
        let end = self.os.thread(key).and_then(|t| t.end.get());
        let first = events.find(|e| e.function != protocol::HOLE_FN);
        match (end, first) {
            (Some(end), Some(e)) => self.sent_after(e.ticks) > end,
            _ => false,
        }
    }

    /// A time on the kernel's clock that a runtime's clock reading `ticks`
    /// surely came after: measured back from now, so that a conversion rate
    /// measured over 10 ms (when the kernel publishes none; off by about
    /// 1e-4) errs by that share of the reading's age only, and a margin of
    /// 1 ms plus a tenth of a percent of the age covers it. The kernel's
    /// clock is read first: a recorder preempted between the two readings
    /// (milliseconds on a loaded machine) then gets an earlier time, never a
    /// later one (read the other way round, a process's own first message
    /// could pass for one sent after its end).
    fn sent_after(&self, ticks: Ticks) -> Timestamp {
        let now = clock::monotonic_now();
        let now_ticks = clock::ticks_now();
        let clock = &self.asm.clock;
        let age = clock
            .to_timestamp(Ticks::new(now_ticks))
            .as_nanos()
            .saturating_sub(clock.to_timestamp(ticks).as_nanos());
        let margin = 1_000_000 + age / 1000;
        Timestamp::from_nanos(now.as_nanos().saturating_sub(age.saturating_add(margin)))
    }

    /// Takes buffer `buf` of `arena`, which `from` handed over: added to
    /// its thread's stream here, or at a worker (`workers.rs`) when others
    /// are at the workers already or wait behind it (`backlog`): the
    /// workers take on work only while this thread cannot keep up.
    fn take_buffer(
        &mut self,
        from: Sender,
        batch: &Batch,
        arena: &Arena,
        buf: usize,
        backlog: bool,
    ) -> Result<(), RecordError> {
        if self.thread_begins_again(from, batch, arena.events(buf, batch.count as usize)) {
            self.replace(thread_of(from))?;
        }
        let idle = self.pool.as_ref().is_none_or(|p| p.in_flight() == 0);
        if idle && !backlog {
            // (nothing is lent while no job is out: the stream is here)
            let r = self.add_events(from, batch, arena.events(buf, batch.count as usize));
            arena.release(buf);
            return r;
        }
        let w = Waiting {
            from,
            batch: *batch,
            arena: arena.view(),
            buf,
        };
        let key = thread_of(from);
        if let Some(queue) = self.lent.get_mut(&key) {
            queue.push_back(w); // (after the buffer its stream is out for)
            return Ok(());
        }
        // (as many out as the workers should hold: one comes back first)
        while self.pool.as_ref().is_some_and(Pool::full) {
            self.collect_workers(Duration::from_millis(50))?;
        }
        self.lend(key, VecDeque::from([w]))
    }

    /// Sends the first of `queue` (thread `key`'s buffers, in order) to a
    /// worker with the thread's stream; the rest wait in [`Self::lent`]
    /// for the stream to come back. Buffers of a thread not followed, or
    /// of calibration, are given back at once.
    fn lend(&mut self, key: ThreadKey, mut queue: VecDeque<Waiting>) -> Result<(), RecordError> {
        while let Some(w) = queue.pop_front() {
            if w.batch.discard {
                w.arena.release(w.buf);
                continue;
            }
            let count = u64::from(w.batch.count);
            let Some((stream, gen)) = self.asm.threads.lend(key, w.batch.first_index, count) else {
                w.arena.release(w.buf);
                continue;
            };
            let job = Box::new(Job {
                key,
                stamped: self.out.stamp(key),
                stream,
                gen,
                first_index: w.batch.first_index,
                stalled: w.batch.stalled_ticks,
                arena: w.arena,
                buf: w.buf,
                count: w.batch.count as usize,
            });
            let sent = match self.pool.as_mut() {
                Some(p) => p.send(job),
                None => Err(job),
            };
            match sent {
                Ok(()) => {
                    self.lent.insert(key, queue);
                    return Ok(());
                }
                Err(job) => {
                    // (no workers left: here, as without them)
                    self.pool = None;
                    let filled = Default::default();
                    self.asm.threads.give_back(key, job.stream, &filled);
                    let events = job.arena.events(job.buf, job.count);
                    let r = self.add_events(w.from, &w.batch, events);
                    job.arena.release(job.buf);
                    r?;
                }
            }
        }
        Ok(())
    }

    /// Takes the workers' finished jobs: waits at most `timeout` for the
    /// first, then takes what else is done.
    fn collect_workers(&mut self, timeout: Duration) -> Result<bool, RecordError> {
        let mut got = false;
        let mut wait = timeout;
        while let Some(d) = self.pool.as_mut().and_then(|p| p.done(wait)) {
            got = true;
            wait = Duration::ZERO;
            self.asm.threads.give_back(d.key, d.stream, &d.filled);
            self.out.chunks(d.events, &d.chunks, d.error)?;
            self.asm.write_book(&mut self.out)?;
            d.arena.release(d.buf);
            let queue = self.lent.remove(&d.key).unwrap_or_default();
            self.lend(d.key, queue)?;
        }
        Ok(got)
    }

    /// Waits until every stream lent to a worker is back (and the buffers
    /// that waited for them are added): then anything may look at them.
    pub(super) fn sync_workers(&mut self) -> Result<(), RecordError> {
        while self.pool.as_ref().is_some_and(|p| p.in_flight() > 0) {
            self.collect_workers(Duration::from_millis(100))?;
        }
        // (workers that died with streams out: their buffers are lost)
        for (_, queue) in self.lent.drain() {
            for w in queue {
                self.asm.threads.lost_events += u64::from(w.batch.count);
                w.arena.release(w.buf);
            }
        }
        Ok(())
    }

    /// Adds one batch of a thread's events (from a datagram or an arena buffer).
    fn add_events(
        &mut self,
        from: Sender,
        batch: &Batch,
        events: impl Iterator<Item = protocol::RawEvent> + Clone,
    ) -> Result<(), RecordError> {
        self.asm.events(from, batch, events, &mut self.out)
    }

    /// Connection `id` closed: the arenas of its processes that have ended
    /// are salvaged; those of processes not known to have ended are kept as
    /// orphans, read at every look (see arena.rs) and salvaged when the
    /// process ends (at the latest when the recording does).
    fn orphan_or_salvage(&mut self, id: u64) -> Result<(), RecordError> {
        let lives =
            |os: &OsCollector, pid: u32| os.processes.get(&pid).is_none_or(|p| p.end.is_none());
        let mut live = Vec::new();
        for (key, arena) in self.arenas.iter_mut().filter(|(k, _)| k.0 == id) {
            if lives(&self.os, key.1) {
                arena.orphan();
                live.push(*key);
            }
        }
        self.read_orphans(|k| live.contains(k))?;
        self.salvage(|k| k.0 == id && !live.contains(k))
    }

    /// Stamps the heartbeat of the orphan arenas `which` selects and reads
    /// the buffers queued in them; true if there were any.
    fn read_orphans(&mut self, which: impl Fn(&(u64, u32)) -> bool) -> Result<bool, RecordError> {
        let now = clock::monotonic_now().as_nanos();
        let keys: Vec<(u64, u32)> = self
            .arenas
            .iter()
            .filter(|(k, a)| a.is_orphan() && which(k))
            .map(|(k, _)| *k)
            .collect();
        let mut got = false;
        for key in keys {
            if let Some(arena) = self.arenas.get_mut(&key) {
                arena.heartbeat(now);
                got |= arena.take_quiet() > 0;
            }
            got |= self.read_quiet(key, u64::MAX, None)?;
        }
        Ok(got)
    }

    /// Takes the events in arena buffers their threads never handed over
    /// (the process died), for the arenas `which` selects, and drops those
    /// arenas; the buffers handed over quietly first (every datagram of
    /// their connection has been read). Events the runtime did hand over
    /// are skipped by index.
    pub(super) fn salvage(
        &mut self,
        which: impl Fn(&(u64, u32)) -> bool,
    ) -> Result<(), RecordError> {
        let keys: Vec<(u64, u32)> = self.arenas.keys().copied().filter(|k| which(k)).collect();
        for key in keys {
            let Some(mut arena) = self.arenas.remove(&key) else {
                continue;
            };
            // (a runtime that goes on in it sends datagrams from now on)
            arena.set_reading(false);
            loop {
                let took = arena.take_quiet();
                self.read_quiet_of(key.1, &mut arena, u64::MAX, None)?;
                if took == 0 && !arena.has_quiet() {
                    break;
                }
            }
            // (the salvage below looks at the threads' streams)
            self.sync_workers()?;
            self.cut_off
                .note(key.1, &arena, &mut self.asm.threads.lost_events);
            for s in arena.salvage() {
                let from = Sender {
                    pid: key.1,
                    tid: s.tid,
                };
                let batch = Batch {
                    first_index: s.first,
                    stalled_ticks: Ticks::ZERO,
                    count: s.events.len() as u32,
                    discard: false,
                };
                self.os.drain(&mut self.asm.book.lock());
                self.add_events(from, &batch, s.events.into_iter())?;
            }
        }
        Ok(())
    }

    /// Arenas of processes that ended, once their connection (shared with
    /// a parent or children that live on) has been read through a time
    /// after the end (`Conn::read_through`): every datagram the process
    /// sent was read by then, and nothing writes to its arena any more. What they left is
    /// taken and the mapping let go at once, so a program that forks child
    /// after child does not make the recorder hold (and look through) the
    /// arenas of the last moments' processes. Runs before the processes'
    /// threads are retired.
    fn release_ended_arenas(&mut self) -> Result<(), RecordError> {
        let read: HashMap<u64, Timestamp> = self
            .conns
            .iter()
            .map(|c| (c.0.id, c.0.read_through()))
            .collect();
        let done: HashSet<(u64, u32)> = self
            .arenas
            .iter()
            .filter(|((conn, pid), arena)| {
                let Some(end) = self.os.processes.get(pid).and_then(|p| p.end) else {
                    return false;
                };
                arena.is_orphan() || read.get(conn).is_some_and(|&at| at > end)
            })
            .map(|(k, _)| *k)
            .collect();
        if done.is_empty() {
            return Ok(());
        }
        self.salvage(|k| done.contains(k))
    }

    /// Threads the kernel said began: their ids in a runtime's namespace
    /// are read while they live (see ns_ids.rs).
    pub(super) fn note_born(&mut self) {
        for thread in self.os.born.drain(..) {
            if !self.ns.is_empty() {
                self.ns.thread_began(thread.pid, thread.tid);
            }
        }
    }

    fn note_pid(&mut self, conn: usize, pid: u32) {
        let pids = &mut self.conns[conn].0.pids;
        if !pids.contains(&pid) {
            pids.push(pid);
        }
    }

    fn poll_os(&mut self, all: bool) -> Result<(), RecordError> {
        let upto = if all {
            u64::MAX
        } else {
            clock::monotonic_now().as_nanos()
        };
        self.os.poll(upto, &mut self.asm.book.lock());
        self.note_born();
        self.asm.write_book(&mut self.out)
    }

    /// Every 100 ms (or at the end): partial batches and OS events go out and
    /// the file is flushed, so a killed recorder loses at most that much.
    fn flush_periodic(&mut self, force: bool) -> Result<(), RecordError> {
        if !force && !self.out.due() {
            return Ok(());
        }
        self.sync_workers()?;
        // (written as they are taken: with tens of thousands of threads, a
        // list of all of them first would be the recorder's peak)
        for (key, s) in self.asm.threads.streams_mut() {
            if let Some(b) = s.take_batch(true) {
                self.out.events(key, &b)?;
            }
        }
        // OS events of threads with a timeline wait until the cuts before them are known.
        let (threads, out) = (&mut self.asm.threads, &mut self.out);
        self.os
            .take_blocks(force, |key, events| match threads.get_mut(key) {
                Some(s) => {
                    s.stalls.add_os(events);
                    Ok(())
                }
                None => out.record(&Record::OsEvents(OsEventBlock {
                    pid: key.pid,
                    tid: key.tid,
                    serial: 0,
                    events: events.into_iter().map(HeldOsEvent::get).collect(),
                })),
            })?;
        for (key, s) in self.asm.threads.streams_mut() {
            let events = s.stalls.release_os(force);
            if !events.is_empty() {
                let (pid, tid) = (key.pid, key.tid);
                self.out.record(&Record::OsEvents(OsEventBlock {
                    pid,
                    tid,
                    serial: 0,
                    events,
                }))?;
            }
        }
        self.announce_new()?;
        self.release_ended_arenas()?;
        self.retire_ended_threads()?;
        self.retire_ended_processes()?;
        self.flushes += 1;
        if self.flushes.is_multiple_of(10) {
            // Threads come and go with batches of very different sizes:
            // this keeps the recorder's RSS near its live data.
            crate::linux::process::release_free_memory(); // about once a second
        }
        self.out.flush(true)
    }
}
