//! The time-ordered streams behind the timeline exports (speedscope, Chrome,
//! Firefox): instrumentation events as properly nested opens and closes,
//! off-CPU periods, and sampling's samples in time order, one thread at a
//! time so that memory does not grow with the recording.
//!
//! The instrumentation stream is repaired by the analysis' own
//! [`CallStack`] (events naming an unknown function are dropped, and a
//! timestamp earlier than the previous one is taken as equal to it, as the
//! analysis does), and placed in time the way the analysis counts it: each
//! interval between two probes is shorter by the probe cost the analysis
//! removes from it, so every later timestamp moves earlier by the cost
//! removed so far on its thread (off-CPU periods move with them). So a
//! consumer that needs balanced calls gets them, and the durations it shows
//! are `lapse report`'s, to the nanosecond.

use std::collections::{BTreeMap, HashMap};

use lapse_analysis::nesting::CallStack;
use lapse_analysis::offcpu::OffCpu;
use lapse_analysis::Analysis;
use lapse_analysis::{ApplicationRule, Fine};
use lapse_data::{
    DataFile, Event, EventKind, FunctionId, Method, Sample, ThreadInfo, ThreadKey, Timestamp,
};

use crate::select::{Selection, StepFilter};

/// One step of a thread's call timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Open(FunctionId),
    Close(FunctionId),
    /// The thread's end (after the calls closed there, if any), once, when
    /// the thread has one.
    End,
}

/// When a step happened, as the analysis counts time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Moment {
    /// The step's time with the probe cost removed so far taken out
    /// (equal to `raw` when there is no compensation).
    pub at: Timestamp,
    /// The recorded time.
    pub raw: Timestamp,
    /// Application nanoseconds of the interval that ends here (under the
    /// analysis' rule).
    pub application_ns: u64,
}

/// How the analysis counted time: the probe cost it removed per interval
/// (zero unless `--compensate`) and its application rule.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timing {
    pub probe_cost: Fine,
    pub rule: ApplicationRule,
}

impl Timing {
    pub fn of(file: &DataFile, analysis: &Analysis) -> Timing {
        match analysis {
            Analysis::Instr(r) => Timing {
                probe_cost: if r.compensated {
                    Fine::from_nanos_f64(file.session.probe_cost_ns)
                } else {
                    Fine::ZERO
                },
                rule: r.rule,
            },
            Analysis::Sample(_) => Timing::default(),
        }
    }
}

/// What a walk found besides the steps.
#[derive(Clone, Debug, Default)]
pub struct Walked {
    /// Time of the last step (or of the thread's end, if later), compensated.
    pub last: Option<Timestamp>,
    /// Calls still open when the thread ended, outermost first.
    pub open: Vec<FunctionId>,
    /// Event chunks that did not decode (skipped, as reports skip them).
    pub bad_chunks: u64,
    /// The thread's off-CPU periods (merged), on the compensated timeline.
    pub off_cpu: Vec<(Timestamp, Timestamp)>,
}

/// Places a thread's boundaries on the compensated timeline, interval by
/// interval, as the analysis removes the probe cost.
struct Clock {
    timing: Timing,
    off: OffCpu,
    /// Off-CPU boundaries not placed yet (raw, in order), with where each
    /// goes in `mapped`.
    boundaries: Vec<Timestamp>,
    next_boundary: usize,
    mapped: Vec<Timestamp>,
    last: Option<Timestamp>,
    last_is_probe: bool,
    removed: Fine,
}

impl Clock {
    fn new(file: &DataFile, thread: &ThreadInfo, timing: Timing) -> Clock {
        let events = file.os_events.get(&thread.key());
        let off = OffCpu::new(events.map_or(&[][..], Vec::as_slice));
        let boundaries: Vec<Timestamp> = off.periods().iter().flat_map(|&(a, b)| [a, b]).collect();
        Clock {
            timing,
            off,
            mapped: Vec::with_capacity(boundaries.len()),
            boundaries,
            next_boundary: 0,
            last: thread.start,
            last_is_probe: false,
            removed: Fine::ZERO,
        }
    }

    /// The boundary at `ts` (a probe, or the thread's end): its moment.
    fn advance(&mut self, ts: Timestamp, is_probe: bool) -> Moment {
        let prev = self.last.unwrap_or(ts);
        let len = ts.since(prev);
        let cut = if is_probe && self.last_is_probe {
            Fine::from_nanos(len).min(self.timing.probe_cost)
        } else {
            Fine::ZERO
        };
        // Off-CPU boundaries inside this interval: the cut is taken at its start.
        let prev_at = prev.as_nanos().saturating_sub(self.removed.to_nanos());
        while let Some(&b) = self.boundaries.get(self.next_boundary) {
            if b > ts {
                break;
            }
            let into = Fine::from_nanos(b.since(prev)).saturating_sub(cut);
            self.mapped
                .push(Timestamp::from_nanos(prev_at + into.to_nanos()));
            self.next_boundary += 1;
        }
        let d = Fine::from_nanos(len) - cut;
        let application = match self.timing.rule {
            ApplicationRule::Exact => {
                d.saturating_sub(Fine::from_nanos(self.off.covered(prev, ts)))
            }
            ApplicationRule::Interval if self.off.touches(prev, ts) => Fine::ZERO,
            ApplicationRule::Interval => d,
        };
        self.removed += cut;
        self.last = Some(ts);
        self.last_is_probe = is_probe;
        Moment {
            at: Timestamp::from_nanos(ts.as_nanos().saturating_sub(self.removed.to_nanos())),
            raw: ts,
            application_ns: application.to_nanos(),
        }
    }

    /// The off-CPU periods on the compensated timeline (boundaries after the
    /// last boundary move with everything before them).
    fn off_cpu(mut self) -> Vec<(Timestamp, Timestamp)> {
        let shift = self.removed.to_nanos();
        for &b in &self.boundaries[self.next_boundary..] {
            self.mapped
                .push(Timestamp::from_nanos(b.as_nanos().saturating_sub(shift)));
        }
        self.mapped
            .chunks(2)
            .filter_map(|p| Some((p[0], *p.get(1)?)))
            .collect()
    }
}

/// Every thread with a record or with events, ordered by (pid, tid): the
/// threads reports analyse.
pub fn threads(file: &DataFile) -> Vec<ThreadInfo> {
    file.all_threads()
}

/// The thread id an export shows for `thread`: the kernel's, but for a
/// later thread under an id used before (its serial above 0) one above
/// every id the kernel hands out (`tid + serial × 2^22`), so that viewers
/// that know threads by their ids keep the two apart (#31 item 16).
pub fn shown_tid(thread: ThreadKey) -> u64 {
    u64::from(thread.tid) + (u64::from(thread.serial) << 22)
}

/// The name an export gives `thread` whose own name is `name` (may be
/// empty): for a later thread under an id used before, with the id and the
/// serial said (`worker (tid 7, again: serial 1)`).
pub fn shown_name(name: &str, thread: ThreadKey) -> String {
    if thread.serial == 0 {
        return name.to_owned();
    }
    let again = format!("tid {}, again: serial {}", thread.tid, thread.serial);
    if name.is_empty() {
        format!("thread ({again})")
    } else {
        format!("{name} ({again})")
    }
}

/// The earliest point any thread or the session starts at: the zero of
/// relative timestamps, so that none is negative.
pub fn origin(file: &DataFile) -> Timestamp {
    file.threads
        .iter()
        .filter_map(|t| t.start)
        .chain([file.session.start])
        .min()
        .unwrap_or(file.session.start)
}

/// The call stack [`walk`] follows a thread with: one for all the threads
/// of an export (it keeps a count of open frames by function id, made once).
pub type Nesting = CallStack<FunctionId>;

/// Walks the calls of `thread` in time order, calling `f` for every open
/// and close, then for the thread's end, as `sel` keeps them
/// ([`StepFilter`]). Calls still open at the end are
/// closed at the thread's end only when `close_open` is set; either way
/// they are listed in the result, and `stack` is left empty.
pub fn walk<E>(
    file: &DataFile,
    thread: &ThreadInfo,
    stack: &mut Nesting,
    close_open: bool,
    timing: Timing,
    sel: &Selection,
    mut f: impl FnMut(Moment, Step) -> Result<(), E>,
) -> Result<Walked, E> {
    let known = file.functions.len();
    let mut filter = StepFilter::new(sel);
    stack.clear();
    let mut clock = Clock::new(file, thread, timing);
    let mut last: Option<Timestamp> = None;
    let mut bad_chunks = 0;
    let mut events: Vec<Event> = Vec::new();
    let mut result = Ok(());
    let mut pause_at = 0;
    for chunk in file.thread_chunks(thread.key()) {
        if file.read_events(chunk, &mut events).is_err() {
            bad_chunks += 1;
            continue;
        }
        for e in &events {
            if e.function.0 as usize >= known {
                continue;
            }
            // Paused stretches, as the analysis has them: the calls open
            // when one begins close there, what lies inside is left out.
            let mut inside = false;
            while let Some(p) = file.paused.get(pause_at) {
                if e.ts < p.from {
                    break;
                }
                if !stack.frames().is_empty() {
                    let ts = last.map_or(p.from, |l| p.from.max(l));
                    last = Some(ts);
                    let at = clock.advance(ts, false);
                    stack.close_all(|g, _| {
                        if result.is_ok() {
                            result = filter.step(at, Step::Close(g), &mut f);
                        }
                    });
                    std::mem::replace(&mut result, Ok(()))?;
                }
                if e.ts < p.to {
                    inside = true;
                    break;
                }
                pause_at += 1;
            }
            if inside {
                continue;
            }
            let ts = last.map_or(e.ts, |l| e.ts.max(l));
            last = Some(ts);
            let at = clock.advance(ts, true);
            match e.kind {
                EventKind::Enter => {
                    stack.push(e.function);
                    filter.step(at, Step::Open(e.function), &mut f)?;
                }
                EventKind::Exit | EventKind::Unwind => {
                    // (frames closed with it take no time of their own)
                    let mut first = true;
                    let close = |g, _| {
                        if result.is_ok() {
                            let moment = if first {
                                at
                            } else {
                                Moment {
                                    application_ns: 0,
                                    ..at
                                }
                            };
                            first = false;
                            result = filter.step(moment, Step::Close(g), &mut f);
                        }
                    };
                    if e.kind == EventKind::Exit {
                        stack.exit(e.function, close);
                    } else {
                        stack.unwind(e.function, close);
                    }
                    std::mem::replace(&mut result, Ok(()))?;
                }
            }
        }
    }
    let open = stack.frames().to_vec();
    let mut end_moment = None;
    if let Some(end) = thread.end {
        if last.is_none_or(|l| end >= l) {
            last = Some(end);
            end_moment = Some(clock.advance(end, false));
        }
    }
    let last_at = end_moment.map(|m| m.at).or_else(|| {
        last.map(|l| Timestamp::from_nanos(l.as_nanos().saturating_sub(clock.removed.to_nanos())))
    });
    if close_open {
        if let Some(at) = last_at {
            let moment = Moment {
                at,
                raw: last.unwrap_or(at),
                application_ns: 0,
            };
            stack.close_all(|g, _| {
                if result.is_ok() {
                    result = filter.step(moment, Step::Close(g), &mut f);
                }
            });
            std::mem::replace(&mut result, Ok(()))?;
        }
    }
    stack.clear();
    if let Some(m) = end_moment {
        filter.step(m, Step::End, &mut f)?;
    }
    let mut off_cpu = clock.off_cpu();
    let mut last_at = last_at;
    if let Some((from, to)) = sel.window() {
        // (the window is in recorded time; these are compensated, a few
        // probe costs earlier at most)
        off_cpu.retain(|&(a, b)| b >= from && a <= to);
        for p in &mut off_cpu {
            *p = (p.0.max(from), p.1.min(to));
        }
        last_at = last_at.map(|l| l.min(to));
    }
    Ok(Walked {
        last: last_at,
        open,
        bad_chunks,
        off_cpu,
    })
}

/// The periods `thread` was off the CPU (OS events of any kind), sorted and
/// merged as the analysis reads them ([`lapse_analysis::offcpu::merged`]).
pub fn off_cpu(file: &DataFile, thread: ThreadKey) -> Vec<(Timestamp, Timestamp)> {
    file.os_events
        .get(&thread)
        .map(|v| lapse_analysis::offcpu::merged(v))
        .unwrap_or_default()
}

/// Samples held at once for a group of small threads (40 MB at 40 bytes a
/// sample): small threads are read together, so a recording of many threads
/// is not decoded once per thread. A thread larger than this is read alone.
const GROUP_SAMPLES: u64 = 1 << 20;

/// Where each thread's samples are in a sampling recording: one pass over
/// the sample chunks finds, for each thread, how many samples it has
/// and which chunks hold them, so a thread's samples can then be read
/// without holding anyone else's. Chunks that do not decode are left out,
/// as reports skip them.
#[derive(Clone, Debug)]
pub struct SampleIndex {
    /// Ordered by (pid, tid).
    threads: Vec<ThreadSamples>,
    group_samples: u64,
    /// The samples kept (the others are left out of every thread's run).
    selection: Selection,
}

impl Default for SampleIndex {
    fn default() -> SampleIndex {
        SampleIndex {
            threads: Vec::new(),
            group_samples: GROUP_SAMPLES,
            selection: Selection::all(),
        }
    }
}

#[derive(Clone, Debug)]
struct ThreadSamples {
    thread: ThreadKey,
    count: u64,
    /// Indexes into `file.sample_chunks`, ascending.
    chunks: Vec<usize>,
}

impl SampleIndex {
    /// The index of `file`'s samples that `sel` keeps; empty unless it is
    /// a sampling recording.
    pub fn new(file: &DataFile, sel: &Selection) -> SampleIndex {
        if file.session.method != Method::Sampling {
            return SampleIndex::default();
        }
        let mut by_thread: BTreeMap<ThreadKey, ThreadSamples> = BTreeMap::new();
        let mut buf = Vec::new();
        for (i, c) in file.sample_chunks.iter().enumerate() {
            if file.read_samples(c, &mut buf).is_err() {
                continue;
            }
            for s in buf.iter().filter(|s| sel.wants_sample(file, s)) {
                let t = by_thread.entry(s.key()).or_insert_with(|| ThreadSamples {
                    thread: s.key(),
                    count: 0,
                    chunks: Vec::new(),
                });
                t.count += 1;
                if t.chunks.last() != Some(&i) {
                    t.chunks.push(i);
                }
            }
        }
        SampleIndex {
            threads: by_thread.into_values().collect(),
            group_samples: GROUP_SAMPLES,
            selection: sel.clone(),
        }
    }

    /// Reads threads together while their samples add up to at most `n`
    /// (default 2^20): less memory for a smaller `n`, more passes over the
    /// chunks when threads are many.
    pub fn group_samples(mut self, n: u64) -> SampleIndex {
        self.group_samples = n;
        self
    }

    /// Every thread with at least one sample, ordered by (pid, tid).
    pub fn threads(&self) -> impl Iterator<Item = ThreadKey> + '_ {
        self.threads.iter().map(|t| t.thread)
    }

    /// Calls `f` with the samples of each thread of `order` in turn, in
    /// time order (equal timestamps in file order); a thread without
    /// samples gets an empty slice. At most one group of small threads, or
    /// one large thread, is in memory at a time.
    pub fn for_each_thread<E>(
        &self,
        file: &DataFile,
        order: &[ThreadKey],
        mut f: impl FnMut(ThreadKey, &[Sample]) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut buf = Vec::new();
        let mut rest = order;
        while !rest.is_empty() {
            // The next group: consecutive threads of `order` up to the budget.
            let mut total = 0u64;
            let mut len = 0;
            for &key in rest {
                let n = self.get(key).map_or(0, |t| t.count);
                if len > 0 && total + n > self.group_samples {
                    break;
                }
                total += n;
                len += 1;
            }
            let (group, next) = rest.split_at(len);
            rest = next;
            let mut chunks: Vec<usize> = group
                .iter()
                .filter_map(|&key| self.get(key))
                .flat_map(|t| t.chunks.iter().copied())
                .collect();
            chunks.sort_unstable();
            chunks.dedup();
            let slot: HashMap<ThreadKey, usize> =
                group.iter().enumerate().map(|(i, &key)| (key, i)).collect();
            let mut samples: Vec<Vec<Sample>> = group
                .iter()
                .map(|&key| Vec::with_capacity(self.get(key).map_or(0, |t| t.count) as usize))
                .collect();
            for &i in &chunks {
                let Some(c) = file.sample_chunks.get(i) else {
                    continue;
                };
                if file.read_samples(c, &mut buf).is_err() {
                    continue;
                }
                for s in buf.iter().filter(|s| self.selection.wants_sample(file, s)) {
                    if let Some(&k) = slot.get(&s.key()) {
                        samples[k].push(*s);
                    }
                }
            }
            for (&key, mut run) in group.iter().zip(samples) {
                // Stable: equal timestamps keep their order in the file.
                run.sort_by_key(|s| s.ts);
                f(key, &run)?;
            }
        }
        Ok(())
    }

    fn get(&self, key: ThreadKey) -> Option<&ThreadSamples> {
        self.threads
            .binary_search_by_key(&key, |t| t.thread)
            .ok()
            .map(|i| &self.threads[i])
    }
}

/// Calls `f` with the samples `sel` keeps of each sampled thread in (pid,
/// tid) order, each thread's in time order; see [`SampleIndex::for_each_thread`].
pub fn for_each_thread<E>(
    file: &DataFile,
    sel: &Selection,
    f: impl FnMut(ThreadKey, &[Sample]) -> Result<(), E>,
) -> Result<(), E> {
    let index = SampleIndex::new(file, sel);
    let order: Vec<ThreadKey> = index.threads().collect();
    index.for_each_thread(file, &order, f)
}
