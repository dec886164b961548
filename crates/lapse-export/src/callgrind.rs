//! Callgrind's profile format, for KCachegrind, qcachegrind and
//! callgrind_annotate (valgrind.org/docs/manual/cl-format.html).
//!
//! Each function is a `fn=` block: its own (self) cost on the function's
//! line, then one `cfn=`/`calls=` record per function it calls directly,
//! followed by the *inclusive* cost of those calls. The consumers derive a
//! function's inclusive cost by adding its self cost and its calls' costs,
//! so:
//! - instrumentation: two event types, `Elapsed` and `Application` (ns);
//!   self costs are the elapsed and application exclusive times, call costs
//!   the callee's inclusive times under that caller, `calls=` the number of
//!   calls along that edge.
//! - sampling: one event type, `Samples`; self cost = exclusive samples,
//!   call cost = samples with the edge on the stack, and `calls=` repeats
//!   that count (sampling does not count calls). With off-CPU periods, a
//!   second event, `OffCPU` (ns), costed the same way.
//!
//! **Recursion** is split by level, as Valgrind's `--separate-recs` does:
//! the outermost frame of a function on a call path is `fib`, the next one
//! down `fib'2`, and so on. Each (function, level) is a function of its own,
//! so no call cost is ever inside its caller's self cost, and a consumer's
//! sum is the real inclusive time (without the split, callgrind_annotate
//! counted fib twice). A thread's outermost calls are calls from `[root]`, a
//! function of no cost of its own (Valgrind's `(below main)`), so that
//! callgrind_annotate, which takes a called function's inclusive cost from
//! the calls to it, counts them too. Functions without a source file are in
//! the file `???`, as Valgrind writes them.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use lapse_analysis::sample::Counts;
use lapse_analysis::tree::{CallTree, FrameKey, NodeId, Weight};
use lapse_analysis::values::{FunctionStats, TimeValue};
use lapse_analysis::Analysis;
use lapse_data::DataFile;

use crate::select::Selection;
use crate::{ExportError, Format, Tree};

/// A function at one recursion level (1 = its outermost frame on the path);
/// level 0 is `[root]`, the caller of every thread's outermost calls.
type Key = (FrameKey, u32);

const ROOT: Key = (FrameKey::Unknown, 0);

/// Costs of one (function, level): its self cost and its calls.
#[derive(Default)]
struct Block {
    own: Vec<u64>,
    /// callee → (calls, inclusive costs).
    calls: BTreeMap<Key, (u64, Vec<u64>)>,
}

/// What a node's weight gives callgrind: its calls, its self costs and its
/// inclusive costs, per event type.
trait Costs: Weight {
    fn calls(&self) -> u64;
    fn own(&self) -> Vec<u64>;
    fn inclusive_costs(&self) -> Vec<u64>;
}

impl Costs for FunctionStats {
    fn calls(&self) -> u64 {
        self.calls
    }
    fn own(&self) -> Vec<u64> {
        vec![
            self.time[TimeValue::ElapsedExclusive].to_nanos(),
            self.time[TimeValue::ApplicationExclusive].to_nanos(),
        ]
    }
    fn inclusive_costs(&self) -> Vec<u64> {
        vec![
            self.time[TimeValue::ElapsedInclusive].to_nanos(),
            self.time[TimeValue::ApplicationInclusive].to_nanos(),
        ]
    }
}

/// Samples, then off-CPU nanoseconds (written only when there are any).
impl Costs for Counts {
    fn calls(&self) -> u64 {
        self.inclusive
    }
    fn own(&self) -> Vec<u64> {
        vec![self.exclusive, self.off_cpu.exclusive]
    }
    fn inclusive_costs(&self) -> Vec<u64> {
        vec![self.inclusive, self.off_cpu.inclusive]
    }
}

fn add(into: &mut Vec<u64>, v: &[u64]) {
    into.resize(into.len().max(v.len()), 0);
    for (a, b) in into.iter_mut().zip(v) {
        *a += b;
    }
}

/// The blocks of every (function, level) of `tree`, in one pass over its
/// nodes (parents come before children, so a node's level is known from
/// its parent's path).
fn blocks<W: Costs>(tree: &CallTree<W>) -> BTreeMap<Key, Block> {
    let mut blocks: BTreeMap<Key, Block> = BTreeMap::new();
    // Per node: its key and level. Levels along the path are counted with
    // a map of open counts maintained through the pre-order walk.
    let mut level_of: Vec<u32> = vec![0; tree.len()];
    let mut on_path: HashMap<FrameKey, u32> = HashMap::new();
    let mut path: Vec<FrameKey> = Vec::new();
    for (node, depth) in tree.pre_order() {
        while path.len() > depth {
            if let Some(k) = path.pop() {
                if let Some(n) = on_path.get_mut(&k) {
                    *n -= 1;
                }
            }
        }
        let Some(key) = tree.key(node) else { continue };
        let n = on_path.entry(key).or_default();
        *n += 1;
        let level = *n;
        path.push(key);
        level_of[node.index()] = level;
        let w = tree.weight(node);
        add(&mut blocks.entry((key, level)).or_default().own, &w.own());
        if let Some(parent) = tree.parent(node) {
            let caller = match tree.key(parent) {
                Some(pkey) if parent != NodeId::ROOT => (pkey, level_of[parent.index()]),
                _ => ROOT,
            };
            let call = blocks
                .entry(caller)
                .or_default()
                .calls
                .entry((key, level))
                .or_insert_with(|| (0, Vec::new()));
            call.0 += w.calls();
            add(&mut call.1, &w.inclusive_costs());
        }
    }
    blocks
}

fn costs(v: &[u64], events: usize) -> String {
    (0..events)
        .map(|i| v.get(i).copied().unwrap_or(0).to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn write(
    file: &DataFile,
    analysis: &Analysis,
    sel: &Selection,
    out: &mut dyn Write,
) -> Result<(), ExportError> {
    let tree = Tree::of(file, analysis, sel, Format::Callgrind)?;
    let (events, blocks): (&[(&str, &str)], _) = match &tree {
        Tree::Time(t) => (
            &[
                ("Elapsed", "Elapsed time (ns)"),
                ("Application", "Application time, off-CPU excluded (ns)"),
            ],
            blocks(t),
        ),
        Tree::Samples(t) if file.off_cpu.is_empty() => (&[("Samples", "Samples")], blocks(t)),
        Tree::Samples(t) => (
            &[
                ("Samples", "Samples"),
                ("OffCPU", "Time switched out, off the CPU (ns)"),
            ],
            blocks(t),
        ),
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
        add(&mut total, &b.own);
    }
    text.push_str(&format!("summary: {}\n", costs(&total, n)));
    let w = ExportError::write(Format::Callgrind);
    out.write_all(text.as_bytes()).map_err(w)?;

    // (name, object, source file, line) of a function at a level.
    let place = |(key, level): Key| {
        if (key, level) == ROOT {
            return ("[root]".to_owned(), "???".to_owned(), "???".to_owned(), 0);
        }
        let base = key.label(file).replace('\n', " ");
        let name = if level > 1 {
            format!("{base}'{level}")
        } else {
            base
        };
        let info = key
            .function()
            .and_then(|f| file.functions.get(f.0 as usize));
        let object = key
            .module(file)
            .and_then(|m| file.module(m))
            .map_or("???", |m| m.path.as_str())
            .to_owned();
        let source = info
            .and_then(|i| i.source_file.as_deref())
            .unwrap_or("???")
            .to_owned();
        let line = info.and_then(|i| i.line).unwrap_or(0);
        (name, object, source, line)
    };
    for (&key, b) in &blocks {
        let (name, object, source, line) = place(key);
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
