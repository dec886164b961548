//! Starting the target held: it is forked, waits on a pipe until the
//! recorder has armed its perf events, then execs. Also signal forwarding
//! (Ctrl-C and SIGTERM reach the target, the recorder finishes the file),
//! reaping with the exit status `record` reports, and giving the target the
//! signal dispositions and mask lapse itself inherited (Rust ignores SIGPIPE
//! in every program it starts; the target must not inherit that).

use std::ffi::{CString, OsStr};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

/// Finds `cmd` the way execvp would: as given when it holds a `/`, else in PATH.
pub fn resolve_command(cmd: &str) -> Option<PathBuf> {
    if cmd.contains('/') {
        let p = PathBuf::from(cmd);
        return p.is_file().then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(cmd))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Why `program` cannot be run, if it cannot: not executable, or neither an
/// ELF file nor a `#!` script (exec would fail after the recording began).
pub fn not_runnable(program: &Path) -> Option<&'static str> {
    use std::io::Read;
    if !is_executable(program) {
        return Some("it is not executable (no x permission)");
    }
    let mut head = [0u8; 4];
    let n = std::fs::File::open(program)
        .and_then(|mut f| f.read(&mut head))
        .unwrap_or(0);
    let head = &head[..n];
    if head.starts_with(b"\x7fELF") || head.starts_with(b"#!") {
        None
    } else {
        Some("it is neither a program (ELF) nor a script starting with #!")
    }
}

/// Signals (bit `sig - 1`) that lapse's parent left ignored.
static INHERITED_IGNORED: AtomicU64 = AtomicU64::new(0);
/// Signals (bit `sig - 1`) that lapse's parent left blocked.
static INHERITED_BLOCKED: AtomicU64 = AtomicU64::new(0);
static INHERITED_NOTED: AtomicBool = AtomicBool::new(false);
/// Signals 1..=64, the ones a `u64` mask holds (glibc's real-time signals end at 64).
const MASK_SIGNALS: i32 = 64;

/// Notes which signals lapse's parent ignored and blocked, for the target to
/// get the same. Must run before Rust's runtime ignores SIGPIPE, so the
/// `lapse` binary calls it from an `.init_array` constructor; a program that
/// never calls it starts its targets as `std::process::Command` does
/// (every signal at its default, none blocked).
pub fn note_inherited_signals() {
    let mut ignored = 0u64;
    let mut blocked = 0u64;
    // SAFETY: querying (not changing) dispositions and the mask into zeroed
    // structures of the right types.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        let have_mask = libc::pthread_sigmask(libc::SIG_SETMASK, std::ptr::null(), &mut set) == 0;
        for sig in 1..=MASK_SIGNALS {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) == 0
                && old.sa_sigaction == libc::SIG_IGN
            {
                ignored |= 1 << (sig - 1);
            }
            if have_mask && libc::sigismember(&set, sig) == 1 {
                blocked |= 1 << (sig - 1);
            }
        }
    }
    INHERITED_IGNORED.store(ignored, Ordering::SeqCst);
    INHERITED_BLOCKED.store(blocked, Ordering::SeqCst);
    INHERITED_NOTED.store(true, Ordering::SeqCst);
}

/// What the target starts with: signals to ignore and to block.
#[derive(Clone, Copy)]
struct InheritedSignals {
    ignored: u64,
    blocked: u64,
}

fn inherited_signals() -> InheritedSignals {
    if INHERITED_NOTED.load(Ordering::SeqCst) {
        InheritedSignals {
            ignored: INHERITED_IGNORED.load(Ordering::SeqCst),
            blocked: INHERITED_BLOCKED.load(Ordering::SeqCst),
        }
    } else {
        InheritedSignals {
            ignored: 0,
            blocked: 0,
        }
    }
}

/// In the forked child, just before exec: every signal ignored or at its
/// default as lapse's parent had it (handlers lapse installed would reset to
/// the default at exec, which is wrong for a signal the parent ignored), and
/// the parent's mask. Only async-signal-safe calls.
///
/// # Safety
/// Call only in a forked child that execs or exits next.
unsafe fn restore_inherited_signals(inherited: InheritedSignals) {
    let mut sa: libc::sigaction = std::mem::zeroed();
    libc::sigemptyset(&mut sa.sa_mask);
    let mut set: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut set);
    for sig in 1..=MASK_SIGNALS {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        let bit = 1u64 << (sig - 1);
        sa.sa_sigaction = if inherited.ignored & bit != 0 {
            libc::SIG_IGN
        } else {
            libc::SIG_DFL
        };
        // (glibc refuses its two internal signals: nothing to restore there)
        libc::sigaction(sig, &sa, std::ptr::null_mut());
        if inherited.blocked & bit != 0 {
            libc::sigaddset(&mut set, sig);
        }
    }
    libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
}

/// A forked target blocked before exec.
pub struct HeldChild {
    pub pid: i32,
    release_fd: i32,
    released: bool,
}

fn cstring(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| io::Error::other("argument holds a NUL byte"))
}

/// Forks a child that will exec `program` with `args` (`argv[0]` included) and
/// the current environment plus `extra_env`, once [`HeldChild::release`] is called.
pub fn spawn_held(
    program: &Path,
    args: &[String],
    extra_env: &[(String, String)],
) -> io::Result<HeldChild> {
    // Everything the child needs is built before fork: it may not allocate.
    let prog = cstring(program.as_os_str())?;
    let argv_c: Vec<CString> = args
        .iter()
        .map(|a| cstring(OsStr::new(a)))
        .collect::<io::Result<_>>()?;
    let mut argv: Vec<*const libc::c_char> = argv_c.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let overridden: Vec<&str> = extra_env.iter().map(|(k, _)| k.as_str()).collect();
    let mut env_c: Vec<CString> = Vec::new();
    for (k, v) in std::env::vars_os() {
        if overridden.iter().any(|o| OsStr::new(o) == k) {
            continue;
        }
        let mut kv = k.as_bytes().to_vec();
        kv.push(b'=');
        kv.extend_from_slice(v.as_bytes());
        env_c.push(CString::new(kv).map_err(|_| io::Error::other("environment holds a NUL byte"))?);
    }
    for (k, v) in extra_env {
        env_c.push(cstring(OsStr::new(&format!("{k}={v}")))?);
    }
    let mut envp: Vec<*const libc::c_char> = env_c.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());

    let signals = inherited_signals();
    let mut fds = [0i32; 2];
    // SAFETY: fds is a valid array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the child only calls async-signal-safe functions (read, close,
    // sigaction, sigprocmask, execve, write, _exit) on memory prepared above.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let e = io::Error::last_os_error();
        // SAFETY: closing the pipe we just made.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        return Err(e);
    }
    if pid == 0 {
        // SAFETY: see above; nothing here returns to Rust code.
        unsafe {
            libc::close(fds[1]);
            let mut b = 0u8;
            // Wait until the recorder releases us (writes a byte or closes the pipe).
            while libc::read(fds[0], (&mut b as *mut u8).cast(), 1) < 0 {}
            restore_inherited_signals(signals);
            libc::execve(prog.as_ptr(), argv.as_ptr(), envp.as_ptr());
            let msg = b"lapse: could not execute the target\n";
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::_exit(127);
        }
    }
    // SAFETY: the read end belongs to the child now.
    unsafe { libc::close(fds[0]) };
    TARGET.store(pid, Ordering::SeqCst);
    Ok(HeldChild {
        pid,
        release_fd: fds[1],
        released: false,
    })
}

impl HeldChild {
    /// Lets the child exec.
    pub fn release(&mut self) {
        if !self.released {
            self.released = true;
            // SAFETY: our end of the pipe; closing it wakes the child's read.
            unsafe { libc::close(self.release_fd) };
        }
    }

    /// Kills a child that should not run after all (set-up failed) and reaps it.
    pub fn abandon(mut self) {
        // SAFETY: signalling and reaping our own child.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
        }
        self.release();
        let _ = wait(self.pid, true);
    }
}

impl Drop for HeldChild {
    fn drop(&mut self) {
        self.release();
    }
}

/// `Some(status)` once `pid` has ended: its exit code, or 128 + signal.
pub fn wait(pid: i32, block: bool) -> io::Result<Option<i32>> {
    let mut status = 0;
    loop {
        // SAFETY: waitpid on our own child with a valid status pointer.
        let rc = unsafe { libc::waitpid(pid, &mut status, if block { 0 } else { libc::WNOHANG }) };
        if rc == 0 {
            return Ok(None);
        }
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        // (reaped: its pid may be anyone's now, so signals stop going there)
        let _ = TARGET.compare_exchange(pid, 0, Ordering::SeqCst, Ordering::SeqCst);
        if libc::WIFEXITED(status) {
            return Ok(Some(libc::WEXITSTATUS(status)));
        }
        if libc::WIFSIGNALED(status) {
            return Ok(Some(128 + libc::WTERMSIG(status)));
        }
    }
}

static PENDING_SIGNAL: AtomicI32 = AtomicI32::new(0);
static PENDING_FROM_TTY: AtomicI32 = AtomicI32::new(0);
/// The launched target (0: none yet).
static TARGET: AtomicI32 = AtomicI32::new(0);
/// Or'ed into PENDING_SIGNAL: the handler passed it on already.
const SENT: i32 = 0x100;

extern "C" fn note_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    let code = if info.is_null() {
        0
    } else {
        // SAFETY: the kernel passes a valid siginfo to SA_SIGINFO handlers.
        unsafe { (*info).si_code }
    };
    let from_tty = code == libc::SI_KERNEL;
    PENDING_FROM_TTY.store(i32::from(from_tty), Ordering::SeqCst);
    // Passed on here, at once: a recorder that is far behind a target
    // flooding it (thousands of busy threads) may not get back to its loop
    // for a long time, and the target must not run on meanwhile.
    let target = TARGET.load(Ordering::SeqCst);
    let mut sent = 0;
    if target > 0 && !from_tty {
        // SAFETY: kill is async-signal-safe; signalling our own child.
        unsafe { libc::kill(target, sig) };
        sent = SENT;
    }
    PENDING_SIGNAL.store(sig | sent, Ordering::SeqCst);
}

/// Catches SIGINT, SIGTERM and SIGHUP so the recorder can pass them on and
/// still finish the data file.
pub fn catch_termination_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: installing a handler that only stores into atomics.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = note_signal as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Passes a caught signal on to `pid`. A Ctrl-C typed at the terminal already
/// reached the target (same process group), so only signals sent to the
/// recorder alone are forwarded. Returns whether a signal was pending (once
/// the target is gone, that means: stop recording now).
pub fn forward_pending_signal(pid: i32) -> bool {
    let pending = PENDING_SIGNAL.swap(0, Ordering::SeqCst);
    let sig = pending & !SENT;
    if sig != 0
        && pending & SENT == 0
        && PENDING_FROM_TTY.load(Ordering::SeqCst) == 0
        && TARGET.load(Ordering::SeqCst) == pid
    {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(pid, sig) };
    }
    sig != 0
}
