//! `modules`: one row per module (SPEC 2.3: inclusive when any frame of the
//! module is on the stack, counted once).

use lapse_analysis::run::{Analysis, Query};
use lapse_analysis::values::TimeValue;
use lapse_data::DataFile;

use super::{columns, ViewOutput};
use crate::columns::{Ctx, Values};
use crate::table::{col, shown, Cell, Column, Kind};

const MODULE_ID: [Column; 3] = [
    shown("module", Kind::Text, "module"),
    col("module_path", Kind::Text),
    col("build_id", Kind::Text),
];

pub fn view(file: &DataFile, a: &Analysis, q: &Query, ctx: &Ctx<'_>) -> ViewOutput {
    match a {
        Analysis::Instr(r) => rows(
            file,
            q,
            ctx,
            r.acc
                .modules
                .iter()
                .enumerate()
                .filter(|(_, s)| s.calls > 0 || !s.time[TimeValue::ElapsedInclusive].is_zero()),
        ),
        Analysis::Sample(r) => rows(
            file,
            q,
            ctx,
            r.analysis.modules.iter().map(|(m, c)| (m.0 as usize, c)),
        ),
    }
}

fn rows<'v, V: Values + 'v>(
    file: &DataFile,
    q: &Query,
    ctx: &Ctx<'_>,
    modules: impl Iterator<Item = (usize, &'v V)>,
) -> ViewOutput {
    let keep = |m: usize| {
        q.module
            .as_ref()
            .is_none_or(|r| file.modules.get(m).is_some_and(|i| r.is_match(&i.path)))
    };
    let rows = modules
        .filter(|(m, _)| keep(*m))
        .map(|(m, v)| {
            let info = file.modules.get(m);
            let build_id = info
                .and_then(|i| i.build_id.as_ref())
                .map(|b| b.iter().map(|x| format!("{x:02x}")).collect::<String>());
            let mut row = vec![
                Cell::opt_text(info.map(|i| i.name())),
                Cell::opt_text(info.map(|i| i.path.as_str())),
                Cell::opt_text(build_id.as_deref()),
            ];
            row.extend(v.cells(ctx));
            row
        })
        .collect();
    ViewOutput::rows(columns::<V>(&MODULE_ID), rows)
}
