//! The session's figures as a whole (SPEC section 5's `session` object):
//! what was recorded, for how long, the totals the percentages divide by,
//! and what the recording says about itself (lost events, preemption,
//! recorder waits). Its field names are the JSON keys; reports and the
//! HTML export serialize the same [`SessionSummary`], so they cannot
//! disagree.

use lapse_data::{DataFile, OsEventKind};
use serde::Serialize;

use crate::run::{off_cpu_recorded, Analysis, InstrResult};

/// Preemption above this share of the elapsed time makes a busy machine.
pub const BUSY_SHARE: f64 = 0.2;

/// The session of an analysed recording. Fields that are `None` and marked
/// "only when" are left out of the JSON; the others are `null` there.
#[derive(Clone, Debug, Serialize)]
pub struct SessionSummary<'a> {
    pub command: &'a [String],
    pub duration_ns: u64,
    pub processes: usize,
    pub threads: usize,
    pub elapsed_inclusive_ns: u64,
    pub application_inclusive_ns: u64,
    pub samples: u64,
    pub discarded_samples: u64,
    pub sample_event: Option<&'a str>,
    pub sample_period: Option<u64>,
    pub os_events: &'a [String],
    pub probe_cost_ns: f64,
    /// Only for instrumentation: whether `probe_cost_ns` was subtracted
    /// from the values (`--compensate`) or they are raw (the default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compensated: Option<bool>,
    pub lost_events: u64,
    pub complete: bool,
    pub application_rule: Option<&'static str>,
    /// The time the recorder made the target wait (buffer hand-overs).
    pub recorder_wait_ns: Option<u64>,
    /// The CPU time the recorder itself used (user and system, all its
    /// threads; `None` when the file does not say: sampling, imports and
    /// older files).
    pub recorder_cpu_ns: Option<u64>,
    /// Only for instrumentation: see [`preempted_ns`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preempted_ns: Option<u64>,
    /// Module file name -> the probe source its events came from
    /// (`finstrument-functions`, `patched`, `libcalls`, ...; docs/report.md);
    /// empty for sampling and for files written before lapse said.
    pub probe_sources: std::collections::BTreeMap<String, String>,
    /// Only on a busy machine: see [`busy_machine`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busy_machine_share: Option<f64>,
    /// Only when some sanitizer-coverage guards fired away from their
    /// function's entry (inlined code), not counted as calls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub non_entry_guards: Option<u64>,
    /// Only when the recording paused: how long, between its start and its
    /// end (the time no value counts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused_ns: Option<u64>,
    /// Only when the program was patched at run time (no probes of its
    /// own): the functions patched at entry, and those left alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patched_functions: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unpatched_functions: Option<u64>,
    /// Only with `--off-cpu`: the selected threads' time off the CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub off_cpu_ns: Option<u64>,
    /// Only with `--off-cpu`: the number of off-CPU periods.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub off_cpu_periods: Option<u64>,
}

impl<'a> SessionSummary<'a> {
    pub fn of(file: &'a DataFile, a: &Analysis) -> SessionSummary<'a> {
        let s = &file.session;
        let end = file.end();
        let threads = match a {
            Analysis::Instr(r) => r.acc.threads.len(),
            Analysis::Sample(r) => r.analysis.threads.len().max(file.threads.len()),
        };
        let mut pids: Vec<u32> = file
            .processes
            .iter()
            .map(|p| p.pid)
            .chain(file.threads.iter().map(|t| t.pid))
            .collect();
        pids.sort_unstable();
        pids.dedup();
        let (el, app, samples) = match a {
            Analysis::Instr(r) => (
                r.session.elapsed_inclusive.to_nanos(),
                r.session.application_inclusive.to_nanos(),
                0,
            ),
            Analysis::Sample(r) => (0, 0, r.session.samples),
        };
        let footer = file.footer.clone().unwrap_or_default();
        let instr = match a {
            Analysis::Instr(r) => Some(r),
            Analysis::Sample(_) => None,
        };
        let off_cpu = match a {
            Analysis::Sample(r) if off_cpu_recorded(file) => {
                Some((r.analysis.off_cpu_ns, r.analysis.off_cpu_periods))
            }
            _ => None,
        };
        SessionSummary {
            command: &s.command,
            duration_ns: end.map_or(0, |e| e.since(s.start)),
            processes: pids.len(),
            threads,
            elapsed_inclusive_ns: el,
            application_inclusive_ns: app,
            samples,
            discarded_samples: footer.discarded_samples,
            sample_event: s.sample_event.as_deref(),
            sample_period: s.sample_period,
            os_events: &s.os_events,
            probe_cost_ns: s.probe_cost_ns,
            compensated: instr.map(|r| r.compensated),
            lost_events: footer.lost_events,
            complete: file.is_complete(),
            application_rule: a.application_rule().map(|r| r.name()),
            recorder_wait_ns: recorder_wait_ns(file),
            recorder_cpu_ns: s.recorder_cpu_ns(),
            preempted_ns: instr.map(|r| preempted_ns(file, r)),
            probe_sources: s.probe_sources(),
            busy_machine_share: instr.and_then(|r| busy_machine(file, r)),
            non_entry_guards: Some(s.non_entry_guards()).filter(|&n| n > 0),
            paused_ns: end.filter(|_| !file.paused.is_empty()).map(|e| {
                file.paused
                    .iter()
                    .map(|p| p.to.min(e).since(p.from.max(s.start)))
                    .sum()
            }),
            patched_functions: s.patching().map(|(p, _)| p),
            unpatched_functions: s.patching().map(|(_, u)| u),
            off_cpu_ns: off_cpu.map(|(ns, _)| ns),
            off_cpu_periods: off_cpu.map(|(_, n)| n),
        }
    }
}

/// The selected threads' time runnable but off the CPU (preempted), from
/// the kernel's switch records.
pub fn preempted_ns(file: &DataFile, r: &InstrResult) -> u64 {
    r.acc
        .threads
        .iter()
        .filter_map(|t| file.os_events.get(&t.key()))
        .flatten()
        .filter(|e| e.kind == OsEventKind::Preempt)
        .map(|e| e.to.since(e.from))
        .sum()
}

/// The share of the elapsed time the threads spent preempted, when it is
/// large enough ([`BUSY_SHARE`]) that elapsed time mostly measures the
/// machine's load: reports say so and rank by application time.
pub fn busy_machine(file: &DataFile, r: &InstrResult) -> Option<f64> {
    let elapsed = r.session.elapsed_inclusive.to_nanos();
    let share = preempted_ns(file, r) as f64 / elapsed.max(1) as f64;
    (share > BUSY_SHARE).then_some(share)
}

/// The time the recorder made the target wait (buffer hand-overs), which
/// the recorder removed from the threads' timelines and noted in the header.
fn recorder_wait_ns(file: &DataFile) -> Option<u64> {
    file.session.notes.iter().find_map(|n| {
        let ms = n.strip_suffix(
            " ms of waiting for the recorder (buffer hand-overs) removed from thread timelines",
        )?;
        ms.parse::<f64>().ok().map(|ms| (ms * 1e6).round() as u64)
    })
}
