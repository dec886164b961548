//! The probe: finding the lapse runtime once, and the guard whose creation
//! and drop are a site's entry and exit events.
//!
//! Cost without lapse: one load of an atomic and one branch per probe (the
//! look-up ran once, before `main`, and found nothing). With lapse: that,
//! plus a compare and an indirect call into the runtime, which records the
//! event as its `-finstrument-functions` hooks do (`csrc/scope.c`).
//! `examples/probe_cost.rs` measures both.

use core::sync::atomic::AtomicUsize;
use core::sync::atomic::Ordering::Relaxed;

use crate::site::Site;

/// The runtime's `void lapse_scope_enter(const void *site)` and
/// `lapse_scope_exit`.
pub type Hook = unsafe extern "C" fn(*const u8);

/// A hook slot's value before the look-up. After it: 0 (no runtime), or the
/// hook's address.
const UNRESOLVED: usize = 1;

static ENTER: AtomicUsize = AtomicUsize::new(UNRESOLVED);
static EXIT: AtomicUsize = AtomicUsize::new(UNRESOLVED);

#[cfg(unix)]
pub(crate) mod lookup {
    use core::ffi::{c_char, c_void, CStr};

    extern "C" {
        // (glibc 2.34 and later, and musl, have it in libc; Rust's std
        // links libdl for older glibc)
        fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    }

    /// The global scope: the program and every library loaded into it,
    /// `LD_PRELOAD`ed ones included (glibc and musl: a null handle).
    const RTLD_DEFAULT: *mut c_void = core::ptr::null_mut();

    pub fn symbol(name: &CStr) -> usize {
        // SAFETY: dlsym takes any handle RTLD_DEFAULT stands for and a
        // NUL-terminated name; it only reads them.
        unsafe { dlsym(RTLD_DEFAULT, name.as_ptr()) as usize }
    }
}

#[cfg(not(unix))]
pub(crate) mod lookup {
    pub fn symbol(_: &core::ffi::CStr) -> usize {
        0
    }
}

/// Looks the runtime's hooks up (again: every thread that finds a slot
/// unresolved may, and they all store the same answer). Both or neither:
/// an entry recorded without its exit would leave the frame open.
#[cold]
#[inline(never)]
fn resolve() {
    let enter = lookup::symbol(c"lapse_scope_enter");
    let exit = lookup::symbol(c"lapse_scope_exit");
    let usable = enter > UNRESOLVED && exit > UNRESOLVED;
    EXIT.store(if usable { exit } else { 0 }, Relaxed);
    ENTER.store(if usable { enter } else { 0 }, Relaxed);
}

/// Runs the look-up before `main` (and before any probe that a signal
/// handler could run: `dlsym` is not async-signal-safe). A probe that runs
/// earlier still (another constructor) looks the runtime up itself.
#[cfg(target_os = "linux")]
#[used]
#[unsafe(link_section = ".init_array")]
static RESOLVE_AT_START: extern "C" fn() = resolve_at_start;

#[cfg(target_os = "linux")]
extern "C" fn resolve_at_start() {
    if ENTER.load(Relaxed) == UNRESOLVED {
        resolve();
    }
}

/// Calls `slot`'s hook with `site`, if there is a runtime.
#[inline(always)]
fn fire(slot: &AtomicUsize, site: *const u8) {
    let mut hook = slot.load(Relaxed);
    // Without lapse, this load and this branch are the probe.
    if hook != 0 {
        if hook == UNRESOLVED {
            resolve();
            hook = slot.load(Relaxed);
        }
        if hook > UNRESOLVED {
            // SAFETY: a non-zero value other than UNRESOLVED is only ever
            // stored by `resolve` (the address of the runtime's hook, which
            // has this signature) or by `install_hooks` (whose caller
            // promised the same).
            let hook: Hook = unsafe { core::mem::transmute::<usize, Hook>(hook) };
            // SAFETY: the hooks take any site address and only read it.
            unsafe { hook(site) }
        }
    }
}

/// True when the lapse runtime is loaded into this process (the program
/// runs under `lapse record`): probes record events.
pub fn runtime_loaded() -> bool {
    if ENTER.load(Relaxed) == UNRESOLVED {
        resolve();
    }
    ENTER.load(Relaxed) > UNRESOLVED
}

/// Replaces the runtime's hooks (tests of the macros record the events
/// themselves).
///
/// # Safety
/// Both functions must take any site address; they run on every probe of
/// every thread from now on, in signal handlers too.
pub unsafe fn install_hooks(enter: Hook, exit: Hook) {
    EXIT.store(exit as usize, Relaxed);
    ENTER.store(enter as usize, Relaxed);
}

/// A site's entry, recorded when the guard is made; its exit, when the
/// guard is dropped (at the end of the block holding it, by a `return`, or
/// by a panic unwinding through it, so frames stay balanced).
///
/// Not `Send`: the exit must be recorded on the thread of the entry.
#[must_use = "the exit is recorded when the guard is dropped: bind it to a local"]
pub struct Guard {
    site: *const u8,
}

impl Guard {
    /// Records the entry of `site` and returns the guard of its exit.
    #[inline(always)]
    pub fn enter<const N: usize>(site: &'static Site<N>) -> Guard {
        let site = site.address();
        fire(&ENTER, site);
        Guard { site }
    }
}

impl Drop for Guard {
    #[inline(always)]
    fn drop(&mut self) {
        fire(&EXIT, self.site);
    }
}
