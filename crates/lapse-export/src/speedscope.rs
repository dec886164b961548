//! speedscope's file format (<https://www.speedscope.app/file-format-schema.json>).
//!
//! Instrumentation: one "evented" profile per thread, built from the real
//! event stream (`O` when a call opens, `C` when it closes; calls still open
//! at the thread's end are closed there, as reports close them), in
//! nanoseconds since the recording's start. speedscope's "time order" view
//! is then the thread's true timeline, and its left-heavy and sandwich views
//! give elapsed times.
//!
//! Sampling: one "sampled" profile per thread, its samples in time order,
//! each weighing its period in nanoseconds for a time-based event (one
//! sample otherwise). With off-CPU time, `--weight` chooses: the off-CPU
//! periods instead of the samples (each weighing its length), or both in
//! time order, the periods' stacks ending in `[off-cpu]`, so that the
//! "time order" view is the thread's wall-clock time.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io::{self, Write};

use lapse_analysis::Analysis;
use lapse_data::{DataFile, Method, OffCpuPeriod, StackId, ThreadKey, Timestamp};

use crate::chrome::quote;
use lapse_analysis::tree::FrameKey;

use crate::select::Selection;
use crate::timeline::{self, SampleIndex, Step};
use crate::{ExportError, Format, SampleWeight, OFF_CPU_FRAME};

pub const SCHEMA: &str = "https://www.speedscope.app/file-format-schema.json";

fn thread_name(file: &DataFile, thread: ThreadKey) -> String {
    let ThreadKey { pid, tid, serial } = thread;
    let name = file
        .threads
        .iter()
        .find(|t| t.key() == thread)
        .map_or("", |t| t.name.as_str());
    // (a later thread under an id used before says which it is)
    let again = if serial > 0 {
        format!(", again: serial {serial}")
    } else {
        String::new()
    };
    if name.is_empty() {
        format!("thread {tid} (pid {pid}{again})")
    } else {
        format!("{name} (pid {pid}, tid {tid}{again})")
    }
}

/// A frame object as JSON text (a million distinct functions are a million
/// of these: text takes a tenth of the memory `serde_json::Value`s did).
fn frame_json(file: &DataFile, key: FrameKey) -> String {
    let mut frame = format!("{{\"name\":{}", quote(&key.label(file)));
    if let FrameKey::Function(f) = key {
        if let Some(info) = file.functions.get(f.0 as usize) {
            if let Some(src) = &info.source_file {
                frame.push_str(&format!(",\"file\":{}", quote(src)));
            }
            if let Some(line) = info.line {
                frame.push_str(&format!(",\"line\":{line}"));
            }
        }
    }
    frame.push('}');
    frame
}

/// Writes the document up to the profiles array (its frames, `frames`,
/// written as they are); returns its end.
fn frame_header(
    file: &DataFile,
    frames: &[String],
    out: &mut dyn Write,
) -> io::Result<&'static str> {
    write!(
        out,
        "{{\"$schema\":{},\"name\":{},\"exporter\":{},\"activeProfileIndex\":0,\n\"shared\":{{\"frames\":[",
        quote(SCHEMA),
        quote(&file.session.command.join(" ")),
        quote(&format!("lapse {}", env!("CARGO_PKG_VERSION"))),
    )?;
    for (i, f) in frames.iter().enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        out.write_all(f.as_bytes())?;
    }
    out.write_all(b"]},\n\"profiles\":[\n")?;
    Ok("\n]}\n")
}

fn instrumentation(
    file: &DataFile,
    timing: timeline::Timing,
    sel: &Selection,
    out: &mut dyn Write,
) -> Result<(), ExportError> {
    let w = ExportError::write(Format::Speedscope);
    let mut frames: Vec<String> = file
        .functions
        .iter()
        .map(|f| frame_json(file, FrameKey::Function(f.id)))
        .collect();
    // The program's marks: speedscope has no instants, so each is a call of
    // no length to a frame `[mark] TEXT` (one frame per text).
    let mut mark_frame: HashMap<&str, usize> = HashMap::new();
    for m in sel.marks(file) {
        mark_frame.entry(m.text.as_str()).or_insert_with(|| {
            frames.push(format!(
                "{{\"name\":{}}}",
                quote(&format!("[mark] {}", m.text))
            ));
            frames.len() - 1
        });
    }
    let tail = frame_header(file, &frames, out).map_err(w)?;
    drop(frames);
    let origin = timeline::origin(file);
    let mut first_profile = true;
    let mut nesting = timeline::Nesting::default();
    for t in sel.threads(file) {
        let start = t.start.map_or(0, |s| s.since(origin));
        if !first_profile {
            out.write_all(b",\n").map_err(w)?;
        }
        first_profile = false;
        write!(
            out,
            "{{\"type\":\"evented\",\"name\":{},\"unit\":\"nanoseconds\",\"startValue\":{start},\"events\":[",
            quote(&thread_name(file, t.key()))
        )
        .map_err(w)?;
        let mut first = true;
        let key = t.key();
        let mut marks = sel
            .marks(file)
            .filter(|m| ThreadKey::new(m.pid, m.tid) == ThreadKey::new(key.pid, key.tid))
            .peekable();
        let mut last = start;
        // (a mark before `upto` is written first, as a call of no length)
        let mut put_marks = |out: &mut dyn Write, upto: u64, first: &mut bool, last: &mut u64| {
            while let Some(m) = marks.next_if(|m| m.at.since(origin) <= upto) {
                let at = m.at.since(origin).max(*last);
                let frame = mark_frame[m.text.as_str()];
                let sep = if *first { "" } else { "," };
                *first = false;
                write!(
                    out,
                    "{sep}\n{{\"type\":\"O\",\"frame\":{frame},\"at\":{at}}},\n{{\"type\":\"C\",\"frame\":{frame},\"at\":{at}}}"
                )?;
                *last = at;
            }
            io::Result::Ok(())
        };
        let walked = timeline::walk(file, &t, &mut nesting, true, timing, sel, |at, step| {
            let (kind, f) = match step {
                Step::Open(f) => ("O", f),
                Step::Close(f) => ("C", f),
                Step::End => return Ok(()),
            };
            let ts = at.at.since(origin);
            put_marks(out, ts, &mut first, &mut last)?;
            let sep = if first { "" } else { "," };
            first = false;
            last = last.max(ts);
            write!(
                out,
                "{sep}\n{{\"type\":\"{kind}\",\"frame\":{},\"at\":{ts}}}",
                f.0,
            )
        })
        .map_err(w)?;
        let end = walked.last.map_or(start, |l| l.since(origin)).max(start);
        put_marks(out, end, &mut first, &mut last).map_err(w)?;
        write!(out, "],\"endValue\":{end}}}").map_err(w)?;
    }
    out.write_all(tail.as_bytes()).map_err(w)
}

/// One entry of a thread's sampled profile: when, which stack (and whether
/// it is off the CPU, shown with an `[off-cpu]` frame) and its weight.
struct Entry {
    at: Timestamp,
    stack: Option<StackId>,
    off_cpu_frame: bool,
    weight: u64,
}

/// A thread's entries in time order: its samples, its off-CPU periods, or
/// both, as `weight` says.
fn entries(
    samples: &[lapse_data::Sample],
    periods: &[&OffCpuPeriod],
    weight: SampleWeight,
    per_sample: u64,
) -> Vec<Entry> {
    let mut out = Vec::new();
    if weight != SampleWeight::OffCpu {
        out.extend(samples.iter().map(|s| Entry {
            at: s.ts,
            stack: s.stack,
            off_cpu_frame: false,
            weight: per_sample,
        }));
    }
    if weight != SampleWeight::Cpu {
        out.extend(periods.iter().map(|p| Entry {
            at: p.from,
            stack: p.stack,
            off_cpu_frame: weight == SampleWeight::Both,
            weight: p.len_ns(),
        }));
        // Stable: samples before periods at equal times.
        out.sort_by_key(|e| e.at);
    }
    out
}

fn sampling(
    file: &DataFile,
    weight: SampleWeight,
    sel: &Selection,
    out: &mut dyn Write,
) -> Result<(), ExportError> {
    let w = ExportError::write(Format::Speedscope);
    // The frames come first in the document, numbered in the order the
    // samples first use them: a first pass over the threads finds them (and
    // each stack's frame list), the second writes the profiles. Each pass
    // holds one thread's samples at a time.
    let index = SampleIndex::new(file, sel);
    let mut periods: HashMap<ThreadKey, Vec<&OffCpuPeriod>> = HashMap::new();
    if weight != SampleWeight::Cpu {
        for p in file.off_cpu.iter().filter(|p| sel.wants_off_cpu(file, p)) {
            periods.entry(p.key()).or_default().push(p);
        }
    }
    let mut order: Vec<ThreadKey> = index.threads().collect();
    if weight != SampleWeight::Cpu {
        order.extend(periods.keys().copied());
        order.sort_unstable();
        order.dedup();
    }
    let periods_of = |thread: ThreadKey| periods.get(&thread).map_or(&[][..], Vec::as_slice);
    // A time-based event weighs each sample by its period in nanoseconds,
    // so speedscope shows time; other events count samples. Off-CPU time
    // is in nanoseconds.
    let period = crate::period_ns(file);
    let (unit, per_sample) = match (period, weight) {
        (Some(p), _) => ("nanoseconds", p),
        (None, SampleWeight::Cpu) => ("none", 1),
        (None, _) => ("nanoseconds", 1),
    };
    let mut frame_index: HashMap<Option<FrameKey>, usize> = HashMap::new();
    let mut frames: Vec<String> = Vec::new();
    let mut stacks: HashMap<(Option<StackId>, bool), String> = HashMap::new();
    let Ok(()) = index.for_each_thread(file, &order, |thread, run| -> Result<(), Infallible> {
        for e in entries(run, periods_of(thread), weight, per_sample) {
            stacks.entry((e.stack, e.off_cpu_frame)).or_insert_with(|| {
                let mut keys: Vec<Option<FrameKey>> = sel
                    .sample_keys(file, e.stack)
                    .unwrap_or_default()
                    .into_iter()
                    .map(Some)
                    .collect();
                if e.off_cpu_frame {
                    keys.push(None);
                }
                let ids: Vec<String> = keys
                    .into_iter()
                    .map(|k| {
                        let id = *frame_index.entry(k).or_insert_with(|| {
                            frames.push(match k {
                                Some(k) => frame_json(file, k),
                                None => format!("{{\"name\":{}}}", quote(OFF_CPU_FRAME)),
                            });
                            frames.len() - 1
                        });
                        id.to_string()
                    })
                    .collect();
                format!("[{}]", ids.join(","))
            });
        }
        Ok(())
    });
    let tail = frame_header(file, &frames, out).map_err(w)?;
    let mut first_profile = true;
    index
        .for_each_thread(file, &order, |thread, run| -> io::Result<()> {
            let run = entries(run, periods_of(thread), weight, per_sample);
            if !first_profile {
                out.write_all(b",\n")?;
            }
            first_profile = false;
            // Keys in serde_json's (sorted) order, as this was once written.
            write!(
                out,
                "{{\"endValue\":{},\"name\":{},\"samples\":[",
                run.iter().map(|e| e.weight).sum::<u64>(),
                quote(&thread_name(file, thread))
            )?;
            for (i, e) in run.iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                let ids = stacks
                    .get(&(e.stack, e.off_cpu_frame))
                    .map_or("[]", String::as_str);
                out.write_all(ids.as_bytes())?;
            }
            write!(
                out,
                r#"],"startValue":0,"type":"sampled","unit":"{unit}","weights":["#
            )?;
            for (i, e) in run.iter().enumerate() {
                let sep = if i > 0 { "," } else { "" };
                write!(out, "{sep}{}", e.weight)?;
            }
            out.write_all(b"]}")
        })
        .map_err(w)?;
    out.write_all(tail.as_bytes()).map_err(w)
}

pub fn write(
    file: &DataFile,
    analysis: &Analysis,
    weight: SampleWeight,
    sel: &Selection,
    out: &mut dyn Write,
) -> Result<(), ExportError> {
    match file.session.method {
        Method::Instrumentation => {
            instrumentation(file, timeline::Timing::of(file, analysis), sel, out)
        }
        Method::Sampling => sampling(file, weight, sel, out),
    }
}
