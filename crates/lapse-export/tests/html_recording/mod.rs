//! Recordings for the HTML page's tests: a small program with threads,
//! recursion, off-CPU periods, source lines and hostile names, at any
//! length; and a 20,000-deep recursion imported from a Chrome trace.

#![allow(dead_code)]

use std::path::Path;

use lapse_data::*;

const START: u64 = 1_000_000_000;

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1)
    }
}

/// Function names, ids in order; two of them try to break out of the
/// page's script element.
pub const FUNCTIONS: [&str; 12] = [
    "main",
    "run_jobs",
    "parse_input",
    "tokenize",
    "eval",
    "fib",
    "hash_block",
    "memcpy",
    "write_output",
    "</script><!--evil",
    "std::vector<int>::push_back",
    "worker_loop",
];

fn id(name: &str) -> FunctionId {
    FunctionId(FUNCTIONS.iter().position(|f| *f == name).unwrap() as u32)
}

/// Builds one thread's events: `rounds` iterations of its loop.
struct Thread {
    rng: Rng,
    ts: u64,
    events: Vec<Event>,
    off: Vec<OsEvent>,
}

impl Thread {
    fn step(&mut self, min: u64, spread: u64) {
        self.ts += min + self.rng.next(spread);
    }

    fn enter(&mut self, f: &str) {
        self.step(200, 800);
        self.events.push(Event {
            ts: Timestamp::from_nanos(self.ts),
            kind: EventKind::Enter,
            function: id(f),
        });
    }

    fn exit(&mut self, f: &str) {
        self.step(300, 2_000);
        self.events.push(Event {
            ts: Timestamp::from_nanos(self.ts),
            kind: EventKind::Exit,
            function: id(f),
        });
    }

    fn call(&mut self, f: &str, body: impl FnOnce(&mut Thread)) {
        self.enter(f);
        body(self);
        self.exit(f);
    }

    fn fib(&mut self, n: u32) {
        self.call("fib", |t| {
            if n > 1 {
                t.fib(n - 1);
                t.fib(n - 2);
            }
        });
    }

    fn blocked(&mut self, ns: u64) {
        let from = self.ts + 100;
        self.ts = from + ns;
        self.off.push(OsEvent {
            from: Timestamp::from_nanos(from),
            to: Timestamp::from_nanos(self.ts),
            kind: OsEventKind::Switch,
        });
    }
}

/// The program: thread 1 parses, evaluates (fib recursion) and writes
/// (blocking in the kernel now and then); threads 2 and 3 hash blocks.
/// `rounds` scales the number of events, not the shape.
pub fn program(rounds: u32) -> DataFile {
    let mut bytes = Vec::new();
    let mut w = DataWriter::new(&mut bytes).unwrap();
    let at = |ns: u64| Timestamp::from_nanos(START + ns);
    w.write_record(&Record::Session(SessionHeader {
        command: vec!["./app".into(), "--jobs".into(), "3".into()],
        start_unix_ns: 1_700_000_000_000_000_000,
        start: at(0),
        clock: "monotonic".into(),
        host: "test".into(),
        method: Method::Instrumentation,
        probe_cost_ns: 12.0,
        os_events: vec!["switch".into()],
        sample_event: None,
        sample_period: None,
        sample_period_is_time: false,
        lapse_version: "test".into(),
        notes: vec![],
        tsc: None,
    }))
    .unwrap();
    for (m, path) in [(0, "/usr/bin/app"), (1, "/lib/libc.so.6")] {
        w.write_record(&Record::Module(ModuleInfo {
            id: ModuleId(m),
            path: path.into(),
            build_id: None,
        }))
        .unwrap();
    }
    let functions = FUNCTIONS
        .iter()
        .enumerate()
        .map(|(i, name)| FunctionInfo {
            id: FunctionId(i as u32),
            module: ModuleId(u32::from(*name == "memcpy")),
            address: 0x1000 + 0x40 * i as u64,
            name: (*name).into(),
            source_file: (*name != "memcpy").then(|| "src/app.c".into()),
            line: (*name != "memcpy").then_some(10 + 7 * i as u32),
        })
        .collect();
    w.write_record(&Record::Functions(functions)).unwrap();
    let mut threads = Vec::new();
    for tid in 1..=3u32 {
        let mut t = Thread {
            rng: Rng(0x5eed + u64::from(tid)),
            ts: START + 1_000 * u64::from(tid),
            events: Vec::new(),
            off: Vec::new(),
        };
        let begin = t.ts;
        if tid == 1 {
            t.call("main", |t| {
                for r in 0..rounds {
                    t.call("parse_input", |t| {
                        for _ in 0..3 {
                            t.call("tokenize", |t| {
                                t.call("std::vector<int>::push_back", |_| {})
                            });
                        }
                    });
                    t.call("eval", |t| t.fib(6 + r % 3));
                    t.call("write_output", |t| {
                        t.call("memcpy", |_| {});
                        if r % 4 == 0 {
                            t.blocked(40_000);
                        }
                    });
                    if r % 5 == 0 {
                        t.call("</script><!--evil", |_| {});
                    }
                }
            });
        } else {
            t.call("worker_loop", |t| {
                for r in 0..rounds * 2 {
                    t.call("run_jobs", |t| {
                        t.call("hash_block", |t| {
                            for _ in 0..4 {
                                t.call("memcpy", |_| {});
                            }
                        });
                        if r % 3 == u32::from(tid == 3) {
                            t.fib(4);
                        }
                    });
                    if r % 9 == 0 {
                        t.blocked(15_000 * u64::from(tid));
                    }
                }
            });
        }
        threads.push((tid, begin, t));
    }
    let end = threads.iter().map(|(_, _, t)| t.ts).max().unwrap_or(START) + 1_000;
    w.write_record(&Record::Process(ProcessInfo {
        pid: 7,
        ppid: None,
        command: vec!["./app".into(), "--jobs".into(), "3".into()],
        start: Some(at(0)),
        end: Some(Timestamp::from_nanos(end)),
        exit_status: Some(0),
    }))
    .unwrap();
    for (tid, begin, t) in &threads {
        let name = if *tid == 1 { "app" } else { "worker" };
        w.write_record(&Record::Thread(ThreadInfo {
            pid: 7,
            tid: 7 + tid - 1,
            serial: 0,
            name: name.into(),
            start: Some(Timestamp::from_nanos(begin - 500)),
            end: Some(Timestamp::from_nanos(t.ts + 500)),
        }))
        .unwrap();
        w.write_record(&Record::OsEvents(OsEventBlock {
            pid: 7,
            tid: 7 + tid - 1,
            serial: 0,
            events: t.off.clone(),
        }))
        .unwrap();
        for chunk in t.events.chunks(4096) {
            w.write_events(7, 7 + tid - 1, chunk).unwrap();
        }
    }
    w.write_record(&Record::Footer(Footer {
        end: Timestamp::from_nanos(end),
        ..Footer::default()
    }))
    .unwrap();
    drop(w);
    DataFile::from_bytes(Path::new("app.data"), bytes).unwrap()
}

/// `main` calling `rec` recursively `depth` deep, as a Chrome trace of
/// nested B/E events imported by `lapse import` (which nests iteratively).
pub fn deep_recursion(depth: u32) -> DataFile {
    let mut trace = String::from("[");
    trace.push_str(r#"{"ph":"B","name":"main","pid":1,"tid":1,"ts":0}"#);
    for i in 0..depth {
        trace.push_str(&format!(
            r#",{{"ph":"B","name":"rec","pid":1,"tid":1,"ts":{}}}"#,
            1 + i
        ));
    }
    for i in 0..depth {
        trace.push_str(&format!(
            r#",{{"ph":"E","name":"rec","pid":1,"tid":1,"ts":{}}}"#,
            depth + 1 + 2 * i
        ));
    }
    trace.push_str(&format!(
        r#",{{"ph":"E","name":"main","pid":1,"tid":1,"ts":{}}}]"#,
        3 * depth + 5
    ));
    let imported = lapse_import::import(trace.as_bytes(), "deep.json").unwrap();
    let mut bytes = Vec::new();
    imported.write(&mut bytes).unwrap();
    DataFile::from_bytes(Path::new("deep.data"), bytes).unwrap()
}
