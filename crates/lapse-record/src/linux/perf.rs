//! perf_event_open and its mmap ring buffer, shared by every collection
//! method: the caller fills in a `perf_event_attr` (what to count, which
//! records, sample_type) and gets back an event whose ring it can drain
//! record by record. Record parsing lives in [`super::records`].

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{fence, Ordering};

use perf_event_open_sys as sys;
use sys::bindings::{perf_event_attr, perf_event_mmap_page};

/// Why an event could not be opened or mapped.
#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    #[error("perf_event_open on cpu {cpu} refused ({source}); allow it with `sysctl kernel.perf_event_paranoid=1` or run as root")]
    Denied { cpu: i32, source: io::Error },
    #[error("perf_event_open on cpu {cpu}: {source}")]
    Open { cpu: i32, source: io::Error },
    #[error("mapping the perf ring buffer of cpu {cpu}: {source}")]
    Mmap { cpu: i32, source: io::Error },
    #[error("perf ioctl {what}: {source}")]
    Ioctl {
        what: &'static str,
        source: io::Error,
    },
}

impl PerfError {
    /// The OS error number behind it (0 when there is none).
    pub fn errno(&self) -> i32 {
        match self {
            PerfError::Denied { source, .. }
            | PerfError::Open { source, .. }
            | PerfError::Mmap { source, .. }
            | PerfError::Ioctl { source, .. } => source.raw_os_error().unwrap_or(0),
        }
    }

    /// What the error says, in the terms lapse explains it to the user.
    pub fn refusal(&self) -> OpenRefusal {
        OpenRefusal::of(self.errno())
    }

    /// Whether the task it was opened on had ended meanwhile (ESRCH).
    pub fn task_gone(&self) -> bool {
        matches!(self, PerfError::Open { source, .. } if source.raw_os_error() == Some(libc::ESRCH))
    }
}

/// Why the kernel would not open (or map) an event, by what the user can
/// do about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenRefusal {
    /// EACCES or EPERM (named): not allowed here (paranoia level,
    /// capabilities, another user's process, a seccomp filter).
    NotAllowed { errno_name: &'static str },
    /// ENOSYS: no perf events in this kernel, or the call is filtered.
    NoPerfEvents,
    /// ENOENT, EOPNOTSUPP or ENODEV: no such event here (for a hardware
    /// event: no counters, as in most virtual machines).
    NoSuchEvent(i32),
    /// Any other OS error number.
    Other(i32),
}

impl OpenRefusal {
    pub fn of(errno: i32) -> OpenRefusal {
        match errno {
            libc::EACCES => OpenRefusal::NotAllowed {
                errno_name: "EACCES",
            },
            libc::EPERM => OpenRefusal::NotAllowed {
                errno_name: "EPERM",
            },
            libc::ENOSYS => OpenRefusal::NoPerfEvents,
            libc::ENOENT | libc::EOPNOTSUPP | libc::ENODEV => OpenRefusal::NoSuchEvent(errno),
            other => OpenRefusal::Other(other),
        }
    }

    pub fn not_allowed(self) -> bool {
        matches!(self, OpenRefusal::NotAllowed { .. })
    }
}

/// A zeroed attribute with `size` set, for callers to fill in.
pub fn new_attr() -> perf_event_attr {
    perf_event_attr {
        size: std::mem::size_of::<perf_event_attr>() as u32,
        ..Default::default()
    }
}

/// The CPUs the kernel has online, from `/sys/devices/system/cpu/online`
/// (`0-3,5` style); falls back to `0..available_parallelism`.
pub fn online_cpus() -> Vec<i32> {
    let parsed = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| parse_cpu_list(s.trim()));
    parsed.unwrap_or_else(|| {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        (0..n as i32).collect()
    })
}

fn parse_cpu_list(s: &str) -> Option<Vec<i32>> {
    let mut cpus = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<i32>().ok()?..=b.parse::<i32>().ok()?),
            None => cpus.push(part.parse().ok()?),
        }
    }
    (!cpus.is_empty()).then_some(cpus)
}

/// How the kernel converts the TSC to nanoseconds (`ns = ticks * mult >> shift`),
/// read from the ring's control page when it offers `cap_user_time`.
#[derive(Clone, Copy, Debug)]
pub struct KernelTscScale {
    pub mult: u32,
    pub shift: u16,
}

/// One opened perf event, with a ring buffer unless its output is redirected.
pub struct PerfEvent {
    fd: OwnedFd,
    cpu: i32,
    ring: Option<Ring>,
}

struct Ring {
    base: NonNull<u8>,
    map_len: usize,
    data_offset: usize,
    data_size: usize,
}

impl PerfEvent {
    /// Opens `attr` for `pid` (-1 = every task) on `cpu` (-1 = every CPU);
    /// maps a ring of `data_pages` pages (a power of two) when `data_pages > 0`,
    /// or of fewer where the locked-memory limit allows no more (not root).
    pub fn open(
        attr: &mut perf_event_attr,
        pid: i32,
        cpu: i32,
        data_pages: usize,
    ) -> Result<PerfEvent, PerfError> {
        // SAFETY: attr is a valid, sized perf_event_attr; the kernel only reads it.
        let fd = unsafe {
            sys::perf_event_open(attr, pid, cpu, -1, sys::bindings::PERF_FLAG_FD_CLOEXEC as _)
        };
        if fd < 0 {
            let source = io::Error::last_os_error();
            return Err(match source.raw_os_error() {
                Some(libc::EACCES) | Some(libc::EPERM) => PerfError::Denied { cpu, source },
                _ => PerfError::Open { cpu, source },
            });
        }
        // SAFETY: fd was just returned by the kernel and is ours alone.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut ring = None;
        let mut pages = data_pages;
        while pages > 0 {
            match Ring::map(fd.as_raw_fd(), pages) {
                Ok(r) => {
                    ring = Some(r);
                    break;
                }
                // Over the locked-memory limit (not root): a smaller ring,
                // down to 8 pages (it loses more records, and says so).
                Err(e)
                    if matches!(e.raw_os_error(), Some(libc::EPERM | libc::ENOMEM))
                        && pages > 8 =>
                {
                    pages /= 2;
                }
                Err(source) => return Err(PerfError::Mmap { cpu, source }),
            }
        }
        Ok(PerfEvent { fd, cpu, ring })
    }

    pub fn cpu(&self) -> i32 {
        self.cpu
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Sends this event's records into `target`'s ring (same CPU).
    pub fn set_output(&self, target: &PerfEvent) -> Result<(), PerfError> {
        // SAFETY: both fds are open perf events.
        let rc = unsafe { sys::ioctls::SET_OUTPUT(self.raw_fd(), target.raw_fd()) };
        check(rc, "SET_OUTPUT")
    }

    /// The kernel's id of this event, as `PERF_SAMPLE_ID`/`IDENTIFIER` report
    /// it (inherited copies report their parent's id).
    pub fn id(&self) -> Result<u64, PerfError> {
        let mut id = 0u64;
        // SAFETY: fd is an open perf event; the kernel writes one u64.
        check(unsafe { sys::ioctls::ID(self.raw_fd(), &mut id) }, "ID")?;
        Ok(id)
    }

    pub fn enable(&self) -> Result<(), PerfError> {
        // SAFETY: fd is an open perf event.
        check(unsafe { sys::ioctls::ENABLE(self.raw_fd(), 0) }, "ENABLE")
    }

    pub fn disable(&self) -> Result<(), PerfError> {
        // SAFETY: fd is an open perf event.
        check(unsafe { sys::ioctls::DISABLE(self.raw_fd(), 0) }, "DISABLE")
    }

    pub fn tsc_scale(&self) -> Option<KernelTscScale> {
        self.ring.as_ref().and_then(Ring::tsc_scale)
    }

    /// Hands every complete record in the ring to `f` (header included, and
    /// contiguous even when it wraps around the ring's end), then frees the space.
    pub fn drain(&mut self, scratch: &mut Vec<u8>, f: impl FnMut(&[u8])) {
        self.drain_some(scratch, usize::MAX, f);
    }

    /// The same for at most `max` records; true if more were left.
    pub fn drain_some(
        &mut self,
        scratch: &mut Vec<u8>,
        max: usize,
        mut f: impl FnMut(&[u8]),
    ) -> bool {
        match &mut self.ring {
            Some(ring) => ring.drain(scratch, max, &mut f),
            None => false,
        }
    }
}

fn check(rc: i32, what: &'static str) -> Result<(), PerfError> {
    if rc < 0 {
        Err(PerfError::Ioctl {
            what,
            source: io::Error::last_os_error(),
        })
    } else {
        Ok(())
    }
}

impl Ring {
    fn map(fd: RawFd, data_pages: usize) -> io::Result<Ring> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let map_len = page * (1 + data_pages.next_power_of_two());
        // SAFETY: a fresh shared mapping of the perf fd, checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base =
            NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        let page_ptr = base.as_ptr().cast::<perf_event_mmap_page>();
        // SAFETY: the control page is mapped; the kernel fills data_offset/size once.
        let (off, size) = unsafe { ((*page_ptr).data_offset, (*page_ptr).data_size) };
        let (data_offset, data_size) = if size == 0 {
            (page, map_len - page) // kernels before 4.1 leave these zero
        } else {
            (off as usize, size as usize)
        };
        Ok(Ring {
            base,
            map_len,
            data_offset,
            data_size,
        })
    }

    fn page(&self) -> *mut perf_event_mmap_page {
        self.base.as_ptr().cast()
    }

    fn tsc_scale(&self) -> Option<KernelTscScale> {
        let page = self.page();
        // SAFETY: the control page stays mapped while self lives; the
        // capabilities word is a plain u64 bitfield.
        unsafe {
            let caps = (*page).__bindgen_anon_1.__bindgen_anon_1;
            if caps.cap_user_time() == 0 || (*page).time_mult == 0 {
                return None;
            }
            Some(KernelTscScale {
                mult: std::ptr::read_volatile(&(*page).time_mult),
                shift: std::ptr::read_volatile(&(*page).time_shift),
            })
        }
    }

    fn drain(&mut self, scratch: &mut Vec<u8>, max: usize, f: &mut dyn FnMut(&[u8])) -> bool {
        let page = self.page();
        // SAFETY: data_head is written by the kernel; read it, then fence so
        // record bytes are read after it (the documented protocol).
        let head = unsafe { std::ptr::read_volatile(&(*page).data_head) };
        fence(Ordering::Acquire);
        // SAFETY: data_tail is ours to read and write.
        let mut tail = unsafe { std::ptr::read_volatile(&(*page).data_tail) };
        // SAFETY: the data area lies inside the mapping.
        let data = unsafe {
            std::slice::from_raw_parts(self.base.as_ptr().add(self.data_offset), self.data_size)
        };
        let size = self.data_size as u64;
        let mut taken = 0;
        while head.wrapping_sub(tail) >= 8 {
            if taken == max {
                break;
            }
            taken += 1;
            let start = (tail % size) as usize;
            let mut hdr = [0u8; 8];
            copy_wrapped(data, start, &mut hdr);
            let len = u16::from_ne_bytes([hdr[6], hdr[7]]) as u64;
            if len < 8 || head.wrapping_sub(tail) < len {
                break; // corrupt or incomplete: drop what is left below
            }
            scratch.resize(len as usize, 0);
            copy_wrapped(data, start, scratch);
            f(scratch);
            tail = tail.wrapping_add(len);
        }
        if head.wrapping_sub(tail) > 0 && head.wrapping_sub(tail) < 8 {
            tail = head;
        }
        fence(Ordering::Release);
        // SAFETY: tells the kernel the space up to tail may be reused.
        unsafe { std::ptr::write_volatile(&mut (*page).data_tail, tail) };
        taken == max && head != tail
    }
}

fn copy_wrapped(data: &[u8], start: usize, out: &mut [u8]) {
    let first = out.len().min(data.len() - start);
    out[..first].copy_from_slice(&data[start..start + first]);
    let rest = out.len() - first;
    out[first..].copy_from_slice(&data[..rest]);
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `map` mapped.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.map_len) };
    }
}

// SAFETY: the ring is only touched through &mut self; the mapping may move threads.
unsafe impl Send for Ring {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse() {
        assert_eq!(parse_cpu_list("0-3,5"), Some(vec![0, 1, 2, 3, 5]));
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn a_ring_is_read_a_slice_at_a_time() {
        // This thread's context switches, into a ring of its own: 200
        // sleeps make about 400 records; read 64 at a time, every slice
        // but the last is full and says more are left, and together they
        // are what one full read would have given.
        let mut attr = new_attr();
        attr.type_ = sys::bindings::PERF_TYPE_SOFTWARE;
        attr.config = u64::from(sys::bindings::PERF_COUNT_SW_DUMMY);
        attr.set_context_switch(1);
        attr.set_exclude_kernel(1);
        let mut ev = PerfEvent::open(&mut attr, 0, -1, 64).expect("a dummy event on this thread");
        for _ in 0..200 {
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
        // (stopped: on a busy machine this thread is preempted while it
        // reads, and records coming in between would end a slice early)
        ev.disable().expect("the event stops");
        let (mut scratch, mut slices) = (Vec::new(), Vec::new());
        loop {
            let mut n = 0;
            let more = ev.drain_some(&mut scratch, 64, |_| n += 1);
            slices.push((n, more));
            if !more {
                break;
            }
        }
        let total: usize = slices.iter().map(|s| s.0).sum();
        // (each sleep switches out at least once; one that ends before the
        // thread is switched out makes none, seldom, on a busy machine)
        assert!(total >= 300, "{total} records");
        let (last, full) = slices.split_last().expect("a slice");
        assert!(full.iter().all(|&s| s == (64, true)), "{slices:?}");
        assert!(last.0 <= 64 && !last.1);
        let mut after = 0;
        ev.drain(&mut scratch, |_| after += 1);
        assert!(after < 10, "the ring was read to its end");
    }

    #[test]
    fn wrapped_copy_joins_both_ends() {
        let data = [1u8, 2, 3, 4, 5];
        let mut out = [0u8; 3];
        copy_wrapped(&data, 3, &mut out);
        assert_eq!(out, [4, 5, 1]);
    }
}
