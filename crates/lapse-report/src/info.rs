//! `lapse info`: what a data file holds and how its recording went, as
//! labelled lines for the terminal or one JSON object.

use std::io::{self, Write};

use lapse_analysis::{Analysis, ThreadStats};
use lapse_data::{DataFile, Method, SessionHeader};
use serde_json::{json, Map, Value};

use crate::spec::Format;

/// One fact: its label in the terminal, its key in JSON, its text and its
/// value.
#[derive(Clone, Debug)]
pub struct InfoLine {
    pub label: &'static str,
    pub key: &'static str,
    pub text: String,
    pub value: Value,
}

/// The facts of one data file, in the order `lapse info` shows them.
#[derive(Clone, Debug, Default)]
pub struct Info {
    pub lines: Vec<InfoLine>,
}

/// The terminal's labels are padded to this width.
const LABEL_WIDTH: usize = 13;

impl Info {
    /// The facts of `file`; `analysis` (of the whole file, instrumentation)
    /// adds the stack repairs; `spill` is a line about events waiting
    /// beside the file, when some do.
    pub fn of(file: &DataFile, analysis: Option<&Analysis>, spill: Option<String>) -> Info {
        let mut i = Info::default();
        let s = &file.session;
        i.text(
            "file",
            "file",
            format!("{} ({} bytes)", file.path().display(), file.file_len),
            json!({ "path": file.path().display().to_string(), "bytes": file.file_len }),
        );
        let why = file.incomplete_why();
        i.text(
            "complete",
            "incomplete",
            why.as_ref()
                .map_or_else(|| "yes".to_owned(), |w| format!("no ({w})")),
            json!(why),
        );
        i.text("command", "command", s.command.join(" "), json!(s.command));
        i.same("method", "method", s.method.name());
        i.same("host", "host", &s.host);
        i.same("clock", "clock", &s.clock);
        i.same("lapse", "lapse_version", &s.lapse_version);
        if s.method == Method::Instrumentation {
            i.text(
                "probe cost",
                "probe_cost_ns",
                format!("{:.2} ns per probe", s.probe_cost_ns),
                json!(s.probe_cost_ns),
            );
            if let Some(t) = &s.tsc {
                i.text(
                    "tsc",
                    "tsc_ticks_per_sec",
                    format!("{:.0} ticks/s", t.ticks_per_sec),
                    json!(t.ticks_per_sec),
                );
            }
            i.text(
                "os events",
                "os_events",
                s.os_events.join(","),
                json!(s.os_events),
            );
        } else {
            let period = s
                .sample_period
                .map_or_else(|| "frequency mode".to_owned(), |p| format!("period {p}"));
            let event = s.sample_event.as_deref().unwrap_or("?");
            i.text(
                "event",
                "event",
                format!("{event} ({period})"),
                json!({ "name": s.sample_event, "period": s.sample_period }),
            );
        }
        if s.method == Method::Instrumentation {
            let sources = s.probe_sources();
            let text: Vec<String> = sources.iter().map(|(m, p)| format!("{m}: {p}")).collect();
            let text = if text.is_empty() {
                "not recorded".to_owned()
            } else {
                text.join(", ")
            };
            i.text("probes", "probe_sources", text, json!(sources));
        }
        for n in s
            .notes
            .iter()
            .filter(|n| !SessionHeader::is_probe_sources_note(n))
        {
            i.same("note", "notes", n);
        }
        i.count("processes", "processes", file.processes.len() as u64);
        i.count("threads", "threads", file.threads.len() as u64);
        i.count("modules", "modules", file.modules.len() as u64);
        i.count("functions", "functions", file.functions.len() as u64);
        i.text(
            "events",
            "events",
            format!(
                "{} in {} chunks",
                file.total_events(),
                file.event_chunks.len()
            ),
            json!({ "events": file.total_events(), "chunks": file.event_chunks.len() }),
        );
        i.text(
            "samples",
            "samples",
            format!(
                "{} chunks; {} frames, {} stack nodes",
                file.sample_chunks.len(),
                file.frames.len(),
                file.stacks.len()
            ),
            json!({
                "chunks": file.sample_chunks.len(),
                "frames": file.frames.len(),
                "stack_nodes": file.stacks.len(),
            }),
        );
        if !file.off_cpu.is_empty() {
            let ns: u64 = file.off_cpu.iter().map(|p| p.len_ns()).sum();
            let preempted = file.off_cpu.iter().filter(|p| p.preempted).count();
            i.text(
                "off-CPU",
                "off_cpu",
                format!(
                    "{} periods ({preempted} preempted), {:.3} s summed over threads",
                    file.off_cpu.len(),
                    ns as f64 / 1e9
                ),
                json!({ "periods": file.off_cpu.len(), "preempted": preempted, "ns": ns }),
            );
        }
        if !file.paused.is_empty() || !file.marks.is_empty() {
            let start = file.session.start;
            let since = |t: lapse_data::Timestamp| t.since(start) as f64 / 1e9;
            let stretches: Vec<String> = file
                .paused
                .iter()
                .map(|p| match p.to.as_nanos() {
                    u64::MAX => format!("{:.6} s to the end", since(p.from)),
                    _ => format!("{:.6}-{:.6} s", since(p.from), since(p.to)),
                })
                .collect();
            i.text(
                "paused",
                "paused",
                match stretches.is_empty() {
                    true => "never".to_owned(),
                    false => stretches.join(", "),
                },
                json!(file
                    .paused
                    .iter()
                    .map(|p| json!({
                        "from_ns": p.from.since(start),
                        "to_ns": (p.to.as_nanos() != u64::MAX).then(|| p.to.since(start)),
                    }))
                    .collect::<Vec<_>>()),
            );
            i.text(
                "marks",
                "marks",
                format!("{} (lapse report --view marks)", file.marks.len()),
                json!(file.marks.len()),
            );
        }
        if let Some(f) = &file.footer {
            i.text(
                "lost",
                "lost_events",
                format!("{} events", f.lost_events),
                json!(f.lost_events),
            );
            i.text(
                "discarded",
                "discarded_samples",
                format!(
                    "{} samples (other processes', or the target's before its exec: not data lost)",
                    f.discarded_samples
                ),
                json!(f.discarded_samples),
            );
            if let Some(st) = f.target_exit_status {
                i.text("exit status", "exit_status", st.to_string(), json!(st));
            }
        }
        if let Some(d) = &file.damage {
            i.text(
                "damage",
                "damage",
                format!("at byte {}: {}", d.offset, d.what),
                json!({ "offset": d.offset, "what": d.what }),
            );
        }
        if let Some(line) = spill {
            i.same("spill", "spill", &line);
        }
        if file.skipped_chunks > 0 {
            i.text(
                "skipped",
                "skipped_chunks",
                format!("{} chunks of unknown kind", file.skipped_chunks),
                json!(file.skipped_chunks),
            );
        }
        if let (Method::Instrumentation, Some(Analysis::Instr(r))) = (s.method, analysis) {
            let sum = |f: fn(&ThreadStats) -> u64| r.acc.threads.iter().map(f).sum::<u64>();
            let repaired = sum(|t| t.repaired_exits);
            i.text(
                "repaired",
                "repaired_calls",
                format!("{repaired} calls closed without their own exit (longjmp, exceptions, lost exits)"),
                json!(repaired),
            );
            let unmatched = sum(|t| t.unmatched_exits);
            i.text(
                "unmatched",
                "unmatched_exits",
                format!("{unmatched} exits matching no entry (ignored)"),
                json!(unmatched),
            );
            let open = sum(|t| t.open_calls);
            i.text(
                "open calls",
                "open_calls",
                format!("{open} closed at thread end"),
                json!(open),
            );
            let guards = s.non_entry_guards();
            i.text(
                "non-entry",
                "non_entry_guards",
                format!("{guards} sanitizer-coverage guards away from a function's entry (inlined code), not calls"),
                json!(guards),
            );
            if crate::views::functions::min_time_recorded(file) {
                let dropped: u64 = file.dropped_calls.values().sum();
                i.text(
                    "dropped",
                    "dropped_calls",
                    format!("{dropped} calls shorter than --min-time, left out as calls of their own (their time is their callers')"),
                    json!(dropped),
                );
            }
            let bad = sum(|t| t.invalid_events) + sum(|t| t.backward_timestamps) + r.bad_chunks;
            if bad > 0 {
                i.text(
                    "invalid",
                    "invalid",
                    format!("{bad} events or chunks skipped"),
                    json!(bad),
                );
            }
        }
        i
    }

    /// A fact with its text and its value.
    fn text(&mut self, label: &'static str, key: &'static str, text: String, value: Value) {
        self.lines.push(InfoLine {
            label,
            key,
            text,
            value,
        });
    }

    /// A fact whose text is its value.
    fn same(&mut self, label: &'static str, key: &'static str, text: &str) {
        self.text(label, key, text.to_owned(), json!(text));
    }

    fn count(&mut self, label: &'static str, key: &'static str, n: u64) {
        self.text(label, key, n.to_string(), json!(n));
    }

    /// The facts as JSON: one key each (a fact that comes several times,
    /// like notes, is a list).
    pub fn to_json(&self) -> Value {
        let mut doc = Map::new();
        doc.insert("schema".into(), json!("lapse-info/1"));
        for l in &self.lines {
            if l.key == "notes" {
                let notes = doc.entry("notes").or_insert_with(|| json!([]));
                if let Value::Array(a) = notes {
                    a.push(l.value.clone());
                }
            } else {
                doc.insert(l.key.into(), l.value.clone());
            }
        }
        doc.entry("notes").or_insert_with(|| json!([]));
        Value::Object(doc)
    }

    /// Writes the facts as labelled lines, CSV (`key,text`) or JSON.
    pub fn render(&self, out: &mut dyn Write, format: Format) -> io::Result<()> {
        match format {
            Format::Json => writeln!(out, "{}", self.to_json()),
            Format::Csv => {
                writeln!(out, "key,text")?;
                for l in &self.lines {
                    writeln!(out, "{},\"{}\"", l.key, l.text.replace('"', "\"\""))?;
                }
                Ok(())
            }
            Format::Table => {
                for l in &self.lines {
                    let label = format!("{}:", l.label);
                    writeln!(out, "{label:<LABEL_WIDTH$}{}", l.text)?;
                }
                Ok(())
            }
        }
    }
}
