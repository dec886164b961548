//! Sampling: the `record` driver. Launches the target held (or finds the
//! threads and mappings of a running one), opens the sampling event on it
//! ([`Rings`]), feeds the records to a [`SampleSession`] every drain, and
//! finishes the file when the target exits (launch) or when the duration or
//! Ctrl-C ends it (attach).
//!
//! Choices where SPEC.md is silent:
//! - Kernel-mode time is sampled when allowed (root, CAP_PERFMON, or
//!   `perf_event_paranoid` ≤ 1) and charged to the user stack at the system
//!   call, so a program stuck in `write` shows `write`; otherwise only user
//!   mode is sampled and the header says so.
//! - Time-based events (`cpu-clock`, `task-clock`) use a fixed period of
//!   1e9 / Hz ns, so every sample stands for the same time; count events use
//!   the kernel's frequency mode and each sample weighs its period.
//! - A stack ends at the first address in no executable mapping (see
//!   `session`); functions are named from the symbol table first, so
//!   `foo.constprop.0` stays its own function, as in `perf`.
//! - Attach samples the process' threads as they are when it starts and
//!   every thread or child they create afterwards; the existing mappings come
//!   from `/proc/PID/maps`.

use std::fs::File;
use std::time::{Duration, Instant};

use lapse_data::{Method, SessionHeader, ThreadKey, Timestamp};

use super::attr::STACK_COPY_BYTES;
use super::control::SampleControl;
use super::rings::{Plan, Rings};
use super::session::SampleSession;
use crate::linux::clock::{monotonic_now, realtime_unix_ns};
use crate::linux::launch;
use crate::linux::proc_scan::{hostname, read_cmdline};
use crate::linux::process;
use crate::{Notice, RecordError, RecordOptions, RecordOutcome, Target};

/// How long the driver sleeps between drains when the rings stay quiet.
const POLL_MS: i32 = 50;

/// The session header: what is sampled, how, and what the user should know.
fn header(plan: &Plan, command: Vec<String>, start: Timestamp) -> SessionHeader {
    let mut notes = vec![if plan.callchain {
        "call graph: frame pointers (kernel callchain)".to_owned()
    } else {
        format!(
            "call graph: DWARF unwinding of {} KiB user stack copies",
            STACK_COPY_BYTES / 1024
        )
    }];
    if plan.exclude_kernel {
        notes.push("kernel-mode time not sampled (perf_event_paranoid forbids it)".to_owned());
    }
    if plan.off_cpu {
        notes.push(
            "off-CPU: the user stack at every switch-out, weighed by the time until the switch-in"
                .to_owned(),
        );
        notes.push(if plan.cpu_wide {
            "CPU samples: one event per CPU for every task, other processes' samples discarded"
                .to_owned()
        } else {
            "CPU samples: one event per thread (watching every task is not allowed here), which costs the target more at each context switch".to_owned()
        });
    }
    let period = plan.rate.fixed_period();
    SessionHeader {
        command,
        start_unix_ns: realtime_unix_ns(),
        start,
        clock: "monotonic".into(),
        host: hostname(),
        method: Method::Sampling,
        probe_cost_ns: 0.0,
        // Off-CPU periods are switches, as instrumentation's OS events are.
        os_events: if plan.off_cpu {
            vec!["switch".to_owned()]
        } else {
            Vec::new()
        },
        sample_event: Some(plan.event.name.to_owned()),
        sample_period: period,
        sample_period_is_time: plan.event.time_based && period.is_some(),
        lapse_version: env!("CARGO_PKG_VERSION").to_owned(),
        notes,
        tsc: None,
    }
}

fn io_error(opts: &RecordOptions) -> impl Fn(std::io::Error) -> RecordError + '_ {
    move |source| RecordError::Output {
        path: opts.output.clone(),
        source,
    }
}

/// `--call-graph fp` on a program most of whose functions keep no frame
/// pointer (their unwind rules say so): said before the run, since the
/// kernel's frame-pointer walk will give their callers wrongly.
fn no_frame_pointers(program: &std::path::Path) -> Option<String> {
    let module = lapse_symbols::ElfModule::open(program).ok()?;
    let used = module.frame_pointer_use()?;
    // (a handful of functions say little either way)
    if used.functions < 4 || used.with_frame_pointer * 2 >= used.functions {
        return None;
    }
    Some(format!(
        "--call-graph fp: {} of {} functions of {} keep no frame pointer (their unwind tables say so), so their callers will be wrong or missing; build with -fno-omit-frame-pointer, or use --call-graph dwarf (the default)",
        used.functions - used.with_frame_pointer,
        used.functions,
        program.display()
    ))
}

/// `lapse record --method sample -- CMD`: launch held, arm, release, record until it exits.
pub(crate) fn record_command(
    opts: &RecordOptions,
    command: &[String],
    file: File,
) -> Result<RecordOutcome, RecordError> {
    let mut plan = Plan::from_options(opts)?;
    let program_name = command.first().ok_or(RecordError::NoCommand)?;
    let program = launch::resolve_command(program_name)
        .ok_or_else(|| RecordError::CommandNotFound(program_name.clone()))?;
    let mut control = SampleControl::new(&opts.control, &program)?;
    launch::catch_termination_signals();
    let env = control.as_ref().map_or(&[][..], |c| c.env.as_slice());
    let child =
        launch::spawn_held(&program, command, env).map_err(|source| RecordError::Spawn {
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
    let mut header = header(&plan, command.to_vec(), start);
    if let Some(warning) = plan
        .callchain
        .then(|| no_frame_pointers(&program))
        .flatten()
    {
        opts.notices.say(Notice::Warning(warning.clone()));
        header.notes.push(format!("warning: {warning}"));
    }
    let mut session =
        SampleSession::new(file, header, layout, id_layout).map_err(io_error(opts))?;
    session.set_off_cpu_ids(rings.off_cpu_ids.clone());
    session
        .add_target(pid, command.to_vec(), start)
        .map_err(io_error(opts))?;
    // (a CPU-wide event sees the held child before its exec)
    session.await_exec(pid);
    session
        .add_thread(ThreadKey::new(pid, pid), short_name(program_name), start)
        .map_err(io_error(opts))?;
    if let Some(c) = &control {
        for r in c.options_records(start) {
            session.record(&r).map_err(io_error(opts))?;
        }
    }
    let mut child = child;
    child.release();
    // A write that fails (a full disk) stops the recording, not the target:
    // its events are closed and it is supervised to its end, its exit status
    // passed on.
    let mut failed: Option<std::io::Error> = None;
    let status = loop {
        if failed.is_none() {
            rings.wait(POLL_MS);
        } else {
            std::thread::sleep(Duration::from_millis(POLL_MS as u64));
        }
        launch::forward_pending_signal(child.pid);
        if failed.is_none() {
            if let Err(e) = rings.pump(&mut session, &id_layout, false) {
                opts.notices.say(Notice::WriteFailed(format!(
                    "cannot write the data file {}: {e}; recording stopped, waiting for the target to end",
                    opts.output.display()
                )));
                rings.events.clear(); // (closes the events: nothing more is sampled)
                failed = Some(e);
            }
            if let Some(c) = &mut control {
                if let Err(e) = c.pump(|r| session.record(r)) {
                    failed = Some(e);
                }
            }
        }
        match launch::wait(child.pid, false) {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => return Err(RecordError::Wait(e)),
        }
    };
    if let Some(source) = failed {
        return Err(RecordError::Stopped {
            path: opts.output.clone(),
            source,
            exit_status: status,
        });
    }
    rings
        .pump(&mut session, &id_layout, true)
        .map_err(io_error(opts))?;
    if let Some(c) = &mut control {
        c.pump(|r| session.record(r)).map_err(io_error(opts))?;
        if let (Some(sig), false) = (opts.control.signal, c.signal_taken.is_empty()) {
            let pids: Vec<String> = c.signal_taken.iter().map(u32::to_string).collect();
            opts.notices.say(Notice::Warning(format!(
                "--signal {}: the program installed its own handler for it (process {}): from then on the signal was the program's and toggled nothing",
                crate::linux::signals::signal_name(sig),
                pids.join(", ")
            )));
        }
    }
    let samples = session.samples();
    if let Some(warning) = session.short_stacks_warning() {
        opts.notices.say(Notice::Warning(warning));
    }
    let bytes = session
        .finish(
            Some((pid, status)),
            monotonic_now(),
            opts.symbol_progress.as_deref(),
        )
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

/// The owner of process `pid` when it is not this user's and this user is
/// not root (whether capabilities make up for it, only the kernel knows).
fn foreign_owner(pid: u32) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let me = process::effective_uid();
    let owner = std::fs::metadata(format!("/proc/{pid}")).ok()?.uid();
    (me != 0 && owner != me).then_some(owner)
}

fn short_name(program: &str) -> String {
    let base = program.rsplit('/').next().unwrap_or(program);
    base.chars().take(15).collect()
}

/// `lapse record --pid PID [--duration S]`: sample a running process and all
/// its threads until the duration ends, Ctrl-C, or the process exits.
pub(crate) fn record_pid(
    opts: &RecordOptions,
    pid: u32,
    duration: Option<Duration>,
    file: File,
) -> Result<RecordOutcome, RecordError> {
    // (Ctrl-C is caught from the start: a SIGINT before the handler, where
    // lapse's parent left it ignored, would be lost and the recording would
    // go on until the process ends)
    process::catch_stop_signals();
    let mut plan = Plan::from_options(opts)?;
    plan.foreign_owner = foreign_owner(pid);
    let threads = crate::linux::proc_scan::threads(pid)
        .ok_or_else(|| RecordError::Unsupported(format!("no process with pid {pid}")))?;
    // One event per thread and CPU: lift the soft limit on open files to
    // the hard one so that busy processes fit.
    process::raise_fd_limit();
    let tids: Vec<i32> = threads.iter().map(|(tid, _)| *tid as i32).collect();
    let mut rings = Rings::open(&mut plan, &tids, false)?;
    let (layout, id_layout) = plan.layouts();
    let start = monotonic_now();
    let command = read_cmdline(pid).unwrap_or_else(|| vec!["--pid".into(), pid.to_string()]);
    let mut session = SampleSession::new(
        file,
        header(&plan, command.clone(), start),
        layout,
        id_layout,
    )
    .map_err(io_error(opts))?;
    session.set_off_cpu_ids(rings.off_cpu_ids.clone());
    session
        .add_target(pid, command, start)
        .map_err(io_error(opts))?;
    for (tid, name) in threads {
        session
            .add_thread(ThreadKey::new(pid, tid), name, start)
            .map_err(io_error(opts))?;
    }
    for m in crate::linux::proc_scan::executable_mappings(pid) {
        session
            .add_mapping(pid, m.start, m.end - m.start, m.offset, &m.path, start)
            .map_err(io_error(opts))?;
    }
    let began = Instant::now();
    loop {
        rings.wait(POLL_MS);
        rings
            .pump(&mut session, &id_layout, false)
            .map_err(io_error(opts))?;
        let expired = duration.is_some_and(|d| began.elapsed() >= d);
        if expired || process::process_gone(pid) || process::stop_requested() {
            break;
        }
    }
    for e in &rings.events {
        let _ = e.disable();
    }
    rings
        .pump(&mut session, &id_layout, true)
        .map_err(io_error(opts))?;
    let samples = session.samples();
    if let Some(warning) = session.short_stacks_warning() {
        opts.notices.say(Notice::Warning(warning));
    }
    let bytes = session
        .finish(None, monotonic_now(), opts.symbol_progress.as_deref())
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

/// Dispatches a sampling recording by target; it is written into `file`.
pub(crate) fn record(opts: &RecordOptions, file: File) -> Result<RecordOutcome, RecordError> {
    match &opts.target {
        Target::Command(cmd) => record_command(opts, cmd, file),
        Target::Pid { pid, duration } => record_pid(opts, *pid, *duration, file),
    }
}
