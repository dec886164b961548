//! The Firefox Profiler's processed profile format (profiler.firefox.com,
//! "Load a profile from file"), written as a stream by `processed` so
//! that memory does not grow with the number of events or samples.
//!
//! - Sampling: every kept sample in time order on its thread, with its stack
//!   (inline frames expanded), weight 1, and the period as CPU delta when the
//!   event counts time.
//! - Instrumentation: the Firefox Profiler reads samples, not calls, so
//!   every interval of SPEC 2.1 becomes one sample at the interval's start,
//!   holding the interval's stack and weighing its length in microseconds
//!   (the profile's interval is 1 µs, so the call tree's running times are
//!   real times). Lengths are rounded with a carried remainder, so a thread's
//!   weights add up to its elapsed time. A sample's CPU delta is the
//!   application time of the interval before it (zero when the thread was
//!   off the CPU), which the profiler draws as the CPU usage graph.
//!
//! Every module gets a category of its own, so the flame graph is coloured by
//! library; instrumentation's off-CPU periods are interval markers named
//! `off-CPU` in the marker chart.

mod processed;

use std::collections::HashMap;
use std::io::{self, Write};

use lapse_analysis::Analysis;
use lapse_data::{DataFile, FunctionId, Method, StackId, ThreadInfo, ThreadKey, Timestamp};

use lapse_analysis::tree::FrameKey;

use crate::select::Selection;
use crate::timeline::{self, SampleIndex, Step};
use crate::{ExportError, Format};
use processed::{Document, Meta, ProfileNs, ThreadHeader, ThreadWriter};

const OFF_CPU: &str = "off-CPU";

/// Timestamps are relative to the session start (the profile's reference).
fn at_time(file: &DataFile, ts: Timestamp) -> ProfileNs {
    ProfileNs(ts.since(file.session.start))
}

/// The profiler's thread list for `threads` (ordered by pid, tid): a
/// process is named by its command and starts with its first thread.
fn headers(file: &DataFile, threads: &[ThreadInfo]) -> Vec<(ThreadHeader, usize)> {
    let mut processes: HashMap<u32, (String, ProfileNs)> = HashMap::new();
    let mut out: Vec<(ThreadHeader, usize)> = threads
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let start = at_time(file, t.start.unwrap_or(file.session.start));
            let (process_name, process_start) = processes
                .entry(t.pid)
                .or_insert_with(|| {
                    let name = file
                        .processes
                        .iter()
                        .find(|p| p.pid == t.pid)
                        .map(|p| p.command.join(" "))
                        .filter(|c| !c.is_empty())
                        .unwrap_or_else(|| format!("pid {}", t.pid));
                    (name, start)
                })
                .clone();
            let name = if t.name.is_empty() && t.serial == 0 {
                format!("thread {}", t.tid)
            } else {
                timeline::shown_name(&t.name, t.key())
            };
            let header = ThreadHeader {
                pid: t.pid,
                tid: t.tid,
                name,
                process_name,
                process_start,
                start,
                end: t.end.map(|e| at_time(file, e)),
            };
            (header, i)
        })
        .collect();
    out.sort_by(|a, b| processed::thread_order(&a.0, &b.0));
    out
}

/// The frame of `key` in `thread`, cached per key.
fn frame(
    doc: &mut Document<'_>,
    thread: &mut ThreadWriter,
    cache: &mut HashMap<FrameKey, u32>,
    file: &DataFile,
    key: FrameKey,
) -> u32 {
    if let Some(&f) = cache.get(&key) {
        return f;
    }
    let f = thread.frame(doc, file, &key.label(file), key.module(file));
    cache.insert(key, f);
    f
}

/// The program's marks on thread `t`: instant markers named by their text.
fn thread_marks<'f>(
    file: &'f DataFile,
    sel: &Selection,
    t: ThreadKey,
) -> Vec<(ProfileNs, &'f str)> {
    // (the id's later threads, serial above 0, have none: marks carry no serial)
    if t.serial > 0 {
        return Vec::new();
    }
    sel.marks(file)
        .filter(|m| m.pid == t.pid && m.tid == t.tid)
        .map(|m| (at_time(file, m.at), m.text.as_str()))
        .collect()
}

fn instrumentation(
    file: &DataFile,
    timing: timeline::Timing,
    sel: &Selection,
    doc: &mut Document<'_>,
) -> io::Result<()> {
    let threads = sel.threads(file);
    let mut nesting = timeline::Nesting::default();
    for (header, i) in headers(file, &threads) {
        let t = &threads[i];
        let mut thread = doc.thread(header)?;
        if file.os_events.get(&t.key()).is_some_and(|o| !o.is_empty()) {
            // Named first, as the marker table comes first in the profiler's own writer.
            thread.string(OFF_CPU);
        }
        let mut frames = HashMap::new();
        let mut stack: Vec<(FunctionId, u32)> = Vec::new();
        let mut last: Option<Timestamp> = t.start;
        let mut carried_ns = 0u64;
        let mut cpu_before = 0u64;
        // Closes the interval ending at `at` with the stack it had: one
        // sample at its start, weighted by its length; its application
        // time is the CPU delta of the next sample.
        let mut interval = |doc: &mut Document<'_>,
                            thread: &mut ThreadWriter,
                            stack: &[(FunctionId, u32)],
                            at: timeline::Moment|
         -> io::Result<()> {
            let Some(from) = last else {
                last = Some(at.at);
                return Ok(());
            };
            let len = at.at.since(from);
            last = Some(at.at.max(from));
            if len == 0 {
                return Ok(());
            }
            let before = carried_ns / 1000;
            carried_ns += len;
            let weight = i32::try_from(carried_ns / 1000 - before).unwrap_or(i32::MAX);
            let top = stack.last().map(|s| s.1);
            thread.sample(doc, at_time(file, from), top, cpu_before, weight)?;
            cpu_before = at.application_ns;
            Ok(())
        };
        let walked = timeline::walk(
            file,
            t,
            &mut nesting,
            true,
            timing,
            sel,
            |at, step| -> io::Result<()> {
                interval(doc, &mut thread, &stack, at)?;
                match step {
                    Step::Open(f) => {
                        let parent = stack.last().map(|s| s.1);
                        let fr = frame(doc, &mut thread, &mut frames, file, FrameKey::Function(f));
                        stack.push((f, thread.stack(parent, fr)));
                    }
                    Step::Close(_) => {
                        stack.pop();
                    }
                    Step::End => {}
                }
                Ok(())
            },
        )?;
        let markers: Vec<(ProfileNs, ProfileNs)> = walked
            .off_cpu
            .iter()
            .map(|&(from, to)| (at_time(file, from), at_time(file, to)))
            .collect();
        let marks = thread_marks(file, sel, t.key());
        thread.finish(doc, OFF_CPU, &markers, &marks)?;
    }
    Ok(())
}

fn sampling(file: &DataFile, sel: &Selection, doc: &mut Document<'_>) -> io::Result<()> {
    let index = SampleIndex::new(file, sel);
    // Threads with a record, and any that only appear in samples.
    let mut threads = sel.threads(file);
    for key in index.threads() {
        if !threads.iter().any(|t| t.key() == key) {
            threads.push(ThreadInfo {
                pid: key.pid,
                tid: key.tid,
                serial: key.serial,
                name: String::new(),
                start: None,
                end: None,
            });
        }
    }
    threads.sort_by_key(ThreadInfo::key);
    let cpu = match (
        file.session.sample_period_is_time,
        file.session.sample_period,
    ) {
        (true, Some(p)) => p,
        _ => 0,
    };
    let headers = headers(file, &threads);
    let order: Vec<ThreadKey> = headers.iter().map(|&(_, i)| threads[i].key()).collect();
    let mut headers = headers.into_iter().map(|(h, _)| h);
    index.for_each_thread(file, &order, |key, run| {
        // `order` follows `headers`, so the next header is this thread's.
        let Some(header) = headers.next() else {
            return Ok(());
        };
        let mut thread = doc.thread(header)?;
        let mut frames = HashMap::new();
        let mut stacks: HashMap<Option<StackId>, u32> = HashMap::new();
        for s in run {
            let stack = match stacks.get(&s.stack) {
                Some(&h) => h,
                None => {
                    let mut parent = None;
                    for key in sel.sample_keys(file, s.stack).unwrap_or_default() {
                        let fr = frame(doc, &mut thread, &mut frames, file, key);
                        parent = Some(thread.stack(parent, fr));
                    }
                    let Some(h) = parent else { continue };
                    stacks.insert(s.stack, h);
                    h
                }
            };
            thread.sample(doc, at_time(file, s.ts), Some(stack), cpu, 1)?;
        }
        let marks = thread_marks(file, sel, key);
        thread.finish(doc, OFF_CPU, &[], &marks)
    })
}

pub fn write(
    file: &DataFile,
    analysis: &Analysis,
    sel: &Selection,
    out: &mut dyn Write,
) -> Result<(), ExportError> {
    let interval_ns = match file.session.method {
        Method::Instrumentation => 1000,
        Method::Sampling => match (
            file.session.sample_period_is_time,
            file.session.sample_period,
        ) {
            (true, Some(p)) if p > 0 => p,
            _ => 1_000_000,
        },
    };
    let product = file.session.command.join(" ");
    let meta = Meta {
        product: format!("lapse ({}): {product}", file.session.method.name()),
        interval_ns,
        start_unix_ns: file.session.start_unix_ns,
    };
    write_document(file, timeline::Timing::of(file, analysis), sel, &meta, out)
        .map_err(ExportError::write(Format::Firefox))
}

fn write_document(
    file: &DataFile,
    timing: timeline::Timing,
    sel: &Selection,
    meta: &Meta,
    out: &mut dyn Write,
) -> io::Result<()> {
    let mut doc = Document::new(out)?;
    match file.session.method {
        Method::Instrumentation => instrumentation(file, timing, sel, &mut doc)?,
        Method::Sampling => sampling(file, sel, &mut doc)?,
    }
    doc.finish(meta)
}
