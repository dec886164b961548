//! Loading the runtime into a running process and turning its probes on and
//! off, with every thread stopped (`lapse record --method instrument --pid`).
//!
//! How: every thread is seized and interrupted with ptrace (again and again
//! until no thread appears that was not stopped: a thread may create one
//! while the others are being stopped). One thread is then made to call
//! functions of the process as a debugger does: its registers are saved,
//! the arguments (strings below its stack's red zone) and a return address
//! of 0 are put in place, and it runs until the return faults at address 0;
//! then its registers are put back exactly, so a thread stopped inside a
//! system call restarts it as if nothing had happened (the call runs with
//! `orig_rax` = -1, which tells the kernel no system call is to be
//! restarted meanwhile). The calls: the C library's `dlopen` on the runtime
//! (skipped when an earlier attach left it loaded), then the runtime's
//! `lapse_rt_attach`, which connects to the recorder. The probe imports of
//! every module (`__cyg_profile_func_enter`/`_exit`: bound to the C
//! library's empty functions) are pointed at the runtime's hooks by writing
//! their GOT slots through `/proc/PID/mem` (which writes through RELRO's
//! protection) while no thread runs. Detaching undoes it in the opposite
//! order: slots back, `lapse_rt_detach` (every thread's events handed over),
//! threads let go. A signal that came for a thread while it was stopped is
//! delivered as it is let go.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use object::{Object, ObjectSegment, ObjectSymbol, ObjectSymbolTable, RelocationTarget};

use crate::linux::ptrace::{self, Memory, Regs, Stop};
use crate::linux::{proc_scan, process};

/// The probe imports attaching redirects.
const PROBE_IMPORTS: [&str; 2] = ["__cyg_profile_func_enter", "__cyg_profile_func_exit"];
/// How long a thread may take to stop before it is looked at.
const STOP_WAIT: Duration = Duration::from_secs(2);
/// How long a thread on its way to a stop (see [`on_its_way`]) is waited
/// for in all before the attach is refused.
const STOP_PATIENCE: Duration = Duration::from_secs(30);
/// How often a thread running an injected call that has not returned is
/// looked at: a call that never returns waits for a lock a stopped thread
/// holds (the dynamic loader's, or the allocator's); one that is merely
/// slow is waited for (see [`stuck`]).
const CALL_WAIT: Duration = Duration::from_secs(5);
/// The CPU time (clock ticks: USER_HZ, 100 a second) past which an injected
/// call that has not returned spins on a lock rather than works: dlopen
/// takes milliseconds.
const CALL_SPIN_TICKS: u64 = 500;
/// Below the stack pointer: the red zone (128 bytes) and some room.
const BELOW_SP: u64 = 512;

/// Why attaching failed: one line for the user.
pub(super) type Refusal = String;

/// A module mapped in the process: its path and load bias.
#[derive(Clone, Debug)]
pub(super) struct Module {
    pub path: String,
    pub bias: u64,
}

/// The modules of `pid` (files mapped from offset 0), with their load
/// biases, from `/proc/PID/maps` and their program headers.
pub(super) fn modules(pid: u32) -> Vec<Module> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let mut out: Vec<Module> = Vec::new();
    let mut seen = HashSet::new();
    for line in text.lines() {
        let f: Vec<&str> = line.splitn(6, ' ').collect();
        if f.len() < 6 {
            continue;
        }
        let path = f[5].trim_start();
        if !path.starts_with('/') || f[2] != "00000000" || !seen.insert(path.to_owned()) {
            continue;
        }
        let Some(start) = f[0]
            .split('-')
            .next()
            .and_then(|s| u64::from_str_radix(s, 16).ok())
        else {
            continue;
        };
        let file = path.strip_suffix(" (deleted)").unwrap_or(path);
        let first_vaddr = std::fs::read(file)
            .ok()
            .and_then(|d| {
                object::File::parse(&*d)
                    .ok()
                    .and_then(|o| o.segments().next().map(|s| s.address()))
            })
            .unwrap_or(0);
        out.push(Module {
            path: path.to_owned(),
            bias: start.wrapping_sub(first_vaddr & !0xfff),
        });
    }
    out
}

/// The address of symbol `name` in ELF `data`, dynamic or else local (0:
/// none).
pub(super) fn symbol(data: &[u8], name: &str) -> u64 {
    let Ok(file) = object::File::parse(data) else {
        return 0;
    };
    file.dynamic_symbols()
        .chain(file.symbols())
        .find(|s| s.is_definition() && s.name().is_ok_and(|n| n == name))
        .map_or(0, |s| s.address())
}

/// Whether x86-64 code `bytes` holds a call (whose return address would
/// be inside them: patched over, a return there would land in a jump's
/// middle).
pub(super) fn holds_call(bytes: &[u8]) -> bool {
    use iced_x86::{Decoder, DecoderOptions, FlowControl};
    let mut d = Decoder::new(64, bytes, DecoderOptions::NONE);
    while d.can_decode() {
        let i = d.decode();
        if matches!(
            i.flow_control(),
            FlowControl::Call | FlowControl::IndirectCall
        ) {
            return true;
        }
    }
    false
}

/// An argument of an injected call.
#[derive(Clone, Copy)]
pub(super) enum Arg<'a> {
    Val(u64),
    /// Copied below the thread's stack; the argument is its address.
    Bytes(&'a [u8]),
}

/// `len` bytes of ELF `data` at link-time address `addr` (as mapped).
pub(super) fn code_at(data: &[u8], addr: u64, len: u64) -> Option<Vec<u8>> {
    let file = object::File::parse(data).ok()?;
    file.segments()
        .find_map(|s| s.data_range(addr, len).ok().flatten())
        .map(<[u8]>::to_vec)
}

/// The GOT slots (link-time addresses) bound to the probe imports in ELF
/// `data`, each with the index of its import in [`PROBE_IMPORTS`].
pub(super) fn probe_slots(data: &[u8]) -> Vec<(u64, usize)> {
    let Ok(file) = object::File::parse(data) else {
        return Vec::new();
    };
    let (Some(relocs), Some(symtab)) = (file.dynamic_relocations(), file.dynamic_symbol_table())
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (offset, r) in relocs {
        let object::RelocationFlags::Elf { r_type } = r.flags() else {
            continue;
        };
        if r_type != object::elf::R_X86_64_JUMP_SLOT && r_type != object::elf::R_X86_64_GLOB_DAT {
            continue;
        }
        let RelocationTarget::Symbol(i) = r.target() else {
            continue;
        };
        let Some(name) = symtab.symbol_by_index(i).ok().and_then(|s| s.name().ok()) else {
            continue;
        };
        if let Some(k) = PROBE_IMPORTS.iter().position(|&p| p == name) {
            out.push((offset, k));
        }
    }
    out
}

/// A GOT slot redirected to the runtime: where, and what it held.
#[derive(Clone, Copy, Debug)]
pub(super) struct Slot {
    pub addr: u64,
    pub original: u64,
}

/// The probe import slots of every module of `pid` (the runtime's own and
/// the C library's left out), in the process's addresses.
pub(super) fn process_slots(mods: &[Module]) -> Vec<(u64, usize)> {
    let mut out = Vec::new();
    for m in mods {
        let name = Path::new(&m.path)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.starts_with(lapse_rt::RUNTIME_FILE_NAME) || name.starts_with("libc.so") {
            continue;
        }
        let Ok(data) = std::fs::read(&m.path) else {
            continue;
        };
        for (at, k) in probe_slots(&data) {
            out.push((m.bias.wrapping_add(at), k));
        }
    }
    out
}

/// Every thread of a process, stopped; let go (with the signals held back
/// meanwhile) when dropped.
pub(super) struct Stopped {
    pub pid: u32,
    /// Each stopped thread and the signal to deliver when it is let go.
    threads: HashMap<i32, i32>,
    mem: Memory,
}

/// Why the threads are stopped: a Ctrl-C gives up a wait for one to stop
/// while attaching (nothing has changed yet), never while detaching (the
/// process must be put back, and a Ctrl-C is what ends many windows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Purpose {
    Attach,
    Detach,
}

/// Why stopping failed: the process is gone, or a refusal.
#[derive(Debug)]
pub(super) enum StopError {
    Gone,
    Refused(Refusal),
}

impl Stopped {
    /// Seizes and stops every thread of `pid`.
    pub fn stop(pid: u32, purpose: Purpose) -> Result<Stopped, StopError> {
        let mem = Memory::open(pid).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ESRCH) => StopError::Gone,
            _ => StopError::Refused(no_permission(pid, &e)),
        })?;
        let mut s = Stopped {
            pid,
            threads: HashMap::new(),
            mem,
        };
        loop {
            let Some(tids) = proc_scan::threads(pid) else {
                return Err(StopError::Gone);
            };
            let fresh: Vec<i32> = tids
                .iter()
                .map(|&(t, _)| t as i32)
                .filter(|t| !s.threads.contains_key(t))
                .collect();
            if fresh.is_empty() {
                break;
            }
            for tid in fresh {
                if let Err(e) = ptrace::seize(tid) {
                    if e.raw_os_error() == Some(libc::ESRCH) {
                        continue; // (it ended meanwhile)
                    }
                    return Err(StopError::Refused(no_permission(pid, &e)));
                }
                if ptrace::interrupt(tid).is_err() {
                    continue;
                }
                match wait_until_stopped(pid, tid, purpose) {
                    Ok(Some(Stop::Interrupted)) => {
                        s.threads.insert(tid, 0);
                    }
                    Ok(Some(Stop::Signal(sig))) => {
                        s.threads.insert(tid, sig);
                    }
                    Ok(Some(Stop::Gone(_))) => {}
                    Ok(None) | Err(_) => {
                        let _ = ptrace::detach(tid, 0);
                        if purpose == Purpose::Attach && process::stop_requested() {
                            return Err(StopError::Refused(format!(
                                "interrupted while thread {tid} of process {pid} was on its way to a stop; it runs on as it was"
                            )));
                        }
                        return Err(StopError::Refused(format!(
                            "thread {tid} of process {pid} did not stop within {} s",
                            STOP_PATIENCE.as_secs()
                        )));
                    }
                }
            }
        }
        if s.threads.is_empty() {
            return Err(StopError::Gone);
        }
        Ok(s)
    }

    pub fn mem(&self) -> &Memory {
        &self.mem
    }

    /// The stopped threads.
    pub fn tids(&self) -> Vec<i32> {
        let mut t: Vec<i32> = self.threads.keys().copied().collect();
        t.sort_unstable();
        t
    }

    /// Every stopped thread's instruction pointer.
    pub fn rips(&self) -> Vec<u64> {
        self.threads
            .keys()
            .filter_map(|&t| ptrace::get_regs(t).ok())
            .map(|r| r.rip)
            .collect()
    }

    /// The thread injected calls run on: the main thread if it is there.
    fn caller(&self) -> Option<i32> {
        let main = self.pid as i32;
        if self.threads.contains_key(&main) {
            return Some(main);
        }
        self.threads.keys().min().copied()
    }

    /// Makes a stopped thread call `func(args...)` (at most six); returns
    /// the call's result (`rax`). The thread's registers are put back
    /// afterwards, whatever happened.
    pub fn call(&mut self, func: u64, args: &[Arg<'_>]) -> Result<u64, Refusal> {
        let tid = self.caller().ok_or("no thread left to run the call")?;
        let saved = ptrace::get_regs(tid).map_err(|e| format!("cannot read registers: {e}"))?;
        let result = self.call_on(tid, &saved, func, args);
        // (a thread that ended has no registers to put back)
        if !self.threads.contains_key(&tid) {
            return result;
        }
        if let Err(e) = ptrace::set_regs(tid, &saved) {
            // (the call's own failure, when it failed, is what went wrong)
            result?;
            return Err(format!("cannot restore thread {tid}'s registers: {e}"));
        }
        result
    }

    fn call_on(
        &mut self,
        tid: i32,
        saved: &Regs,
        func: u64,
        args: &[Arg<'_>],
    ) -> Result<u64, Refusal> {
        let mut r = *saved;
        let mut sp = saved.rsp.wrapping_sub(BELOW_SP) & !15;
        let mut vals = [0u64; 6];
        for (k, a) in args.iter().take(6).enumerate() {
            vals[k] = match *a {
                Arg::Val(v) => v,
                Arg::Bytes(bytes) => {
                    sp = sp.wrapping_sub(bytes.len() as u64 + 16) & !15;
                    self.mem
                        .write(sp, bytes)
                        .map_err(|e| format!("cannot write to the process's stack: {e}"))?;
                    sp
                }
            };
        }
        // (16-byte aligned before the return address is pushed, as a call leaves it)
        sp -= 8;
        self.mem
            .write_u64(sp, 0)
            .map_err(|e| format!("cannot write to the process's stack: {e}"))?;
        r.rsp = sp;
        r.rip = func;
        [r.rdi, r.rsi, r.rdx, r.rcx, r.r8, r.r9] = vals;
        r.rax = 0;
        r.orig_rax = u64::MAX; // (no system call to restart meanwhile)
        r.eflags &= !0x400; // (direction flag clear, as the ABI wants at a call)
        ptrace::set_regs(tid, &r).map_err(|e| format!("cannot set registers: {e}"))?;
        let first = self.sample(tid);
        let mut last = first;
        ptrace::cont(tid, 0).map_err(|e| format!("cannot resume thread {tid}: {e}"))?;
        loop {
            match ptrace::wait_stop(tid, CALL_WAIT) {
                Ok(Some(Stop::Signal(libc::SIGSEGV))) => return self.returned(tid),
                Ok(Some(Stop::Signal(sig))) => {
                    // (for the program: delivered when the thread is let go)
                    self.threads.insert(tid, sig);
                    let _ = ptrace::cont(tid, 0);
                }
                Ok(Some(Stop::Interrupted)) => {
                    let _ = ptrace::cont(tid, 0);
                }
                Ok(Some(Stop::Gone(_))) => {
                    self.threads.remove(&tid);
                    return Err(format!("process {} ended during the attach", self.pid));
                }
                Ok(None) => {
                    let now = self.sample(tid);
                    if !stuck(first, last, now) {
                        last = now;
                        continue;
                    }
                    return self.abandon(tid);
                }
                Err(e) => return Err(format!("cannot wait for thread {tid}: {e}")),
            }
        }
    }

    /// Thread `tid`'s state and CPU time ([`proc_scan::thread_state`]).
    fn sample(&self, tid: i32) -> Option<(char, u64)> {
        proc_scan::thread_state(self.pid, tid as u32)
    }

    /// The result of an injected call that stopped with SIGSEGV: returned
    /// (to address 0), or faulted.
    fn returned(&self, tid: i32) -> Result<u64, Refusal> {
        let now = ptrace::get_regs(tid).map_err(|e| e.to_string())?;
        if now.rip == 0 {
            return Ok(now.rax);
        }
        Err(format!(
            "the injected call faulted at {:#x} in process {}",
            now.rip, self.pid
        ))
    }

    /// Stops thread `tid` in an injected call that will not return, so that
    /// its registers can be put back. It is waited for as long as it takes:
    /// a thread let go still running the call would return to address 0
    /// and kill the process. A call that returns meanwhile is done.
    fn abandon(&mut self, tid: i32) -> Result<u64, Refusal> {
        let _ = ptrace::interrupt(tid);
        let stuck = format!(
            "process {} held a lock its loader needs while it was stopped (it was loading a library or allocating); try again",
            self.pid
        );
        loop {
            match ptrace::wait_stop(tid, STOP_WAIT) {
                Ok(Some(Stop::Signal(libc::SIGSEGV))) => return self.returned(tid),
                Ok(Some(Stop::Signal(sig))) => {
                    self.threads.insert(tid, sig);
                    return Err(stuck);
                }
                Ok(Some(Stop::Interrupted)) => return Err(stuck),
                Ok(Some(Stop::Gone(_))) => {
                    self.threads.remove(&tid);
                    return Err(format!("process {} ended during the attach", self.pid));
                }
                // (in the kernel still: it stops on its way out)
                Ok(None) => {}
                Err(e) => return Err(format!("cannot wait for thread {tid}: {e}")),
            }
        }
    }
}

/// Waits for thread `tid` of `pid`, just interrupted, to stop: [`STOP_WAIT`],
/// then for as long as it is on its way ([`on_its_way`]), at most
/// [`STOP_PATIENCE`] in all; to attach, a Ctrl-C ends the wait within a
/// tenth of a second. `Ok(None)`: it did not stop.
fn wait_until_stopped(pid: u32, tid: i32, purpose: Purpose) -> std::io::Result<Option<Stop>> {
    const STEP: Duration = Duration::from_millis(100);
    let mut waited = Duration::ZERO;
    loop {
        let stop = ptrace::wait_stop(tid, STEP)?;
        waited += STEP;
        if stop.is_some()
            || waited >= STOP_PATIENCE
            || (purpose == Purpose::Attach && process::stop_requested())
            || (waited >= STOP_WAIT && !on_its_way(proc_scan::thread_state(pid, tid as u32)))
        {
            return Ok(stop);
        }
    }
}

/// Whether an interrupted thread that has not stopped yet will: it stops
/// on its way back to user space, so one waiting in the kernel (`D`: a
/// `vfork` parent until its child execs or ends, a slow disk) or runnable
/// and not given a CPU yet (`R`, on a busy machine) is waited for. Any other
/// state after [`STOP_WAIT`] is not a way to a stop.
fn on_its_way(now: Option<(char, u64)>) -> bool {
    matches!(now, Some(('D' | 'R', _)))
}

/// Whether an injected call that has not returned after another
/// [`CALL_WAIT`] is stuck, from its thread's state and CPU time when it was
/// resumed (`first`), at the last look (`last`) and now: asleep (`S`)
/// without using the CPU since the last look, it waits for a lock a
/// stopped thread holds; having used more than [`CALL_SPIN_TICKS`] in all,
/// it spins on one. Running, using the CPU, or waiting in the kernel (`D`:
/// on a busy machine an RCU grace period, as when a thread of a process
/// grows its file table, has taken seconds), it is slow and waited for.
fn stuck(first: Option<(char, u64)>, last: Option<(char, u64)>, now: Option<(char, u64)>) -> bool {
    // (gone: the next wait says so)
    let Some((state, cpu)) = now else {
        return false;
    };
    if first.is_some_and(|(_, c)| cpu.saturating_sub(c) > CALL_SPIN_TICKS) {
        return true;
    }
    state == 'S' && last.is_none_or(|(_, c)| c == cpu)
}

impl Drop for Stopped {
    fn drop(&mut self) {
        for (&tid, &sig) in &self.threads {
            let _ = ptrace::detach(tid, sig);
        }
    }
}

/// The line for a refused ptrace: why, and what to do.
fn no_permission(pid: u32, e: &std::io::Error) -> Refusal {
    if let Some(tracer) = tracer_of(pid).filter(|&t| t != 0) {
        return format!(
            "process {pid} is already traced by process {tracer} (a debugger?): detach it first"
        );
    }
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    match (e.raw_os_error(), scope) {
        (Some(libc::EPERM), Some(s)) if s >= 1 => format!(
            "cannot attach to process {pid}: ptrace is restricted (kernel.yama.ptrace_scope = {s}); run lapse as root, or allow it with `sysctl kernel.yama.ptrace_scope=0`"
        ),
        (Some(libc::EPERM) | Some(libc::EACCES), _) => format!(
            "cannot attach to process {pid}: no permission to trace it (it runs as another user, or is not dumpable); run lapse as its user or as root"
        ),
        _ => format!("cannot attach to process {pid}: {e}"),
    }
}

/// `TracerPid` of /proc/PID/status.
pub(super) fn tracer_of(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtime_exports_what_attaching_calls() {
        for name in [
            "lapse_rt_attach",
            "lapse_rt_detach",
            "__cyg_profile_func_enter",
            "__cyg_profile_func_exit",
        ] {
            assert_ne!(symbol(lapse_rt::RUNTIME_SO, name), 0, "{name}");
        }
        assert_eq!(symbol(lapse_rt::RUNTIME_SO, "no_such_function"), 0);
    }

    #[test]
    fn an_injected_call_is_given_up_only_when_blocked_or_spinning() {
        let first = Some(('t', 100));
        // Asleep without using the CPU: waiting for a lock a stopped thread holds.
        assert!(stuck(first, Some(('S', 102)), Some(('S', 102))));
        // Waiting in the kernel without using the CPU (the attach that failed
        // under load: fcntl(F_DUPFD) growing the file table, in
        // synchronize_rcu for seconds) is slow, not blocked.
        assert!(!stuck(first, Some(('D', 102)), Some(('D', 102))));
        // Running, or asleep now but it used the CPU since the last look.
        assert!(!stuck(first, Some(('R', 102)), Some(('R', 102))));
        assert!(!stuck(first, Some(('R', 102)), Some(('S', 103))));
        // Seconds of CPU time: spinning.
        assert!(stuck(first, Some(('R', 500)), Some(('R', 601))));
        assert!(!stuck(first, Some(('R', 500)), Some(('R', 600))));
        // Gone: the next wait reports it.
        assert!(!stuck(first, Some(('S', 102)), None));
    }

    #[test]
    fn a_thread_slow_to_stop_is_waited_for_only_on_its_way() {
        // In the kernel (a vfork parent, a slow disk), or not given a CPU yet.
        assert!(on_its_way(Some(('D', 7))));
        assert!(on_its_way(Some(('R', 7))));
        // Asleep, stopped otherwise, a zombie, or gone: not on its way.
        for state in ['S', 'T', 't', 'Z'] {
            assert!(!on_its_way(Some((state, 7))), "{state}");
        }
        assert!(!on_its_way(None));
    }

    #[test]
    fn a_call_among_displaced_bytes_is_seen() {
        // endbr64; push %rbp; mov %rsp,%rbp
        assert!(!holds_call(&[
            0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5
        ]));
        // push %rbp; call rel32
        assert!(holds_call(&[0x55, 0xe8, 0, 0, 0, 0]));
        // call *%rax
        assert!(holds_call(&[0xff, 0xd0]));
        // jmp rel32 (no return comes back here)
        assert!(!holds_call(&[0xe9, 0, 0, 0, 0]));
    }

    #[test]
    fn the_runtime_and_the_c_library_are_left_out_of_the_redirected() {
        // (the runtime refers to its own hooks through its GOT: the same
        // bytes under another name count, under its own they do not)
        let dir = std::env::temp_dir().join(format!("lapse-inject-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut mods = Vec::new();
        for name in [lapse_rt::RUNTIME_FILE_NAME, "libc.so.6", "libother.so"] {
            let path = dir.join(name);
            std::fs::write(&path, lapse_rt::RUNTIME_SO).unwrap();
            mods.push(Module {
                path: path.display().to_string(),
                bias: 0x1000_0000,
            });
        }
        let own = probe_slots(lapse_rt::RUNTIME_SO);
        let found = process_slots(&mods);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(!own.is_empty());
        let moved: Vec<(u64, usize)> = own.iter().map(|&(a, k)| (a + 0x1000_0000, k)).collect();
        assert_eq!(found, moved);
        assert!(probe_slots(b"not an ELF file").is_empty());
    }
}
