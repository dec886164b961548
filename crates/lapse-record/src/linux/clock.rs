//! The clocks: CLOCK_MONOTONIC (the file's clock), the wall clock, and the
//! raw tick counter the runtime stamps events with. Converting the runtime's
//! ticks is the instrumentation method's (`instrument/tick_clock.rs`).

use lapse_data::Timestamp;

pub fn monotonic_now() -> Timestamp {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec pointer; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    Timestamp::from_nanos(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

pub fn realtime_unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The same counter the runtime reads (`rdtsc` / `cntvct_el0`).
#[inline]
pub fn ticks_now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc is available on every x86-64 CPU.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(target_arch = "aarch64")]
    {
        let v: u64;
        // SAFETY: reading the virtual counter is allowed at EL0 on Linux.
        unsafe { core::arch::asm!("mrs {}, cntvct_el0", out(reg) v) };
        v
    }
}

/// A (ticks, CLOCK_MONOTONIC nanoseconds) pair: the one read closest
/// together out of a few tries.
pub fn tick_anchor() -> (u64, u64) {
    let mut best = (u64::MAX, 0, 0);
    for _ in 0..7 {
        let t0 = ticks_now();
        let ns = monotonic_now().as_nanos();
        let t1 = ticks_now();
        if t1.wrapping_sub(t0) < best.0 {
            best = (t1.wrapping_sub(t0), t0 + (t1.wrapping_sub(t0)) / 2, ns);
        }
    }
    (best.1, best.2)
}
