//! Building `perf_event_attr`s: the pieces every event of a recording shares
//! (the clock its records are stamped with, the side records that keep
//! processes and modules right, being armed at the target's exec), and safe
//! reads of what the bindings keep in unions. What to sample and how often
//! is the method's choice (`sample/attr.rs`, `instrument/os.rs`).

use perf_event_open_sys::bindings::perf_event_attr;

use super::perf::new_attr;

/// Stamps the event's records with CLOCK_MONOTONIC: the clock of every
/// timestamp in a recording (the runtime's ticks are converted to it).
pub fn use_monotonic_clock(a: &mut perf_event_attr) {
    a.set_use_clockid(1);
    a.clockid = libc::CLOCK_MONOTONIC;
}

/// Whether [`use_monotonic_clock`] was applied to `a`.
pub fn uses_monotonic_clock(a: &perf_event_attr) -> bool {
    a.use_clockid() == 1 && a.clockid == libc::CLOCK_MONOTONIC
}

/// The sample period `a` asks for, or its frequency when `freq` is set
/// (the kernel keeps both in one word).
pub fn period_or_frequency(a: &perf_event_attr) -> u64 {
    // SAFETY: both members of the union are a u64; either reading is valid.
    unsafe { a.__bindgen_anon_1.sample_period }
}

/// Asks for the side records that keep processes, threads and modules
/// right: executable mappings, names (and exec), forks and exits.
pub fn with_side_records(a: &mut perf_event_attr) {
    a.set_mmap(1);
    a.set_mmap2(1);
    a.set_comm(1);
    a.set_comm_exec(1);
    a.set_task(1);
}

/// The opposite of [`with_side_records`]: another event of the recording
/// already asks for them.
pub fn without_side_records(a: &mut perf_event_attr) {
    a.set_mmap(0);
    a.set_mmap2(0);
    a.set_comm(0);
    a.set_comm_exec(0);
    a.set_task(0);
}

/// An event on the target's OS activity: armed at the target's exec,
/// following its children when `inherit`, stamped with CLOCK_MONOTONIC (the
/// clock the runtime's ticks are converted to).
pub fn target_attr(type_: u32, config: u64, sample_type: u64, inherit: bool) -> perf_event_attr {
    let mut attr = new_attr();
    attr.type_ = type_;
    attr.config = config;
    attr.sample_type = sample_type;
    attr.set_disabled(1);
    attr.set_enable_on_exec(1);
    attr.set_inherit(u64::from(inherit));
    use_monotonic_clock(&mut attr);
    attr
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_events_wait_for_the_exec_on_the_monotonic_clock() {
        let a = target_attr(1, 2, 3, true);
        assert_eq!((a.type_, a.config, a.sample_type), (1, 2, 3));
        assert_eq!((a.disabled(), a.enable_on_exec(), a.inherit()), (1, 1, 1));
        assert!(uses_monotonic_clock(&a));
        assert!(!uses_monotonic_clock(&new_attr()));
        let mut b = a;
        with_side_records(&mut b);
        assert_eq!((b.mmap2(), b.comm(), b.task()), (1, 1, 1));
        without_side_records(&mut b);
        assert_eq!(
            (b.mmap(), b.mmap2(), b.comm(), b.comm_exec(), b.task()),
            (0, 0, 0, 0, 0)
        );
    }
}
