//! `lines` (one row per source line), `annotate` (one function's source
//! lines with their values) and `instructions` (one row per sampled
//! address).

use std::collections::HashMap;

use lapse_analysis::run::{Analysis, Query};
use lapse_analysis::values::FunctionStats;
use lapse_data::{DataFile, FunctionId};

use super::{columns, function_identity, function_matches, ViewOutput};
use crate::columns::{Ctx, Values};
use crate::error::ReportError;
use crate::table::{col, shown, Cell, Column, Kind};

const LINE_ID: [Column; 3] = [
    shown("source_file", Kind::Text, "source file"),
    shown("line", Kind::Int, "line"),
    shown("function", Kind::Text, "function"),
];

/// The source text of an annotated line (last in a table, so it gets what
/// width is left).
const SOURCE: Column = shown("source", Kind::Text, "source");

/// Lines of context an annotated function shows before its first and
/// after its last line.
const CONTEXT: u32 = 2;

/// An annotated function shows at most this many lines.
const MAX_ANNOTATED_LINES: u32 = 5_000;

const INSTRUCTION_ID: [Column; 6] = [
    shown("address", Kind::Hex, "address"),
    shown("function", Kind::Text, "function"),
    shown("module", Kind::Text, "module"),
    col("module_path", Kind::Text),
    col("source_file", Kind::Text),
    col("line", Kind::Int),
];

pub fn view(file: &DataFile, a: &Analysis, q: &Query, ctx: &Ctx<'_>) -> ViewOutput {
    match a {
        Analysis::Instr(r) => {
            // Instrumentation knows functions, not lines: each function's own line.
            let mut by_line: HashMap<(&str, u32), (FunctionStats, FunctionId)> = HashMap::new();
            for (info, f) in file.functions.iter().zip(&r.acc.functions) {
                if let (Some(src), Some(line)) = (&info.source_file, info.line) {
                    if f.calls > 0 && function_matches(file, q, Some(info.id)) {
                        let e = by_line
                            .entry((src, line))
                            .or_insert((Default::default(), info.id));
                        e.0.merge(f);
                        e.1 = e.1.min(info.id);
                    }
                }
            }
            rows(
                file,
                ctx,
                by_line
                    .iter()
                    .map(|(&(src, line), (f, id))| (Some((src, line, Some(*id))), f)),
            )
        }
        Analysis::Sample(r) => {
            // One more row, of no line (no source file, no line): samples
            // whose frame has no line information, so that the lines shown
            // are not taken for the whole story.
            let no_line = &r.analysis.no_line;
            let no_line =
                (no_line.inclusive > 0 || no_line.off_cpu.inclusive > 0).then_some((None, no_line));
            let owner = |k: &(String, u32)| r.analysis.line_functions.get(k).copied();
            rows(
                file,
                ctx,
                r.analysis
                    .lines
                    .iter()
                    .map(|(k, c)| (Some((k.0.as_str(), k.1, owner(k))), c))
                    .chain(no_line),
            )
        }
    }
}

type LineAt<'v> = Option<(&'v str, u32, Option<FunctionId>)>;

fn rows<'v, V: Values + 'v>(
    file: &DataFile,
    ctx: &Ctx<'_>,
    lines: impl Iterator<Item = (LineAt<'v>, &'v V)>,
) -> ViewOutput {
    let name = |f: Option<FunctionId>| {
        Cell::opt_text(
            f.and_then(|f| file.functions.get(f.0 as usize))
                .map(|f| f.name.as_str()),
        )
    };
    let rows = lines
        .map(|(at, v)| {
            let mut row = match at {
                Some((src, line, f)) => vec![
                    Cell::Text(src.to_owned()),
                    Cell::Int(u64::from(line)),
                    name(f),
                ],
                None => vec![Cell::Null, Cell::Null, Cell::Null],
            };
            row.extend(v.cells(ctx));
            row
        })
        .collect();
    ViewOutput::rows(columns::<V>(&LINE_ID), rows)
}

/// `annotate`: the source lines of the function named `function` (exact
/// name, else the first matching `q.function`), from its first line (its
/// declaration, or the first sampled line) to its last sampled line, with
/// [`CONTEXT`] lines around them, each
/// with its values (sampled lines) and its text where the source file can
/// be read. Sampling only: instrumentation knows functions, not lines.
pub fn annotate(
    file: &DataFile,
    a: &Analysis,
    q: &Query,
    ctx: &Ctx<'_>,
    function: Option<&str>,
) -> Result<ViewOutput, ReportError> {
    let Analysis::Sample(r) = a else {
        return Err(ReportError::Other(
            "the annotate view needs a sampling recording (instrumentation times functions, not lines)".into(),
        ));
    };
    let target = super::focus::find_function(file, q, function, "the annotate view needs")?;
    let info = &file.functions[target.0 as usize];
    let lines: Vec<(&(String, u32), &lapse_analysis::sample::Counts)> = r
        .analysis
        .lines
        .iter()
        .filter(|(k, _)| r.analysis.line_functions.get(*k) == Some(&target))
        .collect();
    // The function's source file: its own, else the one most of its
    // sampled lines are in.
    let mut files: HashMap<&str, u64> = HashMap::new();
    for ((src, _), c) in &lines {
        *files.entry(src.as_str()).or_default() += c.inclusive.max(1);
    }
    let src = info.source_file.as_deref().or_else(|| {
        files
            .iter()
            .max_by_key(|(name, n)| (**n, std::cmp::Reverse(**name)))
            .map(|(name, _)| *name)
    });
    let mut columns = vec![
        col("source_file", Kind::Text),
        shown("line", Kind::Int, "line"),
    ];
    columns.extend(lapse_analysis::sample::Counts::columns());
    columns.push(SOURCE);
    let Some(src) = src else {
        return Ok(ViewOutput::rows(columns, Vec::new()));
    };
    let by_line: HashMap<u32, &lapse_analysis::sample::Counts> = lines
        .iter()
        .filter(|((s, _), _)| s == src)
        .map(|((_, l), c)| (*l, *c))
        .collect();
    let last = by_line.keys().copied().max().or(info.line).unwrap_or(0);
    let first = by_line
        .keys()
        .copied()
        .chain(
            info.line
                .filter(|_| info.source_file.as_deref() == Some(src)),
        )
        .min()
        .unwrap_or(last);
    // (a source file that cannot be read leaves the text column empty)
    let text = std::fs::read_to_string(src).ok();
    let text: Vec<&str> = text.as_deref().map_or(Vec::new(), |t| t.lines().collect());
    // A few lines of context around what was sampled (the signature above
    // the first line, when the declaration's line is not known).
    let first = first.saturating_sub(CONTEXT).max(1);
    let mut last = last.saturating_add(CONTEXT);
    if !text.is_empty() {
        last = last.min(text.len() as u32);
    }
    let last = last.min(first.saturating_add(MAX_ANNOTATED_LINES));
    let values = columns.len() - 3;
    let rows = (first..=last)
        .filter(|&l| l > 0)
        .map(|l| {
            let mut row = vec![Cell::Text(src.to_owned()), Cell::Int(u64::from(l))];
            match by_line.get(&l) {
                Some(c) => row.extend(c.cells(ctx)),
                None => row.extend(std::iter::repeat_n(Cell::Null, values)),
            }
            row.push(Cell::opt_text(
                text.get(l as usize - 1)
                    .map(|t| t.replace('\t', "    "))
                    .as_deref(),
            ));
            row
        })
        .collect();
    Ok(ViewOutput::rows(columns, rows))
}

pub fn instructions(
    file: &DataFile,
    a: &Analysis,
    q: &Query,
    ctx: &Ctx<'_>,
) -> Result<ViewOutput, ReportError> {
    let Analysis::Sample(r) = a else {
        return Err(ReportError::Other(
            "the instructions view needs a sampling recording (this one is instrumentation)".into(),
        ));
    };
    let mut rows = Vec::new();
    for (&fid, c) in &r.analysis.instructions {
        let Some(frame) = file.frames.get(fid.0 as usize) else {
            continue;
        };
        let top = frame.functions.last();
        let function = top.map(|f| f.function);
        if !function_matches(file, q, function) {
            continue;
        }
        // function, module, module_path from the function (or the frame's
        // module when it has none); source and line of this address.
        let id = function_identity(file, function);
        let module = file.module(frame.module);
        let mut row = vec![Cell::Int(frame.address), id[0].clone()];
        if id[1] == Cell::Null {
            row.push(Cell::opt_text(module.map(|m| m.name())));
            row.push(Cell::opt_text(module.map(|m| m.path.as_str())));
        } else {
            row.push(id[1].clone());
            row.push(id[2].clone());
        }
        row.push(Cell::opt_text(top.and_then(|f| f.source_file.as_deref())));
        row.push(
            top.and_then(|f| f.line)
                .map_or(Cell::Null, |l| Cell::Int(u64::from(l))),
        );
        row.extend(c.cells(ctx));
        rows.push(row);
    }
    Ok(ViewOutput::rows(
        columns::<lapse_analysis::sample::Counts>(&INSTRUCTION_ID),
        rows,
    ))
}
