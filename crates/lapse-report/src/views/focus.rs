//! `callers` and `callees` of one function: its own row, then its values
//! per direct caller, then each callee's values when called directly by it
//! (edges of the call tree; an edge recurring on one path counts its
//! inclusive values once).

use lapse_analysis::run::{Analysis, Query};
use lapse_analysis::tree::{CallTree, FrameKey, Weight};
use lapse_data::{DataFile, FunctionId};

use super::{columns, frame_identity, Body, Focus, ViewOutput, FUNCTION_ID};
use crate::columns::{Ctx, Values};
use crate::error::ReportError;
use crate::table::Cell;

/// callers/callees of the function named `focus` (exact name, else the
/// first function matching it as a regex).
pub fn view(
    file: &DataFile,
    a: &Analysis,
    q: &Query,
    ctx: &Ctx<'_>,
    focus: Option<&str>,
) -> Result<ViewOutput, ReportError> {
    let target = find_function(file, q, focus, "the callers and callees views need")?;
    Ok(match a {
        Analysis::Instr(r) => {
            let own = r
                .acc
                .functions
                .get(target.0 as usize)
                .copied()
                .unwrap_or_default();
            let empty = CallTree::new();
            rows(file, ctx, r.tree().unwrap_or(&empty), target, &own)
        }
        Analysis::Sample(r) => {
            let own = r
                .analysis
                .functions
                .get(&target)
                .copied()
                .unwrap_or_default();
            let empty = CallTree::new();
            rows(file, ctx, r.tree.as_ref().unwrap_or(&empty), target, &own)
        }
    })
}

/// The function a view is about (`--function`): the one with exactly that
/// name, else the first whose name matches `q.function`.
pub(crate) fn find_function(
    file: &DataFile,
    q: &Query,
    pattern: Option<&str>,
    needs: &str,
) -> Result<FunctionId, ReportError> {
    let Some(pattern) = pattern else {
        return Err(ReportError::Option {
            flag: "function",
            what: format!("{needs} --function NAME"),
        });
    };
    if let Some(f) = file.functions.iter().find(|f| f.name == pattern) {
        return Ok(f.id);
    }
    let re = q
        .function
        .as_ref()
        .ok_or_else(|| ReportError::Other(format!("no function named {pattern}")))?;
    file.functions
        .iter()
        .find(|f| re.is_match(&f.name))
        .map(|f| f.id)
        .ok_or_else(|| ReportError::Other(format!("no function matches {pattern}")))
}

fn rows<W: Weight + Values>(
    file: &DataFile,
    ctx: &Ctx<'_>,
    tree: &CallTree<W>,
    target: FunctionId,
    own: &W,
) -> ViewOutput {
    let target = FrameKey::Function(target);
    let row = |key: Option<FrameKey>, w: &W| {
        let mut r = frame_identity(file, key);
        r.extend(w.cells(ctx));
        r
    };
    let mut callers = Vec::new();
    let mut callees = Vec::new();
    for ((caller, callee), w) in tree.edges() {
        if callee == target {
            let mut r = row(caller, &w);
            if caller.is_none() {
                r[0] = Cell::Text("[root]".into());
            }
            callers.push(r);
        }
        if caller == Some(target) {
            callees.push(row(Some(callee), &w));
        }
    }
    let focus = Focus {
        function: row(Some(target), own),
        callers,
        callees,
    };
    ViewOutput::of(columns::<W>(&FUNCTION_ID), Body::Focus(focus))
}
