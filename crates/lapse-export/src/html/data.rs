//! The document embedded in the page (`lapse-html/1`): the session header
//! of the report, the frame table, and per thread its flat call tree,
//! exact function rows, source lines and timeline summary. Its size
//! depends on the distinct call paths (at most [`NODE_BUDGET`] kept), the
//! functions and the threads, never on the number of events or samples.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use lapse_analysis::run::{InstrResult, SampleResult};
use lapse_analysis::sample::Counts;
use lapse_analysis::tree::{CallTree, NodeId};
use lapse_analysis::values::{FunctionStats, TimeValue};
use lapse_analysis::{Analysis, SessionSummary};
use lapse_data::{DataFile, ThreadInfo, ThreadKey};
use serde::Serialize;
use serde_json::{json, Value};

use super::lod::{self, Lookup, Timeline};
use super::model::{self, Frames, PageWeight, Strings, NODE_BUDGET};
use crate::select::Selection;
use crate::timeline::{self, SampleIndex, Timing};
use crate::{ExportError, Format};

/// The page's data.
#[derive(Serialize)]
pub(crate) struct PageData {
    schema: &'static str,
    method: &'static str,
    /// The `session` object of the JSON report (SPEC section 5).
    session: Value,
    /// Nanoseconds per sample, when the sampling event is a clock.
    period_ns: Option<u64>,
    frames: model::FrameTable,
    processes: Vec<ProcessRow>,
    threads: Vec<ThreadPage>,
    /// The names of a node row's fields (`parent`, `frame`, values...).
    node_columns: Vec<&'static str>,
    /// The names of a function row's fields (`frame`, values...).
    function_columns: Vec<&'static str>,
    /// The whole recording's function rows as the report computes them,
    /// when there is more than one thread (instrumentation: summing the
    /// threads' rounded values could differ by a nanosecond per thread).
    all_functions: Option<Vec<u64>>,
    nodes_kept: usize,
    nodes_total: usize,
    node_budget: usize,
    /// The recording's paused stretches: `[from, to]` in ns since the
    /// timeline's origin (`to` at the recording's end for one left open).
    paused: Vec<(u64, u64)>,
}

#[derive(Serialize)]
struct ProcessRow {
    pid: u32,
    command: String,
}

#[derive(Serialize)]
struct ThreadPage {
    pid: u32,
    tid: u32,
    name: String,
    totals: Value,
    /// Rows of `node_columns`; row 0 is the thread.
    nodes: Vec<i64>,
    /// Nodes of the thread's whole tree (some may be left out of `nodes`).
    nodes_total: usize,
    /// Rows of `function_columns`.
    functions: Vec<u64>,
    /// Sampling: rows of `frame, file, line, incl, excl`.
    lines: Vec<u64>,
    timeline: Timeline,
    /// The program's marks on this thread: `[ns since the origin, text]`,
    /// in time order (markers on the timeline).
    marks: Vec<(u64, String)>,
}

fn unsupported(what: impl Into<String>) -> ExportError {
    ExportError::Unsupported {
        format: Format::Html.name(),
        what: what.into(),
    }
}

/// The `session` object of `lapse report --format json`.
fn session(file: &DataFile, analysis: &Analysis) -> Result<Value, ExportError> {
    serde_json::to_value(SessionSummary::of(file, analysis))
        .map_err(|e| unsupported(format!("report JSON: {e}")))
}

fn processes(file: &DataFile, threads: &[ThreadInfo]) -> Vec<ProcessRow> {
    let mut out: BTreeMap<u32, String> = BTreeMap::new();
    for p in &file.processes {
        let command = out.entry(p.pid).or_default();
        if command.is_empty() {
            *command = p.command.join(" ");
        }
    }
    for t in threads {
        out.entry(t.pid).or_default();
    }
    out.into_iter()
        .map(|(pid, command)| ProcessRow { pid, command })
        .collect()
}

/// One thread as the page builders take it: who it is, its whole call
/// tree and its totals (the node table's row 0).
type Input<'a, W> = (ThreadInfo, &'a CallTree<W>, W);

/// Builds the page's data from `analysis` (made as [`crate::needs`] says).
pub(crate) fn build(
    file: &DataFile,
    analysis: &Analysis,
    sel: &Selection,
) -> Result<PageData, ExportError> {
    let session = session(file, analysis)?;
    let infos: BTreeMap<ThreadKey, ThreadInfo> = sel
        .threads(file)
        .into_iter()
        .map(|t| (t.key(), t))
        .collect();
    let mut frames = Frames::default();
    let mut files = Strings::default();
    let (mut threads, all_functions, columns) = match analysis {
        Analysis::Instr(r) => {
            if r.tree().is_none() {
                return Err(unsupported("the analysis was made without a call tree"));
            }
            instrumented(file, analysis, sel, r, &infos, &mut frames)
        }
        Analysis::Sample(r) => sampled(file, r, sel, &infos, &mut frames, &mut files),
    };
    let origin = timeline::origin(file);
    for m in sel.marks(file) {
        if let Some(t) = threads
            .iter_mut()
            .find(|t| t.pid == m.pid && t.tid == m.tid)
        {
            t.marks.push((m.at.since(origin), m.text.clone()));
        }
    }
    let end = file.end().map_or(u64::MAX, |e| e.since(origin));
    let paused = file
        .paused
        .iter()
        .map(|p| (p.from.since(origin), p.to.since(origin).min(end)))
        .collect();
    let all_threads: Vec<ThreadInfo> = infos.into_values().collect();
    let s = &file.session;
    Ok(PageData {
        schema: "lapse-html/1",
        method: s.method.name(),
        session,
        period_ns: s.sample_period.filter(|_| s.sample_period_is_time),
        frames: frames.table(file, &mut files),
        processes: processes(file, &all_threads),
        nodes_kept: threads
            .iter()
            .map(|t| t.nodes.len() / columns.0.len() - 1)
            .sum(),
        nodes_total: threads.iter().map(|t| t.nodes_total).sum(),
        threads,
        node_columns: columns.0,
        function_columns: columns.1,
        all_functions,
        node_budget: NODE_BUDGET,
        paused,
    })
}

/// The names of a node row's and a function row's fields.
type Columns = (Vec<&'static str>, Vec<&'static str>);

fn columns<W: PageWeight>() -> Columns {
    (
        ["parent", "frame"]
            .into_iter()
            .chain(W::NODE_COLUMNS.iter().copied())
            .collect(),
        ["frame"]
            .into_iter()
            .chain(W::FUNCTION_COLUMNS.iter().copied())
            .collect(),
    )
}

fn info(infos: &BTreeMap<ThreadKey, ThreadInfo>, key: ThreadKey) -> ThreadInfo {
    infos.get(&key).cloned().unwrap_or(ThreadInfo {
        pid: key.pid,
        tid: key.tid,
        serial: key.serial,
        name: String::new(),
        start: None,
        end: None,
    })
}

/// Instrumentation: the threads the analysis saw, each with its own tree;
/// timelines walked on every core.
fn instrumented(
    file: &DataFile,
    analysis: &Analysis,
    sel: &Selection,
    r: &InstrResult,
    infos: &BTreeMap<ThreadKey, ThreadInfo>,
    frames: &mut Frames,
) -> (Vec<ThreadPage>, Option<Vec<u64>>, Columns) {
    let empty = CallTree::new();
    // (with --function, each thread's subtrees of it)
    let trees: HashMap<ThreadKey, Cow<'_, CallTree<FunctionStats>>> = r
        .acc
        .trees
        .iter()
        .map(|t| (t.key(), sel.tree(file, &t.tree)))
        .collect();
    let threads: Vec<Input<'_, FunctionStats>> = r
        .acc
        .threads
        .iter()
        .map(|s| {
            let tree = trees.get(&s.key()).map_or(&empty, |t| &**t);
            (info(infos, s.key()), tree, model::thread_totals(s))
        })
        .collect();
    let elapsed = |t: &FunctionStats| t.time[TimeValue::ElapsedInclusive].to_nanos();
    let mut pages = pages(&threads, frames, elapsed);
    let n = lod::buckets_per_thread(threads.len());
    let timing = Timing::of(file, analysis);
    let origin = timeline::origin(file);
    let timelines = in_parallel(threads.len(), |i| {
        let (info, tree, totals) = &threads[i];
        let lookup = Lookup::new(tree);
        lod::instrumented(
            file,
            info,
            timing,
            sel,
            origin,
            elapsed(totals),
            &lookup,
            &pages[i].1,
            n,
        )
    });
    for ((page, _), (tl, (_, _, t))) in pages.iter_mut().zip(timelines.into_iter().zip(&threads)) {
        page.timeline = tl;
        page.totals = json!({
            "calls": t.calls,
            "ei": t.time[TimeValue::ElapsedInclusive].to_nanos(),
            "ee": t.time[TimeValue::ElapsedExclusive].to_nanos(),
            "ai": t.time[TimeValue::ApplicationInclusive].to_nanos(),
            "ae": t.time[TimeValue::ApplicationExclusive].to_nanos(),
            "po": t.probe_overhead.to_nanos(),
        });
    }
    let all = (threads.len() > 1).then(|| model::all_functions(&r.acc.functions, frames));
    let pages = pages.into_iter().map(|(p, _)| p).collect();
    (pages, all, columns::<FunctionStats>())
}

/// Sampling: every thread with a record or a sample, trees and lines from
/// the counted stacks, timelines read one thread (or group) at a time.
fn sampled(
    file: &DataFile,
    r: &SampleResult,
    sel: &Selection,
    infos: &BTreeMap<ThreadKey, ThreadInfo>,
    frames: &mut Frames,
    files: &mut Strings,
) -> (Vec<ThreadPage>, Option<Vec<u64>>, Columns) {
    let mut sampled = model::sampled_threads(file, &r.analysis);
    let mut keys: Vec<ThreadKey> = infos.keys().chain(sampled.keys()).copied().collect();
    keys.sort_unstable();
    keys.dedup();
    let mut owned = Vec::with_capacity(keys.len());
    let mut lines = Vec::with_capacity(keys.len());
    for &key in &keys {
        let t = sampled
            .remove(&key)
            .unwrap_or_else(|| model::SampledThread {
                tree: CallTree::new(),
                lines: HashMap::new(),
            });
        lines.push(model::line_rows(&t.lines, frames, files));
        let tree = match sel.tree(file, &t.tree) {
            Cow::Borrowed(_) => t.tree,
            Cow::Owned(cut) => cut,
        };
        owned.push((info(infos, key), tree));
    }
    let threads: Vec<Input<'_, Counts>> = owned
        .iter()
        .map(|(i, t)| (i.clone(), t, *t.weight(NodeId::ROOT)))
        .collect();
    let mut pages = pages(&threads, frames, |c| c.inclusive);
    let n = lod::buckets_per_thread(threads.len());
    let origin = timeline::origin(file);
    let mut at = 0;
    let _ = SampleIndex::new(file, sel).for_each_thread(file, &keys, |_, samples| {
        let (info, tree, _) = &threads[at];
        let lookup = Lookup::new(tree);
        pages[at].0.timeline =
            lod::sampled(file, info, samples, sel, origin, &lookup, &pages[at].1, n);
        at += 1;
        Ok::<(), Infallible>(())
    });
    for ((page, _), (l, (_, _, c))) in pages.iter_mut().zip(lines.into_iter().zip(&threads)) {
        page.lines = l;
        page.totals = json!({ "samples": c.inclusive });
    }
    let pages = pages.into_iter().map(|(p, _)| p).collect();
    (pages, None, columns::<Counts>())
}

/// Each thread's page (without its timeline) and its tree's node → row
/// map, with the node tables cut to [`NODE_BUDGET`] together.
fn pages<W: PageWeight>(
    threads: &[Input<'_, W>],
    frames: &mut Frames,
    total: impl Fn(&W) -> u64,
) -> Vec<(ThreadPage, Vec<u32>)> {
    let trees: Vec<(&CallTree<W>, u64)> = threads.iter().map(|(_, t, w)| (*t, total(w))).collect();
    let kept = model::keep(&trees, NODE_BUDGET);
    threads
        .iter()
        .zip(kept)
        .map(|((info, tree, totals), kept)| {
            let table = model::node_table(tree, &kept, totals, frames);
            let page = ThreadPage {
                pid: info.pid,
                tid: info.tid,
                name: info.name.clone(),
                totals: Value::Null,
                nodes: table.rows,
                nodes_total: tree.len() - 1,
                functions: model::function_rows(tree, frames),
                lines: Vec::new(),
                timeline: Timeline::default(),
                marks: Vec::new(),
            };
            (page, table.row_of)
        })
        .collect()
}

/// `f(0..n)` on every core, results in order.
fn in_parallel<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<T>>> = Mutex::new((0..n).map(|_| None).collect());
    let workers = std::thread::available_parallelism()
        .map_or(1, |p| p.get())
        .min(n.max(1));
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let r = f(i);
                if let Ok(mut all) = results.lock() {
                    all[i] = Some(r);
                }
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_default()
        .into_iter()
        .flatten()
        .collect()
}
