//! The driver: runs the analysis over a data file as a [`Query`] says and
//! returns its values ([`Analysis`]), which reports and exports shape.
//! Threads run in parallel (on rayon's pool), and within a thread the next
//! batch of chunks is decompressed and decoded while the current one is
//! analysed, so a single long thread still uses two cores.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use lapse_data::codec::{EventDecoder, EventLayout};
use lapse_data::{
    DataFile, EventChunkRef, Method, ModuleId, OffCpuPeriod, ThreadInfo, ThreadKey, Timestamp,
};
use rayon::prelude::*;
use regex::Regex;

use crate::instrument::{Accumulator, ApplicationRule, Config, ThreadRun};
use crate::sample::{Counts, SampleAnalysis};
use crate::tree::CallTree;
use crate::values::{FunctionStats, SessionTotals, ThreadStats};

/// A query that cannot be answered.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The time window ends before it starts.
    #[error("--to: {to} is before --from {from}")]
    WindowReversed { from: f64, to: f64 },
    /// `--from-mark`/`--to-mark` names a mark the recording does not have
    /// (after the `--from-mark`, for `--to-mark`).
    #[error("{flag} {text:?}: the recording has no such mark{after} (lapse report --view marks lists them)")]
    NoMark {
        flag: &'static str,
        text: String,
        after: &'static str,
    },
}

/// `--from-mark A --to-mark B` as `--from`/`--to` seconds since the
/// session's start: A is the first mark with that text, B the first mark
/// with its text at or after A (or after the start, without A). Marks of
/// every process count (a mark is an instant of the whole session).
pub fn mark_window(
    file: &DataFile,
    from: Option<&str>,
    to: Option<&str>,
) -> Result<(Option<f64>, Option<f64>), QueryError> {
    let start = file.session.start;
    let secs = |t: Timestamp| t.since(start) as f64 / 1e9;
    let from_at = match from {
        None => None,
        Some(text) => Some(
            file.marks
                .iter()
                .find(|m| m.text == text)
                .ok_or_else(|| QueryError::NoMark {
                    flag: "--from-mark",
                    text: text.to_owned(),
                    after: "",
                })?
                .at,
        ),
    };
    let to_at = match to {
        None => None,
        Some(text) => Some(
            file.marks
                .iter()
                .find(|m| m.text == text && from_at.is_none_or(|a| m.at >= a))
                .ok_or_else(|| QueryError::NoMark {
                    flag: "--to-mark",
                    text: text.to_owned(),
                    after: if from_at.is_some() {
                        " after the --from-mark"
                    } else {
                        ""
                    },
                })?
                .at,
        ),
    };
    Ok((from_at.map(secs), to_at.map(secs)))
}

/// What to analyse and show: SPEC section 3's filters and switches.
#[derive(Clone, Debug, Default)]
pub struct Query {
    pub pids: Vec<u32>,
    pub tids: Vec<u32>,
    pub function: Option<Regex>,
    pub module: Option<Regex>,
    /// Seconds since the session start.
    pub from_s: Option<f64>,
    pub to_s: Option<f64>,
    /// Subtract the probe cost measured at start-up from every interval
    /// between two probes (`--compensate`). Off by default: no design met
    /// SPEC 2.1's bound (docs/semantics.md), so values are raw unless asked.
    pub compensate: bool,
    /// Which part of an interval is application time.
    pub application: ApplicationRule,
    /// Build call trees (calltree, callers, callees, summary's hot path).
    pub call_tree: bool,
    /// Events (or samples) analysed so far, for a progress display.
    pub progress: Option<Arc<AtomicU64>>,
}

impl Query {
    pub fn wants_thread(&self, thread: ThreadKey) -> bool {
        (self.pids.is_empty() || self.pids.contains(&thread.pid))
            && (self.tids.is_empty() || self.tids.contains(&thread.tid))
    }

    /// `--from`/`--to` as timestamps of `file` (`None` when neither is given).
    pub fn window(&self, file: &DataFile) -> Option<(Timestamp, Timestamp)> {
        if self.from_s.is_none() && self.to_s.is_none() {
            return None;
        }
        let start = file.session.start.as_nanos();
        let at =
            |s: f64| Timestamp::from_nanos(start.saturating_add((s.max(0.0) * 1e9).round() as u64));
        Some((
            self.from_s.map_or(Timestamp::from_nanos(0), at),
            self.to_s.map_or(Timestamp::from_nanos(u64::MAX), at),
        ))
    }
}

pub struct InstrResult {
    pub acc: Accumulator,
    pub session: SessionTotals,
    /// All selected threads' call trees merged path by path (each thread's
    /// own is in `acc.trees`), when there are several: see [`Self::tree`].
    merged: Option<CallTree<FunctionStats>>,
    /// The application rule the values follow.
    pub rule: ApplicationRule,
    /// Whether the probe cost was subtracted (`--compensate`).
    pub compensated: bool,
    /// Chunks that failed to decode (damage found late).
    pub bad_chunks: u64,
}

impl InstrResult {
    /// All selected threads' call trees merged path by path (`None` when
    /// the analysis was made without call trees). With one thread, its own
    /// tree: not a copy of it (with a million distinct functions that was
    /// a hundred MiB more).
    pub fn tree(&self) -> Option<&CallTree<FunctionStats>> {
        match (&self.merged, self.acc.trees.as_slice()) {
            (Some(t), _) => Some(t),
            (None, [one]) => Some(&one.tree),
            _ => None,
        }
    }
}

pub struct SampleResult {
    /// (Boxed: it is the larger of the two methods' results by far.)
    pub analysis: Box<SampleAnalysis>,
    pub session: SessionTotals,
    /// The selected threads' call tree, when the query asked for one.
    pub tree: Option<CallTree<Counts>>,
    pub bad_chunks: u64,
}

pub enum Analysis {
    Instr(InstrResult),
    Sample(SampleResult),
}

impl Analysis {
    /// The application rule of an instrumentation analysis.
    pub fn application_rule(&self) -> Option<ApplicationRule> {
        match self {
            Analysis::Instr(r) => Some(r.rule),
            Analysis::Sample(_) => None,
        }
    }

    /// The denominators of the percentages.
    pub fn session(&self) -> &SessionTotals {
        match self {
            Analysis::Instr(r) => &r.session,
            Analysis::Sample(r) => &r.session,
        }
    }

    /// Chunks that failed to decode (their events are left out).
    pub fn bad_chunks(&self) -> u64 {
        match self {
            Analysis::Instr(r) => r.bad_chunks,
            Analysis::Sample(r) => r.bad_chunks,
        }
    }
}

/// Analyses `file` as `query` says.
pub fn analyze(file: &DataFile, query: &Query) -> Result<Analysis, QueryError> {
    if let (Some(from), Some(to)) = (query.from_s, query.to_s) {
        if to < from {
            return Err(QueryError::WindowReversed { from, to });
        }
    }
    Ok(match file.session.method {
        Method::Instrumentation => Analysis::Instr(analyze_instr(file, query)),
        Method::Sampling => Analysis::Sample(analyze_samples(file, query)),
    })
}

/// Threads to analyse: every thread with a record or with events, filtered.
fn threads(file: &DataFile, query: &Query) -> Vec<ThreadInfo> {
    let mut out = file.all_threads();
    out.retain(|t| query.wants_thread(t.key()));
    out
}

fn analyze_instr(file: &DataFile, query: &Query) -> InstrResult {
    // A function naming a module the file does not hold (damage) is put in one
    // extra slot, so no id from the file decides how much is allocated.
    let known = file.modules.len() as u32;
    let module_of: Vec<ModuleId> = file
        .functions
        .iter()
        .map(|f| {
            if f.module.0 < known {
                f.module
            } else {
                ModuleId(known)
            }
        })
        .collect();
    let config = Config {
        probe_cost_ns: file.session.probe_cost_ns,
        compensate: query.compensate,
        window: query.window(file),
        call_tree: query.call_tree,
        application: query.application,
    };
    let modules = file.modules.len() + 1;
    let threads = threads(file, query);
    let new_acc = || (Accumulator::new(&module_of, modules), 0u64);
    let (mut acc, bad_chunks) = threads
        .par_iter()
        .fold(new_acc, |(mut acc, mut bad), t| {
            let chunks: Vec<&EventChunkRef> = file.thread_chunks(t.key()).collect();
            let off = file.os_events.get(&t.key()).map_or(&[][..], Vec::as_slice);
            let inherited = file.inherited.get(&t.key()).copied().unwrap_or(0);
            let mut run = ThreadRun::new(&mut acc, &module_of, config, t.key(), t.start, off)
                .inherited(inherited)
                .paused(&file.paused);
            bad += feed_pipelined(file, &chunks, &mut run, query.progress.as_deref());
            run.finish(t.end);
            (acc, bad)
        })
        .reduce(new_acc, |(mut a, x), (b, y)| {
            a.merge(b);
            (a, x + y)
        });
    acc.finish(&module_of);
    acc.threads.sort_by_key(|t| t.key());
    let session = SessionTotals::of_threads(&acc.threads);
    acc.trees.sort_by_key(|t| t.key());
    // (one thread's tree is the merged tree as it is; no thread's, an empty one)
    let merged = (query.call_tree && acc.trees.len() != 1).then(|| {
        let mut merged = CallTree::new();
        for t in &acc.trees {
            merged.merge(&t.tree);
        }
        merged
    });
    InstrResult {
        acc,
        session,
        merged,
        rule: query.application,
        compensated: query.compensate,
        bad_chunks,
    }
}

/// Feeds a thread's chunks in order: batch n+1 is decompressed (in
/// parallel) while batch n is decoded and analysed. Decoding happens in the
/// analysing thread, event by event as the engine takes them, so decoded
/// events are never stored. Returns the number of chunks that failed to decompress or decode
/// (skipped; a chunk whose bytes stop decoding part-way has had the events
/// before that point analysed).
fn feed_pipelined(
    file: &DataFile,
    chunks: &[&EventChunkRef],
    run: &mut ThreadRun<'_>,
    progress: Option<&AtomicU64>,
) -> u64 {
    const BATCH: usize = 4;
    let decompress = |batch: &[&EventChunkRef], mut bufs: Vec<Vec<u8>>| -> Vec<(Vec<u8>, bool)> {
        bufs.resize_with(batch.len(), Vec::new);
        batch
            .par_iter()
            .zip(bufs)
            .map(|(c, mut buf)| {
                let ok = file.read_event_bytes(c, &mut buf).is_ok();
                (buf, ok)
            })
            .collect()
    };
    let mut bad = 0;
    let mut batches = chunks.chunks(BATCH);
    let mut current = batches.next().map(|b| (b, decompress(b, Vec::new())));
    let mut spare: Vec<Vec<u8>> = Vec::new();
    while let Some((batch, decompressed)) = current.take() {
        let next_batch = batches.next();
        let bufs = std::mem::take(&mut spare);
        let (next, used) = rayon::join(
            || next_batch.map(|b| (b, decompress(b, bufs))),
            || {
                let mut used = Vec::with_capacity(decompressed.len());
                for (chunk, (bytes, ok)) in batch.iter().zip(decompressed) {
                    let done = ok && feed_chunk(&bytes, chunk.layout, chunk.count as usize, run);
                    if !done {
                        bad += 1;
                    }
                    if let Some(p) = progress {
                        p.fetch_add(u64::from(chunk.count), Ordering::Relaxed);
                    }
                    used.push(bytes);
                }
                used
            },
        );
        spare = used;
        current = next;
    }
    bad
}

/// Decodes one chunk's bytes straight into the run (no event is stored);
/// `false` when they do not hold the events the chunk announces.
fn feed_chunk(bytes: &[u8], layout: EventLayout, count: usize, run: &mut ThreadRun<'_>) -> bool {
    let Some(mut decoder) = EventDecoder::new(bytes, layout, count) else {
        return false;
    };
    run.feed_iter(decoder.by_ref());
    decoder.finish().is_some()
}

fn analyze_samples(file: &DataFile, query: &Query) -> SampleResult {
    let window = query.window(file);
    let mut analysis = SampleAnalysis::default();
    let mut bad_chunks = 0;
    // A few chunks decoded in parallel at a time, then counted: memory stays
    // that of a few chunks, whatever the length of the recording.
    for batch in file.sample_chunks.chunks(16) {
        let decoded: Vec<_> = batch
            .par_iter()
            .map(|c| {
                let mut v = Vec::new();
                file.read_samples(c, &mut v).map(|()| v)
            })
            .collect();
        for chunk in decoded {
            let Ok(samples) = chunk else {
                bad_chunks += 1;
                continue;
            };
            for s in &samples {
                if !query.wants_thread(s.key()) || lapse_data::is_paused(&file.paused, s.ts) {
                    continue;
                }
                if let Some((from, to)) = window {
                    if s.ts < from || s.ts > to {
                        continue;
                    }
                }
                analysis.add(s);
            }
            if let Some(p) = &query.progress {
                p.fetch_add(samples.len() as u64, Ordering::Relaxed);
            }
        }
    }
    if off_cpu_recorded(file) {
        for p in &file.off_cpu {
            if !query.wants_thread(p.key()) {
                continue;
            }
            if file.paused.is_empty() {
                analysis.add_off_cpu(p, window);
                continue;
            }
            // (a period across a paused stretch's bound counts as its parts)
            for (from, to) in lapse_data::unpaused_parts(&file.paused, p.from, p.to) {
                analysis.add_off_cpu(&OffCpuPeriod { from, to, ..*p }, window);
            }
        }
        analysis.wall_period_ns = file
            .session
            .sample_period
            .filter(|_| file.session.sample_period_is_time);
    }
    analysis.finish(&file.stacks, &file.frames);
    let session = SessionTotals {
        samples: analysis.samples,
        ..SessionTotals::default()
    };
    let tree = query
        .call_tree
        .then(|| analysis.call_tree(&file.stacks, &file.frames, |_| true));
    SampleResult {
        analysis: Box::new(analysis),
        session,
        tree,
        bad_chunks,
    }
}

/// Thread rows of an instrumentation result, for `threads`/`processes`.
pub fn thread_stats(r: &InstrResult) -> &[ThreadStats] {
    &r.acc.threads
}

/// True for a sampling recording with off-CPU periods (`--off-cpu`; its
/// header also lists `switch` among its OS events, but a recording in
/// which no thread was ever switched out has nothing to show).
pub fn off_cpu_recorded(file: &DataFile) -> bool {
    file.session.method == Method::Sampling && !file.off_cpu.is_empty()
}
