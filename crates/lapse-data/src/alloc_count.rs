//! A global allocator that counts what each thread holds, for tests that
//! say how much memory something takes (the reader on a crafted file, the
//! recorder per live thread) without depending on other tests running at
//! the same time. A test binary installs it with
//! `#[global_allocator] static A: lapse_data::alloc_count::Counting = Counting;`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The system allocator, counting the bytes this thread asked for and has
/// not given back, and their peak.
pub struct Counting;

thread_local! {
    static NOW: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn account(delta: isize) {
    let _ = NOW.try_with(|now| {
        let v = now.get() + delta;
        now.set(v);
        let _ = PEAK.try_with(|p| p.set(p.get().max(v)));
    });
}

// SAFETY: every call goes to the system allocator unchanged; the counting
// touches only const-initialised thread-locals, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: the caller's layout, passed on as GlobalAlloc::alloc requires.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            account(l.size() as isize);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: as for alloc.
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            account(l.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from System with layout `l` (every alloc goes there).
        unsafe { System.dealloc(p, l) };
        account(-(l.size() as isize));
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // SAFETY: as for dealloc; `new` is the caller's, checked by it.
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            account(new as isize - l.size() as isize);
        }
        q
    }
}

/// Bytes this thread holds now (since it started; frees of memory another
/// thread allocated can make it negative).
pub fn held() -> isize {
    NOW.with(Cell::get)
}

/// Peak bytes this thread held while `f` ran, beyond what it held before.
pub fn peak_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = held();
    PEAK.with(|p| p.set(base));
    let out = f();
    let peak = PEAK.with(Cell::get);
    (out, (peak - base).max(0) as usize)
}
