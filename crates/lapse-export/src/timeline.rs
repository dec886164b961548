//! The time-ordered streams behind the timeline exports (speedscope, Chrome,
//! Firefox): instrumentation events as properly nested opens and closes,
//! off-CPU periods, and sampling's samples in time order.
//!
//! The instrumentation stream is repaired exactly as the analysis repairs it
//! (`lapse_analysis::instrument`): events naming an unknown function and
//! exits matching nothing on the stack are dropped, an exit matching a frame
//! further down closes the frames above it first, and a timestamp earlier
//! than the previous one is taken as equal to it. So a consumer that needs
//! balanced calls gets them, and its numbers agree with `lapse report`.

use lapse_data::{DataFile, Event, EventKind, FunctionId, Method, Sample, ThreadInfo, Timestamp};

/// One step of a thread's call timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Open(FunctionId),
    Close(FunctionId),
}

/// What a walk found besides the steps.
#[derive(Clone, Debug, Default)]
pub struct Walked {
    /// Timestamp of the last step (or of the thread's end, if later).
    pub last: Option<Timestamp>,
    /// Calls still open when the thread ended, outermost first.
    pub open: Vec<FunctionId>,
    /// Event chunks that did not decode (skipped, as reports skip them).
    pub bad_chunks: u64,
}

/// Every thread with a record or with events, ordered by (pid, tid): the
/// threads reports analyse.
pub fn threads(file: &DataFile) -> Vec<ThreadInfo> {
    file.all_threads()
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

/// Walks the calls of `thread` in time order, calling `f` for every open
/// and close. Calls still open at the end are closed at the thread's end
/// only when `close_open` is set; either way they are listed in the result.
pub fn walk<E>(
    file: &DataFile,
    thread: &ThreadInfo,
    close_open: bool,
    mut f: impl FnMut(Timestamp, Step) -> Result<(), E>,
) -> Result<Walked, E> {
    let known = file.functions.len();
    let mut stack: Vec<FunctionId> = Vec::new();
    let mut last: Option<Timestamp> = None;
    let mut bad_chunks = 0;
    let mut events: Vec<Event> = Vec::new();
    for chunk in file.thread_chunks(thread.pid, thread.tid) {
        if file.read_events(chunk, &mut events).is_err() {
            bad_chunks += 1;
            continue;
        }
        for e in &events {
            if e.function.0 as usize >= known {
                continue;
            }
            let ts = last.map_or(e.ts, |l| e.ts.max(l));
            last = Some(ts);
            match e.kind {
                EventKind::Enter => {
                    stack.push(e.function);
                    f(ts, Step::Open(e.function))?;
                }
                EventKind::Exit => {
                    if let Some(pos) = stack.iter().rposition(|&g| g == e.function) {
                        while stack.len() > pos {
                            if let Some(top) = stack.pop() {
                                f(ts, Step::Close(top))?;
                            }
                        }
                    }
                }
            }
        }
    }
    if let Some(end) = thread.end {
        if last.is_none_or(|l| end >= l) {
            last = Some(end);
        }
    }
    if close_open {
        if let Some(ts) = last {
            for &g in stack.iter().rev() {
                f(ts, Step::Close(g))?;
            }
        }
    }
    Ok(Walked {
        last,
        open: stack,
        bad_chunks,
    })
}

/// The periods `thread` was off the CPU (OS events of any kind), sorted and
/// with overlapping or touching periods merged: an interval "has an OS
/// event" for the merged periods exactly when it has one for the originals.
pub fn off_cpu(file: &DataFile, pid: u32, tid: u32) -> Vec<(Timestamp, Timestamp)> {
    let mut periods: Vec<(Timestamp, Timestamp)> = file
        .os_events
        .get(&(pid, tid))
        .map(|v| v.iter().map(|o| (o.from, o.to.max(o.from))).collect())
        .unwrap_or_default();
    periods.sort();
    let mut merged: Vec<(Timestamp, Timestamp)> = Vec::with_capacity(periods.len());
    for (from, to) in periods {
        match merged.last_mut() {
            Some(last) if from <= last.1 => last.1 = last.1.max(to),
            _ => merged.push((from, to)),
        }
    }
    merged
}

/// Every kept sample of a sampling recording, ordered by (pid, tid, time);
/// chunks that do not decode are skipped, as reports skip them.
pub fn samples(file: &DataFile) -> Vec<Sample> {
    if file.session.method != Method::Sampling {
        return Vec::new();
    }
    let mut all = Vec::new();
    let mut buf = Vec::new();
    for c in &file.sample_chunks {
        if file.read_samples(c, &mut buf).is_ok() {
            all.append(&mut buf);
        }
    }
    all.sort_by_key(|s| (s.pid, s.tid, s.ts));
    all
}

/// The samples of each thread, in time order, as (pid, tid, samples).
pub fn samples_by_thread(samples: &[Sample]) -> Vec<(u32, u32, &[Sample])> {
    samples
        .chunk_by(|a, b| (a.pid, a.tid) == (b.pid, b.tid))
        .filter_map(|run| run.first().map(|s| (s.pid, s.tid, run)))
        .collect()
}
