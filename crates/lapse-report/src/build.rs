//! [`build`]: one view of an analysis, as a report asks for it ([`ViewSpec`]):
//! built, sorted, limited and cut to the chosen columns.

use lapse_analysis::{Analysis, Query};
use lapse_data::DataFile;
use regex::Regex;

use crate::error::ReportError;
use crate::sort::{sort_column, sort_rows, RankBy};
use crate::spec::ViewSpec;
use crate::views::{build_view, Body, TreeShape, View, ViewOutput};

/// Builds `spec.view` of `a` (the analysis of `file` that `q` asked for),
/// its rows in order and cut as `spec` says.
pub fn build(
    file: &DataFile,
    a: &Analysis,
    q: &Query,
    spec: &ViewSpec,
) -> Result<ViewOutput, ReportError> {
    // (the views about one function)
    let focus_view = matches!(spec.view, View::Callers | View::Callees | View::Annotate);
    let pattern = |flag: &'static str, p: &str| {
        Regex::new(p).map_err(|e| ReportError::Option {
            flag,
            what: format!("invalid regular expression {p:?}: {e}"),
        })
    };
    // callers/callees: the function is what they are about, not a row filter.
    let function_query;
    let q = match (&spec.function, focus_view) {
        (Some(p), true) => {
            function_query = Query {
                function: Some(pattern("function", p)?),
                ..q.clone()
            };
            &function_query
        }
        _ => q,
    };
    let root = match (&spec.focus, spec.view) {
        (None, _) => None,
        (Some(p), View::Calltree) => Some(pattern("focus", p)?),
        (Some(_), _) => {
            return Err(ReportError::Option {
                flag: "focus",
                what: "re-roots the call tree: use it with --view calltree".into(),
            })
        }
    };
    let shape = TreeShape {
        threshold: spec.threshold(),
        collapse: spec.collapse(),
        root: root.as_ref(),
    };
    let function = spec.function.as_deref().filter(|_| focus_view);
    let mut out = build_view(file, a, q, spec.view, function, &shape)?;
    out.view = spec.view;
    let rank = RankBy::of(file, a);
    let sort = spec.sort.as_deref();
    match &mut out.body {
        Body::Rows(rows) => {
            sort_rows(&out.columns, rows, spec.view, rank, sort, spec.row_limit())?;
        }
        Body::Focus(f) => {
            for rows in [&mut f.callers, &mut f.callees] {
                sort_rows(&out.columns, rows, spec.view, rank, sort, spec.limit)?;
            }
        }
        // A tree keeps its order (heaviest first), but a --sort it
        // cannot follow is still an error.
        Body::Tree { .. } => {
            if let Some(key) = sort {
                sort_column(&out.columns, key)?;
            }
        }
    }
    if !spec.columns.is_empty() {
        out.select(&spec.columns)?;
        out.columns_chosen = true;
    }
    Ok(out)
}
