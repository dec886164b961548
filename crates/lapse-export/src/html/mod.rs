//! One self-contained HTML page that views a recording: threads and
//! processes to choose from, search, functions and lines tables, call tree,
//! bottom-up tree, a sandwich view of one function, flame graph and a
//! zoomable per-thread timeline with off-CPU periods. Nothing is loaded
//! from the network and nothing is built: plain JS and CSS, inlined.
//!
//! Design constraints:
//! - The page's weight does not grow with the number of events: it holds
//!   call paths, functions and lines (aggregates) and a fixed number of
//!   timeline buckets per thread (`data.rs`, `lod.rs`).
//! - No depth of the data becomes a depth of anything: the embedded data is
//!   flat (node tables with parent indices, `model.rs`), and the script
//!   walks it with loops, never with recursion.
//! - Names are data: the embedded JSON escapes every `<`, so a function
//!   called `</script>` or `<!--` cannot end the script element early.

mod data;
mod lod;
mod model;

use std::io::Write;

use lapse_analysis::Analysis;
use lapse_data::DataFile;

pub use lod::{buckets_per_thread, BUCKET_BUDGET};
pub use model::NODE_BUDGET;

use crate::select::Selection;
use crate::{ExportError, Format};

const CSS: &str = include_str!("page.css");
/// The script, in the order its parts are concatenated into one scope.
const JS: [&str; 7] = [
    include_str!("util.js"),
    include_str!("model.js"),
    include_str!("vlist.js"),
    include_str!("flame.js"),
    include_str!("timeline.js"),
    include_str!("views.js"),
    include_str!("page.js"),
];

/// HTML text with `&`, `<`, `>` and `"` escaped.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The page's data as the JSON text the page embeds: every `<` written as
/// `\u003c` (it can only occur inside strings), so that nothing in it can
/// close or comment out the script element that holds it.
pub fn data_json(
    file: &DataFile,
    analysis: &Analysis,
    sel: &Selection,
) -> Result<String, ExportError> {
    let data = data::build(file, analysis, sel)?;
    let text = serde_json::to_string(&data).map_err(|e| ExportError::Unsupported {
        format: Format::Html.name(),
        what: format!("page data: {e}"),
    })?;
    Ok(text.replace('<', "\\u003c"))
}

pub fn write(
    file: &DataFile,
    analysis: &Analysis,
    sel: &Selection,
    out: &mut dyn Write,
) -> Result<(), ExportError> {
    let embedded = data_json(file, analysis, sel)?;
    let title = escape(&format!("lapse: {}", file.session.command.join(" ")));
    let head = format!(
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
{CSS}</style>
<script>
// Any script error is shown on the page and marked on <body data-error>,
// so that people and tests both see it.
window.onerror = function (message) {{
  var box = document.getElementById("script-error");
  if (!box) {{
    box = document.createElement("div");
    box.id = "script-error";
    document.body.insertBefore(box, document.body.firstChild);
  }}
  box.textContent = "Script error: " + message;
  document.body.setAttribute("data-error", String(message));
}};
</script>
</head>
<body>
<header>
<h1>{title}</h1>
<div id="summary"></div>
</header>
<div id="main">
<aside id="side">
<h2>Threads</h2>
<div id="threads"></div>
</aside>
<div id="content">
<div id="toolbar">
<input id="search" type="search" placeholder="Search functions, modules, files (text or /regex/)" autocomplete="off">
<span id="mode" class="toggle" title="Which time the tree, bottom-up and flame graph show"><button type="button" data-mode="e" class="on">Elapsed</button><button type="button" data-mode="a">Application</button></span>
<span id="selection"></span>
</div>
<nav id="tabs">
<button type="button" data-tab="calltree">Call tree</button>
<button type="button" data-tab="bottomup">Bottom-up</button>
<button type="button" data-tab="functions">Functions</button>
<button type="button" data-tab="sandwich">Sandwich</button>
<button type="button" data-tab="flame">Flame graph</button>
<button type="button" data-tab="timeline">Timeline</button>
<button type="button" data-tab="lines">Lines</button>
</nav>
<section class="panel" id="panel-calltree"></section>
<section class="panel" id="panel-bottomup"></section>
<section class="panel" id="panel-functions"></section>
<section class="panel" id="panel-sandwich"></section>
<section class="panel" id="panel-flame"></section>
<section class="panel" id="panel-timeline"></section>
<section class="panel" id="panel-lines"></section>
</div>
</div>
<div id="tip" hidden></div>
<script type="application/json" id="lapse-data">"#
    );
    let tail = format!(
        "</script>\n<script>\n(function () {{\n\"use strict\";\n{}\n}})();\n</script>\n</body>\n</html>\n",
        JS.join("\n")
    );
    let w = ExportError::write(Format::Html);
    out.write_all(head.as_bytes()).map_err(w)?;
    out.write_all(embedded.as_bytes()).map_err(w)?;
    out.write_all(tail.as_bytes()).map_err(w)
}
