//! Folded stacks (`a;b;c N`), the input of Brendan Gregg's flamegraph.pl,
//! inferno, speedscope and many others.
//!
//! One line per call path with a non-zero own weight: instrumentation weighs
//! a path by its elapsed exclusive nanoseconds, sampling by its samples (see
//! [`crate::paths`]).

use std::io::Write;

use lapse_data::DataFile;
use lapse_report::Analysis;

use crate::paths::{label, PathTree};
use crate::{ExportError, Format};

/// A frame name made safe for the folded format: `;` separates frames and a
/// line ends the record, so neither may appear inside a name.
pub fn frame_name(name: &str) -> String {
    name.replace(';', ":").replace(['\n', '\r'], " ")
}

/// The folded lines of `tree`, in a stable depth-first order.
pub fn lines(file: &DataFile, tree: &PathTree) -> Vec<String> {
    let mut out = Vec::new();
    for node in tree.depth_first(file) {
        let weight = tree.weight(node);
        if weight == 0 {
            continue;
        }
        let names: Vec<String> = tree
            .path(node)
            .into_iter()
            .map(|k| frame_name(&label(file, k)))
            .collect();
        out.push(format!("{} {weight}", names.join(";")));
    }
    out
}

pub fn write(file: &DataFile, analysis: &Analysis, out: &mut dyn Write) -> Result<(), ExportError> {
    let tree = PathTree::new(file, analysis)?;
    for line in lines(file, &tree) {
        writeln!(out, "{line}").map_err(ExportError::write(Format::Collapsed))?;
    }
    Ok(())
}
