//! Folded stacks (`a;b;c N`), the input of Brendan Gregg's flamegraph.pl,
//! inferno, speedscope and many others.
//!
//! One line per call path with a non-zero own weight: instrumentation weighs
//! a path by its elapsed exclusive nanoseconds, sampling by its exclusive
//! samples (the call tree's [`Weight::exclusive`]). Time with an empty stack
//! belongs to no function and is left out; samples that unwound nothing
//! are `[unknown]`.

use std::io::Write;

use lapse_analysis::tree::{CallTree, Weight};
use lapse_data::DataFile;
use lapse_report::Analysis;

use crate::{ExportError, Format, Tree};

/// A frame name made safe for the folded format: `;` separates frames and a
/// line ends the record, so neither may appear inside a name.
pub fn frame_name(name: &str) -> String {
    name.replace(';', ":").replace(['\n', '\r'], " ")
}

/// The folded lines of `tree`, in pre-order (heaviest first).
pub fn lines<W: Weight>(file: &DataFile, tree: &CallTree<W>) -> Vec<String> {
    let mut out = Vec::new();
    // The path to the current node, as names, cut back as pre-order climbs.
    let mut names: Vec<String> = Vec::new();
    for (node, depth) in tree.pre_order() {
        names.truncate(depth);
        names.push(frame_name(
            &tree.key(node).map_or_else(String::new, |k| k.label(file)),
        ));
        let weight = tree.weight(node).exclusive();
        if weight > 0 {
            out.push(format!("{} {weight}", names.join(";")));
        }
    }
    out
}

/// The folded lines of an analysis' call tree.
pub fn tree_lines(
    file: &DataFile,
    analysis: &Analysis,
    format: Format,
) -> Result<Vec<String>, ExportError> {
    Ok(match Tree::of(analysis, format)? {
        Tree::Time(t) => lines(file, t),
        Tree::Samples(t) => lines(file, t),
    })
}

pub fn write(file: &DataFile, analysis: &Analysis, out: &mut dyn Write) -> Result<(), ExportError> {
    for line in tree_lines(file, analysis, Format::Collapsed)? {
        writeln!(out, "{line}").map_err(ExportError::write(Format::Collapsed))?;
    }
    Ok(())
}
