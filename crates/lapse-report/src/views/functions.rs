//! `functions` (and the rows of `summary`): one row per function.

use lapse_analysis::run::{Analysis, Query};
use lapse_data::{DataFile, FunctionId};

use super::{columns, function_identity, function_matches, Body, ViewOutput, FUNCTION_ID};
use crate::columns::{Ctx, Values};
use crate::table::{shown_unless, Cell, Column, Kind};

/// `--min-time`: the calls of the function left out as too short (their
/// time is their callers'); only for recordings made with it.
const DROPPED_CALLS: Column = shown_unless("dropped_calls", Kind::Int, "dropped", 5);

/// The recording was made with `--min-time` (its notes name the filters).
pub fn min_time_recorded(file: &DataFile) -> bool {
    !file.dropped_calls.is_empty()
        || file
            .session
            .notes
            .iter()
            .any(|n| n.starts_with("record-time filters:") && n.contains("--min-time"))
}

pub fn view(file: &DataFile, a: &Analysis, q: &Query, ctx: &Ctx<'_>) -> ViewOutput {
    match a {
        Analysis::Instr(r) if min_time_recorded(file) => {
            // (a function all of whose calls were too short has a row too)
            let ids: Vec<FunctionId> = r
                .acc
                .functions
                .iter()
                .enumerate()
                .filter(|&(i, f)| {
                    f.is_used() || file.dropped_calls.contains_key(&FunctionId(i as u32))
                })
                .map(|(i, _)| FunctionId(i as u32))
                .collect();
            let mut out = rows(
                file,
                q,
                ctx,
                ids.iter().map(|&f| (f, &r.acc.functions[f.0 as usize])),
            );
            out.columns.push(DROPPED_CALLS);
            let kept = ids.iter().filter(|&&f| function_matches(file, q, Some(f)));
            if let Body::Rows(rows) = &mut out.body {
                for (row, f) in rows.iter_mut().zip(kept) {
                    let n = file.dropped_calls.get(f).copied().unwrap_or(0);
                    row.push(Cell::Int(n));
                }
            }
            out
        }
        Analysis::Instr(r) => rows(
            file,
            q,
            ctx,
            r.acc
                .functions
                .iter()
                .enumerate()
                .filter(|(_, f)| f.is_used())
                .map(|(i, f)| (FunctionId(i as u32), f)),
        ),
        Analysis::Sample(r) => rows(
            file,
            q,
            ctx,
            r.analysis.functions.iter().map(|(&f, c)| (f, c)),
        ),
    }
}

fn rows<'v, V: Values + 'v>(
    file: &DataFile,
    q: &Query,
    ctx: &Ctx<'_>,
    functions: impl Iterator<Item = (FunctionId, &'v V)>,
) -> ViewOutput {
    let rows = functions
        .filter(|(f, _)| function_matches(file, q, Some(*f)))
        .map(|(f, v)| {
            let mut row = function_identity(file, Some(f));
            row.extend(v.cells(ctx));
            row
        })
        .collect();
    ViewOutput::rows(columns::<V>(&FUNCTION_ID), rows)
}
