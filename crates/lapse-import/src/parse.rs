use std::collections::HashMap;
use std::io::{self, Write};

use lapse_data::*;
use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{name}: not valid JSON: {source}")]
    Json {
        name: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{name}: expected a JSON array of trace events or an object with \"traceEvents\"")]
    Shape { name: String },
    #[error("{name}: trace event #{index}: {what}")]
    Event {
        name: String,
        index: usize,
        what: String,
    },
    #[error("{name}: the trace holds no duration events (B/E/X)")]
    NoEvents { name: String },
}

#[derive(Deserialize)]
#[serde(untagged)]
enum TraceFile {
    Object {
        #[serde(rename = "traceEvents")]
        trace_events: Vec<Value>,
    },
    Array(Vec<Value>),
}

/// A parsed trace, ready to be written as a data file.
#[derive(Debug)]
pub struct Imported {
    pub session: SessionHeader,
    pub processes: Vec<ProcessInfo>,
    pub threads: Vec<ThreadInfo>,
    pub modules: Vec<ModuleInfo>,
    pub functions: Vec<FunctionInfo>,
    /// Per thread (pid, tid): events in time order.
    pub events: Vec<((u32, u32), Vec<Event>)>,
    pub os_events: Vec<OsEventBlock>,
    /// `E` events with no open `B` on their thread.
    pub unmatched_ends: u64,
    /// Events of other phases (counters, flows, ...) that lapse does not use.
    pub skipped: u64,
}

impl Imported {
    /// Writes the trace as a lapse data file.
    pub fn write<W: Write>(&self, out: W) -> io::Result<u64> {
        let mut w = DataWriter::new(out)?;
        w.write_record(&Record::Session(self.session.clone()))?;
        for p in &self.processes {
            w.write_record(&Record::Process(p.clone()))?;
        }
        for t in &self.threads {
            w.write_record(&Record::Thread(t.clone()))?;
        }
        for m in &self.modules {
            w.write_record(&Record::Module(m.clone()))?;
        }
        for chunk in self.functions.chunks(4096) {
            w.write_record(&Record::Functions(chunk.to_vec()))?;
        }
        for b in &self.os_events {
            w.write_record(&Record::OsEvents(b.clone()))?;
        }
        let mut total = 0u64;
        for ((pid, tid), events) in &self.events {
            for chunk in events.chunks(1 << 16) {
                w.write_events(*pid, *tid, chunk)?;
            }
            total += events.len() as u64;
        }
        let end = self
            .threads
            .iter()
            .filter_map(|t| t.end)
            .max()
            .unwrap_or_default();
        w.write_record(&Record::Footer(Footer {
            end,
            lost_events: 0,
            discarded_samples: 0,
            target_exit_status: None,
            events: total,
            samples: 0,
        }))?;
        w.flush()?;
        Ok(total)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Rank {
    /// End of an X event: before anything else at the same timestamp.
    XEnd,
    Other,
}

struct Pending {
    ts: u64,
    rank: Rank,
    /// For X ends: minus the begin time, so later-starting (inner) ones sort first.
    key: (i128, usize),
    kind: EventKind,
    /// `None` for an `E` without a name: it closes whatever is on top.
    function: Option<FunctionId>,
}

/// Ids for pids/tids given as strings (some tools do that).
#[derive(Default)]
struct Ids {
    named: HashMap<String, u32>,
}

impl Ids {
    fn get(&mut self, v: Option<&Value>) -> Option<u32> {
        match v {
            None => Some(0),
            Some(Value::Number(n)) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
            Some(Value::String(s)) => {
                let next = 0x4000_0000 + self.named.len() as u32;
                Some(*self.named.entry(s.clone()).or_insert(next))
            }
            _ => None,
        }
    }
}

fn micros_to_ns(v: &Value) -> Option<u64> {
    let us = v.as_f64()?;
    (0.0..1.8e13)
        .contains(&us)
        .then(|| (us * 1000.0).round() as u64)
}

/// Parses a Chrome trace. `name` (the file name) is used in messages and as
/// the module of events without a category.
pub fn import(bytes: &[u8], name: &str) -> Result<Imported, ImportError> {
    let file: TraceFile =
        serde_json::from_slice(bytes).map_err(|source| match source.classify() {
            serde_json::error::Category::Data => ImportError::Shape {
                name: name.to_owned(),
            },
            _ => ImportError::Json {
                name: name.to_owned(),
                source,
            },
        })?;
    let events = match file {
        TraceFile::Object { trace_events } => trace_events,
        TraceFile::Array(a) => a,
    };
    let err = |index: usize, what: &str| ImportError::Event {
        name: name.to_owned(),
        index,
        what: what.to_owned(),
    };
    let file_module = name.rsplit('/').next().unwrap_or(name).to_owned();
    let mut ids = Ids::default();
    let mut modules: Vec<ModuleInfo> = Vec::new();
    let mut module_index: HashMap<String, ModuleId> = HashMap::new();
    let mut functions: Vec<FunctionInfo> = Vec::new();
    let mut function_index: HashMap<(ModuleId, String), FunctionId> = HashMap::new();
    let mut per_thread: HashMap<(u32, u32), Vec<Pending>> = HashMap::new();
    let mut switches: HashMap<(u32, u32), Vec<(u64, bool)>> = HashMap::new();
    let mut process_names: HashMap<u32, String> = HashMap::new();
    let mut thread_names: HashMap<(u32, u32), String> = HashMap::new();
    let mut skipped = 0u64;

    for (index, ev) in events.iter().enumerate() {
        let Some(obj) = ev.as_object() else {
            return Err(err(index, "not a JSON object"));
        };
        let Some(ph) = obj.get("ph").and_then(Value::as_str) else {
            return Err(err(index, "missing \"ph\" (phase)"));
        };
        let pid = ids
            .get(obj.get("pid"))
            .ok_or_else(|| err(index, "\"pid\" is not a number or string"))?;
        let tid = ids
            .get(obj.get("tid"))
            .ok_or_else(|| err(index, "\"tid\" is not a number or string"))?;
        let ev_name = obj.get("name").and_then(Value::as_str);
        if ph == "M" {
            let arg = obj
                .get("args")
                .and_then(|a| a.get("name"))
                .and_then(Value::as_str);
            match (ev_name, arg) {
                (Some("process_name"), Some(n)) => {
                    process_names.insert(pid, n.to_owned());
                }
                (Some("thread_name"), Some(n)) => {
                    thread_names.insert((pid, tid), n.to_owned());
                }
                _ => skipped += 1,
            }
            continue;
        }
        if !matches!(ph, "B" | "E" | "X" | "i" | "I") {
            skipped += 1;
            continue;
        }
        let ts = match obj.get("ts") {
            Some(v) => micros_to_ns(v)
                .ok_or_else(|| err(index, "\"ts\" is not a non-negative number of microseconds"))?,
            None => return Err(err(index, "missing \"ts\"")),
        };
        if matches!(ph, "i" | "I") {
            match ev_name {
                Some("lapse:switch_out") => {
                    switches.entry((pid, tid)).or_default().push((ts, true))
                }
                Some("lapse:switch_in") => {
                    switches.entry((pid, tid)).or_default().push((ts, false))
                }
                _ => skipped += 1,
            }
            continue;
        }
        let mut function = None;
        if ph != "E" || ev_name.is_some() {
            let fname = ev_name.unwrap_or("(unnamed)").to_owned();
            let cat = obj
                .get("cat")
                .and_then(Value::as_str)
                .filter(|c| !c.is_empty())
                .unwrap_or(&file_module);
            let module = *module_index.entry(cat.to_owned()).or_insert_with(|| {
                let id = ModuleId(modules.len() as u32);
                modules.push(ModuleInfo {
                    id,
                    path: cat.to_owned(),
                    build_id: None,
                });
                id
            });
            let f = *function_index
                .entry((module, fname.clone()))
                .or_insert_with(|| {
                    let id = FunctionId(functions.len() as u32);
                    functions.push(FunctionInfo {
                        id,
                        module,
                        address: 0,
                        name: fname,
                        source_file: None,
                        line: None,
                    });
                    id
                });
            function = Some(f);
        }
        let list = per_thread.entry((pid, tid)).or_default();
        match ph {
            "B" | "E" => list.push(Pending {
                ts,
                rank: Rank::Other,
                key: (0, index),
                kind: if ph == "B" {
                    EventKind::Enter
                } else {
                    EventKind::Exit
                },
                function,
            }),
            _ => {
                let dur = match obj.get("dur") {
                    Some(v) => micros_to_ns(v).ok_or_else(|| {
                        err(
                            index,
                            "\"dur\" is not a non-negative number of microseconds",
                        )
                    })?,
                    None => return Err(err(index, "X event without \"dur\"")),
                };
                list.push(Pending {
                    ts,
                    rank: Rank::Other,
                    key: (0, index),
                    kind: EventKind::Enter,
                    function,
                });
                list.push(Pending {
                    ts: ts.saturating_add(dur),
                    rank: Rank::XEnd,
                    key: (-(ts as i128), usize::MAX - index),
                    kind: EventKind::Exit,
                    function,
                });
            }
        }
    }
    if per_thread.is_empty() {
        return Err(ImportError::NoEvents {
            name: name.to_owned(),
        });
    }

    let mut keys: Vec<(u32, u32)> = per_thread
        .keys()
        .copied()
        .chain(switches.keys().copied())
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let mut out_events = Vec::new();
    let mut threads = Vec::new();
    let mut os_events = Vec::new();
    let mut unmatched_ends = 0u64;
    let mut first_ts = u64::MAX;
    for key in keys {
        let mut pending = per_thread.remove(&key).unwrap_or_default();
        pending.sort_by_key(|p| (p.ts, p.rank, p.key));
        let mut stack: Vec<FunctionId> = Vec::new();
        let mut events = Vec::with_capacity(pending.len());
        for p in &pending {
            let function = match (p.kind, p.function) {
                (EventKind::Enter, Some(f)) => {
                    stack.push(f);
                    f
                }
                (_, Some(f)) => {
                    if let Some(pos) = stack.iter().rposition(|&g| g == f) {
                        stack.truncate(pos);
                    }
                    f
                }
                (_, None) => match stack.pop() {
                    Some(f) => f,
                    None => {
                        unmatched_ends += 1;
                        continue;
                    }
                },
            };
            events.push(Event {
                ts: Timestamp::from_nanos(p.ts),
                kind: p.kind,
                function,
            });
        }
        let mut offs = Vec::new();
        let mut sw = switches.remove(&key).unwrap_or_default();
        sw.sort_by_key(|&(ts, _)| ts);
        let mut out_since = None;
        for (ts, is_out) in sw {
            match (is_out, out_since) {
                (true, None) => out_since = Some(ts),
                (false, Some(from)) => {
                    offs.push(OsEvent {
                        from: Timestamp::from_nanos(from),
                        to: Timestamp::from_nanos(ts),
                        kind: OsEventKind::Switch,
                    });
                    out_since = None;
                }
                _ => {}
            }
        }
        let lo = events
            .first()
            .map(|e| e.ts)
            .into_iter()
            .chain(offs.first().map(|o| o.from))
            .min();
        let hi = events
            .last()
            .map(|e| e.ts)
            .into_iter()
            .chain(offs.last().map(|o| o.to))
            .max();
        if let Some(lo) = lo {
            first_ts = first_ts.min(lo.as_nanos());
        }
        threads.push(ThreadInfo {
            pid: key.0,
            tid: key.1,
            name: thread_names.remove(&key).unwrap_or_default(),
            start: lo,
            end: hi,
        });
        if !offs.is_empty() {
            os_events.push(OsEventBlock {
                pid: key.0,
                tid: key.1,
                events: offs,
            });
        }
        out_events.push((key, events));
    }
    let mut pids: Vec<u32> = threads.iter().map(|t| t.pid).collect();
    pids.dedup();
    let processes = pids
        .into_iter()
        .map(|pid| {
            let ts: Vec<&ThreadInfo> = threads.iter().filter(|t| t.pid == pid).collect();
            ProcessInfo {
                pid,
                ppid: None,
                command: process_names
                    .get(&pid)
                    .map(|n| vec![n.clone()])
                    .unwrap_or_default(),
                start: ts.iter().filter_map(|t| t.start).min(),
                end: ts.iter().filter_map(|t| t.end).max(),
                exit_status: None,
            }
        })
        .collect();
    let session = SessionHeader {
        command: vec!["import".into(), name.to_owned()],
        start_unix_ns: 0,
        start: Timestamp::from_nanos(if first_ts == u64::MAX { 0 } else { first_ts }),
        clock: "trace".into(),
        host: String::new(),
        method: Method::Instrumentation,
        probe_cost_ns: 0.0,
        os_events: if os_events.is_empty() {
            vec![]
        } else {
            vec!["switch".into()]
        },
        sample_event: None,
        sample_period: None,
        sample_period_is_time: false,
        lapse_version: env!("CARGO_PKG_VERSION").into(),
        notes: vec![format!("imported from Chrome trace {name}")],
        tsc: None,
    };
    Ok(Imported {
        session,
        processes,
        threads,
        modules,
        functions,
        events: out_events,
        os_events,
        unmatched_ends,
        skipped,
    })
}
