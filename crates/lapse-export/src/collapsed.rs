//! Folded stacks (`a;b;c N`), the input of Brendan Gregg's flamegraph.pl,
//! inferno, speedscope and many others.
//!
//! One line per call path with a non-zero own weight: instrumentation weighs
//! a path by its elapsed exclusive nanoseconds, sampling by its exclusive
//! samples, or as `--weight` says ([`SampleWeight`]): its off-CPU
//! nanoseconds, or both in nanoseconds with the off-CPU part on a path of
//! its own ending in `[off-cpu]`. Time with an empty stack belongs to no
//! function and is left out; samples that unwound nothing are `[unknown]`.
//!
//! A path deeper than [`MAX_PATH`] frames keeps its outermost and innermost
//! frames with one `[… frames cut …]` frame between them (see
//! [`cut_middle`]), and cut paths that become equal are merged: the output
//! of a 20,000-deep recursion is then a few hundred lines, not 20,000 lines
//! of 10,000 frames (a gigabyte), and flat (innermost) values stay right.

use std::io::Write;

use lapse_analysis::sample::Counts;
use lapse_analysis::tree::{CallTree, Weight};
use lapse_data::DataFile;
use lapse_report::Analysis;

use crate::{ExportError, Format, SampleWeight, Tree, OFF_CPU_FRAME};

/// A frame name made safe for the folded format: `;` separates frames and a
/// line ends the record, so neither may appear inside a name.
pub fn frame_name(name: &str) -> String {
    name.replace(';', ":").replace(['\n', '\r'], " ")
}

/// Paths deeper than this many frames are cut in the middle.
pub const MAX_PATH: usize = 512;
/// A cut path keeps this many outermost frames, ...
const KEEP_OUTER: usize = 256;
/// ... and this many innermost ones.
const KEEP_INNER: usize = MAX_PATH - KEEP_OUTER - 1;
/// The frame that stands for the frames cut out of a deep path.
pub const CUT: &str = "[… frames cut …]";

/// `path` (outermost first) as written: whole up to [`MAX_PATH`] frames,
/// else its outermost and innermost frames with `cut` between them.
pub fn cut_middle<T: Clone>(path: &[T], cut: T) -> Vec<T> {
    if path.len() <= MAX_PATH {
        return path.to_vec();
    }
    let mut out = path[..KEEP_OUTER].to_vec();
    out.push(cut);
    out.extend_from_slice(&path[path.len() - KEEP_INNER..]);
    out
}

/// The folded lines of `tree`, weighing each path by its own weight
/// ([`Weight::exclusive`]), in pre-order (heaviest first), then the cut deep
/// paths, merged.
pub fn lines<W: Weight>(file: &DataFile, tree: &CallTree<W>) -> Vec<String> {
    fold(file, tree, |w| (w.exclusive(), 0))
}

/// The folded lines of a sampling tree, weighed as `weight` says; `period`
/// is the nanoseconds a sample stands for (for [`SampleWeight::Both`]).
pub fn sample_lines(
    file: &DataFile,
    tree: &CallTree<Counts>,
    weight: SampleWeight,
    period: u64,
) -> Vec<String> {
    match weight {
        SampleWeight::Cpu => fold(file, tree, |c| (c.exclusive, 0)),
        SampleWeight::OffCpu => fold(file, tree, |c| (c.off_cpu.exclusive, 0)),
        SampleWeight::Both => fold(file, tree, |c| {
            (c.exclusive.saturating_mul(period), c.off_cpu.exclusive)
        }),
    }
}

/// The folded lines of `tree`: `own` gives a node's weight on its path and
/// its weight on the path extended by `[off-cpu]`.
fn fold<W: Weight>(
    file: &DataFile,
    tree: &CallTree<W>,
    own: impl Fn(&W) -> (u64, u64),
) -> Vec<String> {
    let mut out = Vec::new();
    let mut cut: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    // The path to the current node, as names, cut back as pre-order climbs.
    let mut names: Vec<String> = Vec::new();
    for (node, depth) in tree.pre_order() {
        names.truncate(depth);
        names.push(frame_name(
            &tree.key(node).map_or_else(String::new, |k| k.label(file)),
        ));
        let (on_path, off_cpu) = own(tree.weight(node));
        for (weight, leaf) in [(on_path, false), (off_cpu, true)] {
            if weight == 0 {
                continue;
            }
            if leaf {
                names.push(OFF_CPU_FRAME.to_owned());
            }
            if names.len() <= MAX_PATH {
                out.push(format!("{} {weight}", names.join(";")));
            } else {
                let path = cut_middle(&names, CUT.to_owned()).join(";");
                *cut.entry(path).or_default() += weight;
            }
            if leaf {
                names.pop();
            }
        }
    }
    out.extend(cut.into_iter().map(|(path, w)| format!("{path} {w}")));
    out
}

/// The folded lines of an analysis' call tree (a sampling one weighed as
/// `weight` says).
pub fn tree_lines(
    file: &DataFile,
    analysis: &Analysis,
    format: Format,
    weight: SampleWeight,
) -> Result<Vec<String>, ExportError> {
    Ok(match Tree::of(analysis, format)? {
        Tree::Time(t) => lines(file, t),
        Tree::Samples(t) => {
            let period = crate::period_ns(file).unwrap_or(0);
            sample_lines(file, t, weight, period)
        }
    })
}

pub fn write(
    file: &DataFile,
    analysis: &Analysis,
    weight: SampleWeight,
    out: &mut dyn Write,
) -> Result<(), ExportError> {
    for line in tree_lines(file, analysis, Format::Collapsed, weight)? {
        writeln!(out, "{line}").map_err(ExportError::write(Format::Collapsed))?;
    }
    Ok(())
}
