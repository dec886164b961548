//! One instrumentation recording from launch to footer.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use lapse_data::{Method, OsEventBlock, Record, SessionHeader, Timestamp};
use lapse_rt::protocol::{self, Batch, Msg, Sender, MAX_DATAGRAM};

use super::address::AddressBook;
use super::arena::Arena;
use super::ipc::{wait_readable, Conn, Listener, Recv};
use super::os::OsCollector;
use super::output::{Output, FLUSH_EVERY};
use super::session_dir::SessionDir;
use super::threads::Threads;
use crate::linux::clock::{self, TickClock};
use crate::linux::launch::{self, HeldChild};
use crate::{RecordError, RecordOptions, RecordOutcome};

/// How long to wait for the runtime's first hello before writing the header anyway.
const HELLO_WAIT: Duration = Duration::from_millis(500);
/// After the target exited, how long descendants may keep the session open silently.
const LINGER: Duration = Duration::from_secs(2);
/// An ended thread's stream is dropped this long after its end (its last
/// datagram was sent before it exited, so it is in by then).
pub(super) const RETIRE_AFTER: Duration = Duration::from_millis(500);
/// An ended process's arena is let go this long after its end (before its
/// threads are retired), once its connection has nothing queued.
const ARENA_GRACE: Duration = Duration::from_millis(200);
/// Datagrams read from one connection before looking at the others.
const READ_BURST: usize = 256;

#[derive(Default)]
pub(super) struct Proc {
    pub(super) command: Vec<String>,
    pub(super) ppid: Option<u32>,
    pub(super) start: Option<Timestamp>,
    pub(super) exec_at: Option<Timestamp>,
    pub(super) said_hello: bool,
}

pub(super) struct Session {
    pub(super) out: Output,
    pub(super) book: AddressBook,
    pub(super) threads: Threads,
    pub(super) os: OsCollector,
    pub(super) clock: TickClock,
    pub(super) listener: Listener,
    pub(super) conns: Vec<(Conn, bool)>,
    pub(super) buf: Vec<u8>,
    pub(super) procs: HashMap<u32, Proc>,
    pub(super) probe_cost_ns: Option<f64>,
    pub(super) last_data: Instant,
    pub(super) bad_datagrams: u64,
    pub(super) root: u32,
    pub(super) header: Option<SessionHeader>,
    pub(super) flushes: u64,
    pub(super) inherit: bool,
    /// Functions already written, and (pid, tid) / (pid, 0) already announced.
    pub(super) announced_functions: usize,
    pub(super) announced: HashSet<(u32, u32)>,
    /// Shared arenas by (connection id, pid).
    pub(super) arenas: HashMap<(u64, u32), Arena>,
}

/// Records `argv` (resolved to `program`) with the runtime preloaded.
pub fn record(
    opts: &RecordOptions,
    program: &Path,
    argv: &[String],
) -> Result<RecordOutcome, RecordError> {
    let dir = SessionDir::create()?;
    let listener =
        Listener::bind(&dir.socket_path()).map_err(|source| RecordError::SessionDir {
            path: dir.socket_path(),
            source,
        })?;
    let out = Output::create(&opts.output)?;
    let mut preload = dir.runtime_path().display().to_string();
    if let Ok(old) = std::env::var("LD_PRELOAD") {
        if !old.is_empty() {
            preload = format!("{preload} {old}");
        }
    }
    let spill_path = super::recover::spill_path(&opts.output);
    // A spill left by an earlier recording to the same output is not this one's.
    let _ = std::fs::remove_file(&spill_path);
    let spill = spill_path.display().to_string();
    let mut env = vec![
        ("LD_PRELOAD".to_owned(), preload),
        (
            protocol::ENV_SOCKET.to_owned(),
            dir.socket_path().display().to_string(),
        ),
        (protocol::ENV_SPILL.to_owned(), spill),
        (protocol::ENV_CALIBRATE.to_owned(), "1".to_owned()),
        (
            protocol::ENV_FLUSH_TICKS.to_owned(),
            format!(
                "{:.0}",
                TickClock::rough_ticks_per_sec(3) * FLUSH_EVERY.as_secs_f64()
            ),
        ),
    ];
    if !opts.inherit {
        // The runtime takes itself and its variables out of what children get.
        env.push((protocol::ENV_NO_INHERIT.to_owned(), "1".to_owned()));
    }
    if !opts.libcalls {
        env.push((protocol::ENV_NO_LIBCALLS.to_owned(), "1".to_owned()));
    }
    let mut child =
        launch::spawn_held(program, argv, &env).map_err(|source| RecordError::Spawn {
            command: argv.join(" "),
            source,
        })?;
    let faults = opts.os_events.iter().any(|e| e == "fault");
    let syscalls = opts.os_events.iter().any(|e| e == "syscall");
    let os = match OsCollector::open(child.pid, faults, syscalls, opts.inherit) {
        Ok(os) => os,
        Err(e) => {
            child.abandon();
            return Err(e.into());
        }
    };
    let clock = TickClock::calibrate(os.tsc_scale());
    launch::catch_termination_signals();
    let mut s = Session {
        out,
        book: AddressBook::default(),
        threads: Threads::default(),
        os,
        clock,
        listener,
        conns: Vec::new(),
        buf: Vec::new(),
        procs: HashMap::new(),
        probe_cost_ns: None,
        last_data: Instant::now(),
        bad_datagrams: 0,
        root: child.pid as u32,
        header: None,
        flushes: 0,
        inherit: opts.inherit,
        announced_functions: 0,
        announced: HashSet::new(),
        arenas: HashMap::new(),
    };
    let start = clock::monotonic_now();
    let start_unix_ns = clock::realtime_unix_ns();
    s.procs.insert(
        s.root,
        Proc {
            command: argv.to_vec(),
            start: Some(start),
            ..Proc::default()
        },
    );
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
    fn run(
        &mut self,
        opts: &RecordOptions,
        child: &mut HeldChild,
        start: Timestamp,
        start_unix_ns: u64,
        faults: bool,
    ) -> Result<RecordOutcome, RecordError> {
        let mut exit_status = None;
        // The header carries the probe cost the runtime measures at start-up.
        let hello_deadline = Instant::now() + HELLO_WAIT;
        while self.probe_cost_ns.is_none()
            && Instant::now() < hello_deadline
            && exit_status.is_none()
        {
            self.accept()?;
            let first = self.conns.first().map(|c| c.0.raw_fd());
            let got = first.is_some() && self.read_conn(0, 1)?;
            if !got {
                let fds: Vec<i32> = first.into_iter().chain([self.listener.raw_fd()]).collect();
                wait_readable(&fds, 5);
            }
            exit_status = launch::wait(child.pid, false).map_err(RecordError::Wait)?;
        }
        // A target that ended this fast may still have its hello (with the
        // probe cost the header needs) queued: read up to it.
        if self.probe_cost_ns.is_none() && exit_status.is_some() {
            self.accept()?;
            for i in 0..self.conns.len() {
                while self.probe_cost_ns.is_none() && self.read_conn(i, 1)? {}
            }
        }
        let mut os_events = vec!["switch".to_owned()];
        if faults {
            os_events.push("fault".to_owned());
        }
        let mut notes = Vec::new();
        if self.os.has_syscalls() {
            os_events.push("syscall".to_owned());
        }
        if let Some(why) = &self.os.syscalls_refused {
            // One line now (the run goes on), and the same in the header.
            eprintln!("lapse: warning: recording without syscall OS events: {why}");
            notes.push(format!(
                "syscall OS events were asked for but not recorded: {why}"
            ));
        }
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
            probe_cost_ns: self.probe_cost_ns.unwrap_or(0.0),
            os_events,
            sample_event: None,
            sample_period: None,
            sample_period_is_time: false,
            lapse_version: env!("CARGO_PKG_VERSION").into(),
            notes,
            tsc: Some(self.clock.calibration()),
        };
        self.out.record(&Record::Session(header.clone()))?;
        self.header = Some(header);
        // The datagram read above (if any) was handled; go on until the end.
        // The target may have finished while we waited for its hello.
        let mut exited_at: Option<Instant> = exit_status.map(|_| Instant::now());
        loop {
            if launch::forward_pending_signal(child.pid) && exited_at.is_some() {
                break; // interrupted while descendants linger: finish the file now
            }
            self.accept()?;
            let mut busy = false;
            for i in 0..self.conns.len() {
                busy |= self.read_conn(i, READ_BURST)?;
            }
            self.conns.retain(|c| !c.1);
            self.poll_os(false)?;
            self.flush_periodic(false)?;
            if exit_status.is_none() {
                exit_status = launch::wait(child.pid, false).map_err(RecordError::Wait)?;
                if exit_status.is_some() {
                    exited_at = Some(Instant::now());
                }
            }
            if let Some(t) = exited_at {
                if self.conns.is_empty()
                    || (self.last_data.elapsed() > LINGER && t.elapsed() > LINGER)
                {
                    self.accept()?;
                    if self.conns.is_empty() || t.elapsed() > LINGER {
                        break;
                    }
                }
            }
            if !busy {
                let mut fds: Vec<i32> = self.conns.iter().map(|c| c.0.raw_fd()).collect();
                fds.push(self.listener.raw_fd());
                fds.extend(self.os.wake_fds());
                wait_readable(&fds, 20);
            }
        }
        // Whatever is still queued on open connections, then what processes
        // that died left in their arenas.
        for i in 0..self.conns.len() {
            self.read_conn(i, usize::MAX)?;
        }
        self.salvage(|_| true)?;
        self.poll_os(true)?;
        self.flush_periodic(true)?;
        self.finish(exit_status)
    }

    fn accept(&mut self) -> Result<(), RecordError> {
        while let Some(c) = self.listener.accept().map_err(RecordError::Receive)? {
            self.conns.push((c, false));
        }
        Ok(())
    }

    /// Reads up to `max` datagrams from connection `i`; true if any came.
    fn read_conn(&mut self, i: usize, max: usize) -> Result<bool, RecordError> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.resize(MAX_DATAGRAM + 64, 0);
        let mut got = false;
        let mut n = 0;
        self.conns[i].0.drained = false;
        while n < max && !self.conns[i].1 {
            let (r, fd) = self.conns[i]
                .0
                .recv_with_fd(&mut buf)
                .map_err(RecordError::Receive)?;
            match r {
                Recv::Datagram(len) => {
                    got = true;
                    n += 1;
                    self.handle(i, &buf[..len], fd)?;
                }
                Recv::WouldBlock => {
                    self.conns[i].0.drained = true;
                    break;
                }
                Recv::Closed => {
                    self.conns[i].1 = true;
                    let id = self.conns[i].0.id;
                    self.salvage(|key| key.0 == id)?;
                }
            }
        }
        if got {
            self.last_data = Instant::now();
        }
        self.buf = buf;
        Ok(got)
    }

    fn handle(
        &mut self,
        conn: usize,
        datagram: &[u8],
        fd: Option<std::os::fd::OwnedFd>,
    ) -> Result<(), RecordError> {
        let Ok(msg) = Msg::parse(datagram) else {
            self.bad_datagrams += 1;
            return Ok(());
        };
        let from = msg.from();
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
            self.note_pid(conn, from.pid);
        }
        // Mappings and execs the kernel reported must be known before the
        // addresses in this datagram are looked up.
        self.os.drain(&mut self.book);
        match msg {
            Msg::Hello {
                probe_cost_x1024,
                ticks,
                ppid,
                ..
            } => {
                let at = self.clock.to_timestamp(ticks);
                self.hello(conn, from.pid, probe_cost_x1024, ppid, at)?
            }
            Msg::Events { batch, .. } => {
                if !batch.discard {
                    self.add_events(from, &batch, protocol::events(datagram))?;
                }
            }
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
                let id = self.conns[conn].0.id;
                if let Some(arena) = self.arenas.remove(&(id, from.pid)) {
                    let (buf, count) = (buf as usize, batch.count as usize);
                    let r = if !batch.discard {
                        self.add_events(from, &batch, arena.events(buf, count))
                    } else {
                        Ok(())
                    };
                    arena.release(buf);
                    self.arenas.insert((id, from.pid), arena);
                    r?;
                } else {
                    self.bad_datagrams += 1;
                }
            }
            Msg::Fork { ticks, .. } => self.threads.fork(from.pid, from.tid, ticks),
            Msg::Child {
                fork_ticks, ppid, ..
            } => {
                let at = self.clock.to_timestamp(fork_ticks);
                self.book.fork(ppid, from.pid);
                self.threads
                    .set_gen(from.pid, self.book.gen_at(from.pid, at));
                self.threads.child(from.pid, from.tid, ppid, fork_ticks, at);
                let p = self.procs.entry(from.pid).or_default();
                p.ppid = Some(ppid);
                p.start.get_or_insert(at);
                p.said_hello = true;
                let parent_cmd = self
                    .procs
                    .get(&ppid)
                    .map(|p| p.command.clone())
                    .unwrap_or_default();
                let p = self.procs.entry(from.pid).or_default();
                if p.command.is_empty() {
                    p.command = parent_cmd;
                }
                self.note_pid(conn, from.pid);
            }
            Msg::Exec { ticks, .. } => {
                let at = self.clock.to_timestamp(ticks);
                self.procs.entry(from.pid).or_default().exec_at = Some(at);
                if from.tid != from.pid {
                    // exec from another thread: it goes on as the main
                    // thread (pid/pid); under its own tid it ends here
                    self.os.threads.entry((from.pid, from.tid)).or_default().end = Some(at);
                }
            }
        }
        Ok(())
    }

    /// Adds one batch of a thread's events (from a datagram or an arena buffer).
    fn add_events(
        &mut self,
        from: Sender,
        batch: &Batch,
        events: impl Iterator<Item = protocol::RawEvent>,
    ) -> Result<(), RecordError> {
        let encoded = self.threads.add_events(
            from.pid,
            from.tid,
            batch.first_index,
            batch.stalled_ticks,
            events,
            &mut self.book,
            &self.clock,
        );
        self.write_book()?;
        if let Some(b) = encoded {
            self.out.events(from.pid, from.tid, &b)?;
        }
        Ok(())
    }

    /// Takes the events in arena buffers their threads never handed over
    /// (the process died), for the arenas `which` selects, and drops those
    /// arenas. Events the runtime did hand over are skipped by index.
    fn salvage(&mut self, which: impl Fn(&(u64, u32)) -> bool) -> Result<(), RecordError> {
        let keys: Vec<(u64, u32)> = self.arenas.keys().copied().filter(|k| which(k)).collect();
        for key in keys {
            let Some(arena) = self.arenas.remove(&key) else {
                continue;
            };
            for s in arena.salvage() {
                let from = Sender {
                    pid: key.1,
                    tid: s.tid,
                };
                let batch = Batch {
                    first_index: s.first,
                    stalled_ticks: 0,
                    count: s.events.len() as u32,
                    discard: false,
                };
                self.os.drain(&mut self.book);
                self.add_events(from, &batch, s.events.into_iter())?;
            }
        }
        Ok(())
    }

    /// Arenas of processes that ended a while ago, once their connection
    /// (shared with a parent or children that live on) has nothing queued:
    /// what they left is taken and the mapping let go, so a program that
    /// forks child after child does not make the recorder grow. Runs before
    /// the processes' threads are retired.
    fn release_ended_arenas(&mut self) -> Result<(), RecordError> {
        let now = clock::monotonic_now();
        let grace = ARENA_GRACE.as_nanos() as u64;
        let drained: HashSet<u64> = self
            .conns
            .iter()
            .filter(|c| c.0.drained)
            .map(|c| c.0.id)
            .collect();
        let done: Vec<(u64, u32)> = self
            .arenas
            .keys()
            .filter(|(conn, pid)| {
                drained.contains(conn)
                    && self
                        .os
                        .processes
                        .get(pid)
                        .and_then(|p| p.end)
                        .is_some_and(|end| now.since(end) > grace)
            })
            .copied()
            .collect();
        if done.is_empty() {
            return Ok(());
        }
        self.salvage(|k| done.contains(k))
    }

    fn note_pid(&mut self, conn: usize, pid: u32) {
        let pids = &mut self.conns[conn].0.pids;
        if !pids.contains(&pid) {
            pids.push(pid);
        }
    }

    /// A process image starts: a new process, or `pid` after an exec.
    fn hello(
        &mut self,
        conn: usize,
        pid: u32,
        probe_cost_x1024: u64,
        ppid: u32,
        at: Timestamp,
    ) -> Result<(), RecordError> {
        if self.probe_cost_ns.is_none() && probe_cost_x1024 > 0 {
            self.probe_cost_ns = Some(self.clock.ticks_to_ns(probe_cost_x1024 as f64 / 1024.0));
        }
        let exec = self.procs.get(&pid).is_some_and(|p| p.said_hello);
        if exec {
            // The old image's last datagrams are on its own (now closed)
            // connection: take them before closing its calls.
            for j in 0..self.conns.len() {
                if j != conn && self.conns[j].0.pids.contains(&pid) {
                    self.read_conn(j, usize::MAX)?;
                }
            }
            let end = self.procs.get(&pid).and_then(|p| p.exec_at).unwrap_or(at);
            for (tid, batch) in self.threads.exec(pid, end) {
                self.out.events(pid, tid, &batch)?;
            }
        }
        // (the kernel's exec record already started a new mapping generation)
        self.threads.set_gen(pid, self.book.gen_at(pid, at));
        let p = self.procs.entry(pid).or_default();
        p.said_hello = true;
        p.exec_at = None;
        p.start.get_or_insert(at);
        if p.ppid.is_none() {
            p.ppid = Some(ppid);
        }
        if let Some(cmd) = read_cmdline(pid) {
            p.command = cmd;
        }
        self.note_pid(conn, pid);
        Ok(())
    }

    fn write_book(&mut self) -> Result<(), RecordError> {
        for r in self.book.take_pending() {
            self.out.record(&r)?;
        }
        Ok(())
    }

    fn poll_os(&mut self, all: bool) -> Result<(), RecordError> {
        let upto = if all {
            u64::MAX
        } else {
            clock::monotonic_now().as_nanos()
        };
        self.os.poll(upto, &mut self.book);
        self.write_book()
    }

    /// Every 100 ms (or at the end): partial batches and OS events go out and
    /// the file is flushed, so a killed recorder loses at most that much.
    fn flush_periodic(&mut self, force: bool) -> Result<(), RecordError> {
        if !force && !self.out.due() {
            return Ok(());
        }
        let batches: Vec<_> = self
            .threads
            .streams_mut()
            .filter_map(|s| s.take_batch(true).map(|b| (s.pid, s.tid, b)))
            .collect();
        for (pid, tid, b) in batches {
            self.out.events(pid, tid, &b)?;
        }
        // OS events of threads with a timeline wait until the cuts before them are known.
        for block in self.os.take_blocks(force) {
            match self.threads.get_mut(block.pid, block.tid) {
                Some(s) => s.stalls.add_os(block.events),
                None => self.out.record(&Record::OsEvents(block))?,
            }
        }
        let released: Vec<OsEventBlock> = self
            .threads
            .streams_mut()
            .map(|s| OsEventBlock {
                pid: s.pid,
                tid: s.tid,
                events: s.stalls.release_os(force),
            })
            .filter(|b| !b.events.is_empty())
            .collect();
        for block in released {
            self.out.record(&Record::OsEvents(block))?;
        }
        self.announce_new()?;
        self.release_ended_arenas()?;
        self.retire_ended_threads()?;
        self.flushes += 1;
        if self.flushes.is_multiple_of(10) {
            super::wrapup::release_free_memory(); // about once a second
        }
        self.out.flush(true)
    }
}

fn read_cmdline(pid: u32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    (!args.is_empty()).then_some(args)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default()
}
