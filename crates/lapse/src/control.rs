//! Pausing, resuming and marking the recording from the program:
//! `lapse::pause()`, `lapse::resume()`, `lapse::mark("text")`. The same
//! three functions of the lapse runtime that `lapse header`'s C header
//! calls, looked up once (dlsym); without lapse each call is a load and a
//! branch.

use core::sync::atomic::AtomicUsize;
use core::sync::atomic::Ordering::Relaxed;

use crate::probe::lookup;

/// A slot before its look-up; after it, 0 (no runtime) or the function.
const UNRESOLVED: usize = 1;

static PAUSE: AtomicUsize = AtomicUsize::new(UNRESOLVED);
static RESUME: AtomicUsize = AtomicUsize::new(UNRESOLVED);
static MARK: AtomicUsize = AtomicUsize::new(UNRESOLVED);

/// The longest mark text the runtime keeps (longer ones are cut).
const MARK_MAX: usize = 1024;

/// The runtime's function in `slot` (`name`), looked up at the first call.
#[inline(always)]
fn function(slot: &AtomicUsize, name: &core::ffi::CStr) -> usize {
    let f = slot.load(Relaxed);
    if f != UNRESOLVED {
        return f;
    }
    let found = lookup::symbol(name);
    slot.store(found, Relaxed);
    found
}

/// Stops recording on every thread of the process until [`resume`]: calls
/// open now end here in the recording, as at its end. Nothing without lapse.
pub fn pause() {
    let f = function(&PAUSE, c"lapse_rt_pause");
    if f > UNRESOLVED {
        // SAFETY: the runtime's `void lapse_rt_pause(void)`.
        let f: extern "C" fn() = unsafe { core::mem::transmute::<usize, extern "C" fn()>(f) };
        f();
    }
}

/// Records again after [`pause`] (or after `lapse record --start-paused`).
pub fn resume() {
    let f = function(&RESUME, c"lapse_rt_resume");
    if f > UNRESOLVED {
        // SAFETY: the runtime's `void lapse_rt_resume(void)`.
        let f: extern "C" fn() = unsafe { core::mem::transmute::<usize, extern "C" fn()>(f) };
        f();
    }
}

/// An instant of the calling thread named `text` (its first 1024 bytes, up
/// to a NUL): `lapse report --view marks`, markers in the exports, and
/// `--from-mark`/`--to-mark`. Nothing without lapse; no allocation.
pub fn mark(text: &str) {
    let f = function(&MARK, c"lapse_rt_mark");
    if f > UNRESOLVED {
        let bytes = text.as_bytes();
        let n = bytes
            .iter()
            .take(MARK_MAX)
            .position(|&b| b == 0)
            .unwrap_or(bytes.len().min(MARK_MAX));
        let mut buf = [0u8; MARK_MAX + 1];
        buf[..n].copy_from_slice(&bytes[..n]);
        // SAFETY: the runtime's `void lapse_rt_mark(const char *)`, given a
        // NUL-terminated string that lives through the call.
        let f: extern "C" fn(*const core::ffi::c_char) =
            unsafe { core::mem::transmute::<usize, extern "C" fn(*const core::ffi::c_char)>(f) };
        f(buf.as_ptr().cast());
    }
}
