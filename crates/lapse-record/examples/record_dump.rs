//! Records a command with instrumentation and prints what the file holds:
//! `cargo run -p lapse-record --example record_dump -- OUT.lapse CMD ARGS...`

use std::path::PathBuf;

use lapse_data::{DataFile, EventKind};
use lapse_record::{record, CallGraph, MethodChoice, OsEventSource, RecordOptions, Target};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        eprintln!("usage: record_dump OUT CMD [ARGS...]");
        std::process::exit(2);
    }
    let opts = RecordOptions {
        method: MethodChoice::Auto,
        rate: lapse_record::SampleRate::DEFAULT,
        event: None,
        call_graph: CallGraph::FramePointer,
        os_events: vec![OsEventSource::Switch],
        off_cpu: false,
        inherit: true,
        libcalls: true,
        patch: Default::default(),
        buffer_size: None,
        filters: Default::default(),
        control: Default::default(),
        output: PathBuf::from(&args[0]),
        target: Target::Command(args[1..].to_vec()),
        symbol_progress: None,
        notices: lapse_record::Notices::to(|n| eprintln!("record_dump: {n}")),
    };
    let outcome = match record(&opts) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("record_dump: {e}");
            std::process::exit(1);
        }
    };
    println!("{outcome:?}");
    let file = match DataFile::open(&opts.output) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("record_dump: {e}");
            std::process::exit(1);
        }
    };
    println!(
        "session: probe_cost_ns={:.2} tsc={:?}",
        file.session.probe_cost_ns, file.session.tsc
    );
    println!("complete={} footer={:?}", file.is_complete(), file.footer);
    for p in &file.processes {
        println!("process {p:?}");
    }
    for t in &file.threads {
        let off: u64 = file
            .os_events
            .get(&t.key())
            .map_or(0, |v| v.iter().map(|e| e.to.since(e.from)).sum());
        let mut kinds = std::collections::BTreeMap::new();
        for e in file.os_events.get(&t.key()).into_iter().flatten() {
            let k = kinds.entry(format!("{:?}", e.kind)).or_insert((0u64, 0u64));
            k.0 += 1;
            k.1 += e.to.since(e.from);
        }
        println!("thread {t:?} off_cpu_ns={off} by kind (count, ns): {kinds:?}");
    }
    for m in &file.mappings {
        println!(
            "mapping {:#x}-{:#x} module {} bias {:#x} t={}",
            m.start,
            m.end,
            m.module.0,
            m.bias,
            m.time.as_nanos()
        );
    }
    for m in &file.modules {
        println!("module {m:?}");
    }
    let mut calls = vec![0u64; file.functions.len()];
    let mut events = Vec::new();
    for chunk in &file.event_chunks {
        if file.read_events(chunk, &mut events).is_ok() {
            for e in &events {
                if e.kind == EventKind::Enter {
                    if let Some(c) = calls.get_mut(e.function.0 as usize) {
                        *c += 1;
                    }
                }
            }
        }
    }
    for f in &file.functions {
        println!(
            "function {:>4} {:<24} {:#x} calls={}",
            f.id.0, f.name, f.address, calls[f.id.0 as usize]
        );
    }
}
