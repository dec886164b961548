//! The recorder's side of the runtime's shared arena (`struct lapse_arena`
//! in the runtime's `csrc/lapse_rt.h`): each process image maps a memfd of
//! event buffers and passes it over the socket; its threads fill buffers in
//! place and hand them over with a `ShmEvents` datagram. The recorder reads
//! the events where they are and frees the buffer, waking any thread that
//! waits for one. It never writes to a buffer, so the cache lines the probe
//! writes next are not dirty in the recorder's core.
//!
//! The buffers a process was still filling when it died without handing them
//! over (SIGKILL, or a thread blocked in a system call when another one
//! called `_exit`) are read up to the first event stamped before the buffer
//! was claimed (left from its previous use) or empty: [`Arena::salvage`].

use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use lapse_rt::protocol::{arena, at, RawEvent, BUF_EVENTS, EVENT_LEN};

pub struct Arena {
    ptr: NonNull<u8>,
}

/// A buffer a dead process left behind: its thread, the index of its first
/// event, and the events written before the process died.
pub struct Salvaged {
    pub tid: u32,
    pub first: u64,
    pub events: Vec<RawEvent>,
}

impl Arena {
    /// Maps the arena the runtime announced (`bytes`, `bufs` buffers of
    /// `events` events). `None` when its layout is not the one this recorder
    /// knows, or the memfd is not that big, or mapping fails.
    pub fn map(fd: &OwnedFd, bytes: u64, bufs: u32, events: u32) -> Option<Arena> {
        if bytes != arena::BYTES as u64
            || bufs as usize != arena::BUFS
            || events as usize != BUF_EVENTS
        {
            return None;
        }
        // SAFETY: fstat fills the struct; mmap of a shared memfd we were given,
        // whose size we checked (so no access can fault past its end).
        unsafe {
            let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
            if libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) != 0 {
                return None;
            }
            if (st.assume_init().st_size as u64) < arena::BYTES as u64 {
                return None;
            }
            let p = libc::mmap(
                std::ptr::null_mut(),
                arena::BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            );
            if p == libc::MAP_FAILED {
                return None;
            }
            let a = Arena {
                ptr: NonNull::new(p.cast())?,
            };
            (a.u32_at(arena::OFF_MAGIC).load(Ordering::Acquire) == arena::MAGIC
                && a.u32_at(arena::OFF_NBUFS).load(Ordering::Acquire) as usize == arena::BUFS)
                .then_some(a)
        }
    }

    fn u32_at(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off.is_multiple_of(4) && off + 4 <= arena::BYTES);
        // SAFETY: in bounds of the mapping (checked by the callers' constant
        // layout), aligned, and every access to shared words is atomic.
        unsafe { &*self.ptr.as_ptr().add(off).cast::<AtomicU32>() }
    }

    fn u64_at(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off.is_multiple_of(8) && off + 8 <= arena::BYTES);
        // SAFETY: as for u32_at.
        unsafe { &*self.ptr.as_ptr().add(off).cast::<AtomicU64>() }
    }

    fn slot(buf: usize) -> usize {
        arena::OFF_SLOTS + buf * arena::SLOT_LEN
    }

    fn event_at(&self, buf: usize, k: usize) -> RawEvent {
        let at = arena::HEAD + buf * arena::BUF_BYTES + k * EVENT_LEN;
        RawEvent::from_words(
            self.u64_at(at + at::EVENT_FN).load(Ordering::Relaxed),
            self.u64_at(at + at::EVENT_STAMP).load(Ordering::Relaxed),
            self.u64_at(at + at::EVENT_SP).load(Ordering::Relaxed),
        )
    }

    /// The first `count` events of buffer `buf` (which its thread handed over).
    pub fn events(&self, buf: usize, count: usize) -> impl Iterator<Item = RawEvent> + '_ {
        let (buf, count) = (buf.min(arena::BUFS - 1), count.min(BUF_EVENTS));
        (0..count).map(move |k| {
            // The lines were just written on another core: ask for them well
            // ahead (64 events) instead of waiting for each in turn, once per
            // line (the event that starts in a line's first EVENT_LEN bytes).
            let ahead = (k + 64) * EVENT_LEN;
            if ahead % 64 < EVENT_LEN && k + 64 < count {
                self.prefetch(arena::HEAD + buf * arena::BUF_BYTES + ahead);
            }
            self.event_at(buf, k)
        })
    }

    #[inline(always)]
    fn prefetch(&self, off: usize) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch is a hint; the address is inside the mapping.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(self.ptr.as_ptr().add(off).cast());
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = off;
    }

    /// How many buffers the runtime has handed over so far: it moves
    /// before their datagrams come.
    pub fn handed_over(&self) -> u64 {
        self.u64_at(arena::OFF_SEQ).load(Ordering::Relaxed)
    }

    /// Gives buffer `buf` back to the runtime.
    pub fn release(&self, buf: usize) {
        let buf = buf.min(arena::BUFS - 1);
        self.u32_at(Self::slot(buf) + arena::SLOT_STATE)
            .store(arena::FREE, Ordering::Release);
        self.u32_at(arena::OFF_GEN).fetch_add(1, Ordering::AcqRel);
        if self.u32_at(arena::OFF_WAITERS).load(Ordering::Acquire) > 0 {
            // SAFETY: FUTEX_WAKE on a word of our shared mapping (not
            // FUTEX_PRIVATE: the waiters are in another process).
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    self.u32_at(arena::OFF_GEN).as_ptr(),
                    libc::FUTEX_WAKE,
                    1, // one buffer freed: one waiter can have it
                    std::ptr::null::<libc::timespec>(),
                    std::ptr::null::<u32>(),
                    0,
                )
            };
        }
    }

    /// The buffers threads were still filling, each up to its first empty
    /// event; for a process that is gone (nothing writes them any more).
    pub fn salvage(&self) -> Vec<Salvaged> {
        let mut out = Vec::new();
        for buf in 0..arena::BUFS {
            let slot = Self::slot(buf);
            if self
                .u32_at(slot + arena::SLOT_STATE)
                .load(Ordering::Acquire)
                != arena::FILLING
            {
                continue;
            }
            let claimed = self
                .u64_at(slot + arena::SLOT_CLAIMED)
                .load(Ordering::Acquire);
            let events: Vec<RawEvent> = (0..BUF_EVENTS)
                .map(|k| self.event_at(buf, k))
                .take_while(|e| e.function != 0 && e.ticks >= claimed && e.ticks != 0)
                .collect();
            if !events.is_empty() {
                out.push(Salvaged {
                    tid: self.u32_at(slot + arena::SLOT_TID).load(Ordering::Acquire),
                    first: self
                        .u64_at(slot + arena::SLOT_FIRST)
                        .load(Ordering::Acquire),
                    events,
                });
            }
        }
        out.sort_by_key(|s| (s.tid, s.first));
        out
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping; no reference into it outlives self.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), arena::BYTES) };
    }
}

// The mapping is plain memory shared with another process; the recorder
// uses it from one thread at a time.
unsafe impl Send for Arena {}
