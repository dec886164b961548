//! Analysis-driver throughput: writes a synthetic instrumentation recording
//! (default 100 M events over 4 threads, 2,000 functions in 8 modules, a
//! fixed call graph about 20 deep, OS events every ~2,000 calls) and times the
//! functions-view analysis over it, several runs, median reported.
//!
//! cargo run --release -p lapse-analysis --example engine_bench -- [EVENTS] [THREADS] [RUNS]

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::time::Instant;

use lapse_analysis::{analyze, Query};
use lapse_data::*;

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

const FUNCTIONS: u32 = 2000;
const MODULES: u32 = 8;

fn write_file(path: &Path, events: u64, threads: u32) -> std::io::Result<()> {
    let mut w = DataWriter::new(BufWriter::new(File::create(path)?))?;
    w.write_record(&Record::Session(SessionHeader {
        command: vec!["synthetic".into()],
        start_unix_ns: 0,
        start: Timestamp::from_nanos(0),
        clock: "monotonic".into(),
        host: String::new(),
        method: Method::Instrumentation,
        probe_cost_ns: 7.5,
        os_events: vec!["switch".into()],
        sample_event: None,
        sample_period: None,
        sample_period_is_time: false,
        lapse_version: "bench".into(),
        notes: vec![],
        tsc: None,
    }))?;
    for m in 0..MODULES {
        w.write_record(&Record::Module(ModuleInfo {
            id: ModuleId(m),
            path: format!("/lib/m{m}.so"),
            build_id: None,
        }))?;
    }
    let functions: Vec<FunctionInfo> = (0..FUNCTIONS)
        .map(|f| FunctionInfo {
            id: FunctionId(f),
            module: ModuleId(f % MODULES),
            address: 0x1000 + u64::from(f) * 64,
            name: format!("fn_{f}"),
            source_file: None,
            line: None,
        })
        .collect();
    w.write_record(&Record::Functions(functions))?;
    let per_thread = events / u64::from(threads);
    // A fixed "program": each function calls a fixed list of callees (ids
    // above its own, so depth stays bounded at about 20) a fixed number of
    // times, as code does; which top-level routine runs next and how long each
    // interval takes vary. Real traces are this repetitive (loops), which is
    // what branch predictors and caches see in practice.
    let mut rng = Rng(0x5eed);
    let callees: Vec<Vec<(u32, u32)>> = (0..FUNCTIONS)
        .map(|f| {
            let n = if f + 1 >= FUNCTIONS {
                0
            } else {
                rng.next() % 4
            };
            (0..n)
                .map(|_| {
                    let c = (f + 1 + (rng.next() % 100) as u32).min(FUNCTIONS - 1);
                    (c, 1 + (rng.next() % 3) as u32)
                })
                .collect()
        })
        .collect();
    for tid in 1..=threads {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ u64::from(tid));
        let mut ts = 1_000u64;
        let mut batch = Vec::with_capacity(1 << 16);
        let mut offs = Vec::new();
        let mut n = 0u64;
        while n < per_thread {
            // One top-level call: depth-first walk of the fixed call graph, at most 4,000 events.
            let root = (rng.next() % 64) as u32;
            let mut budget = 2000u32.min(((per_thread - n) / 2) as u32).max(1);
            let mut todo: Vec<(u32, bool)> = vec![(root, true)];
            while let Some((f, entering)) = todo.pop() {
                let r = rng.next();
                ts += 5 + (r & 31);
                if entering {
                    batch.push(Event {
                        ts: Timestamp::from_nanos(ts),
                        kind: EventKind::Enter,
                        function: FunctionId(f),
                    });
                    todo.push((f, false));
                    budget = budget.saturating_sub(1);
                    if budget > 0 {
                        for &(c, times) in callees[f as usize].iter().rev() {
                            for _ in 0..times {
                                todo.push((c, true));
                            }
                        }
                    }
                } else {
                    batch.push(Event {
                        ts: Timestamp::from_nanos(ts),
                        kind: EventKind::Exit,
                        function: FunctionId(f),
                    });
                }
                if (r >> 48).is_multiple_of(4000) {
                    offs.push(OsEvent {
                        from: Timestamp::from_nanos(ts + 1),
                        to: Timestamp::from_nanos(ts + 2 + (r & 4095)),
                        kind: OsEventKind::Switch,
                    });
                    ts += 3 + (r & 4095);
                }
                n += 1;
                if batch.len() == 1 << 16 {
                    w.write_events(1, tid, &batch)?;
                    batch.clear();
                }
            }
        }
        w.write_events(1, tid, &batch)?;
        w.write_record(&Record::Thread(ThreadInfo {
            pid: 1,
            tid,
            serial: 0,
            name: format!("t{tid}"),
            start: Some(Timestamp::from_nanos(0)),
            end: Some(Timestamp::from_nanos(ts + 10)),
        }))?;
        for chunk in offs.chunks(100_000) {
            w.write_record(&Record::OsEvents(OsEventBlock {
                pid: 1,
                tid,
                serial: 0,
                events: chunk.to_vec(),
            }))?;
        }
    }
    w.write_record(&Record::Footer(Footer {
        events,
        ..Default::default()
    }))?;
    w.flush()
}

/// User + system CPU time of this process so far.
fn cpu_seconds() -> f64 {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given.
    let u = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr());
        u.assume_init()
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let events: u64 = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000_000);
    let threads: u32 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(4);
    let runs: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(5);
    let path = std::env::temp_dir().join(format!("lapse-engine-bench-{events}-{threads}.data"));
    if !path.exists() {
        let t = Instant::now();
        write_file(&path, events, threads).expect("write synthetic file");
        eprintln!(
            "wrote {} in {:.1} s",
            path.display(),
            t.elapsed().as_secs_f64()
        );
    }
    let file = DataFile::open(&path).expect("open");
    let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let total = file.total_events();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if std::env::var_os("ENGINE_ONLY").is_some() {
        engine_only(&file, runs);
        return;
    }
    let mut times = Vec::new();
    let mut cpu = Vec::new();
    for _ in 0..runs {
        let (t, c) = (Instant::now(), cpu_seconds());
        let a = analyze(&file, &Query::default()).expect("analyze");
        times.push(t.elapsed().as_secs_f64());
        cpu.push(cpu_seconds() - c);
        std::hint::black_box(a);
    }
    cpu.sort_by(f64::total_cmp);
    let cpu_median = cpu[cpu.len() / 2];
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    let rate = total as f64 / median;
    println!(
        "events:            {total} in {threads} threads ({:.2} bytes/event on disk)",
        bytes as f64 / total as f64
    );
    println!(
        "runs:              {runs}, median {median:.3} s (min {:.3}, max {:.3})",
        times[0],
        times[times.len() - 1]
    );
    println!(
        "throughput:        {:.1} M events/s wall on {cores} cores",
        rate / 1e6
    );
    println!(
        "per core:          {:.1} M events/s per CPU-second (median CPU {cpu_median:.3} s; {:.2} cores busy)",
        total as f64 / cpu_median / 1e6,
        cpu_median / median
    );
}

/// The interval engine alone on one core: every thread's events decoded into
/// memory first, then only `ThreadRun::feed` is timed.
fn engine_only(file: &DataFile, runs: usize) {
    use lapse_analysis::instrument::{Accumulator, Config, ThreadRun};
    let module_of: Vec<ModuleId> = file.functions.iter().map(|f| f.module).collect();
    let threads = file.all_threads();
    let streams: Vec<Vec<Event>> = threads
        .iter()
        .map(|t| {
            let mut all = Vec::new();
            let mut v = Vec::new();
            for c in file.thread_chunks(t.key()) {
                file.read_events(c, &mut v).expect("decode");
                all.extend_from_slice(&v);
            }
            all
        })
        .collect();
    let total: usize = streams.iter().map(Vec::len).sum();
    let mut times = Vec::new();
    for _ in 0..runs {
        let t0 = Instant::now();
        let mut acc = Accumulator::new(&module_of, file.modules.len() + 1);
        for (t, events) in threads.iter().zip(&streams) {
            let off = file.os_events.get(&t.key()).map_or(&[][..], Vec::as_slice);
            let config = Config {
                probe_cost_ns: file.session.probe_cost_ns,
                ..Config::default()
            };
            let mut run = ThreadRun::new(&mut acc, &module_of, config, t.key(), t.start, off);
            run.feed(events);
            run.finish(t.end);
        }
        acc.finish(&module_of);
        times.push(t0.elapsed().as_secs_f64());
        std::hint::black_box(acc);
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    println!(
        "engine only:       {total} events, median {median:.3} s = {:.1} M events/s on one core ({:.2} ns/event)",
        total as f64 / median / 1e6,
        median * 1e9 / total as f64
    );
}
