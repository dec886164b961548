//! Chrome Trace Event Format, for Perfetto and chrome://tracing.
//!
//! Instrumentation: the full timeline of calls per thread as `B`/`E` events
//! (name = function, `cat` = module path), and every off-CPU period as a
//! `lapse:switch_out` / `lapse:switch_in` pair of thread-scoped instants:
//! the very shape `lapse import` reads, so importing an export gives the
//! recording's values back (with probe compensation off, since a trace has no
//! probe cost). To carry the thread's bounds — time before its first and after
//! its last call counts in the thread's totals — a zero-length switch pair
//! marks its start and its end; it never overlaps an interval. Calls still
//! open at the thread's end get no `E`, so viewers show them unfinished and
//! an import closes them at the same point the report does.
//!
//! Sampling: one thread-scoped instant per sample, named after the executing
//! function, whose `sf` points into the `stackFrames` table (the format's way
//! to attach a call stack to an event).
//!
//! The program's marks (`lapse_mark`) are thread-scoped instants of
//! category `lapse:mark` named by their text.
//!
//! Timestamps are microseconds since the recording's start, written with
//! exactly three decimals so no nanosecond is lost.

use std::collections::HashMap;
use std::io::{self, Write};

use lapse_analysis::Analysis;
use lapse_data::{DataFile, Method, ThreadKey, Timestamp};

use lapse_analysis::sample::Counts;
use lapse_analysis::tree::{CallTree, NodeId};

use crate::select::Selection;
use crate::timeline::{self, Step};
use crate::{ExportError, Format};

/// A JSON string literal.
pub(crate) fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"?\"".into())
}

/// `ns` after `origin` as microseconds with three decimals.
fn micros(ts: Timestamp, origin: Timestamp) -> String {
    let ns = ts.since(origin);
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

/// Writes trace events separated by commas.
struct Events<'a> {
    out: &'a mut dyn Write,
    first: bool,
}

impl Events<'_> {
    fn push(&mut self, event: &str) -> io::Result<()> {
        if !self.first {
            self.out.write_all(b",\n")?;
        }
        self.first = false;
        self.out.write_all(event.as_bytes())
    }
}

fn metadata(ev: &mut Events<'_>, file: &DataFile, sel: &Selection) -> io::Result<()> {
    for p in file.processes.iter().filter(|p| sel.wants_process(p.pid)) {
        let name = if p.command.is_empty() {
            format!("pid {}", p.pid)
        } else {
            p.command.join(" ")
        };
        ev.push(&format!(
            r#"{{"ph":"M","name":"process_name","pid":{},"tid":{},"args":{{"name":{}}}}}"#,
            p.pid,
            p.pid,
            quote(&name)
        ))?;
    }
    for t in sel.threads(file) {
        let name = timeline::shown_name(&t.name, t.key());
        if !name.is_empty() {
            ev.push(&format!(
                r#"{{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":{}}}}}"#,
                t.pid,
                timeline::shown_tid(t.key()),
                quote(&name)
            ))?;
        }
    }
    Ok(())
}

fn switch(ev: &mut Events<'_>, thread: ThreadKey, out: bool, ts: &str) -> io::Result<()> {
    let (pid, tid) = (thread.pid, timeline::shown_tid(thread));
    let name = if out {
        "lapse:switch_out"
    } else {
        "lapse:switch_in"
    };
    ev.push(&format!(
        r#"{{"ph":"i","s":"t","name":"{name}","cat":"lapse","pid":{pid},"tid":{tid},"ts":{ts}}}"#
    ))
}

/// The program's marks: thread-scoped instants of category `lapse:mark`,
/// named by their text (at their recorded time: with `--compensate`, up to
/// the probe costs removed before them later than the calls around them).
fn marks(ev: &mut Events<'_>, file: &DataFile, sel: &Selection) -> io::Result<()> {
    let origin = timeline::origin(file);
    for m in sel.marks(file) {
        let tid = timeline::shown_tid(ThreadKey::new(m.pid, m.tid));
        ev.push(&format!(
            r#"{{"ph":"i","s":"t","name":{},"cat":"lapse:mark","pid":{},"tid":{tid},"ts":{}}}"#,
            quote(&m.text),
            m.pid,
            micros(m.at, origin)
        ))?;
    }
    Ok(())
}

fn instrumentation(
    ev: &mut Events<'_>,
    file: &DataFile,
    timing: timeline::Timing,
    sel: &Selection,
) -> Result<(), ExportError> {
    let origin = timeline::origin(file);
    let w = ExportError::write(Format::Chrome);
    // Names and categories are the same for every call of a function: quote once.
    let names: Vec<(String, String)> = file
        .functions
        .iter()
        .map(|f| {
            let module = file.module(f.module).map_or("", |m| m.path.as_str());
            (quote(&f.name), quote(module))
        })
        .collect();
    let mut nesting = timeline::Nesting::default();
    for t in sel.threads(file) {
        let thread = t.key();
        let (pid, tid) = (thread.pid, timeline::shown_tid(thread));
        let mut line = String::with_capacity(128);
        let walked = timeline::walk(file, &t, &mut nesting, false, timing, sel, |at, step| {
            let (ph, f) = match step {
                Step::Open(f) => ("B", f),
                Step::Close(f) => ("E", f),
                Step::End => return Ok(()),
            };
            let ts = at.at;
            let (name, cat) = &names[f.0 as usize];
            line.clear();
            line.push_str(&format!(
                r#"{{"ph":"{ph}","name":{name},"cat":{cat},"pid":{pid},"tid":{tid},"ts":{}}}"#,
                micros(ts, origin)
            ));
            ev.push(&line)
        })
        .map_err(w)?;
        let bounds = |b: Option<Timestamp>| b.map(|b| micros(b, origin));
        if let Some(start) = bounds(t.start) {
            switch(ev, thread, true, &start).map_err(w)?;
            switch(ev, thread, false, &start).map_err(w)?;
        }
        for (from, to) in walked.off_cpu {
            switch(ev, thread, true, &micros(from, origin)).map_err(w)?;
            switch(ev, thread, false, &micros(to, origin)).map_err(w)?;
        }
        // (the end, on the compensated timeline like everything else)
        if let Some(end) = t.end.and(walked.last).map(|e| micros(e, origin)) {
            switch(ev, thread, true, &end).map_err(w)?;
            switch(ev, thread, false, &end).map_err(w)?;
        }
    }
    Ok(())
}

fn sampling(ev: &mut Events<'_>, file: &DataFile, sel: &Selection) -> Result<String, ExportError> {
    let origin = timeline::origin(file);
    // The call tree only as a path interner: node ids are the frame table's.
    let mut paths: CallTree<Counts> = CallTree::new();
    let mut node_of: HashMap<Option<lapse_data::StackId>, NodeId> = HashMap::new();
    timeline::for_each_thread(file, sel, |_, run| {
        for s in run {
            let node = match node_of.get(&s.stack) {
                Some(&n) => n,
                None => {
                    let keys = sel.sample_keys(file, s.stack).unwrap_or_default();
                    let n = paths.path_node(keys);
                    node_of.insert(s.stack, n);
                    n
                }
            };
            let leaf = paths
                .key(node)
                .map_or_else(|| "[unknown]".into(), |k| k.label(file));
            let node = node.index();
            ev.push(&format!(
                r#"{{"ph":"i","s":"t","name":{},"cat":"sample","pid":{},"tid":{},"ts":{},"sf":{node},"args":{{"cpu":{},"weight":{}}}}}"#,
                quote(&leaf),
                s.pid,
                s.tid,
                micros(s.ts, origin),
                s.cpu,
                s.weight
            ))?;
        }
        Ok(())
    })
    .map_err(ExportError::write(Format::Chrome))?;
    // The stack frame table: one entry per path node, keyed by node id.
    let mut frames = Vec::with_capacity(paths.len());
    for id in paths.nodes() {
        let Some(key) = paths.key(id) else { continue };
        let category = key
            .module(file)
            .and_then(|m| file.module(m))
            .map_or("", |m| m.name());
        let parent = match paths.parent(id) {
            Some(p) if p != NodeId::ROOT => format!(r#","parent":"{}""#, p.index()),
            _ => String::new(),
        };
        frames.push(format!(
            r#""{}":{{"name":{},"category":{}{parent}}}"#,
            id.index(),
            quote(&key.label(file)),
            quote(category)
        ));
    }
    Ok(frames.join(",\n"))
}

pub fn write(
    file: &DataFile,
    analysis: &Analysis,
    sel: &Selection,
    out: &mut dyn Write,
) -> Result<(), ExportError> {
    let w = ExportError::write(Format::Chrome);
    out.write_all(b"{\"traceEvents\":[\n").map_err(w)?;
    let mut ev = Events { out, first: true };
    metadata(&mut ev, file, sel).map_err(ExportError::write(Format::Chrome))?;
    let stack_frames = match file.session.method {
        Method::Instrumentation => {
            instrumentation(&mut ev, file, timeline::Timing::of(file, analysis), sel)?;
            String::new()
        }
        Method::Sampling => sampling(&mut ev, file, sel)?,
    };
    marks(&mut ev, file, sel).map_err(ExportError::write(Format::Chrome))?;
    let tail = format!(
        "\n],\n\"stackFrames\":{{{stack_frames}}},\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{{\"producer\":\"lapse\",\"method\":{},\"command\":{}}}}}\n",
        quote(file.session.method.name()),
        quote(&file.session.command.join(" "))
    );
    out.write_all(tail.as_bytes())
        .map_err(ExportError::write(Format::Chrome))
}
