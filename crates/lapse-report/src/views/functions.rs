//! `functions` (and the rows of `summary`): one row per function.

use lapse_analysis::run::{Analysis, Query};
use lapse_data::{DataFile, FunctionId};

use super::{columns, function_identity, function_matches, ViewOutput, FUNCTION_ID};
use crate::columns::{Ctx, Values};

pub fn view(file: &DataFile, a: &Analysis, q: &Query, ctx: &Ctx<'_>) -> ViewOutput {
    match a {
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
