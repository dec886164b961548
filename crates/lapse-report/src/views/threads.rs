//! `threads` and `processes`: one row per thread (pid, tid, name) or per
//! process (pid, command), in one pass over the analysis' thread rows.

use std::collections::{BTreeMap, HashMap};

use lapse_analysis::run::Analysis;
use lapse_analysis::sample::Counts;
use lapse_analysis::tree::Weight;
use lapse_analysis::values::ModuleStats;
use lapse_data::{DataFile, ThreadKey};

use super::{columns, ViewOutput};
use crate::columns::{key, Ctx, Values};
use crate::table::{shown, Cell, Column, Kind};

const THREAD_ID: [Column; 3] = [
    shown(key::PID, Kind::Int, "pid"),
    shown(key::TID, Kind::Int, "tid"),
    shown("thread_name", Kind::Text, "thread"),
];

/// The threads' columns when two threads of the recording had one thread
/// id (the kernel reused it): which of them a row is (0: the id's first).
const REUSED_THREAD_ID: [Column; 4] = [
    shown(key::PID, Kind::Int, "pid"),
    shown(key::TID, Kind::Int, "tid"),
    shown("thread_serial", Kind::Int, "serial"),
    shown("thread_name", Kind::Text, "thread"),
];

const PROCESS_ID: [Column; 2] = [
    shown(key::PID, Kind::Int, "pid"),
    shown("command", Kind::Text, "command"),
];

pub fn view(file: &DataFile, a: &Analysis, ctx: &Ctx<'_>, processes: bool) -> ViewOutput {
    // A process row is keyed (pid, 0), so both views share one aggregation.
    let key = |k: ThreadKey| {
        if processes {
            ThreadKey::new(k.pid, 0)
        } else {
            k
        }
    };
    match a {
        Analysis::Instr(r) => {
            let mut rows: BTreeMap<ThreadKey, ModuleStats> = BTreeMap::new();
            for t in &r.acc.threads {
                let row = rows.entry(key(t.key())).or_default();
                row.merge(&ModuleStats {
                    calls: t.calls,
                    time: t.time,
                    probe_overhead: t.probe_overhead,
                    preempted: t.preempted,
                });
            }
            table(file, ctx, processes, rows)
        }
        Analysis::Sample(r) => {
            let mut rows: BTreeMap<ThreadKey, Counts> = BTreeMap::new();
            for (&k, c) in &r.analysis.threads {
                rows.entry(key(k)).or_default().merge(c);
            }
            table(file, ctx, processes, rows)
        }
    }
}

fn table<V: Values>(
    file: &DataFile,
    ctx: &Ctx<'_>,
    processes: bool,
    rows: BTreeMap<ThreadKey, V>,
) -> ViewOutput {
    let mut names: HashMap<ThreadKey, &str> = HashMap::new();
    for t in &file.threads {
        names.entry(t.key()).or_insert(t.name.as_str());
    }
    let mut commands: HashMap<u32, String> = HashMap::new();
    for p in &file.processes {
        // The first record of a process names it (later ones may only update it).
        if !p.command.is_empty() {
            commands.entry(p.pid).or_insert_with(|| p.command.join(" "));
        }
    }
    let reused = !processes && rows.keys().any(|k| k.serial > 0);
    let rows = rows
        .into_iter()
        .map(|(key, v)| {
            let ThreadKey { pid, tid, serial } = key;
            let mut row = if processes {
                vec![
                    Cell::Int(u64::from(pid)),
                    Cell::opt_text(commands.get(&pid).map(String::as_str)),
                ]
            } else {
                let mut id = vec![Cell::Int(u64::from(pid)), Cell::Int(u64::from(tid))];
                if reused {
                    id.push(Cell::Int(u64::from(serial)));
                }
                id.push(Cell::opt_text(names.get(&key).copied()));
                id
            };
            row.extend(v.cells(ctx));
            row
        })
        .collect();
    let id: &[Column] = if processes {
        &PROCESS_ID
    } else if reused {
        &REUSED_THREAD_ID
    } else {
        &THREAD_ID
    };
    ViewOutput::rows(columns::<V>(id), rows)
}
