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
//! each weighing one sample (unit "none"), so totals are sample counts.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io::{self, Write};

use lapse_data::{DataFile, Method, StackId};
use lapse_report::Analysis;
use serde_json::{json, Value};

use crate::chrome::quote;
use lapse_analysis::tree::FrameKey;

use crate::sample_keys;
use crate::timeline::{self, SampleIndex, Step};
use crate::{ExportError, Format};

pub const SCHEMA: &str = "https://www.speedscope.app/file-format-schema.json";

fn thread_name(file: &DataFile, pid: u32, tid: u32) -> String {
    let name = file
        .threads
        .iter()
        .find(|t| t.pid == pid && t.tid == tid)
        .map_or("", |t| t.name.as_str());
    if name.is_empty() {
        format!("thread {tid} (pid {pid})")
    } else {
        format!("{name} (pid {pid}, tid {tid})")
    }
}

fn frame_json(file: &DataFile, key: FrameKey) -> Value {
    let mut frame = json!({ "name": key.label(file) });
    if let FrameKey::Function(f) = key {
        if let Some(info) = file.functions.get(f.0 as usize) {
            if let Some(src) = &info.source_file {
                frame["file"] = json!(src);
            }
            if let Some(line) = info.line {
                frame["line"] = json!(line);
            }
        }
    }
    frame
}

/// The document up to the profiles array, and its end.
fn frame_header(file: &DataFile, frames: &[Value]) -> (String, String) {
    let head = format!(
        "{{\"$schema\":{},\"name\":{},\"exporter\":{},\"activeProfileIndex\":0,\n\"shared\":{{\"frames\":{}}},\n\"profiles\":[\n",
        quote(SCHEMA),
        quote(&file.session.command.join(" ")),
        quote(&format!("lapse {}", env!("CARGO_PKG_VERSION"))),
        Value::Array(frames.to_vec())
    );
    (head, "\n]}\n".into())
}

fn instrumentation(
    file: &DataFile,
    timing: timeline::Timing,
    out: &mut dyn Write,
) -> Result<(), ExportError> {
    let w = ExportError::write(Format::Speedscope);
    let frames: Vec<Value> = file
        .functions
        .iter()
        .map(|f| frame_json(file, FrameKey::Function(f.id)))
        .collect();
    let (head, tail) = frame_header(file, &frames);
    out.write_all(head.as_bytes()).map_err(w)?;
    let origin = timeline::origin(file);
    let mut first_profile = true;
    for t in timeline::threads(file) {
        let start = t.start.map_or(0, |s| s.since(origin));
        if !first_profile {
            out.write_all(b",\n").map_err(w)?;
        }
        first_profile = false;
        write!(
            out,
            "{{\"type\":\"evented\",\"name\":{},\"unit\":\"nanoseconds\",\"startValue\":{start},\"events\":[",
            quote(&thread_name(file, t.pid, t.tid))
        )
        .map_err(w)?;
        let mut first = true;
        let walked = timeline::walk(file, &t, true, timing, |at, step| {
            let (kind, f) = match step {
                Step::Open(f) => ("O", f),
                Step::Close(f) => ("C", f),
                Step::End => return Ok(()),
            };
            let ts = at.at;
            let sep = if first { "" } else { "," };
            first = false;
            write!(
                out,
                "{sep}\n{{\"type\":\"{kind}\",\"frame\":{},\"at\":{}}}",
                f.0,
                ts.since(origin)
            )
        })
        .map_err(w)?;
        let end = walked.last.map_or(start, |l| l.since(origin)).max(start);
        write!(out, "],\"endValue\":{end}}}").map_err(w)?;
    }
    out.write_all(tail.as_bytes()).map_err(w)
}

fn sampling(file: &DataFile, out: &mut dyn Write) -> Result<(), ExportError> {
    let w = ExportError::write(Format::Speedscope);
    // The frames come first in the document, numbered in the order the
    // samples first use them: a first pass over the threads finds them (and
    // each stack's frame list), the second writes the profiles. Each pass
    // holds one thread's samples at a time.
    let index = SampleIndex::new(file);
    let order: Vec<(u32, u32)> = index.threads().collect();
    let mut frame_index: HashMap<FrameKey, usize> = HashMap::new();
    let mut frames: Vec<Value> = Vec::new();
    let mut stacks: HashMap<Option<StackId>, String> = HashMap::new();
    let Ok(()) = index.for_each_thread(file, &order, |_, _, run| -> Result<(), Infallible> {
        for s in run {
            stacks.entry(s.stack).or_insert_with(|| {
                let ids: Vec<String> = sample_keys(file, s.stack)
                    .into_iter()
                    .map(|k| {
                        let id = *frame_index.entry(k).or_insert_with(|| {
                            frames.push(frame_json(file, k));
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
    let (head, tail) = frame_header(file, &frames);
    out.write_all(head.as_bytes()).map_err(w)?;
    // A time-based event weighs each sample by its period in nanoseconds,
    // so speedscope shows time; other events count samples.
    let period = file
        .session
        .sample_period
        .filter(|&p| file.session.sample_period_is_time && p > 0);
    let (unit, weight) = match period {
        Some(p) => ("nanoseconds", p),
        None => ("none", 1),
    };
    let mut first_profile = true;
    index
        .for_each_thread(file, &order, |pid, tid, run| -> io::Result<()> {
            if !first_profile {
                out.write_all(b",\n")?;
            }
            first_profile = false;
            // Keys in serde_json's (sorted) order, as this was once written.
            write!(
                out,
                "{{\"endValue\":{},\"name\":{},\"samples\":[",
                run.len() as u64 * weight,
                quote(&thread_name(file, pid, tid))
            )?;
            for (i, s) in run.iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                let ids = stacks.get(&s.stack).map_or("[]", String::as_str);
                out.write_all(ids.as_bytes())?;
            }
            write!(
                out,
                r#"],"startValue":0,"type":"sampled","unit":"{unit}","weights":["#
            )?;
            for i in 0..run.len() {
                let sep = if i > 0 { "," } else { "" };
                write!(out, "{sep}{weight}")?;
            }
            out.write_all(b"]}")
        })
        .map_err(w)?;
    out.write_all(tail.as_bytes()).map_err(w)
}

pub fn write(file: &DataFile, analysis: &Analysis, out: &mut dyn Write) -> Result<(), ExportError> {
    match file.session.method {
        Method::Instrumentation => instrumentation(file, timeline::Timing::of(file, analysis), out),
        Method::Sampling => sampling(file, out),
    }
}
