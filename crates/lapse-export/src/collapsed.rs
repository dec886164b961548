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

use rustc_hash::FxHashMap as HashMap;

use lapse_analysis::sample::Counts;
use lapse_analysis::tree::{CallTree, Weight};
use lapse_analysis::Analysis;
use lapse_data::DataFile;

use crate::select::Selection;
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
///
/// Paths are kept as ids of interned names while the tree is walked, so a
/// deep path costs a few bytes a frame, and a path past [`MAX_PATH`] costs
/// its cut form's ids (not its names) to merge: a 2-million-deep recursion
/// folds in about a second.
fn fold<W: Weight>(
    file: &DataFile,
    tree: &CallTree<W>,
    own: impl Fn(&W) -> (u64, u64),
) -> Vec<String> {
    // Names by id: [off-cpu] and the cut frame first, then frames as met.
    let mut names: Vec<String> = vec![OFF_CPU_FRAME.to_owned(), CUT.to_owned()];
    const OFF_CPU_ID: u32 = 0;
    const CUT_ID: u32 = 1;
    let mut ids: HashMap<Option<lapse_analysis::tree::FrameKey>, u32> = HashMap::default();
    let mut out = Vec::new();
    let mut cut: HashMap<Vec<u32>, u64> = HashMap::default();
    // The path to the current node, cut back as pre-order climbs.
    let mut path: Vec<u32> = Vec::new();
    let join = |names: &[String], path: &[u32]| -> String {
        let mut line = String::new();
        for (i, &id) in path.iter().enumerate() {
            if i > 0 {
                line.push(';');
            }
            line.push_str(&names[id as usize]);
        }
        line
    };
    for (node, depth) in tree.pre_order() {
        path.truncate(depth);
        let key = tree.key(node);
        let id = *ids.entry(key).or_insert_with(|| {
            names.push(frame_name(&key.map_or_else(String::new, |k| k.label(file))));
            (names.len() - 1) as u32
        });
        path.push(id);
        let (on_path, off_cpu) = own(tree.weight(node));
        for (weight, leaf) in [(on_path, false), (off_cpu, true)] {
            if weight == 0 {
                continue;
            }
            if leaf {
                path.push(OFF_CPU_ID);
            }
            if path.len() <= MAX_PATH {
                out.push(format!("{} {weight}", join(&names, &path)));
            } else {
                *cut.entry(cut_middle(&path, CUT_ID)).or_default() += weight;
            }
            if leaf {
                path.pop();
            }
        }
    }
    let mut deep: Vec<(String, u64)> = cut
        .into_iter()
        .map(|(p, w)| (join(&names, &p), w))
        .collect();
    deep.sort();
    out.extend(deep.into_iter().map(|(path, w)| format!("{path} {w}")));
    out
}

/// The folded lines of an analysis' call tree (a sampling one weighed as
/// `weight` says).
pub fn tree_lines(
    file: &DataFile,
    analysis: &Analysis,
    format: Format,
    weight: SampleWeight,
    sel: &Selection,
) -> Result<Vec<String>, ExportError> {
    Ok(match Tree::of(file, analysis, sel, format)? {
        Tree::Time(t) => lines(file, &t),
        Tree::Samples(t) => {
            let period = crate::period_ns(file).unwrap_or(0);
            sample_lines(file, &t, weight, period)
        }
    })
}

pub fn write(
    file: &DataFile,
    analysis: &Analysis,
    weight: SampleWeight,
    sel: &Selection,
    out: &mut dyn Write,
) -> Result<(), ExportError> {
    for line in tree_lines(file, analysis, Format::Collapsed, weight, sel)? {
        writeln!(out, "{line}").map_err(ExportError::write(Format::Collapsed))?;
    }
    Ok(())
}
