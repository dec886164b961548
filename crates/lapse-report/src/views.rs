//! SPEC section 3's views, built from an [`Analysis`] as neutral tables.

use std::collections::HashMap;

use lapse_analysis::calltree::{CallTree, ROOT};
use lapse_analysis::sample::{expand, Counts};
use lapse_analysis::values::{FunctionStats, SessionTotals, TimeValues};
use lapse_analysis::Fine;
use lapse_data::{DataFile, FunctionId};

use crate::load::{Analysis, Query, ReportError, SampleResult};
use crate::table::{col, shown, Cell, Column, Kind, TreeRow};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    Summary,
    Functions,
    Callers,
    Callees,
    Calltree,
    Modules,
    Threads,
    Processes,
    Lines,
    Instructions,
}

impl View {
    pub const ALL: [(&'static str, View); 10] = [
        ("summary", View::Summary),
        ("functions", View::Functions),
        ("callers", View::Callers),
        ("callees", View::Callees),
        ("calltree", View::Calltree),
        ("modules", View::Modules),
        ("threads", View::Threads),
        ("processes", View::Processes),
        ("lines", View::Lines),
        ("instructions", View::Instructions),
    ];

    pub fn name(self) -> &'static str {
        View::ALL
            .iter()
            .find(|(_, v)| *v == self)
            .map_or("?", |(n, _)| n)
    }

    pub fn needs_call_tree(self) -> bool {
        matches!(
            self,
            View::Summary | View::Callers | View::Callees | View::Calltree
        )
    }
}

/// callers/callees: the focus function's row, its callers' rows, its callees' rows.
pub type Focus = (Vec<Cell>, Vec<Vec<Cell>>, Vec<Vec<Cell>>);

/// A built view: rows (or a tree, or a focus function with its callers and
/// callees), ready for any renderer.
#[derive(Clone, Debug, Default)]
pub struct ViewOutput {
    pub columns: Vec<Column>,
    pub rows: Vec<Vec<Cell>>,
    pub roots: Option<Vec<TreeRow>>,
    /// callers/callees: the focus function's row, its callers, its callees.
    pub focus: Option<Focus>,
    /// Function names along the hot path (summary, calltree).
    pub hot_path: Vec<String>,
}

// ---- columns -------------------------------------------------------------

const FUNCTION_ID: [Column; 6] = [
    shown("function", Kind::Text, "function"),
    shown("module", Kind::Text, "module"),
    col("module_path", Kind::Text),
    col("address", Kind::Hex),
    col("source_file", Kind::Text),
    col("line", Kind::Int),
];

const TIMES: [Column; 9] = [
    shown("calls", Kind::Int, "calls"),
    shown("elapsed_inclusive_ns", Kind::Nanos, "elapsed incl"),
    shown("elapsed_exclusive_ns", Kind::Nanos, "elapsed excl"),
    shown("application_inclusive_ns", Kind::Nanos, "app incl"),
    shown("application_exclusive_ns", Kind::Nanos, "app excl"),
    shown("elapsed_inclusive_pct", Kind::Percent, "el incl %"),
    shown("elapsed_exclusive_pct", Kind::Percent, "el excl %"),
    col("application_inclusive_pct", Kind::Percent),
    col("application_exclusive_pct", Kind::Percent),
];

const PER_CALL: [Column; 12] = [
    shown("avg_elapsed_inclusive_ns", Kind::Nanos, "avg el incl"),
    col("min_elapsed_inclusive_ns", Kind::Nanos),
    col("max_elapsed_inclusive_ns", Kind::Nanos),
    col("avg_elapsed_exclusive_ns", Kind::Nanos),
    col("min_elapsed_exclusive_ns", Kind::Nanos),
    col("max_elapsed_exclusive_ns", Kind::Nanos),
    col("avg_application_inclusive_ns", Kind::Nanos),
    col("min_application_inclusive_ns", Kind::Nanos),
    col("max_application_inclusive_ns", Kind::Nanos),
    col("avg_application_exclusive_ns", Kind::Nanos),
    col("min_application_exclusive_ns", Kind::Nanos),
    col("max_application_exclusive_ns", Kind::Nanos),
];

const OVERHEAD: [Column; 2] = [
    col("probe_overhead_ns", Kind::Nanos),
    col("open_calls", Kind::Int),
];

const SAMPLES: [Column; 6] = [
    shown("inclusive_samples", Kind::Int, "incl samples"),
    shown("exclusive_samples", Kind::Int, "excl samples"),
    shown("inclusive_pct", Kind::Percent, "incl %"),
    shown("exclusive_pct", Kind::Percent, "excl %"),
    col("estimated_ns", Kind::Nanos),
    col("estimated_exclusive_ns", Kind::Nanos),
];

fn cols(parts: &[&[Column]]) -> Vec<Column> {
    parts.iter().flat_map(|p| p.iter().cloned()).collect()
}

fn time_cells(calls: u64, t: &TimeValues, s: &SessionTotals) -> Vec<Cell> {
    let mut v = vec![Cell::Int(calls)];
    v.extend(t.as_array().iter().map(|f| Cell::Int(f.to_nanos())));
    v.extend(s.time_pcts(t).iter().map(|p| Cell::Float(*p)));
    v
}

fn per_call_cells(f: &FunctionStats) -> Vec<Cell> {
    let n = f.closed_calls();
    let mut v = Vec::with_capacity(12);
    let p = &f.per_call;
    for i in 0..4 {
        match p.sum[i].0.checked_div(n) {
            None => v.extend([Cell::Null, Cell::Null, Cell::Null]),
            Some(avg) => v.extend([
                Cell::Int(Fine(avg).to_nanos()),
                Cell::Int(p.min[i].to_nanos()),
                Cell::Int(p.max[i].to_nanos()),
            ]),
        }
    }
    v
}

fn function_values(f: &FunctionStats, s: &SessionTotals) -> Vec<Cell> {
    let mut v = time_cells(f.calls, &f.time, s);
    v.extend(per_call_cells(f));
    v.push(Cell::Int(f.probe_overhead.to_nanos()));
    v.push(Cell::Int(f.open_calls));
    v
}

fn sample_values(c: &Counts, r: &SampleResult, file: &DataFile) -> Vec<Cell> {
    let [i, e] = r.session.sample_pcts(c.inclusive, c.exclusive);
    let est = |n: u64| match (
        file.session.sample_period_is_time,
        file.session.sample_period,
    ) {
        (true, Some(p)) => Cell::Int(n.saturating_mul(p)),
        _ => Cell::Null,
    };
    vec![
        Cell::Int(c.inclusive),
        Cell::Int(c.exclusive),
        Cell::Float(i),
        Cell::Float(e),
        est(c.inclusive),
        est(c.exclusive),
    ]
}

fn function_identity(file: &DataFile, f: Option<FunctionId>) -> Vec<Cell> {
    let Some(info) = f.and_then(|f| file.functions.get(f.0 as usize)) else {
        return vec![
            Cell::Text("[unknown]".into()),
            Cell::Null,
            Cell::Null,
            Cell::Null,
            Cell::Null,
            Cell::Null,
        ];
    };
    let module = file.module(info.module);
    vec![
        Cell::Text(info.name.clone()),
        Cell::opt_text(module.map(|m| m.name())),
        Cell::opt_text(module.map(|m| m.path.as_str())),
        if info.address == 0 {
            Cell::Null
        } else {
            Cell::Int(info.address)
        },
        Cell::opt_text(info.source_file.as_deref()),
        info.line.map_or(Cell::Null, |l| Cell::Int(u64::from(l))),
    ]
}

fn function_matches(file: &DataFile, q: &Query, f: Option<FunctionId>) -> bool {
    let info = f.and_then(|f| file.functions.get(f.0 as usize));
    let name = info.map_or("[unknown]", |i| i.name.as_str());
    let module = info
        .and_then(|i| file.module(i.module))
        .map_or("", |m| m.path.as_str());
    q.function.as_ref().is_none_or(|r| r.is_match(name))
        && q.module.as_ref().is_none_or(|r| r.is_match(module))
}

// ---- views ---------------------------------------------------------------

pub fn build_view(
    file: &DataFile,
    a: &Analysis,
    q: &Query,
    view: View,
    focus: Option<&str>,
    threshold: f64,
) -> Result<ViewOutput, ReportError> {
    let sampling_only = |name: &str| {
        ReportError::Other(format!(
            "the {name} view needs a sampling recording (this one is instrumentation)"
        ))
    };
    Ok(match (view, a) {
        (View::Functions | View::Summary, Analysis::Instr(r)) => {
            let mut out = ViewOutput {
                columns: cols(&[&FUNCTION_ID, &TIMES, &PER_CALL, &OVERHEAD]),
                ..Default::default()
            };
            for (i, f) in r.acc.functions.iter().enumerate() {
                let id = Some(FunctionId(i as u32));
                if (f.calls > 0 || f.time.elapsed_inclusive.0 > 0) && function_matches(file, q, id)
                {
                    let mut row = function_identity(file, id);
                    row.extend(function_values(f, &r.session));
                    out.rows.push(row);
                }
            }
            if view == View::Summary {
                out.hot_path = hot_path_names(file, &tree_rows(file, a, q, 0.0));
            }
            out
        }
        (View::Functions | View::Summary, Analysis::Sample(r)) => {
            let mut out = ViewOutput {
                columns: cols(&[&FUNCTION_ID, &SAMPLES]),
                ..Default::default()
            };
            for (&f, c) in &r.analysis.functions {
                if function_matches(file, q, Some(f)) {
                    let mut row = function_identity(file, Some(f));
                    row.extend(sample_values(c, r, file));
                    out.rows.push(row);
                }
            }
            if view == View::Summary {
                out.hot_path = hot_path_names(file, &tree_rows(file, a, q, 0.0));
            }
            out
        }
        (View::Modules, _) => modules_view(file, a, q),
        (View::Threads, _) => threads_view(file, a, false),
        (View::Processes, _) => threads_view(file, a, true),
        (View::Lines, Analysis::Sample(r)) => {
            let mut out = ViewOutput {
                columns: cols(&[
                    &[
                        shown("source_file", Kind::Text, "source file"),
                        shown("line", Kind::Int, "line"),
                    ],
                    &SAMPLES,
                ]),
                ..Default::default()
            };
            for ((file_name, line), c) in &r.analysis.lines {
                let mut row = vec![Cell::Text(file_name.clone()), Cell::Int(u64::from(*line))];
                row.extend(sample_values(c, r, file));
                out.rows.push(row);
            }
            out
        }
        (View::Lines, Analysis::Instr(r)) => {
            // Instrumentation knows functions, not lines: each function's own line.
            let mut by_line: HashMap<(String, u32), FunctionStats> = HashMap::new();
            for (i, f) in r.acc.functions.iter().enumerate() {
                let info = &file.functions[i];
                if let (Some(src), Some(line)) = (&info.source_file, info.line) {
                    if f.calls > 0 && function_matches(file, q, Some(info.id)) {
                        by_line.entry((src.clone(), line)).or_default().merge(f);
                    }
                }
            }
            let mut out = ViewOutput {
                columns: cols(&[
                    &[
                        shown("source_file", Kind::Text, "source file"),
                        shown("line", Kind::Int, "line"),
                    ],
                    &TIMES,
                    &PER_CALL,
                    &OVERHEAD,
                ]),
                ..Default::default()
            };
            for ((src, line), f) in by_line {
                let mut row = vec![Cell::Text(src), Cell::Int(u64::from(line))];
                row.extend(function_values(&f, &r.session));
                out.rows.push(row);
            }
            out
        }
        (View::Instructions, Analysis::Sample(r)) => {
            let mut out = ViewOutput {
                columns: cols(&[
                    &[shown("address", Kind::Hex, "address")],
                    &FUNCTION_ID[..5],
                    &SAMPLES,
                ]),
                ..Default::default()
            };
            for (&fid, c) in &r.analysis.instructions {
                let Some(frame) = file.frames.get(fid.0 as usize) else {
                    continue;
                };
                let top = frame.functions.last();
                let function = top.map(|f| f.function);
                if !function_matches(file, q, function) {
                    continue;
                }
                let mut row = vec![Cell::Int(frame.address)];
                let mut id = function_identity(file, function);
                if id[1] == Cell::Null {
                    id[1] = Cell::opt_text(file.module(frame.module).map(|m| m.name()));
                    id[2] = Cell::opt_text(file.module(frame.module).map(|m| m.path.as_str()));
                }
                id[3] = Cell::opt_text(top.and_then(|f| f.source_file.as_deref()));
                id[4] = top
                    .and_then(|f| f.line)
                    .map_or(Cell::Null, |l| Cell::Int(u64::from(l)));
                row.push(id[0].clone());
                row.push(id[1].clone());
                row.push(id[2].clone());
                row.push(id[3].clone());
                row.push(id[4].clone());
                row.extend(sample_values(c, r, file));
                out.rows.push(row);
            }
            // Columns: address, function, module, module_path, source_file, line.
            out.columns = cols(&[
                &[
                    shown("address", Kind::Hex, "address"),
                    shown("function", Kind::Text, "function"),
                    shown("module", Kind::Text, "module"),
                    col("module_path", Kind::Text),
                    col("source_file", Kind::Text),
                    col("line", Kind::Int),
                ],
                &SAMPLES,
            ]);
            out
        }
        (View::Instructions, Analysis::Instr(_)) => return Err(sampling_only("instructions")),
        (View::Calltree, _) => {
            let roots = tree_rows(file, a, q, threshold);
            ViewOutput {
                columns: value_columns(a, true),
                hot_path: hot_path_names(file, &roots),
                roots: Some(roots),
                ..Default::default()
            }
        }
        (View::Callers | View::Callees, _) => focus_view(file, a, q, focus)?,
    })
}

fn value_columns(a: &Analysis, with_identity: bool) -> Vec<Column> {
    let id: &[Column] = if with_identity { &FUNCTION_ID } else { &[] };
    match a {
        Analysis::Instr(_) => cols(&[id, &TIMES, &PER_CALL, &OVERHEAD]),
        Analysis::Sample(_) => cols(&[id, &SAMPLES]),
    }
}

fn modules_view(file: &DataFile, a: &Analysis, q: &Query) -> ViewOutput {
    let id = [
        shown("module", Kind::Text, "module"),
        col("module_path", Kind::Text),
        col("build_id", Kind::Text),
    ];
    let mut out = ViewOutput {
        columns: match a {
            Analysis::Instr(_) => cols(&[&id, &TIMES, &OVERHEAD[..1]]),
            Analysis::Sample(_) => cols(&[&id, &SAMPLES]),
        },
        ..Default::default()
    };
    let identity = |m: usize| {
        let info = file.modules.get(m);
        let build_id = info
            .and_then(|i| i.build_id.as_ref())
            .map(|b| b.iter().map(|x| format!("{x:02x}")).collect::<String>());
        vec![
            Cell::opt_text(info.map(|i| i.name())),
            Cell::opt_text(info.map(|i| i.path.as_str())),
            Cell::opt_text(build_id.as_deref()),
        ]
    };
    let keep = |m: usize| {
        q.module
            .as_ref()
            .is_none_or(|r| file.modules.get(m).is_some_and(|i| r.is_match(&i.path)))
    };
    match a {
        Analysis::Instr(r) => {
            for (m, s) in r.acc.modules.iter().enumerate() {
                if (s.calls > 0 || s.time.elapsed_inclusive.0 > 0) && keep(m) {
                    let mut row = identity(m);
                    row.extend(time_cells(s.calls, &s.time, &r.session));
                    row.push(Cell::Int(s.probe_overhead.to_nanos()));
                    out.rows.push(row);
                }
            }
        }
        Analysis::Sample(r) => {
            for (m, c) in &r.analysis.modules {
                if keep(m.0 as usize) {
                    let mut row = identity(m.0 as usize);
                    row.extend(sample_values(c, r, file));
                    out.rows.push(row);
                }
            }
        }
    }
    out
}

fn threads_view(file: &DataFile, a: &Analysis, processes: bool) -> ViewOutput {
    let id: Vec<Column> = if processes {
        vec![
            shown("pid", Kind::Int, "pid"),
            shown("command", Kind::Text, "command"),
        ]
    } else {
        vec![
            shown("pid", Kind::Int, "pid"),
            shown("tid", Kind::Int, "tid"),
            shown("thread_name", Kind::Text, "thread"),
        ]
    };
    let identity = |pid: u32, tid: u32| -> Vec<Cell> {
        if processes {
            let cmd = file
                .processes
                .iter()
                .find(|p| p.pid == pid)
                .map(|p| p.command.join(" "))
                .filter(|c| !c.is_empty());
            vec![Cell::Int(u64::from(pid)), Cell::opt_text(cmd.as_deref())]
        } else {
            let name = file
                .threads
                .iter()
                .find(|t| t.pid == pid && t.tid == tid)
                .map(|t| t.name.as_str());
            vec![
                Cell::Int(u64::from(pid)),
                Cell::Int(u64::from(tid)),
                Cell::opt_text(name),
            ]
        }
    };
    let key = |pid: u32, tid: u32| if processes { (pid, 0) } else { (pid, tid) };
    let mut out = ViewOutput::default();
    match a {
        Analysis::Instr(r) => {
            out.columns = cols(&[&id, &TIMES, &OVERHEAD[..1]]);
            let mut rows: Vec<((u32, u32), u64, TimeValues, Fine)> = Vec::new();
            for t in &r.acc.threads {
                let k = key(t.pid, t.tid);
                match rows.iter_mut().find(|r| r.0 == k) {
                    Some(row) => {
                        row.1 += t.calls;
                        row.2.add(&t.time);
                        row.3 .0 += t.probe_overhead.0;
                    }
                    None => rows.push((k, t.calls, t.time, t.probe_overhead)),
                }
            }
            for ((pid, tid), calls, time, overhead) in rows {
                let mut row = identity(pid, tid);
                row.extend(time_cells(calls, &time, &r.session));
                row.push(Cell::Int(overhead.to_nanos()));
                out.rows.push(row);
            }
        }
        Analysis::Sample(r) => {
            out.columns = cols(&[&id, &SAMPLES]);
            let mut rows: HashMap<(u32, u32), Counts> = HashMap::new();
            for (&(pid, tid), c) in &r.analysis.threads {
                let e = rows.entry(key(pid, tid)).or_default();
                e.inclusive += c.inclusive;
                e.exclusive += c.exclusive;
            }
            let mut rows: Vec<_> = rows.into_iter().collect();
            rows.sort_by_key(|r| r.0);
            for ((pid, tid), c) in rows {
                let mut row = identity(pid, tid);
                row.extend(sample_values(&c, r, file));
                out.rows.push(row);
            }
        }
    }
    out
}

// ---- trees ---------------------------------------------------------------

/// A call tree in report form, the same for both methods.
struct GenericTree {
    function: Vec<Option<FunctionId>>,
    children: Vec<Vec<u32>>,
    parent: Vec<u32>,
    instr: Vec<FunctionStats>,
    samples: Vec<Counts>,
}

fn generic_tree(file: &DataFile, a: &Analysis) -> GenericTree {
    match a {
        Analysis::Instr(r) => {
            let empty = CallTree::new(0, 0);
            let t = r.tree.as_ref().unwrap_or(&empty);
            GenericTree {
                function: t.nodes.iter().map(|n| n.function).collect(),
                children: t.nodes.iter().map(|n| n.children.clone()).collect(),
                parent: t.nodes.iter().map(|n| n.parent).collect(),
                instr: t.nodes.iter().map(|n| n.stats).collect(),
                samples: Vec::new(),
            }
        }
        Analysis::Sample(r) => {
            let mut g = GenericTree {
                function: vec![None],
                children: vec![Vec::new()],
                parent: vec![ROOT],
                instr: Vec::new(),
                samples: vec![Counts::default()],
            };
            let mut index: HashMap<(u32, FunctionId), u32> = HashMap::new();
            let mut stacks: Vec<_> = r.analysis.per_stack.iter().collect();
            stacks.sort_by_key(|(k, _)| **k);
            for (&(stack, _, _), &n) in stacks {
                let mut node = ROOT;
                g.samples[0].inclusive += n;
                for f in expand(&file.stacks, &file.frames, stack)
                    .iter()
                    .filter_map(|f| f.function)
                {
                    node = *index.entry((node, f)).or_insert_with(|| {
                        let id = g.function.len() as u32;
                        g.function.push(Some(f));
                        g.children.push(Vec::new());
                        g.parent.push(node);
                        g.samples.push(Counts::default());
                        g.children[node as usize].push(id);
                        id
                    });
                    g.samples[node as usize].inclusive += n;
                }
                if node != ROOT {
                    g.samples[node as usize].exclusive += n;
                }
            }
            g
        }
    }
}

impl GenericTree {
    fn weight(&self, n: u32) -> u64 {
        if self.instr.is_empty() {
            self.samples[n as usize].inclusive
        } else {
            self.instr[n as usize].time.elapsed_inclusive.0
        }
    }

    fn cells(&self, file: &DataFile, a: &Analysis, n: u32) -> Vec<Cell> {
        let mut row = function_identity(file, self.function[n as usize]);
        match a {
            Analysis::Instr(r) => row.extend(function_values(&self.instr[n as usize], &r.session)),
            Analysis::Sample(r) => row.extend(sample_values(&self.samples[n as usize], r, file)),
        }
        row
    }
}

fn total_weight(a: &Analysis) -> f64 {
    match a {
        Analysis::Instr(r) => r.session.elapsed_inclusive.0 as f64,
        Analysis::Sample(r) => r.session.samples as f64,
    }
}

/// The call tree's roots with `--threshold` applied and the hot path marked:
/// from the root, the heaviest child, as long as it carries at least 5 % of the session.
fn tree_rows(file: &DataFile, a: &Analysis, q: &Query, threshold: f64) -> Vec<TreeRow> {
    let g = generic_tree(file, a);
    let total = total_weight(a).max(1.0);
    let mut hot = vec![false; g.function.len()];
    let mut cur = ROOT;
    while let Some(&next) = g.children[cur as usize]
        .iter()
        .max_by_key(|&&c| g.weight(c))
    {
        if (g.weight(next) as f64) < 0.05 * total {
            break;
        }
        hot[next as usize] = true;
        cur = next;
    }
    fn build(
        g: &GenericTree,
        file: &DataFile,
        a: &Analysis,
        q: &Query,
        hot: &[bool],
        n: u32,
        min: f64,
    ) -> Option<TreeRow> {
        if (g.weight(n) as f64) < min {
            return None;
        }
        let children: Vec<TreeRow> = g.children[n as usize]
            .iter()
            .filter_map(|&c| build(g, file, a, q, hot, c, min))
            .collect();
        let own_match = function_matches(file, q, g.function[n as usize]);
        if !own_match && children.is_empty() {
            return None;
        }
        Some(TreeRow {
            cells: g.cells(file, a, n),
            hot: hot[n as usize],
            children,
        })
    }
    let min = threshold.max(0.0) / 100.0 * total;
    let mut roots: Vec<(u64, TreeRow)> = g.children[ROOT as usize]
        .iter()
        .filter_map(|&c| build(&g, file, a, q, &hot, c, min).map(|r| (g.weight(c), r)))
        .collect();
    roots.sort_by_key(|(w, _)| std::cmp::Reverse(*w));
    let mut roots: Vec<TreeRow> = roots.into_iter().map(|(_, r)| r).collect();
    sort_children(&mut roots, a);
    roots
}

/// Orders every level heaviest first (by the weight column of the method).
fn sort_children(rows: &mut [TreeRow], a: &Analysis) {
    let key_col = match a {
        Analysis::Instr(_) => FUNCTION_ID.len() + 1,
        Analysis::Sample(_) => FUNCTION_ID.len(),
    };
    let w = |r: &TreeRow| r.cells.get(key_col).and_then(Cell::as_f64).unwrap_or(0.0);
    rows.sort_by(|x, y| w(y).total_cmp(&w(x)));
    for r in rows {
        sort_children(&mut r.children, a);
    }
}

fn hot_path_names(_file: &DataFile, roots: &[TreeRow]) -> Vec<String> {
    let mut out = Vec::new();
    let mut level = roots;
    while let Some(h) = level.iter().find(|r| r.hot) {
        if let Some(Cell::Text(name)) = h.cells.first() {
            out.push(name.clone());
        }
        level = &h.children;
    }
    out
}

/// callers/callees of the function named `focus` (exact name, else the
/// single function matching it as a regex).
fn focus_view(
    file: &DataFile,
    a: &Analysis,
    q: &Query,
    focus: Option<&str>,
) -> Result<ViewOutput, ReportError> {
    let Some(pattern) = focus else {
        return Err(ReportError::Option {
            flag: "function",
            what: "the callers and callees views need --function NAME".into(),
        });
    };
    let exact: Vec<FunctionId> = file
        .functions
        .iter()
        .filter(|f| f.name == pattern)
        .map(|f| f.id)
        .collect();
    let targets = if exact.is_empty() {
        let re = q
            .function
            .clone()
            .ok_or_else(|| ReportError::Other(format!("no function named {pattern}")))?;
        file.functions
            .iter()
            .filter(|f| re.is_match(&f.name))
            .map(|f| f.id)
            .collect()
    } else {
        exact
    };
    let g = generic_tree(file, a);
    // Edges from the tree, counting inclusive once per edge on a path.
    let mut edges: HashMap<(Option<FunctionId>, FunctionId), (FunctionStats, Counts)> =
        HashMap::new();
    let mut depth: HashMap<(Option<FunctionId>, FunctionId), u32> = HashMap::new();
    let mut todo = vec![(ROOT, true)];
    while let Some((n, entering)) = todo.pop() {
        let key = g.function[n as usize].map(|f| (g.function[g.parent[n as usize] as usize], f));
        if entering {
            if let Some(key) = key {
                let d = depth.entry(key).or_default();
                let e = edges.entry(key).or_default();
                if !g.instr.is_empty() {
                    let mut s = g.instr[n as usize];
                    if *d > 0 {
                        s.time.elapsed_inclusive = Fine(0);
                        s.time.application_inclusive = Fine(0);
                    }
                    e.0.merge(&s);
                } else {
                    let c = g.samples[n as usize];
                    e.1.exclusive += c.exclusive;
                    if *d == 0 {
                        e.1.inclusive += c.inclusive;
                    }
                }
                *d += 1;
            }
            todo.push((n, false));
            todo.extend(g.children[n as usize].iter().map(|&c| (c, true)));
        } else if let Some(key) = key {
            if let Some(d) = depth.get_mut(&key) {
                *d -= 1;
            }
        }
    }
    let Some(&target) = targets.first() else {
        return Err(ReportError::Other(format!("no function matches {pattern}")));
    };
    let row_of = |f: Option<FunctionId>, s: &(FunctionStats, Counts)| {
        let mut row = function_identity(file, f);
        match a {
            Analysis::Instr(r) => row.extend(function_values(&s.0, &r.session)),
            Analysis::Sample(r) => row.extend(sample_values(&s.1, r, file)),
        }
        row
    };
    let own = match a {
        Analysis::Instr(r) => (
            r.acc
                .functions
                .get(target.0 as usize)
                .copied()
                .unwrap_or_default(),
            Counts::default(),
        ),
        Analysis::Sample(r) => (
            FunctionStats::default(),
            r.analysis
                .functions
                .get(&target)
                .copied()
                .unwrap_or_default(),
        ),
    };
    let mut callers = Vec::new();
    let mut callees = Vec::new();
    for (&(caller, callee), s) in &edges {
        if callee == target {
            let mut row = row_of(caller, s);
            if caller.is_none() {
                row[0] = Cell::Text("[root]".into());
            }
            callers.push(row);
        }
        if caller == Some(target) {
            callees.push(row_of(Some(callee), s));
        }
    }
    Ok(ViewOutput {
        columns: value_columns(a, true),
        focus: Some((row_of(Some(target), &own), callers, callees)),
        ..Default::default()
    })
}
