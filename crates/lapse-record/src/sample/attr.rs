//! Sampling: which perf event to sample on, how its attributes are set, and
//! what to tell the user when the kernel refuses it.

use perf_event_open_sys::bindings as sys;

use super::parse::regs;
use crate::linux::perf::OpenRefusal;
use crate::linux::perf_attr::{use_monotonic_clock, with_side_records, without_side_records};
use crate::SampleRate;

/// Bytes of user stack the kernel copies per sample. 16 KiB (perf's default
/// is 8 KiB) keeps deep optimised stacks whole at a cost the benchmark shows
/// to be small at 1 kHz.
pub(crate) const STACK_COPY_BYTES: u32 = 16 * 1024;

/// Most entries of a kernel callchain (`--call-graph fp`), context markers
/// included; a user chain this long was cut.
pub(crate) const CALLCHAIN_MAX: u16 = 127;

/// A sampling event by its `perf` name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SampleEvent {
    pub(crate) name: &'static str,
    type_: u32,
    config: u64,
    /// The period is in nanoseconds (cpu-clock, task-clock).
    pub(crate) time_based: bool,
    pub(crate) hardware: bool,
}

const EVENTS: &[SampleEvent] = &[
    sw("cpu-clock", sys::PERF_COUNT_SW_CPU_CLOCK, true),
    sw("task-clock", sys::PERF_COUNT_SW_TASK_CLOCK, true),
    sw("page-faults", sys::PERF_COUNT_SW_PAGE_FAULTS, false),
    sw(
        "context-switches",
        sys::PERF_COUNT_SW_CONTEXT_SWITCHES,
        false,
    ),
    hw("cycles", sys::PERF_COUNT_HW_CPU_CYCLES),
    hw("instructions", sys::PERF_COUNT_HW_INSTRUCTIONS),
    hw("cache-misses", sys::PERF_COUNT_HW_CACHE_MISSES),
    hw("branch-misses", sys::PERF_COUNT_HW_BRANCH_MISSES),
];

const fn sw(name: &'static str, config: u32, time_based: bool) -> SampleEvent {
    SampleEvent {
        name,
        type_: sys::PERF_TYPE_SOFTWARE,
        config: config as u64,
        time_based,
        hardware: false,
    }
}

const fn hw(name: &'static str, config: u32) -> SampleEvent {
    SampleEvent {
        name,
        type_: sys::PERF_TYPE_HARDWARE,
        config: config as u64,
        time_based: false,
        hardware: true,
    }
}

impl SampleEvent {
    /// The event called `name` (`cpu-clock` when `None`); accepts perf's aliases.
    pub(crate) fn by_name(name: Option<&str>) -> Result<SampleEvent, String> {
        let wanted = match name.unwrap_or("cpu-clock") {
            "faults" => "page-faults",
            "cs" => "context-switches",
            "cpu-cycles" => "cycles",
            other => other,
        };
        EVENTS
            .iter()
            .copied()
            .find(|e| e.name == wanted)
            .ok_or_else(|| {
                let known: Vec<&str> = EVENTS.iter().map(|e| e.name).collect();
                format!(
                    "unknown sampling event `{wanted}` (known: {})",
                    known.join(", ")
                )
            })
    }
}

/// How often to sample: every `Period` events, or `Frequency` times a second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rate {
    Period(u64),
    Frequency(u64),
}

impl Rate {
    /// Time-based events always get a fixed period (1e9 / Hz ns), so that
    /// every sample stands for the same, known time.
    pub(crate) fn choose(event: SampleEvent, rate: SampleRate) -> Rate {
        if let Some(p) = rate.events() {
            return Rate::Period(p);
        }
        let hz = rate.hz().unwrap_or(SampleRate::DEFAULT_HZ);
        if event.time_based {
            Rate::Period(1_000_000_000 / hz)
        } else {
            Rate::Frequency(hz)
        }
    }

    pub(crate) fn fixed_period(self) -> Option<u64> {
        match self {
            Rate::Period(p) => Some(p),
            Rate::Frequency(_) => None,
        }
    }
}

/// Attributes of the sampling event, with the side records (mmap2, comm,
/// fork/exit) that keep processes and modules right, on CLOCK_MONOTONIC.
pub(crate) fn attr(
    event: SampleEvent,
    rate: Rate,
    callchain: bool,
    inherit: bool,
    exclude_kernel: bool,
    enable_on_exec: bool,
) -> sys::perf_event_attr {
    let mut a = sys::perf_event_attr {
        type_: event.type_,
        size: std::mem::size_of::<sys::perf_event_attr>() as u32,
        config: event.config,
        ..Default::default()
    };
    let mut sample_type = sys::PERF_SAMPLE_IP
        | sys::PERF_SAMPLE_TID
        | sys::PERF_SAMPLE_TIME
        | sys::PERF_SAMPLE_CPU
        | sys::PERF_SAMPLE_PERIOD;
    if callchain {
        sample_type |= sys::PERF_SAMPLE_CALLCHAIN;
        a.set_exclude_callchain_kernel(1);
        a.sample_max_stack = CALLCHAIN_MAX;
    } else {
        sample_type |= sys::PERF_SAMPLE_REGS_USER | sys::PERF_SAMPLE_STACK_USER;
        a.sample_regs_user = regs::MASK;
        a.sample_stack_user = STACK_COPY_BYTES;
    }
    a.sample_type = sample_type as u64;
    match rate {
        Rate::Period(p) => a.__bindgen_anon_1.sample_period = p,
        Rate::Frequency(hz) => {
            a.set_freq(1);
            a.__bindgen_anon_1.sample_freq = hz;
        }
    }
    a.set_disabled(u64::from(enable_on_exec));
    a.set_enable_on_exec(u64::from(enable_on_exec));
    a.set_inherit(u64::from(inherit));
    a.set_exclude_kernel(u64::from(exclude_kernel));
    a.set_exclude_hv(1);
    with_side_records(&mut a);
    a.set_sample_id_all(1);
    use_monotonic_clock(&mut a);
    // Wake the reader once a fair share of the ring is full, not per sample.
    a.set_watermark(1);
    a.__bindgen_anon_2.wakeup_watermark = 256 * 1024;
    a
}

/// The off-CPU event (`--off-cpu`) beside a sampling event `sampling`: a
/// sample at every context switch of the target's threads, taken as the
/// thread is switched out, with the same sample layout (so the same user
/// stack capture and `sample_id` trailer), plus the kernel's switch records
/// (`context_switch`), whose switch-in ends each period. The side records
/// (mmap, comm, fork/exit) come from the per-thread sampling event, unless
/// that one is CPU-wide (see `rings`).
///
/// The `context-switches` software event fires in the scheduler, in kernel
/// mode: it needs kernel-mode events allowed (`exclude_kernel` off).
pub(crate) fn off_cpu_attr(sampling: &sys::perf_event_attr) -> sys::perf_event_attr {
    let mut a = *sampling;
    a.type_ = sys::PERF_TYPE_SOFTWARE;
    a.config = u64::from(sys::PERF_COUNT_SW_CONTEXT_SWITCHES);
    a.set_freq(0);
    a.__bindgen_anon_1.sample_period = 1;
    without_side_records(&mut a);
    a.set_context_switch(1);
    a
}

/// One line saying why `--off-cpu` cannot be had here and what to change.
pub(crate) fn off_cpu_refused(why: OpenRefusal) -> String {
    let errno_name = match why {
        OpenRefusal::NotAllowed { errno_name } => errno_name,
        _ => "EPERM",
    };
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into());
    format!(
        "--off-cpu: perf_event_open was refused ({}; kernel.perf_event_paranoid = {paranoid}): \
         off-CPU stacks are taken in the kernel's scheduler, which needs kernel-mode events: \
         run `sysctl kernel.perf_event_paranoid=1`, give lapse CAP_PERFMON, or record without --off-cpu",
        errno_name
    )
}

/// One line for a refusal to watch another user's process: no paranoia
/// level allows it, only privileges do.
pub(crate) fn foreign_refused(owner_uid: u32) -> String {
    format!(
        "perf_event_open was refused: the process belongs to another user (uid {owner_uid}); \
         watching another user's process needs root, CAP_PERFMON, or CAP_SYS_PTRACE \
         (kernel.perf_event_paranoid does not change that)"
    )
}

/// One line saying why `perf_event_open` failed for `event` and what to change.
pub(crate) fn open_error(event: SampleEvent, why: OpenRefusal) -> String {
    match why {
        OpenRefusal::NotAllowed { errno_name } => {
            let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
                .map(|s| s.trim().to_owned())
                .unwrap_or_else(|_| "unknown".into());
            format!(
                "perf_event_open was refused ({}; kernel.perf_event_paranoid = {paranoid}): \
                 run `sysctl kernel.perf_event_paranoid=1` (or 2 for user-space only), \
                 give lapse CAP_PERFMON, or, in a container, allow perf_event_open in its seccomp profile",
                errno_name
            )
        }
        OpenRefusal::NoPerfEvents => {
            "perf_event_open is not available: the kernel has no perf events \
                         support or a seccomp filter blocks the system call"
                .into()
        }
        OpenRefusal::NoSuchEvent(_) if event.hardware => format!(
            "event `{}` is not supported on this machine (no hardware performance counters, \
             as is usual in virtual machines); use --event cpu-clock or task-clock",
            event.name
        ),
        OpenRefusal::NoSuchEvent(errno) | OpenRefusal::Other(errno) => format!(
            "perf_event_open for `{}` failed: {}",
            event.name,
            std::io::Error::from_raw_os_error(errno)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linux::perf_attr::{period_or_frequency, uses_monotonic_clock};

    #[test]
    fn names_and_rates() {
        let cpu = SampleEvent::by_name(None).expect("default event");
        assert_eq!(cpu.name, "cpu-clock");
        let hz = |n| SampleRate::frequency(n).expect("not 0");
        let every = |n| SampleRate::period(n).expect("not 0");
        assert_eq!(
            Rate::choose(cpu, SampleRate::DEFAULT),
            Rate::Period(1_000_000)
        );
        assert_eq!(Rate::choose(cpu, hz(250)), Rate::Period(4_000_000));
        let pf = SampleEvent::by_name(Some("faults")).expect("alias");
        assert_eq!(Rate::choose(pf, SampleRate::DEFAULT), Rate::Frequency(1000));
        assert_eq!(Rate::choose(pf, every(10)), Rate::Period(10));
        assert!(SampleEvent::by_name(Some("bogus")).is_err());
        let cycles = SampleEvent::by_name(Some("cycles")).expect("hardware event");
        let no_counters = OpenRefusal::NoSuchEvent(2); // (ENOENT)
        assert!(open_error(cycles, no_counters).contains("not supported"));
        assert!(open_error(cpu, no_counters).contains("No such file"));
        let eacces = OpenRefusal::NotAllowed {
            errno_name: "EACCES",
        };
        assert!(open_error(cpu, eacces).contains("perf_event_paranoid"));
        assert!(off_cpu_refused(eacces).contains("EACCES"));
        let no_perf = open_error(cycles, OpenRefusal::NoPerfEvents);
        assert!(no_perf.contains("not available"), "{no_perf}");
    }

    #[test]
    fn dwarf_and_fp_attributes() {
        let cpu = SampleEvent::by_name(None).expect("default event");
        let base = (sys::PERF_SAMPLE_IP
            | sys::PERF_SAMPLE_TID
            | sys::PERF_SAMPLE_TIME
            | sys::PERF_SAMPLE_CPU
            | sys::PERF_SAMPLE_PERIOD) as u64;
        let user = (sys::PERF_SAMPLE_REGS_USER | sys::PERF_SAMPLE_STACK_USER) as u64;
        let dwarf = attr(cpu, Rate::Period(1_000_000), false, true, false, true);
        assert_eq!(dwarf.sample_type, base | user);
        assert_eq!(dwarf.sample_regs_user, regs::MASK);
        assert!((8192..=16384).contains(&dwarf.sample_stack_user));
        assert_eq!(period_or_frequency(&dwarf), 1_000_000);
        assert_eq!(
            (dwarf.inherit(), dwarf.enable_on_exec(), dwarf.disabled()),
            (1, 1, 1)
        );
        assert_eq!((dwarf.mmap2(), dwarf.comm(), dwarf.task()), (1, 1, 1));
        assert!(uses_monotonic_clock(&dwarf));

        let fp = attr(cpu, Rate::Frequency(1000), true, false, true, false);
        assert_eq!(fp.sample_type, base | sys::PERF_SAMPLE_CALLCHAIN as u64);
        assert_eq!((fp.freq(), fp.inherit(), fp.exclude_kernel()), (1, 0, 1));
        assert_eq!((fp.enable_on_exec(), fp.disabled()), (0, 0));

        // The off-CPU event: every switch, the same layout, switch records,
        // no side records of its own.
        let off = off_cpu_attr(&dwarf);
        assert_eq!(off.type_, sys::PERF_TYPE_SOFTWARE);
        assert_eq!(off.config, sys::PERF_COUNT_SW_CONTEXT_SWITCHES as u64);
        assert_eq!(period_or_frequency(&off), 1);
        assert_eq!((off.freq(), off.context_switch()), (0, 1));
        assert_eq!((off.mmap2(), off.comm(), off.task()), (0, 0, 0));
        assert_eq!(off.sample_type, dwarf.sample_type);
        assert_eq!(off.sample_stack_user, dwarf.sample_stack_user);
        assert_eq!((off.inherit(), off.enable_on_exec()), (1, 1));
    }
}
