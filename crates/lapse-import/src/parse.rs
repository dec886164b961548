use std::collections::HashMap;
use std::io::{self, Read, Write};

use lapse_analysis::nesting::{CallStack, Exit};
use lapse_data::*;

use crate::stream::{self, Id, Micros, StreamError, TraceEvent};

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

/// A parsed trace, ready to be written as a data file.
#[derive(Debug)]
pub struct Imported {
    pub session: SessionHeader,
    pub processes: Vec<ProcessInfo>,
    pub threads: Vec<ThreadInfo>,
    pub modules: Vec<ModuleInfo>,
    pub functions: Vec<FunctionInfo>,
    /// Per thread: events in time order.
    pub events: Vec<(ThreadKey, Vec<Event>)>,
    pub os_events: Vec<OsEventBlock>,
    /// Ends (`E`, or an `X`'s end) that matched no open event on their thread.
    pub unmatched_ends: u64,
    /// Events of other phases (counters, flows, ...) that lapse does not use.
    pub skipped: u64,
    /// Instants of category `lapse:mark` (the marks lapse's exports write).
    pub marks: Vec<Mark>,
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
        for m in &self.marks {
            w.write_record(&Record::Control(ControlEvent::Mark(m.clone())))?;
        }
        let mut total = 0u64;
        for (ThreadKey { pid, tid, .. }, events) in &self.events {
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

/// What an end event closes.
#[derive(Clone, Copy, Debug)]
enum Target {
    /// An `X` event's end: its own function.
    Function(FunctionId),
    /// A named `E`: the innermost open event of that name (in any category).
    Name(u32),
    /// An `E` without a name: whatever is on top.
    Top,
}

/// One begin or end on a thread, before they are put in time order.
struct Pending {
    ts: u64,
    /// Sort key after the timestamp: see [`order`].
    order: (u8, u64, u64),
    what: Step,
}

#[derive(Clone, Copy, Debug)]
enum Step {
    Begin(FunctionId),
    End(Target),
    /// A zero-length `X`: a call that contains nothing.
    Point(FunctionId),
}

/// Equal timestamps: ends of `X` events come first, those that began later
/// (inner ones) before those that began earlier, then everything else in
/// file order, so that complete events nest.
fn order(x_end_of: Option<u64>, seq: u64) -> (u8, u64, u64) {
    match x_end_of {
        Some(begin) => (0, u64::MAX - begin, seq),
        None => (1, 0, seq),
    }
}

/// Ids for pids/tids given as strings (some tools do that).
#[derive(Default)]
struct Ids {
    named: HashMap<String, u32>,
}

impl Ids {
    fn get(&mut self, v: Option<&Id>) -> Option<u32> {
        match v {
            None => Some(0),
            Some(Id::Num(n)) => u32::try_from(*n).ok(),
            Some(Id::Name(s)) => {
                let next = 0x4000_0000 + self.named.len() as u32;
                Some(*self.named.entry(s.clone()).or_insert(next))
            }
            Some(Id::Invalid) => None,
        }
    }
}

fn micros_to_ns(v: Micros) -> Option<u64> {
    let us = v.0?;
    (0.0..1.8e13)
        .contains(&us)
        .then(|| (us * 1000.0).round() as u64)
}

/// Everything gathered while the events stream by.
#[derive(Default)]
struct Gather {
    ids: Ids,
    modules: Vec<ModuleInfo>,
    module_index: HashMap<String, ModuleId>,
    functions: Vec<FunctionInfo>,
    function_index: HashMap<(ModuleId, String), FunctionId>,
    /// Event names, and each function's name among them.
    names: HashMap<String, u32>,
    name_of: Vec<u32>,
    per_thread: HashMap<ThreadKey, Vec<Pending>>,
    switches: HashMap<ThreadKey, Vec<(u64, bool)>>,
    process_names: HashMap<u32, String>,
    thread_names: HashMap<ThreadKey, String>,
    marks: Vec<Mark>,
    skipped: u64,
    seq: u64,
}

impl Gather {
    fn name_id(&mut self, name: &str) -> u32 {
        let next = self.names.len() as u32;
        *self.names.entry(name.to_owned()).or_insert(next)
    }

    fn function(&mut self, name: &str, category: &str) -> FunctionId {
        let module = match self.module_index.get(category) {
            Some(&m) => m,
            None => {
                let id = ModuleId(self.modules.len() as u32);
                self.modules.push(ModuleInfo {
                    id,
                    path: category.to_owned(),
                    build_id: None,
                });
                self.module_index.insert(category.to_owned(), id);
                id
            }
        };
        if let Some(&f) = self.function_index.get(&(module, name.to_owned())) {
            return f;
        }
        let id = FunctionId(self.functions.len() as u32);
        self.functions.push(FunctionInfo {
            id,
            module,
            address: 0,
            name: name.to_owned(),
            source_file: None,
            line: None,
        });
        let n = self.name_id(name);
        self.name_of.push(n);
        self.function_index.insert((module, name.to_owned()), id);
        id
    }

    fn push(&mut self, key: ThreadKey, ts: u64, x_end_of: Option<u64>, what: Step) {
        self.seq += 1;
        let order = order(x_end_of, self.seq);
        self.per_thread
            .entry(key)
            .or_default()
            .push(Pending { ts, order, what });
    }

    /// Takes one event; `Err` says what is wrong with it.
    fn event(&mut self, ev: TraceEvent, file_module: &str) -> Result<(), &'static str> {
        let Some(ph) = ev.ph.as_deref() else {
            return Err("missing \"ph\" (phase)");
        };
        let pid = self
            .ids
            .get(ev.pid.as_ref())
            .ok_or("\"pid\" is not a number or string")?;
        let tid = self
            .ids
            .get(ev.tid.as_ref())
            .ok_or("\"tid\" is not a number or string")?;
        let ev_name = ev.name.as_deref();
        if ph == "M" {
            let arg = ev.args.and_then(|a| a.0);
            match (ev_name, arg) {
                (Some("process_name"), Some(n)) => {
                    self.process_names.insert(pid, n);
                }
                (Some("thread_name"), Some(n)) => {
                    self.thread_names.insert(ThreadKey::new(pid, tid), n);
                }
                _ => self.skipped += 1,
            }
            return Ok(());
        }
        if !matches!(ph, "B" | "E" | "X" | "i" | "I") {
            self.skipped += 1;
            return Ok(());
        }
        let ts = match ev.ts {
            Some(v) => {
                micros_to_ns(v).ok_or("\"ts\" is not a non-negative number of microseconds")?
            }
            None => return Err("missing \"ts\""),
        };
        if matches!(ph, "i" | "I") {
            match ev_name {
                Some("lapse:switch_out") => self
                    .switches
                    .entry(ThreadKey::new(pid, tid))
                    .or_default()
                    .push((ts, true)),
                Some("lapse:switch_in") => self
                    .switches
                    .entry(ThreadKey::new(pid, tid))
                    .or_default()
                    .push((ts, false)),
                Some(text) if ev.cat.as_deref() == Some("lapse:mark") => self.marks.push(Mark {
                    pid,
                    tid,
                    at: Timestamp::from_nanos(ts),
                    text: text.to_owned(),
                }),
                _ => self.skipped += 1,
            }
            return Ok(());
        }
        let category = ev
            .cat
            .as_deref()
            .filter(|c| !c.is_empty())
            .unwrap_or(file_module);
        let key = ThreadKey::new(pid, tid);
        match ph {
            "B" => {
                let f = self.function(ev_name.unwrap_or("(unnamed)"), category);
                self.push(key, ts, None, Step::Begin(f));
            }
            "E" => {
                let target = match ev_name {
                    Some(n) => Target::Name(self.name_id(n)),
                    None => Target::Top,
                };
                self.push(key, ts, None, Step::End(target));
            }
            _ => {
                let dur = match ev.dur {
                    Some(v) => micros_to_ns(v)
                        .ok_or("\"dur\" is not a non-negative number of microseconds")?,
                    None => return Err("X event without \"dur\""),
                };
                let f = self.function(ev_name.unwrap_or("(unnamed)"), category);
                if dur == 0 {
                    self.push(key, ts, None, Step::Point(f));
                } else {
                    self.push(key, ts, None, Step::Begin(f));
                    self.push(
                        key,
                        ts.saturating_add(dur),
                        Some(ts),
                        Step::End(Target::Function(f)),
                    );
                }
            }
        }
        Ok(())
    }
}

/// Parses a Chrome trace held in memory; see [`import_reader`].
pub fn import(bytes: &[u8], name: &str) -> Result<Imported, ImportError> {
    import_reader(bytes, name)
}

/// Parses a Chrome trace as it is read from `reader`. `name` (the file
/// name) is used in messages and as the module of events without a
/// category. Memory holds the events (a few dozen bytes each), never the text.
pub fn import_reader(reader: impl Read, name: &str) -> Result<Imported, ImportError> {
    let file_module = name.rsplit('/').next().unwrap_or(name).to_owned();
    let mut g = Gather::default();
    stream::for_each_event(reader, |_, ev| g.event(ev, &file_module)).map_err(|e| match e {
        StreamError::Json { shape: true, .. } => ImportError::Shape {
            name: name.to_owned(),
        },
        StreamError::Json { source, .. } => ImportError::Json {
            name: name.to_owned(),
            source,
        },
        StreamError::NotAnObject { index } => ImportError::Event {
            name: name.to_owned(),
            index,
            what: "not a JSON object".into(),
        },
        StreamError::Handler { index, error } => ImportError::Event {
            name: name.to_owned(),
            index,
            what: error.to_owned(),
        },
    })?;
    let Gather {
        modules,
        functions,
        name_of,
        mut per_thread,
        mut switches,
        process_names,
        mut thread_names,
        marks,
        skipped,
        ..
    } = g;
    if per_thread.is_empty() {
        return Err(ImportError::NoEvents {
            name: name.to_owned(),
        });
    }

    let mut keys: Vec<ThreadKey> = per_thread
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
    // The analysis' own stack repair: an end that skips frames closes them
    // first (as explicit exits), an end of nothing is dropped. (One stack
    // for all threads: its count of open frames by function is made once.)
    let mut stack: CallStack<FunctionId> = CallStack::default();
    for key in keys {
        let mut pending = per_thread.remove(&key).unwrap_or_default();
        pending.sort_unstable_by_key(|p| (p.ts, p.order));
        stack.clear();
        // Open frames per event name: a named end of a name with none open
        // matches nothing, known without searching the stack.
        let mut open_names: HashMap<u32, u32> = HashMap::new();
        let mut events = Vec::with_capacity(pending.len());
        for p in &pending {
            let ts = Timestamp::from_nanos(p.ts);
            let event = |kind, function| Event { ts, kind, function };
            let exit = |f| event(EventKind::Exit, f);
            // Every frame closed here: its exit, and one name less open.
            let closing = |g: FunctionId, events: &mut Vec<Event>, open: &mut HashMap<u32, u32>| {
                if let Some(n) = name_of.get(g.0 as usize).and_then(|n| open.get_mut(n)) {
                    *n = n.saturating_sub(1);
                }
                events.push(exit(g));
            };
            let closed = match p.what {
                Step::Begin(f) => {
                    stack.push(f);
                    if let Some(&n) = name_of.get(f.0 as usize) {
                        *open_names.entry(n).or_default() += 1;
                    }
                    events.push(event(EventKind::Enter, f));
                    continue;
                }
                Step::Point(f) => {
                    events.push(event(EventKind::Enter, f));
                    events.push(exit(f));
                    continue;
                }
                Step::End(Target::Function(f)) => {
                    stack.exit(f, |g, _| closing(g, &mut events, &mut open_names))
                }
                Step::End(Target::Name(n)) if open_names.get(&n).is_none_or(|&c| c == 0) => {
                    Exit::Unmatched
                }
                Step::End(Target::Name(n)) => stack.exit_where(
                    |g| name_of.get(g.0 as usize) == Some(&n),
                    |g, _| closing(g, &mut events, &mut open_names),
                ),
                Step::End(Target::Top) => match stack.pop() {
                    Some(f) => {
                        closing(f, &mut events, &mut open_names);
                        Exit::Returned
                    }
                    None => Exit::Unmatched,
                },
            };
            if closed == Exit::Unmatched {
                unmatched_ends += 1;
            }
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
            pid: key.pid,
            tid: key.tid,
            serial: 0,
            name: thread_names.remove(&key).unwrap_or_default(),
            start: lo,
            end: hi,
        });
        if !offs.is_empty() {
            os_events.push(OsEventBlock {
                pid: key.pid,
                tid: key.tid,
                serial: 0,
                events: offs,
            });
        }
        out_events.push((key, events));
    }
    // One pass over the threads (ordered by pid, tid) makes the processes.
    let mut processes: Vec<ProcessInfo> = Vec::new();
    for t in &threads {
        match processes.last_mut() {
            Some(p) if p.pid == t.pid => {
                p.start = p.start.into_iter().chain(t.start).min();
                p.end = p.end.into_iter().chain(t.end).max();
            }
            _ => processes.push(ProcessInfo {
                pid: t.pid,
                ppid: None,
                command: process_names
                    .get(&t.pid)
                    .map(|n| vec![n.clone()])
                    .unwrap_or_default(),
                start: t.start,
                end: t.end,
                exit_status: None,
            }),
        }
    }
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
        marks,
    })
}
