//! `calltree`: the selected threads' call tree, path by path, heaviest
//! first, with the hot path marked and `--threshold` applied; and the hot
//! path `summary` names.

use lapse_analysis::run::{Analysis, Query};
use lapse_analysis::tree::{collapse_equal, elide_chains, CallTree, NodeId, ShownLine, Weight};
use lapse_data::DataFile;
use regex::Regex;

use super::{columns, frame_identity, frame_matches, Body, ViewOutput, FUNCTION_ID};
use crate::columns::{Ctx, Values};
use crate::table::{Cell, TreeRow};

/// The hot path follows the heaviest child while it carries at least this
/// share of the session.
pub const HOT_SHARE: f64 = 0.05;

/// A chain of lines (each with one line below it: a deep recursion) longer
/// than twice this keeps this many lines at each end; one row says how many
/// were left out between them.
pub const CHAIN_KEEP: usize = 32;

/// How a call tree is shown: which share of the session a branch needs,
/// whether runs of calls that only pass their time on collapse, and the
/// function it is re-rooted at (`--focus`).
#[derive(Clone, Copy, Debug, Default)]
pub struct TreeShape<'a> {
    /// `--threshold`, in percent.
    pub threshold: f64,
    pub collapse: bool,
    pub root: Option<&'a Regex>,
}

pub fn view(
    file: &DataFile,
    a: &Analysis,
    q: &Query,
    ctx: &Ctx<'_>,
    shape: &TreeShape<'_>,
) -> ViewOutput {
    match a {
        Analysis::Instr(r) => {
            let total = r.session.elapsed_inclusive.to_nanos();
            let empty = CallTree::new();
            rows(file, q, ctx, r.tree().unwrap_or(&empty), total, shape)
        }
        Analysis::Sample(r) => {
            let empty = CallTree::new();
            // The root holds every selected sample (and, with off-CPU
            // periods, their wall time): in the unit the tree weighs by.
            let tree = r.tree.as_ref().unwrap_or(&empty);
            let total = tree.weight(NodeId::ROOT).inclusive();
            rows(file, q, ctx, tree, total, shape)
        }
    }
}

fn rows<W: Weight + Values>(
    file: &DataFile,
    q: &Query,
    ctx: &Ctx<'_>,
    tree: &CallTree<W>,
    total: u64,
    shape: &TreeShape<'_>,
) -> ViewOutput {
    // --focus: every call of the function, whoever called it, as one root.
    let focused;
    let tree = match shape.root {
        Some(root) => {
            focused = tree.focus(|k| root.is_match(&k.label(file)));
            &focused
        }
        None => tree,
    };
    let threshold = shape.threshold;
    let hot = tree.hot_path(total, HOT_SHARE);
    let min = (threshold.max(0.0) / 100.0 * total as f64).ceil() as u64;
    let lines = tree.lines(min, &hot, |k| frame_matches(file, q, k));
    let below_threshold = (min > 0).then(|| {
        let all = tree.lines(0, &hot, |k| frame_matches(file, q, k)).len();
        (all - lines.len(), threshold)
    });
    let row = |node: NodeId| {
        let mut r = frame_identity(file, tree.key(node));
        r.extend(tree.weight(node).cells(ctx));
        r
    };
    let columns = columns::<W>(&FUNCTION_ID);
    let elided = |depth: usize, count: usize, hot: bool| {
        let mut cells = vec![Cell::Null; columns.len()];
        cells[0] = Cell::Text(format!("…{count}"));
        TreeRow {
            depth,
            hot,
            cells,
            elided: count,
            collapsed: 0,
        }
    };
    let mut shown = elide_chains(&lines, CHAIN_KEEP);
    if shape.collapse {
        shown = collapse_equal(&shown, |n| tree.weight(n).inclusive());
    }
    let lines = shown
        .into_iter()
        .map(|l| match l {
            ShownLine::Node(l) => TreeRow {
                depth: l.depth,
                hot: l.hot,
                cells: row(l.node),
                elided: 0,
                collapsed: 0,
            },
            ShownLine::Elided { depth, count, hot } => elided(depth, count, hot),
            ShownLine::Collapsed { depth, count, hot } => {
                let mut cells = vec![Cell::Null; columns.len()];
                cells[0] = Cell::Text(format!("…{count} frames…"));
                TreeRow {
                    depth,
                    hot,
                    cells,
                    elided: 0,
                    collapsed: count,
                }
            }
        })
        .collect();
    let mut out = ViewOutput::of(
        columns,
        Body::Tree {
            lines,
            below_threshold,
        },
    );
    out.hot_path = hot
        .iter()
        .filter_map(|&n| tree.key(n))
        .map(|k| k.label(file))
        .collect();
    out
}
