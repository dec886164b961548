//! Writes a synthetic sampling recording for measuring the timeline exports
//! on many samples (BENCHMARKS.md, "Large recordings"): THREADS threads of
//! one process sampled in turn at 1 kHz each, in chunks of 4,096 samples as
//! the recorder writes them (so every chunk mixes all threads), stacks drawn
//! from a fixed tree of 2,000 functions about 20 deep.
//!
//! cargo run --release -p lapse-export --example sample_recording -- OUT [SAMPLES] [THREADS]

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;

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
const STACKS: u32 = 20_000;
/// The recorder's batch (`SAMPLE_BATCH` in lapse-record).
const CHUNK: usize = 4096;

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let Some(out) = args.next().map(PathBuf::from) else {
        eprintln!("usage: sample_recording OUT [SAMPLES] [THREADS]");
        std::process::exit(2);
    };
    let samples: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(5_000_000);
    let threads: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(4).max(1);
    let mut w = DataWriter::new(BufWriter::new(File::create(&out)?))?;
    w.write_record(&Record::Session(SessionHeader {
        command: vec!["synthetic".into()],
        start_unix_ns: 0,
        start: Timestamp::from_nanos(0),
        clock: "monotonic".into(),
        host: String::new(),
        method: Method::Sampling,
        probe_cost_ns: 0.0,
        os_events: vec![],
        sample_event: Some("cpu-clock".into()),
        sample_period: Some(1_000_000),
        sample_period_is_time: true,
        lapse_version: "bench".into(),
        notes: vec![],
        tsc: None,
    }))?;
    w.write_record(&Record::Module(ModuleInfo {
        id: ModuleId(0),
        path: "/usr/bin/synthetic".into(),
        build_id: None,
    }))?;
    let functions: Vec<FunctionInfo> = (0..FUNCTIONS)
        .map(|f| FunctionInfo {
            id: FunctionId(f),
            module: ModuleId(0),
            address: 0x1000 + u64::from(f) * 64,
            name: format!("fn_{f}"),
            source_file: None,
            line: None,
        })
        .collect();
    w.write_record(&Record::Functions(functions))?;
    let frames: Vec<FrameInfo> = (0..FUNCTIONS)
        .map(|f| FrameInfo {
            id: FrameId(f),
            module: ModuleId(0),
            address: 0x1010 + u64::from(f) * 64,
            functions: vec![FrameFunction {
                function: FunctionId(f),
                source_file: None,
                line: None,
            }],
        })
        .collect();
    w.write_record(&Record::Frames(frames))?;
    // A tree of stacks: node n's parent is an earlier node, its frame a
    // function above its parent's, so paths look like call chains.
    let mut rng = Rng(0x5eed);
    let mut nodes: Vec<StackNode> = Vec::with_capacity(STACKS as usize);
    let mut depth = vec![0u32; STACKS as usize];
    for id in 0..STACKS {
        let parent = (id > 0).then(|| (rng.next() % u64::from(id)) as u32);
        let parent = parent.filter(|&p| depth[p as usize] < 20);
        let frame = match parent {
            Some(p) => {
                let pf = nodes[p as usize].frame.0;
                (pf + 1 + (rng.next() % 50) as u32).min(FUNCTIONS - 1)
            }
            None => (rng.next() % 16) as u32,
        };
        depth[id as usize] = parent.map_or(0, |p| depth[p as usize] + 1);
        nodes.push(StackNode {
            id: StackId(id),
            parent: parent.map(StackId),
            frame: FrameId(frame),
        });
    }
    w.write_record(&Record::Stacks(nodes))?;
    for tid in 0..threads {
        w.write_record(&Record::Thread(ThreadInfo {
            pid: 100,
            tid: 100 + tid,
            serial: 0,
            name: format!("worker {tid}"),
            start: Some(Timestamp::from_nanos(0)),
            end: Some(Timestamp::from_nanos(
                (samples / u64::from(threads) + 1) * 1_000_000,
            )),
        }))?;
    }
    let mut batch = Vec::with_capacity(CHUNK);
    for i in 0..samples {
        let tid = (i % u64::from(threads)) as u32;
        // Each thread ticks every ms, the threads a little apart.
        let ts = (i / u64::from(threads)) * 1_000_000 + u64::from(tid) * 1000;
        batch.push(Sample {
            pid: 100,
            tid: 100 + tid,
            serial: 0,
            ts: Timestamp::from_nanos(ts),
            cpu: tid % 2,
            stack: Some(StackId((rng.next() % u64::from(STACKS)) as u32)),
            weight: 1_000_000,
        });
        if batch.len() == CHUNK {
            w.write_samples(&batch)?;
            batch.clear();
        }
    }
    w.write_samples(&batch)?;
    w.write_record(&Record::Footer(Footer {
        end: Timestamp::from_nanos((samples / u64::from(threads) + 1) * 1_000_000),
        samples,
        ..Footer::default()
    }))?;
    w.flush()
}
