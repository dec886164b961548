//! System calls as OS events (`--os-events syscall`): the kernel's
//! `raw_syscalls:sys_enter` and `raw_syscalls:sys_exit` tracepoints, one of
//! each per CPU, following the target like the switch events do (`inherit`,
//! armed at exec). Both write into one ring per CPU; every sample starts with
//! `PERF_SAMPLE_IDENTIFIER`, which tells enter from exit. The caller pairs
//! enter → exit per thread into periods (see `os.rs`).
//!
//! Tracepoints fire in kernel mode, so the events cannot exclude the kernel:
//! without CAP_PERFMON they need `kernel.perf_event_paranoid` ≤ 1, and their
//! ids are read from tracefs (see [`crate::linux::tracepoint`]).

use perf_event_open_sys::bindings as b;

use crate::linux::perf::{self, PerfEvent};
use crate::linux::records::{self, PerfRecord, SampleIdLayout};
use crate::linux::tracepoint;

/// All rings together, in bytes. A thread making a million system calls a
/// second writes 64 MB/s of samples (two 32-byte records per call); 8 MiB
/// on one CPU hold ~130 ms of that, so a recorder kept off the CPU for a
/// while by a busy machine still loses nothing.
const RINGS_BYTES: usize = 32 << 20;
/// Bounds of one ring, in pages.
const RING_PAGES_MIN: usize = 64;
const RING_PAGES_MAX: usize = 2048;

/// What the rings say, in each ring's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyscallRecord {
    /// One tracepoint sample: a thread enters (or leaves) a system call.
    Edge {
        time: u64,
        pid: u32,
        tid: u32,
        enter: bool,
    },
    /// The kernel dropped samples after `time` (the ring was full): an enter
    /// seen before must not be paired with an exit seen after.
    Gap { time: u64 },
}

pub struct SyscallEvents {
    /// The `sys_enter` events; each owns its CPU's ring.
    rings: Vec<PerfEvent>,
    /// The `sys_exit` events, writing into `rings`.
    _exits: Vec<PerfEvent>,
    enter_ids: Vec<u64>,
    exit_ids: Vec<u64>,
    /// Time of the last sample read from each ring.
    last_time: Vec<u64>,
    /// Samples the kernel dropped because a ring was full.
    pub lost: u64,
}

impl SyscallEvents {
    /// Opens the tracepoints on `pid` (disabled until it execs). The error is
    /// a sentence saying why and how to allow it, for the header and stderr.
    pub fn open(pid: i32, inherit: bool) -> Result<SyscallEvents, String> {
        let ids = tracepoint::ids("raw_syscalls", &["sys_enter", "sys_exit"])
            .map_err(|e| e.to_string())?;
        let sample_type =
            u64::from(b::PERF_SAMPLE_IDENTIFIER | b::PERF_SAMPLE_TID | b::PERF_SAMPLE_TIME);
        let mut s = SyscallEvents {
            rings: Vec::new(),
            _exits: Vec::new(),
            enter_ids: Vec::new(),
            exit_ids: Vec::new(),
            last_time: Vec::new(),
            lost: 0,
        };
        let cpus = perf::online_cpus();
        let pages = (RINGS_BYTES / 4096 / cpus.len().max(1))
            .next_power_of_two()
            .clamp(RING_PAGES_MIN, RING_PAGES_MAX);
        for cpu in cpus {
            let open = |config: u64, pages: usize| {
                let mut attr = crate::linux::perf_attr::target_attr(
                    b::PERF_TYPE_TRACEPOINT,
                    config,
                    sample_type,
                    inherit,
                );
                attr.__bindgen_anon_1.sample_period = 1;
                attr.set_exclude_hv(1);
                // Wake the recorder's poll when a ring is a quarter full.
                attr.set_watermark(1);
                attr.__bindgen_anon_2.wakeup_watermark = (pages * 4096 / 4) as u32;
                PerfEvent::open(&mut attr, pid, cpu, pages).map_err(|e| e.to_string())
            };
            let enter = open(ids[0], pages)?;
            let exit = open(ids[1], 0)?;
            exit.set_output(&enter).map_err(|e| e.to_string())?;
            s.enter_ids.push(enter.id().map_err(|e| e.to_string())?);
            s.exit_ids.push(exit.id().map_err(|e| e.to_string())?);
            s.rings.push(enter);
            s._exits.push(exit);
            s.last_time.push(0);
        }
        Ok(s)
    }

    /// The rings' descriptors, readable when a ring needs draining.
    pub fn wake_fds(&self) -> impl Iterator<Item = i32> + '_ {
        self.rings.iter().map(PerfEvent::raw_fd)
    }

    /// Hands every record in the rings to `f`, ring by ring (not merged in time).
    pub fn drain(&mut self, scratch: &mut Vec<u8>, mut f: impl FnMut(SyscallRecord)) {
        let layout = SampleIdLayout::new(0); // no sample_id_all trailers
        let (enter_ids, exit_ids) = (&self.enter_ids, &self.exit_ids);
        let mut lost = 0;
        for (ring, last_time) in self.rings.iter_mut().zip(&mut self.last_time) {
            ring.drain(scratch, |rec| match records::parse(rec, &layout) {
                Some(PerfRecord::Sample { body, .. }) => {
                    if let Some(edge) = parse_sample(body, enter_ids, exit_ids) {
                        if let SyscallRecord::Edge { time, .. } = edge {
                            *last_time = time;
                        }
                        f(edge);
                    }
                }
                Some(PerfRecord::Lost { lost: n }) => {
                    lost += n;
                    f(SyscallRecord::Gap { time: *last_time });
                }
                _ => {}
            });
        }
        self.lost += lost;
    }
}

/// `IDENTIFIER | TID | TIME`: id, pid, tid, time.
fn parse_sample(body: &[u8], enter_ids: &[u64], exit_ids: &[u64]) -> Option<SyscallRecord> {
    let mut r = records::Reader::new(body, 0);
    let (id, pid, tid, time) = (r.u64()?, r.u32()?, r.u32()?, r.u64()?);
    let enter = if enter_ids.contains(&id) {
        true
    } else if exit_ids.contains(&id) {
        false
    } else {
        return None;
    };
    Some(SyscallRecord::Edge {
        time,
        pid,
        tid,
        enter,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_told_apart_by_their_identifier() {
        let mut body = Vec::new();
        body.extend_from_slice(&7u64.to_ne_bytes());
        body.extend_from_slice(&10u32.to_ne_bytes());
        body.extend_from_slice(&11u32.to_ne_bytes());
        body.extend_from_slice(&500u64.to_ne_bytes());
        let edge = parse_sample(&body, &[3], &[7]);
        assert_eq!(
            edge,
            Some(SyscallRecord::Edge {
                time: 500,
                pid: 10,
                tid: 11,
                enter: false
            })
        );
        assert_eq!(parse_sample(&body, &[3], &[4]), None, "unknown id");
        assert_eq!(parse_sample(&body[..12], &[7], &[]), None, "short");
    }
}
