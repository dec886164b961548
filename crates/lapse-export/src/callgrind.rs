//! Callgrind's profile format, for KCachegrind and qcachegrind
//! (valgrind.org/docs/manual/cl-format.html).
//!
//! Each function is a `fn=` block: its own (self) cost on the function's
//! line, then one `cfn=`/`calls=` record per function it calls directly,
//! followed by the *inclusive* cost of those calls. KCachegrind derives a
//! function's inclusive cost from them, so:
//! - instrumentation: two event types, `Elapsed` and `Application` (ns);
//!   self costs are the elapsed and application exclusive times, call costs
//!   the callee's inclusive times under that caller, `calls=` the number of
//!   calls along that edge; KCachegrind's Self/Incl columns of the two events
//!   are the report's four times.
//! - sampling: one event type, `Samples`; self cost = exclusive samples,
//!   call cost = samples in which the edge is on the stack (once per stack),
//!   and `calls=` repeats that count (sampling does not count calls).
//!
//! Calls made from a thread's root (no instrumented caller) have no calling
//! function and are left out; their cost is in the callee's self cost.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use lapse_analysis::tree::FrameKey;
use lapse_analysis::values::TimeValue;
use lapse_data::{DataFile, FunctionId};
use lapse_report::Analysis;

use crate::{ExportError, Format, Tree};

/// Costs of one function: its self cost and its calls, per event type.
#[derive(Default)]
struct Block {
    own: Vec<u64>,
    /// callee → (calls, inclusive costs).
    calls: BTreeMap<FunctionId, (u64, Vec<u64>)>,
}

fn instrumentation(analysis: &Analysis) -> Result<HashMap<FunctionId, Block>, ExportError> {
    let Analysis::Instr(r) = analysis else {
        return Ok(HashMap::new());
    };
    let Tree::Time(tree) = Tree::of(analysis, Format::Callgrind)? else {
        return Ok(HashMap::new());
    };
    let mut blocks: HashMap<FunctionId, Block> = HashMap::new();
    for (i, f) in r.acc.functions.iter().enumerate() {
        if f.is_used() {
            blocks.entry(FunctionId(i as u32)).or_default().own = vec![
                f.time[TimeValue::ElapsedExclusive].to_nanos(),
                f.time[TimeValue::ApplicationExclusive].to_nanos(),
            ];
        }
    }
    for ((caller, callee), s) in tree.edges() {
        let (Some(caller), Some(callee)) = (caller.and_then(FrameKey::function), callee.function())
        else {
            continue;
        };
        blocks.entry(caller).or_default().calls.insert(
            callee,
            (
                s.calls,
                vec![
                    s.time[TimeValue::ElapsedInclusive].to_nanos(),
                    s.time[TimeValue::ApplicationInclusive].to_nanos(),
                ],
            ),
        );
    }
    Ok(blocks)
}

fn sampling(analysis: &Analysis) -> Result<HashMap<FunctionId, Block>, ExportError> {
    let Analysis::Sample(r) = analysis else {
        return Ok(HashMap::new());
    };
    let Tree::Samples(tree) = Tree::of(analysis, Format::Callgrind)? else {
        return Ok(HashMap::new());
    };
    let mut blocks: HashMap<FunctionId, Block> = HashMap::new();
    for (&f, c) in &r.analysis.functions {
        blocks.entry(f).or_default().own = vec![c.exclusive];
    }
    // An edge's cost: the samples it is on the stack of, once per stack.
    for ((caller, callee), c) in tree.edges() {
        let (Some(caller), Some(callee)) = (caller.and_then(FrameKey::function), callee.function())
        else {
            continue;
        };
        blocks
            .entry(caller)
            .or_default()
            .calls
            .insert(callee, (c.inclusive, vec![c.inclusive]));
    }
    Ok(blocks)
}

fn costs(v: &[u64], events: usize) -> String {
    (0..events)
        .map(|i| v.get(i).copied().unwrap_or(0).to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn write(file: &DataFile, analysis: &Analysis, out: &mut dyn Write) -> Result<(), ExportError> {
    let (events, blocks): (&[(&str, &str)], _) = match analysis {
        Analysis::Instr(_) => (
            &[
                ("Elapsed", "Elapsed time (ns)"),
                ("Application", "Application time, off-CPU excluded (ns)"),
            ],
            instrumentation(analysis)?,
        ),
        Analysis::Sample(_) => (&[("Samples", "Samples")], sampling(analysis)?),
    };
    let n = events.len();
    let mut text = String::new();
    text.push_str("# callgrind format\nversion: 1\n");
    text.push_str(&format!("creator: lapse {}\n", env!("CARGO_PKG_VERSION")));
    text.push_str(&format!("cmd: {}\n", file.session.command.join(" ")));
    if let Some(rule) = analysis.application_rule() {
        text.push_str(&format!("desc: Application rule: {}\n", rule.name()));
    }
    text.push_str("positions: line\n");
    for (name, long) in events {
        text.push_str(&format!("event: {name} : {long}\n"));
    }
    let names: Vec<&str> = events.iter().map(|e| e.0).collect();
    text.push_str(&format!("events: {}\n", names.join(" ")));
    let mut total = vec![0u64; n];
    for b in blocks.values() {
        for (i, t) in total.iter_mut().enumerate() {
            *t += b.own.get(i).copied().unwrap_or(0);
        }
    }
    text.push_str(&format!("summary: {}\n", costs(&total, n)));
    let w = ExportError::write(Format::Callgrind);
    out.write_all(text.as_bytes()).map_err(w)?;

    let place = |f: FunctionId| {
        let info = file.functions.get(f.0 as usize);
        let name = info
            .map_or("[unknown]", |i| i.name.as_str())
            .replace('\n', " ");
        let object = info
            .and_then(|i| file.module(i.module))
            .map_or("", |m| m.path.as_str());
        let source = info.and_then(|i| i.source_file.as_deref()).unwrap_or("");
        let line = info.and_then(|i| i.line).unwrap_or(0);
        (name, object.to_owned(), source.to_owned(), line)
    };
    let mut order: Vec<FunctionId> = blocks.keys().copied().collect();
    order.sort();
    for f in order {
        let b = &blocks[&f];
        let (name, object, source, line) = place(f);
        let mut s = format!(
            "\nob={object}\nfl={source}\nfn={name}\n{line} {}\n",
            costs(&b.own, n)
        );
        for (&callee, (calls, inclusive)) in &b.calls {
            let (cname, cobject, csource, cline) = place(callee);
            s.push_str(&format!(
                "cob={cobject}\ncfi={csource}\ncfn={cname}\ncalls={calls} {cline}\n{line} {}\n",
                costs(inclusive, n)
            ));
        }
        out.write_all(s.as_bytes()).map_err(w)?;
    }
    Ok(())
}
