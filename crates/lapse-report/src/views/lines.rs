//! `lines` (one row per source line) and `instructions` (one row per
//! sampled address).

use std::collections::HashMap;

use lapse_analysis::run::{Analysis, Query};
use lapse_analysis::values::FunctionStats;
use lapse_data::DataFile;

use super::{columns, function_identity, function_matches, ViewOutput};
use crate::columns::{Ctx, Values};
use crate::error::ReportError;
use crate::table::{col, shown, Cell, Column, Kind};

const LINE_ID: [Column; 2] = [
    shown("source_file", Kind::Text, "source file"),
    shown("line", Kind::Int, "line"),
];

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
            let mut by_line: HashMap<(&str, u32), FunctionStats> = HashMap::new();
            for (info, f) in file.functions.iter().zip(&r.acc.functions) {
                if let (Some(src), Some(line)) = (&info.source_file, info.line) {
                    if f.calls > 0 && function_matches(file, q, Some(info.id)) {
                        by_line.entry((src, line)).or_default().merge(f);
                    }
                }
            }
            rows(
                ctx,
                by_line
                    .iter()
                    .map(|(&(src, line), f)| (Some((src, line)), f)),
            )
        }
        Analysis::Sample(r) => {
            // One more row, of no line (no source file, no line): samples
            // whose frame has no line information, so that the lines shown
            // are not taken for the whole story.
            let no_line = &r.analysis.no_line;
            let no_line =
                (no_line.inclusive > 0 || no_line.off_cpu.inclusive > 0).then_some((None, no_line));
            rows(
                ctx,
                r.analysis
                    .lines
                    .iter()
                    .map(|((src, line), c)| (Some((src.as_str(), *line)), c))
                    .chain(no_line),
            )
        }
    }
}

fn rows<'v, V: Values + 'v>(
    ctx: &Ctx<'_>,
    lines: impl Iterator<Item = (Option<(&'v str, u32)>, &'v V)>,
) -> ViewOutput {
    let rows = lines
        .map(|(at, v)| {
            let mut row = match at {
                Some((src, line)) => vec![Cell::Text(src.to_owned()), Cell::Int(u64::from(line))],
                None => vec![Cell::Null, Cell::Null],
            };
            row.extend(v.cells(ctx));
            row
        })
        .collect();
    ViewOutput::rows(columns::<V>(&LINE_ID), rows)
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
