//! `lapse record --method instrument --pid PID`: instrumentation attached
//! to a running process for a window (a duration, or until Ctrl-C or the
//! process's end), then detached, the process running on.
//!
//! The window is recorded by the same session as a launched target's
//! (`session.rs`); what differs is its start and end (`inject.rs` does the
//! work on the stopped process):
//! - start: with every thread stopped, the runtime is loaded and
//!   connected, the probes are turned on, and the kernel's events are
//!   opened on each thread (each following the threads it creates: none is
//!   missed, and no child forked before the runtime was there is seen);
//!   then the threads run on and the mappings the process has are noted;
//! - end: the probe imports get their old values back, the runtime hands
//!   every thread's events over and goes idle, and the threads run on;
//!   children forked during the window are detached the same way.
//!
//! Choices where the spec is silent:
//! - Calls open when the window starts are shown as open (their exits come
//!   without entries: the report's rule for calls open at the start), and
//!   calls still open at its end are open at the end.
//! - A program built with `-pg` or `-pg -mfentry` is patched like one
//!   without probes (its `mcount` calls stay the C library's); sanitizer
//!   coverage and the lapse crate's probes are not turned on.
//! - Calls into other libraries are not traced while attached, and the
//!   runtime installs no signal handlers (the program's stay as they are).
//! - The exit status recorded for an attached process is 0 (lapse is not
//!   its parent and cannot know it).

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use lapse_rt::protocol;

use super::assemble::Proc;
use super::inject::{self, Arg, Module, Purpose, Refusal, Slot, StopError, Stopped};
use super::ipc::Listener;
use super::os::OsCollector;
use super::output::{Output, FLUSH_EVERY};
use super::patch::{Patching, Plan};
use super::session::{Session, Watched};
use super::session_dir::SessionDir;
use super::threads;
use super::tick_clock::TickClock;
use crate::linux::proc_scan::{self, read_cmdline};
use crate::linux::{clock, process};
use crate::{Notice, OsEventSource, RecordError, RecordOptions, RecordOutcome};

/// The runtime in the process, once loaded: where, and the functions the
/// recorder calls and points the imports at.
#[derive(Clone, Copy, Debug)]
struct Runtime {
    bias: u64,
}

impl Runtime {
    fn addr(&self, name: &str) -> u64 {
        self.bias
            .wrapping_add(inject::symbol(lapse_rt::RUNTIME_SO, name))
    }
}

/// Records process `pid` by instrumentation for `duration` (or until
/// Ctrl-C, or its end).
pub fn record_attached(
    opts: &RecordOptions,
    pid: u32,
    duration: Option<Duration>,
) -> Result<RecordOutcome, RecordError> {
    let refuse = RecordError::Unsupported;
    // Ctrl-C ends the window whatever the attach is doing, and is caught
    // from the start: what comes before the attach (the program's ELF files
    // read, the runtime written, the clock timed) takes hundreds of ms on a
    // busy machine, and a SIGINT then was lost where lapse's parent left it
    // ignored (a background job of a script): lapse attached and recorded
    // on forever.
    process::catch_stop_signals();
    let max_threads = threads::threads_followed().map_err(RecordError::Unsupported)?;
    check_process(pid).map_err(refuse)?;
    let mods = inject::modules(pid);
    let libc = libc_functions(pid, &mods).map_err(refuse)?;
    let slots = inject::process_slots(&mods);
    // (a program without -finstrument-functions probes is patched)
    let job = match slots.is_empty() {
        true => Some(patch_job(pid, &mods, opts).ok_or_else(|| refuse(no_probes(pid)))?),
        false => None,
    };
    let dir = SessionDir::create()?;
    check_reachable(pid, &dir.runtime_path()).map_err(refuse)?;
    let listener =
        Listener::bind(&dir.socket_path()).map_err(|source| RecordError::SessionDir {
            path: dir.socket_path(),
            source,
        })?;
    if let Some((uid, gid)) = owner(pid).filter(|&(uid, _)| uid != process::effective_uid()) {
        // (only root gets here: ptrace refuses another user's process)
        dir.lend_to(uid, gid)
            .map_err(|source| RecordError::SessionDir {
                path: dir.runtime_path(),
                source,
            })?;
    }
    let out = Output::create(&opts.output, opts.notices.clone())?;
    let spill_path = super::session::fresh_spill_path(&out, &dir, &opts.output)?;
    let start_unix_ns = clock::realtime_unix_ns();
    let vars = runtime_vars(&dir, &spill_path, start_unix_ns, opts.inherit);
    let faults = opts.os_events.contains(&OsEventSource::Fault);
    if opts.os_events.contains(&OsEventSource::Syscall) {
        opts.notices.say(Notice::Warning(
            "system calls are not recorded when attaching to a running process".into(),
        ));
    }
    // (interrupted before the process was touched: nothing to undo)
    if process::stop_requested() {
        return Err(refuse(format!(
            "interrupted before attaching to process {pid}; it runs on as it was"
        )));
    }
    let start = clock::monotonic_now();
    let runtime_path = dir.runtime_path();
    let (attached, stopped) =
        attach(pid, &runtime_path, libc, &vars, &slots, job.as_ref()).map_err(refuse)?;
    let mut window = Window {
        pid,
        until: duration.map(|d| Instant::now() + d),
        runtime: attached.runtime,
        slots: attached.slots,
        patched: attached.patched,
        done: None,
        done_at: None,
        notices: opts.notices.clone(),
    };
    // The kernel's events go on while every thread is still stopped: on
    // each thread there is (each following the threads it creates), none
    // missed, and no child forked before the runtime was there.
    let census_max = max_threads.saturating_add(max_threads / 4);
    let os = OsCollector::open_threads(&stopped.tids(), true, faults, opts.inherit, census_max);
    drop(stopped);
    let os = match os {
        Ok(os) => os,
        Err(e) => {
            window.end(&HashMap::new());
            return Err(e.into());
        }
    };
    let clock = TickClock::calibrate(os.tsc_scale());
    let mut s = Session::new(out, os, listener, clock, max_threads, pid, opts);
    s.asm.procs.insert(
        pid,
        Proc {
            command: read_cmdline(pid).unwrap_or_else(|| vec!["--pid".into(), pid.to_string()]),
            start: Some(start),
            ..Proc::default()
        },
    );
    s.asm.book.lock().load_proc_maps(pid, start);
    if let Some(job) = job {
        // (what patch.c says of a launched program's patching)
        let done = dir.plan_done_path(0);
        let text = format!(
            "patched {}\nchanged {}\nfailed -\n",
            window.patched.len(),
            attached.changed
        );
        let _ = std::fs::write(&done, text);
        if attached.busy > 0 {
            opts.notices.say(Notice::Warning(format!(
                "{} function(s) of {} were running when lapse attached and were left unpatched",
                attached.busy, job.module
            )));
        }
        s.patching = vec![Patching {
            plan: job.plan,
            module: job.module,
            library: false,
            done,
        }];
        s.patch_wanted = true;
    }
    let run = s.run(opts, &mut window, start, start_unix_ns, faults);
    // (the process must never be left attached, whatever ended the run)
    window.end(&HashMap::new());
    drop(dir);
    if std::fs::symlink_metadata(&spill_path).is_ok_and(|m| m.is_file() && m.len() == 0) {
        let _ = std::fs::remove_file(&spill_path);
    }
    run
}

/// Refuses what cannot be attached to: a 32-bit or non-x86-64 program, one
/// traced already.
fn check_process(pid: u32) -> Result<(), Refusal> {
    let mut head = [0u8; 20];
    let exe = format!("/proc/{pid}/exe");
    use std::io::Read;
    let read = std::fs::File::open(&exe).and_then(|mut f| f.read_exact(&mut head));
    if let Err(e) = read {
        return Err(format!("cannot read the program of process {pid} ({exe}): {e}; run lapse as its user or as root"));
    }
    let machine = u16::from_le_bytes([head[18], head[19]]);
    if &head[..4] != b"\x7fELF" || head[4] != 2 || machine != 62 {
        return Err(format!(
            "process {pid} is not an x86-64 program: instrumentation attaches to x86-64 programs only; record it with --method sample"
        ));
    }
    if let Some(tracer) = inject::tracer_of(pid).filter(|&t| t != 0) {
        return Err(format!(
            "process {pid} is already traced by process {tracer} (a debugger?): detach it first"
        ));
    }
    Ok(())
}

/// The C library's functions an attach calls in the process.
#[derive(Clone, Copy)]
struct LibC {
    dlopen: u64,
    dlerror: u64,
    mmap: u64,
    /// Its empty `__cyg_profile_func_enter` and `_exit` (0: none).
    cyg: [u64; 2],
}

fn libc_functions(pid: u32, mods: &[Module]) -> Result<LibC, Refusal> {
    let libc = mods.iter().find(|m| {
        Path::new(&m.path)
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("libc.so"))
    });
    let found = libc.and_then(|m| {
        let data = std::fs::read(&m.path).ok()?;
        let at = |name| inject::symbol(&data, name);
        let (dlopen, dlerror, mmap) = (at("dlopen"), at("dlerror"), at("mmap"));
        let cyg = ["__cyg_profile_func_enter", "__cyg_profile_func_exit"]
            .map(at)
            .map(|a| if a == 0 { 0 } else { m.bias + a });
        (dlopen != 0 && dlerror != 0 && mmap != 0).then(|| LibC {
            dlopen: m.bias + dlopen,
            dlerror: m.bias + dlerror,
            mmap: m.bias + mmap,
            cyg,
        })
    });
    found.ok_or_else(|| {
        format!(
            "process {pid} is statically linked, or its C library is older than glibc 2.34: lapse cannot load its runtime into it; record it with --method sample"
        )
    })
}

/// What run-time patching does to a program without probes.
struct PatchJob {
    plan: Plan,
    module: String,
    bias: u64,
}

/// The patching plan for process `pid`'s executable (`None`: it has
/// nothing to patch, or is not to be patched).
fn patch_job(pid: u32, mods: &[Module], opts: &RecordOptions) -> Option<PatchJob> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let path = exe.display().to_string();
    let m = mods.iter().find(|m| m.path == path)?;
    let module = exe.file_name()?.to_string_lossy().into_owned();
    if !opts.patch.any_in(&module) {
        return None;
    }
    let data = std::fs::read(&exe).ok()?;
    let wanted = |name: &str| {
        let demangled = lapse_symbols::demangle(name);
        opts.patch.wants(&module, &[name, &demangled])
    };
    let plan = Plan::for_module(&data, wanted)?;
    if plan.sites.is_empty() {
        return None;
    }
    Some(PatchJob {
        plan,
        module,
        bias: m.bias,
    })
}

/// A function entry patched with a jump: where, and the bytes it had.
struct Patched {
    addr: u64,
    orig: Vec<u8>,
}

const PROT_READ_EXEC: u64 = 5;
const MAP_PRIVATE_ANONYMOUS_FIXED_NOREPLACE: u64 = 0x02 | 0x20 | 0x10_0000;
const PAGE: u64 = 4096;

/// Maps the plan's stub region in the stopped process (or finds it, left
/// by an earlier attach), writes the stubs, and patches every site no
/// thread is at; returns the sites patched and how many were busy (a
/// thread was there) or changed (not the bytes the plan expects).
fn apply_plan(
    stopped: &mut Stopped,
    libc: LibC,
    runtime: Runtime,
    job: &PatchJob,
) -> Result<(Vec<Patched>, usize, usize), Refusal> {
    let pid = stopped.pid;
    let plan = &job.plan;
    let region = job.bias.wrapping_add(plan.region as u64);
    let len = (plan.stubs.len() as u64).div_ceil(PAGE) * PAGE;
    if !mapped_at(pid, region, len) {
        let got = stopped.call(
            libc.mmap,
            &[
                Arg::Val(region),
                Arg::Val(len),
                Arg::Val(PROT_READ_EXEC),
                Arg::Val(MAP_PRIVATE_ANONYMOUS_FIXED_NOREPLACE),
                Arg::Val(u64::MAX),
                Arg::Val(0),
            ],
        )?;
        if got != region {
            return Err(format!(
                "process {pid} has something else where the patching stubs must go ({region:#x}); nothing was patched"
            ));
        }
    }
    let mut stubs = plan.stubs.clone();
    let entry = runtime.addr("lapse_patch_entry");
    let slot = plan.entry_slot as usize;
    stubs[slot..slot + 8].copy_from_slice(&entry.to_le_bytes());
    stopped
        .mem()
        .write(region, &stubs)
        .map_err(|e| format!("cannot write the patching stubs into process {pid}: {e}"))?;
    let rips = stopped.rips();
    let (mut busy, mut changed) = (0, 0);
    let mut done = Vec::new();
    for site in &plan.sites {
        let addr = job.bias.wrapping_add(site.at);
        let n = site.orig.len() as u64;
        let target = region.wrapping_add(u64::from(site.stub));
        let rel = target.wrapping_sub(addr + 5) as i64 as i32;
        let mut bytes = vec![0xcc; site.orig.len()];
        bytes[0] = 0xe9;
        bytes[1..5].copy_from_slice(&rel.to_le_bytes());
        let mut now = vec![0u8; site.orig.len()];
        if stopped.mem().read(addr, &mut now).is_err() {
            changed += 1;
            continue;
        }
        if now == bytes {
            // (patched by an attach whose recorder died before detaching:
            // this one puts it back at its end)
            done.push(Patched {
                addr,
                orig: site.orig.clone(),
            });
            continue;
        }
        // (inclusive: a thread in a system call restarts it two bytes back)
        if rips.iter().any(|&r| (addr..=addr + n).contains(&r)) {
            busy += 1;
            continue;
        }
        if inject::holds_call(&site.orig) {
            continue; // (left alone, counted so in the note)
        }
        if now != site.orig {
            changed += 1;
            continue;
        }
        if stopped.mem().write(addr, &bytes).is_ok() {
            done.push(Patched {
                addr,
                orig: site.orig.clone(),
            });
        }
    }
    Ok((done, busy, changed))
}

/// Whether `pid` has a mapping of at least `len` bytes starting at `addr`.
fn mapped_at(pid: u32, addr: u64, len: u64) -> bool {
    maps_of(pid)
        .lines()
        .filter_map(range_of)
        .any(|(lo, hi)| lo == addr && hi - lo >= len)
}

fn maps_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default()
}

/// The address range of a `/proc/PID/maps` line.
fn range_of(line: &str) -> Option<(u64, u64)> {
    let (lo, hi) = line.split(' ').next()?.split_once('-')?;
    Some((
        u64::from_str_radix(lo, 16).ok()?,
        u64::from_str_radix(hi, 16).ok()?,
    ))
}

fn no_probes(pid: u32) -> Refusal {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
    let how = match crate::method::detect_probes(&exe) {
        crate::method::Probes::None => "run-time patching found nothing to patch in it (no function symbols, or --patch named none of its functions)",
        _ => "its kind of probes (sanitizer coverage, the lapse crate's) cannot be turned on in a running process yet",
    };
    format!(
        "cannot attach instrumentation to process {pid}: {how}; record it with --method sample, or start it under lapse record"
    )
}

/// The runtime written for this session must be the same file inside the
/// process's mount namespace (a container sees another /tmp).
fn check_reachable(pid: u32, runtime: &Path) -> Result<(), Refusal> {
    use std::os::unix::fs::MetadataExt;
    let ours = std::fs::metadata(runtime).map_err(|e| e.to_string())?;
    let inside =
        Path::new(&format!("/proc/{pid}/root")).join(runtime.strip_prefix("/").unwrap_or(runtime));
    match std::fs::metadata(&inside) {
        Ok(m) if m.dev() == ours.dev() && m.ino() == ours.ino() => Ok(()),
        _ => Err(format!(
            "process {pid} cannot reach {} (it runs in another mount namespace, a container?): run lapse inside its namespace (nsenter -t {pid} -m -p), or give it a TMPDIR both see",
            runtime.display()
        )),
    }
}

/// What the runtime would have read from its environment.
fn runtime_vars(dir: &SessionDir, spill: &Path, session: u64, inherit: bool) -> Vec<u8> {
    let ticks = TickClock::rough_ticks_per_sec(3) * FLUSH_EVERY.as_secs_f64();
    let mut v = format!(
        "{}={}\n{}={}\n{}={}\n{}={:.0}\n{}=1\n",
        protocol::ENV_SOCKET,
        dir.socket_path().display(),
        protocol::ENV_SPILL,
        spill.display(),
        protocol::ENV_SESSION,
        session,
        protocol::ENV_FLUSH_TICKS,
        ticks,
        protocol::ENV_NO_LIBCALLS,
    );
    if !inherit {
        v.push_str(&format!("{}=1\n", protocol::ENV_NO_INHERIT));
    }
    let mut bytes = v.into_bytes();
    bytes.push(0);
    bytes
}

/// The runtime already in the process (an earlier attach left it), when it
/// is this lapse's.
fn loaded_runtime(stopped: &Stopped, mods: &[Module]) -> Option<Runtime> {
    let name = lapse_rt::RUNTIME_FILE_NAME;
    let at = inject::symbol(lapse_rt::RUNTIME_SO, "lapse_rt_attach");
    let ours = inject::code_at(lapse_rt::RUNTIME_SO, at, 64)?;
    mods.iter()
        .filter(|m| {
            Path::new(&m.path)
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(name))
        })
        .find(|m| {
            let mut theirs = vec![0u8; ours.len()];
            stopped.mem().read(m.bias + at, &mut theirs).is_ok() && theirs == ours
        })
        .map(|m| Runtime { bias: m.bias })
}

/// Stops the process, loads (or finds) the runtime, connects it and points
/// the probe imports at it; the threads run on once the [`Stopped`]
/// returned is dropped.
/// What an attach changed in the process (the counts: sites left alone
/// because a thread was at them, or their bytes were not the plan's).
struct Attached {
    runtime: Runtime,
    slots: Vec<Slot>,
    patched: Vec<Patched>,
    busy: usize,
    changed: usize,
}

fn attach(
    pid: u32,
    runtime_path: &Path,
    libc: LibC,
    vars: &[u8],
    slots: &[(u64, usize)],
    job: Option<&PatchJob>,
) -> Result<(Attached, Stopped), Refusal> {
    let mut stopped = Stopped::stop(pid, Purpose::Attach).map_err(|e| match e {
        StopError::Gone => format!("process {pid} ended before lapse could attach"),
        StopError::Refused(why) => why,
    })?;
    let runtime = match loaded_runtime(&stopped, &inject::modules(pid)) {
        Some(r) => r,
        None => {
            let mut path = runtime_path.as_os_str().as_encoded_bytes().to_vec();
            path.push(0);
            let handle =
                stopped.call(libc.dlopen, &[Arg::Bytes(&path), Arg::Val(RTLD_NOW_FLAG)])?;
            if handle == 0 {
                let msg = stopped.call(libc.dlerror, &[]).unwrap_or(0);
                let why = if msg == 0 {
                    String::new()
                } else {
                    stopped.mem().read_c_string(msg, 400)
                };
                return Err(format!(
                    "process {pid} could not load the lapse runtime: {why}"
                ));
            }
            let path = runtime_path.display().to_string();
            let m = inject::modules(pid)
                .into_iter()
                .find(|m| m.path == path)
                .ok_or_else(|| {
                    format!("process {pid} loaded the lapse runtime, but it is not mapped")
                })?;
            Runtime { bias: m.bias }
        }
    };
    let rc = stopped.call(runtime.addr("lapse_rt_attach"), &[Arg::Bytes(vars)])? as u32 as i32;
    match rc {
        0 => {}
        -1 => {
            return Err(format!(
                "process {pid} is recorded by lapse already (started under lapse record)"
            ))
        }
        -2 => return Err(format!("another lapse is attached to process {pid}")),
        _ => {
            return Err(format!(
                "the lapse runtime in process {pid} could not connect to the recorder"
            ))
        }
    }
    let hooks = [
        runtime.addr("__cyg_profile_func_enter"),
        runtime.addr("__cyg_profile_func_exit"),
    ];
    let mut done = Vec::new();
    for &(addr, k) in slots {
        let original = match stopped.mem().read_u64(addr) {
            // (left pointing at the runtime by an attach whose recorder
            // died before detaching: it was bound to the C library's)
            Ok(v) if v == hooks[k] && libc.cyg[k] != 0 => libc.cyg[k],
            Ok(v) => v,
            Err(_) => continue,
        };
        if stopped.mem().write_u64(addr, hooks[k]).is_ok() {
            done.push(Slot { addr, original });
        }
    }
    let (patched, busy, changed) = match job {
        Some(job) => apply_plan(&mut stopped, libc, runtime, job)?,
        None => (Vec::new(), 0, 0),
    };
    Ok((
        Attached {
            runtime,
            slots: done,
            patched,
            busy,
            changed,
        },
        stopped,
    ))
}

const RTLD_NOW_FLAG: u64 = 2;

/// The window: when it ends, and what to undo then.
struct Window {
    pid: u32,
    until: Option<Instant>,
    runtime: Runtime,
    slots: Vec<Slot>,
    patched: Vec<Patched>,
    /// Set once detached.
    done: Option<i32>,
    /// When it was detached.
    done_at: Option<Instant>,
    notices: crate::Notices,
}

impl Window {
    fn over(&self) -> bool {
        self.until.is_some_and(|u| Instant::now() >= u)
            || process::stop_requested()
            || !alive(self.pid)
    }

    /// Detaches from the process and from its children that have the
    /// runtime (forked during the window), once.
    fn end(&mut self, procs: &HashMap<u32, Proc>) -> i32 {
        if let Some(status) = self.done {
            return status;
        }
        let mut pids = vec![self.pid];
        pids.extend(procs.keys().copied().filter(|&p| p != self.pid));
        for pid in pids {
            if !alive(pid) {
                continue;
            }
            if let Err(why) = self.detach(pid) {
                self.notices.say(Notice::Warning(why));
            }
        }
        self.done = Some(0);
        self.done_at = Some(Instant::now());
        0
    }

    fn detach(&self, pid: u32) -> Result<(), Refusal> {
        // (a child that exec'd has another image, without the runtime)
        if pid != self.pid
            && !inject::modules(pid).iter().any(|m| {
                m.bias == self.runtime.bias && m.path.contains(lapse_rt::RUNTIME_FILE_NAME)
            })
        {
            return Ok(());
        }
        let runtime = runtime_range(pid, self.runtime.bias);
        let mut tries = 0;
        let mut stopped = loop {
            let stopped = match Stopped::stop(pid, Purpose::Detach) {
                Ok(s) => s,
                Err(StopError::Gone) => return Ok(()),
                Err(StopError::Refused(why)) => {
                    return Err(format!("cannot detach from process {pid}: {why}"))
                }
            };
            for slot in &self.slots {
                let _ = stopped.mem().write_u64(slot.addr, slot.original);
            }
            // (a thread in a stub runs on into the function's original
            // code, which follows the displaced instructions it ran there)
            for site in &self.patched {
                let _ = stopped.mem().write(site.addr, &site.orig);
            }
            // No probe starts now; one a thread is inside (its rip in the
            // runtime) is let finish before the runtime lets its buffers
            // go, a few times (a thread waiting in the runtime for the
            // recorder does not finish: it is detached as it is).
            let inside = stopped.rips().iter().any(|r| runtime.contains(r));
            tries += 1;
            if !inside || tries >= DETACH_TRIES {
                break stopped;
            }
            drop(stopped);
            std::thread::sleep(Duration::from_millis(1));
        };
        stopped
            .call(self.runtime.addr("lapse_rt_detach"), &[])
            .map(|_| ())
            .map_err(|why| format!("detaching from process {pid}: {why}"))
    }
}

impl Watched for Window {
    fn poll_end(&mut self, procs: &HashMap<u32, Proc>) -> Result<Option<i32>, RecordError> {
        if self.done.is_none() && !self.over() {
            return Ok(None);
        }
        Ok(Some(self.end(procs)))
    }

    /// Once detached, the runtimes handed everything over before they
    /// let go: what is queued is read, and the recording ends, soon even
    /// when a process could not be detached (it stays connected).
    fn stop_pending(&mut self) -> bool {
        self.done_at
            .is_some_and(|at| process::stop_requested() || at.elapsed() > DRAIN_AFTER)
    }
}

/// How long after the detach the recording ends at the latest.
const DRAIN_AFTER: Duration = Duration::from_secs(1);

/// How often detaching stops the process again to find no thread inside
/// the runtime.
const DETACH_TRIES: u32 = 50;

/// The addresses of the runtime mapped at `bias` in `pid`.
fn runtime_range(pid: u32, bias: u64) -> std::ops::Range<u64> {
    runtime_range_in(&maps_of(pid), bias)
}

/// The addresses of the runtime mapped at `bias`, from maps `text`.
fn runtime_range_in(text: &str, bias: u64) -> std::ops::Range<u64> {
    let mut range = bias..bias;
    for l in text
        .lines()
        .filter(|l| l.contains(lapse_rt::RUNTIME_FILE_NAME))
    {
        if let Some((lo, hi)) = range_of(l) {
            if lo >= bias && lo < bias + (1 << 30) {
                range.end = range.end.max(hi);
            }
        }
    }
    range
}

/// The effective user and group of process `pid`.
fn owner(pid: u32) -> Option<(u32, u32)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let id = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    Some((id("Uid:")?, id("Gid:")?))
}

/// Whether `pid` runs (not gone, not a zombie).
fn alive(pid: u32) -> bool {
    proc_scan::session_of(pid).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtime_range_spans_its_mappings_at_its_bias() {
        // (two copies: the one at 0x7f00_0000_0000 is asked for; a stack
        // line and another file are not the runtime)
        let maps = "\
7f0000000000-7f0000004000 r--p 00000000 08:01 11 /tmp/lapse-1-a/liblapse_rt.so (deleted)
7f0000004000-7f0000030000 r-xp 00004000 08:01 11 /tmp/lapse-1-a/liblapse_rt.so (deleted)
7f0000030000-7f0000040000 rw-p 00030000 08:01 11 /tmp/lapse-1-a/liblapse_rt.so (deleted)
7f0000040000-7f0000050000 r-xp 00000000 08:01 12 /usr/lib/libother.so
7f5000000000-7f5000040000 r-xp 00000000 08:01 13 /tmp/lapse-2-b/liblapse_rt.so
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
";
        let r = runtime_range_in(maps, 0x7f00_0000_0000);
        assert_eq!(r, 0x7f00_0000_0000..0x7f00_0004_0000);
        assert!(r.contains(&0x7f00_0000_5000) && !r.contains(&0x7f00_0004_0000));
        // (nothing there: an empty range)
        assert!(runtime_range_in(maps, 0x1000).is_empty());
        assert_eq!(range_of("10-20 r-xp 0 0 0"), Some((0x10, 0x20)));
        assert_eq!(range_of("garbage"), None);
    }

    #[test]
    fn the_runtime_gets_its_variables_as_lines() {
        let dir = SessionDir::create().expect("session dir");
        let vars = runtime_vars(&dir, Path::new("/out/x.spill"), 42, false);
        assert_eq!(vars.last(), Some(&0), "NUL-terminated");
        let text = std::str::from_utf8(&vars[..vars.len() - 1]).expect("utf-8");
        let lines: Vec<&str> = text.lines().collect();
        let socket = format!("LAPSE_SOCKET={}", dir.socket_path().display());
        assert_eq!(lines[0], socket);
        assert_eq!(lines[1], "LAPSE_SPILL=/out/x.spill");
        assert_eq!(lines[2], "LAPSE_SESSION=42");
        assert!(lines[3].starts_with("LAPSE_FLUSH_TICKS="));
        assert_eq!(&lines[4..], ["LAPSE_NO_LIBCALLS=1", "LAPSE_NO_INHERIT=1"]);
        let inherit = runtime_vars(&dir, Path::new("/s"), 1, true);
        assert!(!String::from_utf8_lossy(&inherit).contains("NO_INHERIT"));
    }
}
