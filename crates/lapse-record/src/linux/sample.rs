//! Sampling: the `record` driver. Opens the sampling event on the target
//! (one event and ring per CPU, inherited by every thread and child),
//! drains the rings in time order into a [`SampleSession`], and finishes the
//! file when the target exits (launch) or the duration or Ctrl-C ends it
//! (attach).

use std::fs::File;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use lapse_data::{Method, SessionHeader, Timestamp};
use perf_event_open_sys::bindings as sys;

use super::clock::{monotonic_now, realtime_unix_ns};
use super::launch;
use super::perf::{online_cpus, PerfError, PerfEvent};
use super::records::SampleIdLayout;
use super::sample_attr::{self, Rate, SampleEvent, STACK_COPY_BYTES};
use super::sample_parse::SampleLayout;
use super::sample_session::{read_cmdline, SampleSession};
use crate::{CallGraph, RecordError, RecordOptions, RecordOutcome, Target};

/// Ring size per CPU: 4 MiB holds about 250 16-KiB samples, a quarter
/// second of both CPUs' worth at 1 kHz, far more than one drain interval.
const RING_PAGES: usize = 1024;
/// How long the driver sleeps between drains when the rings stay quiet.
const POLL_MS: i32 = 50;

/// The rings of one recording and the merged, time-ordered record batch.
struct Rings {
    events: Vec<PerfEvent>,
    arena: Vec<u8>,
    index: Vec<(u64, usize, usize)>,
    scratch: Vec<u8>,
}

/// Everything fixed about how the event is opened.
struct Plan {
    event: SampleEvent,
    rate: Rate,
    callchain: bool,
    inherit: bool,
    exclude_kernel: bool,
}

impl Plan {
    fn from_options(opts: &RecordOptions) -> Result<Plan, RecordError> {
        let event =
            SampleEvent::by_name(opts.event.as_deref()).map_err(RecordError::Unsupported)?;
        Ok(Plan {
            event,
            rate: Rate::choose(event, opts.frequency, opts.period),
            callchain: opts.call_graph == CallGraph::FramePointer,
            inherit: opts.inherit,
            exclude_kernel: false,
        })
    }

    fn attr(&self, enable_on_exec: bool) -> sys::perf_event_attr {
        sample_attr::attr(
            self.event,
            self.rate,
            self.callchain,
            self.inherit,
            self.exclude_kernel,
            enable_on_exec,
        )
    }

    fn layouts(&self) -> (SampleLayout, SampleIdLayout) {
        let a = self.attr(false);
        (
            SampleLayout {
                callchain: self.callchain,
                user_state: !self.callchain,
            },
            SampleIdLayout::new(a.sample_type),
        )
    }

    fn header(&self, command: Vec<String>, start: Timestamp) -> SessionHeader {
        let mut notes = vec![if self.callchain {
            "call graph: frame pointers (kernel callchain)".to_owned()
        } else {
            format!(
                "call graph: DWARF unwinding of {} KiB user stack copies",
                STACK_COPY_BYTES / 1024
            )
        }];
        if self.exclude_kernel {
            notes.push("kernel-mode time not sampled (perf_event_paranoid forbids it)".to_owned());
        }
        let period = self.rate.fixed_period();
        SessionHeader {
            command,
            start_unix_ns: realtime_unix_ns(),
            start,
            clock: "monotonic".into(),
            host: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .unwrap_or_default(),
            method: Method::Sampling,
            probe_cost_ns: 0.0,
            os_events: Vec::new(),
            sample_event: Some(self.event.name.to_owned()),
            sample_period: period,
            sample_period_is_time: self.event.time_based && period.is_some(),
            lapse_version: env!("CARGO_PKG_VERSION").to_owned(),
            notes,
            tsc: None,
        }
    }
}

fn errno_of(e: &PerfError) -> i32 {
    match e {
        PerfError::Denied { source, .. }
        | PerfError::Open { source, .. }
        | PerfError::Mmap { source, .. } => source.raw_os_error().unwrap_or(0),
        PerfError::Ioctl { source, .. } => source.raw_os_error().unwrap_or(0),
    }
}

impl Rings {
    /// One ring-owning event per CPU for `tids[0]`, the other threads'
    /// events redirected into it. Kernel-mode sampling is tried first; when
    /// refused, user-mode only.
    fn open(plan: &mut Plan, tids: &[i32], enable_on_exec: bool) -> Result<Rings, RecordError> {
        match Rings::open_once(plan, tids, enable_on_exec) {
            Err(e)
                if matches!(errno_of(&e), libc::EACCES | libc::EPERM) && !plan.exclude_kernel =>
            {
                plan.exclude_kernel = true;
                Rings::open_once(plan, tids, enable_on_exec)
            }
            other => other,
        }
        .map_err(|e| RecordError::Unsupported(sample_attr::open_error(plan.event, errno_of(&e))))
    }

    fn open_once(plan: &Plan, tids: &[i32], enable_on_exec: bool) -> Result<Rings, PerfError> {
        let mut events = Vec::new();
        for cpu in online_cpus() {
            let mut attr = plan.attr(enable_on_exec);
            let Some((&first, rest)) = tids.split_first() else {
                break;
            };
            let leader = PerfEvent::open(&mut attr, first, cpu, RING_PAGES)?;
            for &tid in rest {
                let mut attr = plan.attr(enable_on_exec);
                match PerfEvent::open(&mut attr, tid, cpu, 0) {
                    Ok(e) => {
                        e.set_output(&leader)?;
                        events.push(e);
                    }
                    // The thread ended meanwhile.
                    Err(PerfError::Open { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            events.push(leader);
        }
        Ok(Rings {
            events,
            arena: Vec::new(),
            index: Vec::new(),
            scratch: Vec::new(),
        })
    }

    fn wait(&self, timeout_ms: i32) {
        let mut fds: Vec<libc::pollfd> = self
            .events
            .iter()
            .map(|e| libc::pollfd {
                fd: e.raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: fds is a valid array of pollfd for its length.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    }

    /// Drains every ring and hands the records to `session` in time order.
    fn pump(
        &mut self,
        session: &mut SampleSession<File>,
        id_layout: &SampleIdLayout,
    ) -> std::io::Result<()> {
        self.arena.clear();
        self.index.clear();
        let (arena, index) = (&mut self.arena, &mut self.index);
        for e in &mut self.events {
            e.drain(&mut self.scratch, |rec| {
                let time = record_time(rec, id_layout);
                index.push((time, arena.len(), rec.len()));
                arena.extend_from_slice(rec);
            });
        }
        // Stable: records of one ring keep their order when times tie.
        index.sort_by_key(|&(t, _, _)| t);
        for &(_, at, len) in index.iter() {
            session.handle(&arena[at..at + len])?;
        }
        session.flush()
    }
}

/// A record's timestamp: samples carry it after IP and TID, other records in
/// their `sample_id` trailer (0 when there is none: such records sort first).
fn record_time(rec: &[u8], id_layout: &SampleIdLayout) -> u64 {
    let kind = rec
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_ne_bytes);
    if kind == sys::PERF_RECORD_SAMPLE {
        rec.get(24..32)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_ne_bytes)
    } else {
        id_layout.parse(rec).map_or(0, |id| id.time)
    }
}

fn create_output(opts: &RecordOptions) -> Result<File, RecordError> {
    File::create(&opts.output).map_err(|source| RecordError::Output {
        path: opts.output.clone(),
        source,
    })
}

fn io_error(opts: &RecordOptions) -> impl Fn(std::io::Error) -> RecordError + '_ {
    move |source| RecordError::Output {
        path: opts.output.clone(),
        source,
    }
}

/// `lapse record --method sample -- CMD`: launch held, arm, release, record until it exits.
pub(crate) fn record_command(
    opts: &RecordOptions,
    command: &[String],
) -> Result<RecordOutcome, RecordError> {
    let mut plan = Plan::from_options(opts)?;
    let program_name = command.first().ok_or(RecordError::NoCommand)?;
    let program = launch::resolve_command(program_name)
        .ok_or_else(|| RecordError::CommandNotFound(program_name.clone()))?;
    let file = create_output(opts)?;
    launch::catch_termination_signals();
    let child =
        launch::spawn_held(&program, command, &[]).map_err(|source| RecordError::Spawn {
            command: program_name.clone(),
            source,
        })?;
    let mut rings = match Rings::open(&mut plan, &[child.pid], true) {
        Ok(r) => r,
        Err(e) => {
            child.abandon();
            return Err(e);
        }
    };
    let (layout, id_layout) = plan.layouts();
    let start = monotonic_now();
    let pid = child.pid as u32;
    let mut session = SampleSession::new(
        file,
        plan.header(command.to_vec(), start),
        layout,
        id_layout,
    )
    .map_err(io_error(opts))?;
    session
        .add_target(pid, command.to_vec(), start)
        .map_err(io_error(opts))?;
    session
        .add_thread(pid, pid, short_name(program_name), start)
        .map_err(io_error(opts))?;
    let mut child = child;
    child.release();
    let status = loop {
        rings.wait(POLL_MS);
        launch::forward_pending_signal(child.pid);
        rings
            .pump(&mut session, &id_layout)
            .map_err(io_error(opts))?;
        match launch::wait(child.pid, false) {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => return Err(RecordError::Wait(e)),
        }
    };
    rings
        .pump(&mut session, &id_layout)
        .map_err(io_error(opts))?;
    let samples = session.samples();
    let bytes = session
        .finish(Some((pid, status)), monotonic_now())
        .map_err(io_error(opts))?;
    Ok(RecordOutcome {
        output: opts.output.clone(),
        method: Method::Sampling,
        events: 0,
        samples,
        bytes,
        exit_status: status,
    })
}

fn short_name(program: &str) -> String {
    let base = program.rsplit('/').next().unwrap_or(program);
    base.chars().take(15).collect()
}

static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn note_stop(sig: libc::c_int) {
    STOP_SIGNAL.store(sig, Ordering::SeqCst);
}

/// `lapse record --pid PID [--duration S]`: sample a running process and all
/// its threads until the duration ends, Ctrl-C, or the process exits.
pub(crate) fn record_pid(
    opts: &RecordOptions,
    pid: u32,
    duration: Option<Duration>,
) -> Result<RecordOutcome, RecordError> {
    let mut plan = Plan::from_options(opts)?;
    let threads = super::proc_scan::threads(pid)
        .ok_or_else(|| RecordError::Unsupported(format!("no process with pid {pid}")))?;
    let file = create_output(opts)?;
    let tids: Vec<i32> = threads.iter().map(|(tid, _)| *tid as i32).collect();
    let mut rings = Rings::open(&mut plan, &tids, false)?;
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores into an atomic.
        unsafe { libc::signal(sig, note_stop as *const () as usize) };
    }
    let (layout, id_layout) = plan.layouts();
    let start = monotonic_now();
    let command = read_cmdline(pid).unwrap_or_else(|| vec!["--pid".into(), pid.to_string()]);
    let mut session =
        SampleSession::new(file, plan.header(command.clone(), start), layout, id_layout)
            .map_err(io_error(opts))?;
    session
        .add_target(pid, command, start)
        .map_err(io_error(opts))?;
    for (tid, name) in threads {
        session
            .add_thread(pid, tid, name, start)
            .map_err(io_error(opts))?;
    }
    for m in super::proc_scan::executable_mappings(pid) {
        session
            .add_mapping(pid, m.start, m.end - m.start, m.offset, &m.path, start)
            .map_err(io_error(opts))?;
    }
    let began = Instant::now();
    loop {
        rings.wait(POLL_MS);
        rings
            .pump(&mut session, &id_layout)
            .map_err(io_error(opts))?;
        let expired = duration.is_some_and(|d| began.elapsed() >= d);
        // SAFETY: signal 0 only checks that the process exists.
        let gone = unsafe { libc::kill(pid as i32, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if expired || gone || STOP_SIGNAL.load(Ordering::SeqCst) != 0 {
            break;
        }
    }
    for e in &rings.events {
        let _ = e.disable();
    }
    rings
        .pump(&mut session, &id_layout)
        .map_err(io_error(opts))?;
    let samples = session.samples();
    let bytes = session
        .finish(None, monotonic_now())
        .map_err(io_error(opts))?;
    Ok(RecordOutcome {
        output: opts.output.clone(),
        method: Method::Sampling,
        events: 0,
        samples,
        bytes,
        exit_status: 0,
    })
}

/// Dispatches a sampling recording by target.
pub(crate) fn record(opts: &RecordOptions) -> Result<RecordOutcome, RecordError> {
    match &opts.target {
        Target::Command(cmd) => record_command(opts, cmd),
        Target::Pid { pid, duration } => record_pid(opts, *pid, *duration),
    }
}
