//! ptrace, for attaching instrumentation to a running process: stopping
//! its threads (`PTRACE_SEIZE` + `PTRACE_INTERRUPT`, which neither sends a
//! signal nor shows up as one to the program), reading and setting a
//! stopped thread's registers, running it until it stops again, and letting
//! it go. Memory is read and written through `/proc/PID/mem`, which writes
//! through page protections (code and RELRO pages included) as a debugger
//! does.

use std::io;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

/// A stopped thread's general-purpose registers.
pub type Regs = libc::user_regs_struct;

/// How a traced thread stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Our interrupt (or a group-stop): nothing to pass on.
    Interrupted,
    /// A signal was about to be delivered to it: it is held back while the
    /// thread is ours, and delivered when it is let go.
    Signal(i32),
    /// The thread is gone (the process exited or was killed): its exit
    /// status, or 128 + the signal that ended it.
    Gone(i32),
}

fn check(rc: libc::c_long) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Becomes thread `tid`'s tracer without stopping it.
pub fn seize(tid: i32) -> io::Result<()> {
    // SAFETY: PTRACE_SEIZE takes no pointers (addr 0, data: options 0).
    check(unsafe { libc::ptrace(libc::PTRACE_SEIZE, tid, 0usize, 0usize) })
}

/// Asks a seized thread to stop (it reports the stop to [`wait_stop`]).
pub fn interrupt(tid: i32) -> io::Result<()> {
    // SAFETY: PTRACE_INTERRUPT takes no pointers.
    check(unsafe { libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0usize, 0usize) })
}

/// The next stop of traced thread `tid`, waiting for it at most `limit`
/// (`None` when it did not stop by then).
pub fn wait_stop(tid: i32, limit: Duration) -> io::Result<Option<Stop>> {
    let until = Instant::now() + limit;
    loop {
        let mut status = 0;
        // SAFETY: waitpid with a valid status pointer; __WALL: any thread.
        let rc = unsafe { libc::waitpid(tid, &mut status, libc::__WALL | libc::WNOHANG) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            if e.raw_os_error() == Some(libc::ECHILD) {
                return Ok(Some(Stop::Gone(0)));
            }
            return Err(e);
        }
        if rc == tid {
            if libc::WIFEXITED(status) {
                return Ok(Some(Stop::Gone(libc::WEXITSTATUS(status))));
            }
            if libc::WIFSIGNALED(status) {
                return Ok(Some(Stop::Gone(128 + libc::WTERMSIG(status))));
            }
            if libc::WIFSTOPPED(status) {
                let sig = libc::WSTOPSIG(status);
                let event = status >> 16;
                return Ok(Some(if event != 0 {
                    // PTRACE_EVENT_STOP: our interrupt or a group-stop.
                    Stop::Interrupted
                } else {
                    Stop::Signal(sig)
                }));
            }
            continue;
        }
        if Instant::now() >= until {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// The registers of stopped thread `tid`.
pub fn get_regs(tid: i32) -> io::Result<Regs> {
    // SAFETY: user_regs_struct is plain data; zeroed is a valid value.
    let mut regs: Regs = unsafe { std::mem::zeroed() };
    // SAFETY: PTRACE_GETREGS writes one user_regs_struct at data.
    check(unsafe {
        libc::ptrace(
            libc::PTRACE_GETREGS,
            tid,
            0usize,
            &mut regs as *mut Regs as usize,
        )
    })?;
    Ok(regs)
}

/// Sets the registers of stopped thread `tid`.
pub fn set_regs(tid: i32, regs: &Regs) -> io::Result<()> {
    // SAFETY: PTRACE_SETREGS reads one user_regs_struct at data.
    check(unsafe {
        libc::ptrace(
            libc::PTRACE_SETREGS,
            tid,
            0usize,
            regs as *const Regs as usize,
        )
    })
}

/// Lets stopped thread `tid` run on, delivering `sig` (0: none).
pub fn cont(tid: i32, sig: i32) -> io::Result<()> {
    // SAFETY: PTRACE_CONT takes the signal number as data, no pointers.
    check(unsafe { libc::ptrace(libc::PTRACE_CONT, tid, 0usize, sig as usize) })
}

/// Stops tracing `tid` (stopped), which runs on, delivering `sig` (0: none).
pub fn detach(tid: i32, sig: i32) -> io::Result<()> {
    // SAFETY: PTRACE_DETACH takes the signal number as data, no pointers.
    check(unsafe { libc::ptrace(libc::PTRACE_DETACH, tid, 0usize, sig as usize) })
}

/// A process's memory, as its tracer (or an owner with ptrace access) sees it.
pub struct Memory {
    file: std::fs::File,
}

impl Memory {
    pub fn open(pid: u32) -> io::Result<Memory> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/{pid}/mem"))?;
        Ok(Memory { file })
    }

    pub fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buf, addr)
    }

    pub fn read_u64(&self, addr: u64) -> io::Result<u64> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Writes `bytes` at `addr`, read-only and code pages included.
    pub fn write(&self, addr: u64, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all_at(bytes, addr)
    }

    pub fn write_u64(&self, addr: u64, v: u64) -> io::Result<()> {
        self.write(addr, &v.to_le_bytes())
    }

    /// The NUL-terminated string at `addr` (at most `max` bytes).
    pub fn read_c_string(&self, addr: u64, max: usize) -> String {
        let mut out = Vec::new();
        let mut chunk = [0u8; 64];
        while out.len() < max {
            if self.read(addr + out.len() as u64, &mut chunk).is_err() {
                break;
            }
            match chunk.iter().position(|&b| b == 0) {
                Some(n) => {
                    out.extend_from_slice(&chunk[..n]);
                    break;
                }
                None => out.extend_from_slice(&chunk),
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}
