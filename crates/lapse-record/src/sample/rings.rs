//! Sampling: opening the event on the target (one ring-owning event per
//! CPU, other threads' events redirected into it) and draining the rings
//! into one time-ordered batch, so that an mmap seen on one CPU is applied
//! before a sample taken just after it on another.
//!
//! With `--off-cpu`, where the kernel allows it (CAP_PERFMON, root,
//! `perf_event_paranoid` ≤ 0), the CPU samples come from one event per CPU
//! for every task rather than one per thread of the target: a per-thread
//! timer event is stopped and restarted at each of the thread's context
//! switches, which at 10,000 switches a second costs the target more than
//! the off-CPU samples themselves (BENCHMARKS.md). Samples of other
//! processes are discarded (and counted, as SPEC 1.2 says); the side
//! records then come from the per-thread off-CPU events, which write to a
//! ring of their own on each CPU.

use perf_event_open_sys::bindings as sys;

use super::attr::{self, Rate, SampleEvent};
use super::parse::SampleLayout;
use super::session::SampleSession;
use crate::linux::clock::monotonic_now;
use crate::linux::perf::{online_cpus, PerfError, PerfEvent};
use crate::linux::perf_attr::{with_side_records, without_side_records};
use crate::linux::poll::wait_readable;
use crate::linux::records::SampleIdLayout;
use crate::{CallGraph, RecordError, RecordOptions};

/// Ring size per CPU (and, with `--off-cpu` on a CPU-wide timer, as much
/// again for the target's switches and side records): 4 MiB holds about
/// 250 samples with 16 KiB stacks, a
/// quarter second of one CPU at 1 kHz, several drain intervals' worth.
pub(crate) const RING_PAGES: usize = 1024;
/// The rings of one recording and the merged, time-ordered record batch.
pub(crate) struct Rings {
    pub(crate) events: Vec<PerfEvent>,
    /// The ids of the off-CPU events (`--off-cpu`), which tell their
    /// samples from the sampling event's.
    pub(crate) off_cpu_ids: Vec<u64>,
    arena: Vec<u8>,
    index: Vec<(u64, usize, usize)>,
    scratch: Vec<u8>,
    /// Records held back for the next drain (see [`Rings::pump`]).
    carried: Vec<(u64, Vec<u8>)>,
}

/// Everything fixed about how the event is opened.
pub(crate) struct Plan {
    pub(crate) event: SampleEvent,
    pub(crate) rate: Rate,
    pub(crate) callchain: bool,
    pub(crate) inherit: bool,
    pub(crate) exclude_kernel: bool,
    /// Also sample every switch-out (`--off-cpu`).
    pub(crate) off_cpu: bool,
    /// CPU samples from one event per CPU for every task (see the top).
    pub(crate) cpu_wide: bool,
    /// Attaching, without root, to a process of another user (its uid):
    /// a refusal is then about whose process it is, not the paranoia level.
    pub(crate) foreign_owner: Option<u32>,
}

impl Plan {
    pub(crate) fn from_options(opts: &RecordOptions) -> Result<Plan, RecordError> {
        let event =
            SampleEvent::by_name(opts.event.as_deref()).map_err(RecordError::Unsupported)?;
        if opts.off_cpu && !event.time_based {
            return Err(RecordError::Unsupported(format!(
                "--off-cpu adds time off the CPU to time on it: it needs a time-based event \
                 (cpu-clock or task-clock), not `{}`",
                event.name
            )));
        }
        Ok(Plan {
            event,
            rate: Rate::choose(event, opts.rate),
            callchain: opts.call_graph == CallGraph::FramePointer,
            inherit: opts.inherit,
            exclude_kernel: false,
            off_cpu: opts.off_cpu,
            cpu_wide: opts.off_cpu,
            foreign_owner: None,
        })
    }

    /// The per-thread sampling event's attributes; with `--off-cpu` its
    /// samples carry the event id, as the off-CPU event's do.
    pub(crate) fn attr(&self, enable_on_exec: bool) -> sys::perf_event_attr {
        let mut a = attr::attr(
            self.event,
            self.rate,
            self.callchain,
            self.inherit,
            self.exclude_kernel,
            enable_on_exec,
        );
        if self.off_cpu {
            a.sample_type |= u64::from(sys::PERF_SAMPLE_ID);
        }
        a
    }

    /// The sampling event as opened: per thread, or (`cpu_wide`) one per
    /// CPU for every task, enabled at once, without side records, idle time
    /// left out.
    fn sampling_attr(&self, enable_on_exec: bool) -> sys::perf_event_attr {
        let mut a = self.attr(enable_on_exec);
        if self.cpu_wide {
            a.set_inherit(0);
            a.set_enable_on_exec(0);
            a.set_disabled(0);
            a.set_exclude_idle(1);
            without_side_records(&mut a);
        }
        a
    }

    /// The off-CPU event (`--off-cpu`), with the side records when the
    /// sampling event is CPU-wide.
    fn off_cpu_attr(&self, enable_on_exec: bool) -> sys::perf_event_attr {
        let task = self.attr(enable_on_exec);
        let mut a = attr::off_cpu_attr(&task);
        if self.cpu_wide {
            with_side_records(&mut a);
        }
        a
    }

    pub(crate) fn layouts(&self) -> (SampleLayout, SampleIdLayout) {
        let a = self.attr(false);
        (
            SampleLayout {
                callchain: self.callchain,
                user_state: !self.callchain,
                id: self.off_cpu,
            },
            SampleIdLayout::new(a.sample_type),
        )
    }
}

impl Rings {
    /// One ring-owning event per CPU for `tids[0]`, the other threads'
    /// events (and with `--off-cpu` every thread's off-CPU event)
    /// redirected into it. Kernel-mode sampling is tried first; when
    /// refused, user-mode only (which `--off-cpu` cannot do with: its
    /// samples are taken in the scheduler).
    pub(crate) fn open(
        plan: &mut Plan,
        tids: &[i32],
        enable_on_exec: bool,
    ) -> Result<Rings, RecordError> {
        let mut first = Rings::open_once(plan, tids, enable_on_exec);
        if plan.cpu_wide {
            if let Err(e) = &first {
                if e.refusal().not_allowed() {
                    // Not allowed to watch every task: per-thread CPU samples.
                    plan.cpu_wide = false;
                    first = Rings::open_once(plan, tids, enable_on_exec);
                }
            }
        }
        let refused = |e: &PerfError| e.refusal().not_allowed();
        if let (Err(e), Some(uid)) = (&first, plan.foreign_owner) {
            if refused(e) {
                return Err(RecordError::Unsupported(attr::foreign_refused(uid)));
            }
        }
        match first {
            Err(e) if refused(&e) && plan.off_cpu => {
                Err(RecordError::Unsupported(attr::off_cpu_refused(e.refusal())))
            }
            Err(e) if refused(&e) && !plan.exclude_kernel => {
                plan.exclude_kernel = true;
                Rings::open_once(plan, tids, enable_on_exec).map_err(|e| {
                    RecordError::Unsupported(attr::open_error(plan.event, e.refusal()))
                })
            }
            other => other
                .map_err(|e| RecordError::Unsupported(attr::open_error(plan.event, e.refusal()))),
        }
    }

    fn open_once(plan: &Plan, tids: &[i32], enable_on_exec: bool) -> Result<Rings, PerfError> {
        let mut events = Vec::new();
        let mut off_cpu_ids = Vec::new();
        for cpu in online_cpus() {
            let mut attr = plan.sampling_attr(enable_on_exec);
            let Some(&first) = tids.first() else {
                break;
            };
            let owner = if plan.cpu_wide { -1 } else { first };
            let leader = PerfEvent::open(&mut attr, owner, cpu, RING_PAGES)?;
            // A CPU-wide timer samples every task, each sample with its
            // stack copy: on a busy machine other processes' samples fill
            // its ring while the recorder waits for a CPU, and the
            // target's switches and side records went with them (a test
            // beside two CPU hogs lost the 200 ms a function spent
            // blocked). They get a ring of their own then.
            let mut off_leader: Option<PerfEvent> = None;
            for (i, &tid) in tids.iter().enumerate() {
                let mut attrs = Vec::with_capacity(2);
                if i > 0 && !plan.cpu_wide {
                    attrs.push(plan.sampling_attr(enable_on_exec));
                }
                if plan.off_cpu {
                    attrs.push(plan.off_cpu_attr(enable_on_exec));
                }
                for mut attr in attrs {
                    let off_cpu = attr.context_switch() != 0;
                    let owns_ring = off_cpu && plan.cpu_wide && off_leader.is_none();
                    let pages = if owns_ring { RING_PAGES } else { 0 };
                    match PerfEvent::open(&mut attr, tid, cpu, pages) {
                        Ok(e) => {
                            if off_cpu {
                                off_cpu_ids.push(e.id()?);
                            }
                            if owns_ring {
                                off_leader = Some(e);
                                continue;
                            }
                            match &off_leader {
                                Some(ring) if off_cpu => e.set_output(ring)?,
                                _ => e.set_output(&leader)?,
                            }
                            events.push(e);
                        }
                        // The thread ended meanwhile.
                        Err(e) if e.task_gone() => {}
                        Err(e) => return Err(e),
                    }
                }
            }
            events.push(leader);
            events.extend(off_leader);
        }
        Ok(Rings {
            events,
            off_cpu_ids,
            arena: Vec::new(),
            index: Vec::new(),
            scratch: Vec::new(),
            carried: Vec::new(),
        })
    }

    pub(crate) fn wait(&self, timeout_ms: i32) {
        let fds: Vec<_> = self.events.iter().map(|e| e.raw_fd()).collect();
        wait_readable(&fds, timeout_ms);
    }

    /// Drains every ring and hands the records to `session` in time order.
    ///
    /// Records stamped after the drain began may still have older siblings
    /// on their way into a ring drained earlier, so they wait for the next
    /// call (all go when `last`): that keeps an mmap on one CPU ahead of a
    /// sample taken just after it on another.
    pub(crate) fn pump(
        &mut self,
        session: &mut SampleSession<std::fs::File>,
        id_layout: &SampleIdLayout,
        last: bool,
    ) -> std::io::Result<()> {
        let horizon = if last {
            u64::MAX
        } else {
            monotonic_now().as_nanos()
        };
        self.arena.clear();
        self.index.clear();
        for (time, rec) in self.carried.drain(..) {
            self.index.push((time, self.arena.len(), rec.len()));
            self.arena.extend_from_slice(&rec);
        }
        let (arena, index) = (&mut self.arena, &mut self.index);
        for e in &mut self.events {
            e.drain(&mut self.scratch, |rec| {
                let time = record_time(rec, id_layout);
                index.push((time, arena.len(), rec.len()));
                arena.extend_from_slice(rec);
            });
        }
        // Stable: records of one ring keep their order when times tie.
        index.sort_by_key(|&(t, _, _)| t);
        for &(time, at, len) in index.iter() {
            let rec = &arena[at..at + len];
            if time < horizon {
                session.handle(rec)?;
            } else {
                self.carried.push((time, rec.to_vec()));
            }
        }
        session.flush()
    }
}

/// A record's timestamp: samples carry it after IP and TID, other records in
/// their `sample_id` trailer (0 when there is none: such records sort first).
fn record_time(rec: &[u8], id_layout: &SampleIdLayout) -> u64 {
    let kind = rec
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_ne_bytes);
    if kind == sys::PERF_RECORD_SAMPLE {
        rec.get(24..32)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_ne_bytes)
    } else {
        id_layout.parse(rec).map_or(0, |id| id.time)
    }
}
