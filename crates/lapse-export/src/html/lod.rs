//! The timeline's level-of-detail summary: per thread, a fixed number of
//! time buckets, each holding the call path that took most of its time (or
//! most of its samples) and the share of it the thread spent off the CPU.
//!
//! It is computed while the thread's events stream by ([`timeline::walk`],
//! compensated as every other view) or its samples do, with O(1) work per
//! event and memory of one bucket's paths: the page's weight depends on the
//! number of buckets, never on the number of events. A path is a row of the
//! thread's node table ([`super::model`]), so the page draws a bucket's
//! whole stack from the parent indices.

use std::convert::Infallible;

use lapse_analysis::tree::{CallTree, FrameKey, NodeId, Weight};
use lapse_data::{DataFile, FunctionId, OffCpuPeriod, Sample, StackId, ThreadInfo, Timestamp};
use serde::Serialize;

use crate::select::Selection;
use crate::timeline::{self, Step, Timing};

/// Buckets over all threads' timelines, shared out evenly.
pub const BUCKET_BUDGET: usize = 1 << 18;
/// Buckets of one thread, at most and at least.
pub const MAX_BUCKETS: usize = 16_384;
pub const MIN_BUCKETS: usize = 256;

/// Buckets per thread when there are `threads`.
pub fn buckets_per_thread(threads: usize) -> usize {
    (BUCKET_BUDGET / threads.max(1)).clamp(MIN_BUCKETS, MAX_BUCKETS)
}

/// One thread's timeline as the page holds it; times are nanoseconds since
/// the recording's origin ([`timeline::origin`]).
#[derive(Serialize, Debug, Default)]
pub(crate) struct Timeline {
    pub start: u64,
    pub end: u64,
    /// Per bucket, the node-table row of the path that dominated it (0: no
    /// function on the stack, or nothing recorded).
    pub node: Vec<u32>,
    /// Pairs `bucket, permille`: the share of the bucket spent off the CPU,
    /// for the buckets that have any.
    pub off: Vec<u32>,
    /// Sampling with `--off-cpu`: for each pair of `off`, in order, the
    /// triple `row, preempted, ns` of the off-CPU period that covered most
    /// of that bucket: the node-table row of the stack it waited in (0:
    /// none unwound), 1 when it was preempted (0: blocked), and its length.
    /// Empty otherwise (periods from OS events carry no stack).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub off_stack: Vec<u64>,
    /// Sampling with a time-based event: pairs `bucket, permille`, the
    /// share of the bucket the samples stand for (each spread over the
    /// period before it): the thread's CPU usage. Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Vec<u32>>,
}

/// A tree's children by key, for following a stream's calls down the tree
/// without changing it.
pub(crate) struct Lookup {
    start: Vec<u32>,
    children: Vec<(FrameKey, u32)>,
}

impl Lookup {
    pub fn new<W: Weight>(tree: &CallTree<W>) -> Lookup {
        let n = tree.len();
        let mut start = vec![0u32; n + 1];
        for id in tree.nodes().skip(1) {
            if let Some(p) = tree.parent(id) {
                start[p.index() + 1] += 1;
            }
        }
        for i in 1..=n {
            start[i] += start[i - 1];
        }
        let mut fill = start.clone();
        let mut children = vec![(FrameKey::Unknown, 0u32); n.saturating_sub(1)];
        for id in tree.nodes().skip(1) {
            if let (Some(p), Some(k)) = (tree.parent(id), tree.key(id)) {
                children[fill[p.index()] as usize] = (k, id.index() as u32);
                fill[p.index()] += 1;
            }
        }
        for p in 0..n {
            children[start[p] as usize..start[p + 1] as usize].sort_unstable();
        }
        Lookup { start, children }
    }

    /// The node of `key` called from `parent`, if the tree has it.
    pub fn child(&self, parent: u32, key: FrameKey) -> Option<u32> {
        let p = parent as usize;
        let range = &self.children[*self.start.get(p)? as usize..*self.start.get(p + 1)? as usize];
        range
            .binary_search_by(|(k, _)| k.cmp(&key))
            .ok()
            .map(|i| range[i].1)
    }
}

/// Time buckets being filled in time order.
struct Buckets {
    start: u64,
    width: f64,
    /// The bucket being weighed, its bounds, and each row's weight in it.
    current: usize,
    bounds: (u64, u64),
    weight: Vec<u64>,
    touched: Vec<u32>,
    node: Vec<u32>,
}

impl Buckets {
    fn new(start: u64, span: u64, n: usize, rows: usize) -> Buckets {
        let mut b = Buckets {
            start,
            width: span.max(1) as f64 / n as f64,
            current: 0,
            bounds: (0, 0),
            weight: vec![0; rows.max(1)],
            touched: Vec::new(),
            node: vec![0; n],
        };
        b.bounds = (b.bucket_start(0), b.bucket_start(1));
        b
    }

    fn index(&self, t: u64) -> usize {
        ((t.saturating_sub(self.start) as f64 / self.width) as usize).min(self.node.len() - 1)
    }

    fn bucket_start(&self, b: usize) -> u64 {
        self.start + (b as f64 * self.width).ceil() as u64
    }

    /// Adds `w` to `row` in bucket `b` (or in the current one, if `b` is
    /// before it: time only moves forward).
    fn weigh(&mut self, b: usize, row: u32, w: u64) {
        if b > self.current {
            self.settle();
            self.current = b;
            self.bounds = (self.bucket_start(b), self.bucket_start(b + 1));
        }
        let slot = &mut self.weight[row as usize];
        if *slot == 0 {
            self.touched.push(row);
        }
        *slot += w.max(1);
    }

    /// Decides the current bucket: its heaviest row (the first one to
    /// reach that weight on a tie).
    fn settle(&mut self) {
        let mut best: Option<(u64, u32)> = None;
        for &r in &self.touched {
            let w = self.weight[r as usize];
            if best.is_none_or(|(bw, _)| w > bw) {
                best = Some((w, r));
            }
            self.weight[r as usize] = 0;
        }
        self.touched.clear();
        if let Some((_, r)) = best {
            self.node[self.current] = r;
        }
    }

    /// The time `[from, to)` spent in `row`.
    fn span(&mut self, from: u64, to: u64, row: u32) {
        if to <= from {
            return;
        }
        // Most spans fall inside the current bucket: no division.
        if from >= self.bounds.0 && to <= self.bounds.1 {
            self.weigh(self.current, row, to - from);
            return;
        }
        let first = self.index(from);
        let last = self.index(to - 1);
        if first == last {
            self.weigh(first, row, to - from);
            return;
        }
        self.weigh(
            first,
            row,
            self.bucket_start(first + 1).saturating_sub(from),
        );
        // Buckets wholly inside the span are this row's alone.
        for b in first + 1..last {
            self.node[b] = row;
        }
        self.weigh(last, row, to.saturating_sub(self.bucket_start(last)));
    }

    fn finish(mut self) -> Vec<u32> {
        self.settle();
        self.node
    }
}

/// Pairs `bucket, permille` of the buckets `periods` cover.
fn covered(periods: &[(u64, u64)], start: u64, span: u64, n: usize) -> Vec<u32> {
    covered_by(periods, start, span, n).0
}

/// [`covered`], and for each of its pairs the index in `periods` of the
/// period that covered most of that bucket (the first one on a tie).
fn covered_by(periods: &[(u64, u64)], start: u64, span: u64, n: usize) -> (Vec<u32>, Vec<usize>) {
    let b = Buckets::new(start, span, n, 1);
    let mut covered = vec![0u64; n];
    // (each bucket's longest share of one period, and that period)
    let mut best = vec![(0u64, 0usize); n];
    for (p, &(from, to)) in periods.iter().enumerate() {
        let (from, to) = (from.max(start), to.min(start + span));
        if to <= from {
            continue;
        }
        let (first, last) = (b.index(from), b.index(to - 1));
        for (i, c) in covered.iter_mut().enumerate().take(last + 1).skip(first) {
            let lo = from.max(b.bucket_start(i));
            let hi = if i == last {
                to
            } else {
                to.min(b.bucket_start(i + 1))
            };
            let part = hi.saturating_sub(lo);
            *c += part;
            if part > best[i].0 {
                best[i] = (part, p);
            }
        }
    }
    let mut out = Vec::new();
    let mut by = Vec::new();
    for (i, &c) in covered.iter().enumerate() {
        let permille = ((c as f64 * 1000.0 / b.width).round() as u32).min(1000);
        if permille > 0 {
            out.extend([i as u32, permille]);
            by.push(best[i].1);
        }
    }
    (out, by)
}

/// The timeline of an instrumented thread: its calls as the analysis
/// placed them (compensated), bucketed. `elapsed_ns` is the thread's
/// elapsed inclusive time (its length on the compensated timeline);
/// `row_of` maps the thread's tree nodes to node-table rows.
#[allow(clippy::too_many_arguments)]
pub(crate) fn instrumented(
    file: &DataFile,
    thread: &ThreadInfo,
    timing: Timing,
    sel: &Selection,
    origin: Timestamp,
    elapsed_ns: u64,
    lookup: &Lookup,
    row_of: &[u32],
    n: usize,
) -> Timeline {
    let start = thread
        .start
        .or_else(|| first_event(file, thread))
        .unwrap_or(origin)
        .as_nanos();
    // The lane spans the thread's time and the paused stretches in it,
    // which count in no value but lie between its calls on the timeline.
    let elapsed_ns = elapsed_ns + paused_within(file, start, thread.end);
    let rows = row_of.iter().max().map_or(1, |&m| m as usize + 1);
    let mut buckets = Buckets::new(start, elapsed_ns, n, rows);
    let mut stack: Vec<u32> = vec![NodeId::ROOT.index() as u32];
    // Programs repeat their calls: a small direct-mapped cache of
    // (parent, function) -> child saves most of the searches.
    let mut recent = vec![(u32::MAX, FunctionId(0), 0u32); 4096];
    let mut prev = start;
    // (one stack for all the threads a worker walks: see `timeline::Nesting`)
    thread_local! {
        static NESTING: std::cell::RefCell<timeline::Nesting> = Default::default();
    }
    let mut nesting = NESTING.take();
    let walked = timeline::walk(
        file,
        thread,
        &mut nesting,
        true,
        timing,
        sel,
        |moment, step| {
            let at = moment.at.as_nanos();
            let top = *stack.last().unwrap_or(&0);
            buckets.span(prev, at, row_of.get(top as usize).copied().unwrap_or(0));
            prev = prev.max(at);
            match step {
                Step::Open(f) => {
                    let slot = &mut recent[(top.wrapping_mul(31) ^ f.0) as usize & 4095];
                    let child = if slot.0 == top && slot.1 == f {
                        slot.2
                    } else {
                        let c = lookup.child(top, FrameKey::Function(f)).unwrap_or(top);
                        *slot = (top, f, c);
                        c
                    };
                    stack.push(child);
                }
                Step::Close(_) if stack.len() > 1 => {
                    stack.pop();
                }
                Step::Close(_) | Step::End => {}
            }
            Ok::<(), Infallible>(())
        },
    );
    NESTING.set(nesting);
    let walked = match walked {
        Ok(w) => w,
        Err(e) => match e {},
    };
    let periods: Vec<(u64, u64)> = walked
        .off_cpu
        .iter()
        .map(|&(a, b)| (a.as_nanos(), b.as_nanos()))
        .collect();
    Timeline {
        start: start.saturating_sub(origin.as_nanos()),
        end: (start + elapsed_ns).saturating_sub(origin.as_nanos()),
        off: covered(&periods, start, elapsed_ns, n),
        off_stack: Vec::new(),
        cpu: None,
        node: buckets.finish(),
    }
}

/// Whether a sample's weight is nanoseconds of CPU time (cpu-clock and
/// task-clock, whether sampled by period or by frequency).
fn time_based(file: &DataFile) -> bool {
    crate::period_ns(file).is_some()
        || matches!(
            file.session.sample_event.as_deref(),
            Some("cpu-clock" | "task-clock")
        )
}

/// The timestamp of a thread's first event, when it has no start of its own.
fn first_event(file: &DataFile, thread: &ThreadInfo) -> Option<Timestamp> {
    let chunk = file.thread_chunks(thread.key()).next()?;
    let mut events = Vec::new();
    file.read_events(chunk, &mut events).ok()?;
    events.first().map(|e| e.ts)
}

/// The timeline of a sampled thread, `samples` in time order. With a
/// time-based event (cpu-clock, task-clock) each sample stands for the CPU
/// time of its period just before it, so it is spread over that time (cut
/// at the previous sample, at most): a bucket goes to the path that ran
/// most of it, and the share of it covered is the thread's CPU usage there,
/// as the Firefox Profiler draws it. A sample 1 ms apart in 20 µs buckets
/// then fills 50 buckets, not 1 (a timeline of points was blank almost
/// everywhere). Other events count each sample once in its bucket.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sampled(
    file: &DataFile,
    thread: &ThreadInfo,
    samples: &[Sample],
    sel: &Selection,
    origin: Timestamp,
    lookup: &Lookup,
    row_of: &[u32],
    n: usize,
) -> Timeline {
    let spread = time_based(file);
    // (a sample's period lies before it: the thread ran from there)
    let first = samples.first().map(|s| {
        if spread {
            Timestamp::from_nanos(s.ts.as_nanos().saturating_sub(s.weight))
        } else {
            s.ts
        }
    });
    let last = samples.last().map(|s| s.ts);
    let start = thread
        .start
        .into_iter()
        .chain(first)
        .min()
        .unwrap_or(origin);
    let end = thread.end.into_iter().chain(last).max().unwrap_or(start);
    let span = end.since(start).max(1);
    let rows = row_of.iter().max().map_or(1, |&m| m as usize + 1);
    let mut buckets = Buckets::new(start.as_nanos(), span, n, rows);
    let mut rows_of_stack = std::collections::HashMap::new();
    let unknown = lookup
        .child(0, FrameKey::Unknown)
        .map_or(0, |u| row_of[u as usize]);
    // The node-table row of a stack (samples' and off-CPU periods' alike:
    // the tree holds both).
    let mut row_of_stack = |stack: Option<StackId>| match stack {
        None => unknown,
        Some(stack) => *rows_of_stack.entry(stack).or_insert_with(|| {
            let keys = sel.sample_keys(file, Some(stack)).unwrap_or_default();
            if keys == [FrameKey::Unknown] {
                return unknown;
            }
            let mut node = 0u32;
            for k in keys {
                match lookup.child(node, k) {
                    Some(c) => node = c,
                    None => break,
                }
            }
            row_of.get(node as usize).copied().unwrap_or(0)
        }),
    };
    let mut ran: Vec<(u64, u64)> = Vec::new();
    let mut prev = start.as_nanos();
    for s in samples {
        let row = row_of_stack(s.stack);
        let at = s.ts.as_nanos();
        if spread {
            let from = at.saturating_sub(s.weight).max(prev);
            buckets.span(from, at, row);
            if at > from {
                ran.push((from, at));
            }
            prev = prev.max(at);
        } else {
            let b = buckets.index(at);
            buckets.weigh(b, row, 1);
        }
    }
    // Off-CPU periods: recorded with --off-cpu (sampling's own), else OS events.
    // Each bucket's longest one says what the thread waited in there.
    let key = thread.key();
    let recorded: Vec<&OffCpuPeriod> = file
        .off_cpu
        .iter()
        .filter(|p| p.key() == key && sel.in_window(p.from))
        .collect();
    let mut periods: Vec<(u64, u64)> = recorded
        .iter()
        .map(|p| (p.from.as_nanos(), p.to.as_nanos()))
        .collect();
    if periods.is_empty() {
        periods = timeline::off_cpu(file, key)
            .iter()
            .map(|&(a, b)| (a.as_nanos(), b.as_nanos()))
            .collect();
    }
    let (off, by) = covered_by(&periods, start.as_nanos(), span, n);
    let mut off_stack = Vec::new();
    if !recorded.is_empty() {
        let mut rows: Vec<Option<u32>> = vec![None; recorded.len()];
        for i in by {
            let p = recorded[i];
            let row = *rows[i].get_or_insert_with(|| row_of_stack(p.stack));
            off_stack.extend([u64::from(row), u64::from(p.preempted), p.len_ns()]);
        }
    }
    Timeline {
        start: start.since(origin),
        end: end.since(origin),
        off,
        off_stack,
        cpu: spread.then(|| covered(&ran, start.as_nanos(), span, n)),
        node: buckets.finish(),
    }
}

/// How much of the paused stretches lies in a thread's life from `start`
/// (ns) to `end` (the recording's end when it has none).
fn paused_within(file: &DataFile, start: u64, end: Option<Timestamp>) -> u64 {
    let end = end.or(file.end()).map_or(u64::MAX, |e| e.as_nanos());
    file.paused
        .iter()
        .map(|p| {
            let (a, b) = (p.from.as_nanos().max(start), p.to.as_nanos().min(end));
            b.saturating_sub(a)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_goes_to_the_path_that_took_most_of_it() {
        // 4 buckets of 10 ns over [100, 140).
        let mut b = Buckets::new(100, 40, 4, 4);
        b.span(100, 103, 1);
        b.span(103, 110, 2);
        b.span(110, 135, 3); // all of bucket 1, half of 2 ... and 3's first half
        b.span(135, 140, 1);
        assert_eq!(b.finish(), [2, 3, 3, 3]);
    }

    #[test]
    fn off_cpu_shares_are_per_bucket() {
        assert_eq!(
            covered(&[(105, 125)], 100, 40, 4),
            [0, 500, 1, 1000, 2, 500]
        );
    }

    #[test]
    fn each_off_cpu_bucket_names_the_period_that_covered_most_of_it() {
        // 4 buckets of 10 ns over [100, 140): period 0 covers 3 ns of
        // bucket 0, period 1 its last 7 and all of bucket 1; period 2
        // half of bucket 2, period 3 the other half (a tie: the first).
        let periods = [(100, 103), (103, 120), (120, 125), (125, 130)];
        assert_eq!(
            covered_by(&periods, 100, 40, 4),
            (vec![0, 1000, 1, 1000, 2, 1000], vec![1, 1, 2])
        );
    }
}
