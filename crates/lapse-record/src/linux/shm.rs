//! Memory shared with another process, behind safe calls: a memfd mapped
//! shared whose words are only ever touched atomically (the other process
//! writes them at the same time), a futex wake on one of those words, and a
//! cache prefetch hint. What the words mean is the caller's business (the
//! runtime's arena layout is `instrument/arena.rs`'s).
//!
//! Offsets are checked when a word or a run of words is asked for; a run
//! ([`SharedMapping::u64_arrays`]) is checked once, so reading the records
//! in it costs no check per record.

use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

/// The first `len` bytes of a memfd, mapped shared and read-write.
pub struct SharedMapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory, valid until drop; every
// access goes through atomics (`u32_at`, `u64_at`, the event words), so
// threads may share and move it as they may share atomics.
unsafe impl Send for SharedMapping {}
// SAFETY: as above.
unsafe impl Sync for SharedMapping {}

impl SharedMapping {
    /// Maps the first `len` bytes of `fd`. `None` when the file is shorter
    /// (an access past its end would fault), `len` is 0, or mapping fails.
    pub fn map(fd: &OwnedFd, len: usize) -> Option<SharedMapping> {
        if len == 0 {
            return None;
        }
        // SAFETY: fstat fills the struct; mmap of a shared memfd we were given,
        // whose size we checked (so no access can fault past its end).
        unsafe {
            let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
            if libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) != 0 {
                return None;
            }
            if (st.assume_init().st_size as u64) < len as u64 {
                return None;
            }
            let p = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            );
            if p == libc::MAP_FAILED {
                return None;
            }
            Some(SharedMapping {
                ptr: NonNull::new(p.cast())?,
                len,
            })
        }
    }

    /// The 32-bit word at byte `off` (a multiple of 4, inside the mapping).
    #[inline(always)]
    pub fn u32_at(&self, off: usize) -> &AtomicU32 {
        assert!(
            off.is_multiple_of(4) && off + 4 <= self.len,
            "word {off} of {}",
            self.len
        );
        // SAFETY: in bounds of the mapping (checked above), aligned (the
        // mapping is page aligned), and every access to shared words is atomic.
        unsafe { &*self.ptr.as_ptr().add(off).cast::<AtomicU32>() }
    }

    /// The 64-bit word at byte `off` (a multiple of 8, inside the mapping).
    #[inline(always)]
    pub fn u64_at(&self, off: usize) -> &AtomicU64 {
        assert!(
            off.is_multiple_of(8) && off + 8 <= self.len,
            "word {off} of {}",
            self.len
        );
        // SAFETY: as for u32_at.
        unsafe { &*self.ptr.as_ptr().add(off).cast::<AtomicU64>() }
    }

    /// `count` runs of `N` 64-bit words from byte `off` (a multiple of 8):
    /// fixed-size records read in place, checked here once.
    #[inline(always)]
    pub fn u64_arrays<const N: usize>(&self, off: usize, count: usize) -> &[[AtomicU64; N]] {
        assert!(
            N > 0
                && off.is_multiple_of(8)
                && off <= self.len
                && count <= (self.len - off) / (8 * N),
            "{count} × {N} words at {off} of {}",
            self.len
        );
        // SAFETY: the range is inside the mapping and aligned (checked
        // above); an array of atomics has no padding, and every access to
        // shared words is atomic.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off).cast(), count) }
    }
}

impl Drop for SharedMapping {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping; no reference into it outlives self.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Wakes up to `n` threads waiting on `word` (`FUTEX_WAIT`), in any process
/// that maps it.
pub fn futex_wake(word: &AtomicU32, n: i32) {
    // SAFETY: FUTEX_WAKE on a live word (not FUTEX_PRIVATE: the waiters are
    // in another process); it reads nothing else.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            n,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0,
        )
    };
}

/// Asks for the cache line holding `p` ahead of reading it. A hint: it
/// never faults, whatever `p` points at.
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint and cannot fault; SSE is always there
    // on x86_64.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// A new memfd of `len` zero bytes, as the runtime makes one (for tests
/// that play the runtime's part).
#[cfg(test)]
pub fn memfd(len: usize) -> std::io::Result<OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: memfd_create with a NUL-terminated name; the new fd is ours.
    let fd = unsafe {
        let raw = libc::memfd_create(c"lapse-test-arena".as_ptr(), libc::MFD_CLOEXEC);
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        OwnedFd::from_raw_fd(raw)
    };
    std::fs::File::from(fd.try_clone()?).set_len(len as u64)?;
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn two_mappings_of_one_memfd_see_each_other() {
        let fd = memfd(4096).expect("memfd");
        let (a, b) = (
            SharedMapping::map(&fd, 4096).expect("maps"),
            SharedMapping::map(&fd, 4096).expect("maps"),
        );
        a.u32_at(8).store(7, Ordering::Release);
        a.u64_at(4088).store(9, Ordering::Release);
        assert_eq!(b.u32_at(8).load(Ordering::Acquire), 7);
        let runs = b.u64_arrays::<3>(4096 - 24, 1);
        assert_eq!(runs[0][2].load(Ordering::Acquire), 9);
        assert!(SharedMapping::map(&fd, 8192).is_none(), "too short");
        assert!(SharedMapping::map(&fd, 0).is_none(), "nothing");
        futex_wake(a.u32_at(8), 1);
    }
}
