//! One self-contained HTML page: summary, sortable functions table, call
//! tree and flame graph, readable offline (no network, no library).
//!
//! The page holds the report's own JSON (the `functions` and `calltree`
//! views of SPEC section 5) in a `<script type="application/json">` element,
//! and a small plain-JS renderer (`page.js`) draws it; the flame graph is
//! drawn by the same script from the call tree, so it zooms on click and
//! needs no SVG script. Call-tree branches under [`TREE_THRESHOLD_PCT`] of
//! the session are left out, which bounds the page for long recordings.

use std::io::Write;

use lapse_data::DataFile;
use lapse_report::{
    build_view, render, Analysis, Format as ReportFormat, Query, RenderOptions, View,
};
use serde_json::{json, Value};

use crate::{ExportError, Format};

/// Smallest call-tree branch kept, in percent of the session.
pub const TREE_THRESHOLD_PCT: f64 = 0.05;

const CSS: &str = include_str!("page.css");
const JS: &str = include_str!("page.js");

/// The report JSON of `view`, as `lapse report --format json` prints it.
fn report(file: &DataFile, analysis: &Analysis, view: View) -> Result<Value, ExportError> {
    let unsupported = |what: String| ExportError::Unsupported {
        format: Format::Html.name(),
        what,
    };
    let q = Query::default();
    let threshold = if view == View::Calltree {
        TREE_THRESHOLD_PCT
    } else {
        0.0
    };
    let v = build_view(file, analysis, &q, view, None, threshold)
        .map_err(|e| unsupported(e.to_string()))?;
    let opts = RenderOptions {
        view,
        format: ReportFormat::Json,
        sort: None,
        limit: None,
        color: false,
        no_compensation: false,
        width: None,
        columns_chosen: false,
    };
    let mut out = Vec::new();
    render(&mut out, file, analysis, &v, &opts).map_err(ExportError::write(Format::Html))?;
    serde_json::from_slice(&out).map_err(|e| unsupported(format!("report JSON: {e}")))
}

/// HTML text with `<`, `>` and `&` escaped.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The data embedded in the page.
pub fn data(file: &DataFile, analysis: &Analysis) -> Result<Value, ExportError> {
    if let Analysis::Instr(r) = analysis {
        if r.tree.is_none() {
            return Err(ExportError::Unsupported {
                format: Format::Html.name(),
                what: "the analysis was made without a call tree".into(),
            });
        }
    }
    let functions = report(file, analysis, View::Functions)?;
    let tree = report(file, analysis, View::Calltree)?;
    Ok(json!({
        "method": file.session.method.name(),
        "session": tree["session"],
        "functions": functions["rows"],
        "roots": tree["roots"],
        "hot_path": tree["hot_path"],
        "tree_threshold_pct": TREE_THRESHOLD_PCT,
    }))
}

pub fn write(file: &DataFile, analysis: &Analysis, out: &mut dyn Write) -> Result<(), ExportError> {
    let data = data(file, analysis)?;
    // Inside <script>, only "</" could end the element early; "<\/" is the
    // same JSON string.
    let embedded = data.to_string().replace("</", "<\\/");
    let title = escape(&format!("lapse: {}", file.session.command.join(" ")));
    let page = format!(
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>
{CSS}</style>
</head>
<body>
<h1>{title}</h1>
<section id="summary"></section>
<h2>Functions</h2>
<p class="note">Click a column to sort by it.</p>
<section id="functions"></section>
<h2>Call tree</h2>
<p class="note">Branches under {TREE_THRESHOLD_PCT}% of the session are not shown; the hot path is marked.</p>
<section id="calltree"></section>
<h2>Flame graph</h2>
<p class="note">Width = inclusive value; click a frame to zoom.</p>
<button id="flame-reset">Reset zoom</button>
<div id="flame"></div>
<script type="application/json" id="lapse-data">{embedded}</script>
<script>
{JS}</script>
</body>
</html>
"#
    );
    out.write_all(page.as_bytes())
        .map_err(ExportError::write(Format::Html))
}
