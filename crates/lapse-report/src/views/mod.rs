//! SPEC section 3's views, built from an [`Analysis`] as neutral tables:
//! one file per view, each written once for both methods over the
//! [`Values`] of the rows.

mod calltree;
mod focus;
pub(crate) mod functions;
mod lines;
mod marks;
mod modules;
mod threads;

use lapse_analysis::run::{Analysis, Query};
use lapse_analysis::tree::FrameKey;
use lapse_data::{DataFile, FunctionId};

pub use calltree::TreeShape;

use crate::columns::{Ctx, Values, OFF_CPU_KEYS};
use crate::error::ReportError;
use crate::table::{col, shown, shown_unless, Cell, Column, Kind, TreeRow};

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
    Annotate,
    Instructions,
    /// The program's marks (`lapse_mark`), in time order.
    Marks,
}

impl View {
    pub const ALL: [(&'static str, View); 12] = [
        ("summary", View::Summary),
        ("functions", View::Functions),
        ("callers", View::Callers),
        ("callees", View::Callees),
        ("calltree", View::Calltree),
        ("modules", View::Modules),
        ("threads", View::Threads),
        ("processes", View::Processes),
        ("lines", View::Lines),
        ("annotate", View::Annotate),
        ("instructions", View::Instructions),
        ("marks", View::Marks),
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
#[derive(Clone, Debug)]
pub struct Focus {
    pub function: Vec<Cell>,
    pub callers: Vec<Vec<Cell>>,
    pub callees: Vec<Vec<Cell>>,
}

/// What a built view holds: rows, a call tree's lines, or one function with
/// its callers and callees.
#[derive(Clone, Debug)]
pub enum Body {
    Rows(Vec<Vec<Cell>>),
    /// calltree: the tree's lines in pre-order, and the lines a
    /// `--threshold` left out with that threshold (%).
    Tree {
        lines: Vec<TreeRow>,
        below_threshold: Option<(usize, f64)>,
    },
    /// callers/callees.
    Focus(Focus),
}

/// A built view, ready for any renderer: its columns and its body.
#[derive(Clone, Debug)]
pub struct ViewOutput {
    pub view: View,
    pub columns: Vec<Column>,
    pub body: Body,
    /// Function names along the hot path (summary, calltree).
    pub hot_path: Vec<String>,
    /// The columns were chosen (`--columns`): a table shows them all,
    /// whatever it would show by itself.
    pub columns_chosen: bool,
}

impl ViewOutput {
    /// A view of rows (`view` is set by [`build`]).
    pub(crate) fn rows(columns: Vec<Column>, rows: Vec<Vec<Cell>>) -> ViewOutput {
        ViewOutput::of(columns, Body::Rows(rows))
    }

    pub(crate) fn of(columns: Vec<Column>, body: Body) -> ViewOutput {
        ViewOutput {
            view: View::Functions,
            columns,
            body,
            hot_path: Vec::new(),
            columns_chosen: false,
        }
    }

    /// The rows of a view of rows (none for a tree or a focus).
    pub fn table_rows(&self) -> &[Vec<Cell>] {
        match &self.body {
            Body::Rows(rows) => rows,
            _ => &[],
        }
    }

    /// Leaves out the columns named in `keys`.
    pub fn without(&mut self, keys: &[&str]) {
        let keep: Vec<String> = self
            .columns
            .iter()
            .filter(|c| !keys.contains(&c.key))
            .map(|c| c.key.to_owned())
            .collect();
        if keep.len() < self.columns.len() {
            // (every kept key names a column)
            let _ = self.select(&keep);
        }
    }

    /// Keeps only the columns named in `keys`, in that order (`--columns`).
    pub fn select(&mut self, keys: &[String]) -> Result<(), ReportError> {
        // What names a row stays in front, asked for or not (a table of
        // numbers without the function they belong to says nothing).
        let names = match self.view {
            View::Lines => &["source_file", "line", "function"][..],
            View::Annotate => &["line", "source"][..],
            _ if self.columns.iter().any(|c| c.key == "function") => &["function", "module"][..],
            _ => &["module", "pid", "tid", "source_file", "line"][..],
        };
        let identity = self
            .columns
            .iter()
            .map(|c| c.key)
            .filter(|k| names.contains(k) && !keys.iter().any(|w| w == k))
            .map(str::to_owned);
        let keys: Vec<String> = identity.chain(keys.iter().cloned()).collect();
        let idx: Vec<usize> = keys
            .iter()
            .map(|k| {
                self.columns.iter().position(|c| c.key == k).ok_or_else(|| {
                    let names: Vec<&str> = self.columns.iter().map(|c| c.key).collect();
                    ReportError::Option {
                        flag: "columns",
                        what: format!("no column {k} in this view (columns: {})", names.join(", ")),
                    }
                })
            })
            .collect::<Result<_, _>>()?;
        let pick = |row: &mut Vec<Cell>| {
            *row = idx
                .iter()
                .map(|&i| row.get(i).cloned().unwrap_or(Cell::Null))
                .collect();
        };
        self.columns = idx.iter().map(|&i| self.columns[i].clone()).collect();
        match &mut self.body {
            Body::Rows(rows) => rows.iter_mut().for_each(pick),
            Body::Tree { lines, .. } => lines.iter_mut().for_each(|r| pick(&mut r.cells)),
            Body::Focus(f) => {
                pick(&mut f.function);
                f.callers
                    .iter_mut()
                    .chain(f.callees.iter_mut())
                    .for_each(pick);
            }
        }
        Ok(())
    }
}

/// The identity columns of a function row.
pub(crate) const FUNCTION_ID: [Column; 6] = [
    shown("function", Kind::Text, "function"),
    shown_unless("module", Kind::Text, "module", 5),
    col("module_path", Kind::Text),
    col("address", Kind::Hex),
    col("source_file", Kind::Text),
    col("line", Kind::Int),
];

/// `id` followed by the value columns of `V`.
pub(crate) fn columns<V: Values>(id: &[Column]) -> Vec<Column> {
    let mut c = id.to_vec();
    c.extend(V::columns());
    c
}

/// The identity cells of a call-tree frame (a function, or an address
/// without one, or nothing unwound).
pub(crate) fn frame_identity(file: &DataFile, key: Option<FrameKey>) -> Vec<Cell> {
    match key {
        Some(FrameKey::Function(f)) => function_identity(file, Some(f)),
        Some(k @ FrameKey::Unresolved { module, address }) => {
            let m = file.module(module);
            vec![
                Cell::Text(k.label(file)),
                Cell::opt_text(m.map(|m| m.name())),
                Cell::opt_text(m.map(|m| m.path.as_str())),
                Cell::Int(address),
                Cell::Null,
                Cell::Null,
            ]
        }
        Some(FrameKey::Unknown) | None => function_identity(file, None),
    }
}

pub(crate) fn function_identity(file: &DataFile, f: Option<FunctionId>) -> Vec<Cell> {
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

/// `--function` and `--module` on a frame: its label (`[unknown]`,
/// `[module+0x...]` for a frame without a function) and its module's path.
pub(crate) fn frame_matches(file: &DataFile, q: &Query, key: Option<FrameKey>) -> bool {
    let name = key.map_or_else(|| "[unknown]".to_owned(), |k| k.label(file));
    let module = key
        .and_then(|k| k.module(file))
        .and_then(|m| file.module(m))
        .map_or("", |m| m.path.as_str());
    q.function.as_ref().is_none_or(|r| r.is_match(&name))
        && q.module.as_ref().is_none_or(|r| r.is_match(module))
}

pub(crate) fn function_matches(file: &DataFile, q: &Query, f: Option<FunctionId>) -> bool {
    frame_matches(
        file,
        q,
        Some(f.map_or(FrameKey::Unknown, FrameKey::Function)),
    )
}

/// Builds `view` of analysis `a`. `focus` names the function of
/// callers/callees; `shape` is how a call tree is shown.
pub(crate) fn build_view(
    file: &DataFile,
    a: &Analysis,
    q: &Query,
    view: View,
    focus: Option<&str>,
    shape: &TreeShape<'_>,
) -> Result<ViewOutput, ReportError> {
    let ctx = Ctx::of(file, a);
    let mut out = match view {
        View::Functions => functions::view(file, a, q, &ctx),
        View::Summary => {
            let mut out = functions::view(file, a, q, &ctx);
            out.hot_path = calltree::view(file, a, q, &ctx, &TreeShape::default()).hot_path;
            out
        }
        View::Modules => modules::view(file, a, q, &ctx),
        View::Threads => threads::view(file, a, &ctx, false),
        View::Processes => threads::view(file, a, &ctx, true),
        View::Lines => lines::view(file, a, q, &ctx),
        View::Annotate => lines::annotate(file, a, q, &ctx, focus)?,
        View::Instructions => lines::instructions(file, a, q, &ctx)?,
        View::Calltree => calltree::view(file, a, q, &ctx, shape),
        View::Callers | View::Callees => focus::view(file, a, q, &ctx, focus)?,
        View::Marks => marks::view(file, q),
    };
    if matches!(a, Analysis::Sample(_)) && !ctx.off_cpu {
        out.without(&OFF_CPU_KEYS);
    }
    out.view = view;
    Ok(out)
}
