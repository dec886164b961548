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

/// A sampling recording as the Lua run of #34 looked: one thread, a sample
/// every millisecond of cpu-clock (frequency mode: no fixed period in the
/// header, each sample's weight is its period) for `samples` ms, every
/// stack `common` frames of interpreter (`lua_main`, `luaV_execute_1`, ...)
/// with the interesting work below them: `parse` or `eval` (then `eval >
/// fold`), alternating every 10 ms, and the thread idle (no samples) from
/// its 3/4 mark to 7/8.
pub fn sampled_deep(samples: u64, common: u32) -> DataFile {
    sampled_deep_with(samples, common, false)
}

/// [`sampled_deep`] recorded with `--off-cpu`: in its idle gap the thread
/// was blocked in `eval > read_socket` for its first 30 ms, then preempted
/// in `parse` until it ran again.
pub fn sampled_off_cpu(samples: u64, common: u32) -> DataFile {
    sampled_deep_with(samples, common, true)
}

fn sampled_deep_with(samples: u64, common: u32, off_cpu: bool) -> DataFile {
    let mut bytes = Vec::new();
    let mut w = DataWriter::new(&mut bytes).unwrap();
    let at = |ns: u64| Timestamp::from_nanos(START + ns);
    const MS: u64 = 1_000_000;
    let end = at(samples * MS + MS);
    w.write_record(&Record::Session(SessionHeader {
        command: vec!["lua".into(), "bench.lua".into()],
        start_unix_ns: 1_700_000_000_000_000_000,
        start: at(0),
        clock: "monotonic".into(),
        host: "test".into(),
        method: Method::Sampling,
        probe_cost_ns: 0.0,
        os_events: vec![],
        sample_event: Some("cpu-clock".into()),
        sample_period: None,
        sample_period_is_time: false,
        lapse_version: "test".into(),
        notes: vec![],
        tsc: None,
    }))
    .unwrap();
    w.write_record(&Record::Process(ProcessInfo {
        pid: 7,
        ppid: None,
        command: vec!["lua".into(), "bench.lua".into()],
        start: Some(at(0)),
        end: Some(end),
        exit_status: Some(0),
    }))
    .unwrap();
    w.write_record(&Record::Thread(ThreadInfo {
        pid: 7,
        tid: 7,
        serial: 0,
        name: "lua".into(),
        start: Some(at(0)),
        end: Some(end),
    }))
    .unwrap();
    w.write_record(&Record::Module(ModuleInfo {
        id: ModuleId(0),
        path: "/usr/bin/lua".into(),
        build_id: None,
    }))
    .unwrap();
    let mut names: Vec<String> = (0..common)
        .map(|i| {
            if i == 0 {
                "lua_main".to_owned()
            } else {
                format!("luaV_execute_{i}")
            }
        })
        .collect();
    names.extend(["parse", "eval", "fold"].map(String::from));
    if off_cpu {
        names.push("read_socket".into());
    }
    w.write_record(&Record::Functions(
        names
            .iter()
            .enumerate()
            .map(|(i, name)| FunctionInfo {
                id: FunctionId(i as u32),
                module: ModuleId(0),
                address: 0x1000 + 0x100 * i as u64,
                name: name.clone(),
                source_file: Some("lvm.c".into()),
                line: Some(10 + i as u32),
            })
            .collect(),
    ))
    .unwrap();
    w.write_record(&Record::Frames(
        (0..names.len() as u32)
            .map(|i| FrameInfo {
                id: FrameId(i),
                module: ModuleId(0),
                address: 0x1010 + 0x100 * u64::from(i),
                functions: vec![FrameFunction {
                    function: FunctionId(i),
                    source_file: Some("lvm.c".into()),
                    line: Some(10 + i),
                }],
            })
            .collect(),
    ))
    .unwrap();
    // Stack nodes: the common chain, then parse, eval and eval > fold.
    let mut nodes: Vec<StackNode> = (0..common)
        .map(|i| StackNode {
            id: StackId(i),
            parent: i.checked_sub(1).map(StackId),
            frame: FrameId(i),
        })
        .collect();
    let below = StackId(common - 1);
    for (id, parent, frame) in [
        (common, below, common),
        (common + 1, below, common + 1),
        (common + 2, StackId(common + 1), common + 2),
        (common + 3, StackId(common + 1), common + 3),
    ] {
        if id == common + 3 && !off_cpu {
            continue;
        }
        nodes.push(StackNode {
            id: StackId(id),
            parent: Some(parent),
            frame: FrameId(frame),
        });
    }
    w.write_record(&Record::Stacks(nodes)).unwrap();
    let idle = (samples * 3 / 4, samples * 7 / 8);
    let kept: Vec<Sample> = (1..=samples)
        .filter(|i| !(idle.0..idle.1).contains(i))
        .map(|i| Sample {
            pid: 7,
            tid: 7,
            serial: 0,
            ts: at(i * MS),
            cpu: 0,
            stack: Some(StackId(match (i / 10) % 2 {
                0 => common,
                _ if i % 2 == 0 => common + 2,
                _ => common + 1,
            })),
            weight: MS,
        })
        .collect();
    w.write_samples(&kept).unwrap();
    if off_cpu {
        // (the last sample before the gap is at idle.0 - 1 ms, the first
        // after it covers the millisecond before idle.1)
        let (from, to) = ((idle.0 - 1) * MS, (idle.1 - 1) * MS);
        let period = |from: u64, to: u64, stack: u32, preempted: bool| OffCpuPeriod {
            pid: 7,
            tid: 7,
            serial: 0,
            from: at(from),
            to: at(to),
            stack: Some(StackId(stack)),
            preempted,
        };
        w.write_record(&Record::OffCpu(vec![
            period(from, from + 30 * MS, common + 3, false),
            period(from + 30 * MS, to, common, true),
        ]))
        .unwrap();
    }
    w.write_record(&Record::Footer(Footer {
        end,
        ..Footer::default()
    }))
    .unwrap();
    drop(w);
    DataFile::from_bytes(Path::new("lua.data"), bytes).unwrap()
}
