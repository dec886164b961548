//! The terminal table: a short header that explains the session, then
//! aligned columns in human units, fitted to the terminal's width: the
//! columns a view can spare drop first (see [`Column::drop`]), then long
//! text is cut in the middle with `…`.

use std::io::{self, Write};

use lapse_analysis::run::Analysis;
use lapse_data::DataFile;
use serde_json::Value;

use crate::spec::RenderOptions;
use crate::table::{Cell, Kind, TreeRow, COMPACT};
use crate::units;
use crate::views::{Body, Focus, View, ViewOutput};

const BOLD: &str = "\x1b[1m";
const RESET: &str = "\x1b[0m";
/// Text columns are cut to no less than this.
const MIN_TEXT: usize = 12;
/// Before any column is dropped, long text is cut to this.
const SOFT_TEXT: usize = 40;
const GAP: usize = 2;

/// `s` in at most `width` characters: the middle replaced by `…`.
pub fn cut_middle(s: &str, width: usize) -> String {
    let n = s.chars().count();
    if n <= width {
        return s.to_owned();
    }
    if width == 0 {
        return String::new();
    }
    let keep = width - 1;
    let head = keep.div_ceil(2);
    let tail = keep - head;
    let mut out: String = s.chars().take(head).collect();
    out.push('…');
    out.extend(s.chars().skip(n - tail));
    out
}

/// `name` in at most `width` characters: the generic arguments and
/// parameter lists of C++ and Rust names give way first (the most deeply
/// nested, the longest first, each to `<…>` or `(…)`), so
/// `HashMap<K, V, S>::insert` keeps `::insert`; what is still too long is
/// cut in the middle.
pub fn shorten(name: &str, width: usize) -> String {
    let mut s: Vec<char> = name.chars().collect();
    while s.len() > width {
        // The innermost-deepest, then longest, bracket group not yet cut.
        let mut best: Option<(usize, usize, usize)> = None; // (depth, open, close)
        let mut open: Vec<usize> = Vec::new();
        for (i, &ch) in s.iter().enumerate() {
            match ch {
                '<' | '(' => open.push(i),
                '>' | ')' => {
                    let Some(o) = open.pop() else { break };
                    let pair = (s[o], ch);
                    if !matches!(pair, ('<', '>') | ('(', ')')) {
                        // `operator<`, `->`: not a bracket pair; give up.
                        open.clear();
                        break;
                    }
                    // (one character, `…` or `T`, gains nothing)
                    let inner = i - o - 1;
                    if inner <= 1 {
                        continue;
                    }
                    let depth = open.len();
                    let better = best
                        .is_none_or(|(d, bo, bc)| depth > d || (depth == d && inner > bc - bo - 1));
                    if better {
                        best = Some((depth, o, i));
                    }
                }
                _ => {}
            }
        }
        let Some((_, o, cl)) = best else { break };
        s.splice(o + 1..cl, ['…']);
    }
    let s: String = s.into_iter().collect();
    cut_middle(&s, width)
}

/// The hot path, every frame of it: wrapped between frames to the width
/// (a name longer than a line is shortened), continued under its first
/// frame.
fn hot_path(out: &mut dyn Write, width: Option<usize>, frames: &[String]) -> io::Result<()> {
    const HEAD: &str = "hot path: ";
    const ARROW: &str = " → ";
    let indent = HEAD.chars().count();
    let room = width.map_or(usize::MAX, |w| w.saturating_sub(indent).max(MIN_TEXT));
    let mut text = String::from(HEAD);
    let mut used = 0;
    for (i, f) in frames.iter().enumerate() {
        let name = shorten(&units::terminal_text(f), room);
        let n = name.chars().count();
        let arrow = if i == 0 { 0 } else { ARROW.chars().count() };
        if i > 0 && used + arrow + n > room {
            // The arrow ends the line; the next one starts with the frame.
            text.push_str(ARROW.trim_end());
            text.push('\n');
            text.push_str(&" ".repeat(indent));
            used = 0;
        } else if i > 0 {
            text.push_str(ARROW);
            used += arrow;
        }
        text.push_str(&name);
        used += n;
    }
    writeln!(out, "{text}")
}

/// `text` wrapped between words to the width, continued one space in.
fn wrap(out: &mut dyn Write, width: Option<usize>, text: &str) -> io::Result<()> {
    let Some(width) = width else {
        return writeln!(out, "{text}");
    };
    let mut line = String::new();
    for word in text.split(' ') {
        let n = line.chars().count();
        if n > 1 && n + 1 + word.chars().count() > width {
            writeln!(out, "{}", cut_middle(&line, width))?;
            line = String::from(" ");
        } else if !line.is_empty() && line != " " {
            line.push(' ');
        }
        line.push_str(word);
    }
    writeln!(out, "{}", cut_middle(&line, width))
}

/// One header line, cut to the width (its command line and notes escaped
/// for the terminal).
fn line(out: &mut dyn Write, width: Option<usize>, text: &str) -> io::Result<()> {
    let text = &*crate::units::terminal_text(text);
    match width {
        Some(w) => writeln!(out, "{}", cut_middle(text, w)),
        None => writeln!(out, "{text}"),
    }
}

fn header(
    out: &mut dyn Write,
    file: &DataFile,
    a: &Analysis,
    session: &Value,
    opts: &RenderOptions,
) -> io::Result<()> {
    let s = &file.session;
    let w = opts.width;
    let n = |k: &str| session[k].as_u64().unwrap_or(0);
    line(out, w, &format!("command:  {}", s.command.join(" ")))?;
    let mut method = format!("method:   {}", s.method.name());
    match (&s.sample_event, s.sample_period) {
        (Some(ev), Some(p)) => method.push_str(&format!(" ({ev}, period {p})")),
        (Some(ev), None) => method.push_str(&format!(" ({ev})")),
        _ => {}
    }
    if let Some(rule) = session["application_rule"].as_str() {
        method.push_str(&format!(
            "   application rule: {rule}   probe cost: {:.1} ns ({})",
            s.probe_cost_ns,
            if matches!(a, Analysis::Instr(r) if r.compensated) {
                "subtracted"
            } else {
                "not subtracted"
            }
        ));
    }
    line(out, w, &method)?;
    line(
        out,
        w,
        &format!(
            "wall:     {}   processes: {}   threads: {}{}",
            units::duration(n("duration_ns")),
            n("processes"),
            n("threads"),
            // (the time no value counts: lapse_pause, --start-paused...)
            session["paused_ns"]
                .as_u64()
                .map_or(String::new(), |p| format!(
                    "   paused: {}",
                    units::duration(p)
                ))
        ),
    )?;
    match s.method {
        lapse_data::Method::Instrumentation => {
            line(
                out,
                w,
                &format!(
                    "time:     {} elapsed, {} application (on the CPU), summed over threads",
                    units::duration(n("elapsed_inclusive_ns")),
                    units::duration(n("application_inclusive_ns")),
                ),
            )?;
            let wait = session["recorder_wait_ns"].as_u64().filter(|&w| w > 0);
            let cpu = session["recorder_cpu_ns"].as_u64();
            let mut said = Vec::new();
            if let Some(cpu) = cpu {
                said.push(format!("{} of CPU", units::duration(cpu)));
            }
            if let Some(wait) = wait {
                said.push(format!(
                    "{} of waiting for it removed from the threads' time",
                    units::duration(wait)
                ));
            }
            if !said.is_empty() {
                line(out, w, &format!("recorder: {}", said.join(", ")))?;
            }
        }
        lapse_data::Method::Sampling => {
            line(
                out,
                w,
                &format!(
                    "samples:  {}   other processes' samples ignored: {}   lost events: {}",
                    n("samples"),
                    n("discarded_samples"),
                    n("lost_events")
                ),
            )?;
            if let Some(off) = session["off_cpu_ns"].as_u64() {
                line(
                    out,
                    w,
                    &format!(
                        "off-CPU:  {} in {} periods switched out, summed over threads (on-CPU: est columns)",
                        units::duration(off),
                        n("off_cpu_periods")
                    ),
                )?;
            }
        }
    }
    if let Some(share) = session["busy_machine_share"].as_f64() {
        line(
            out,
            w,
            &format!(
                "warning:  busy machine (threads preempted {:.0}% of the time): ranked by app time",
                share * 100.0
            ),
        )?;
    }
    if let Some(why) = file.incomplete_why() {
        line(
            out,
            w,
            &format!("warning:  the data file is incomplete: {why}; showing what is intact"),
        )?;
    }
    // What the recorder warned about (e.g. one-frame stacks with --call-graph fp).
    for note in &s.notes {
        if let Some(warning) = note.strip_prefix("warning: ") {
            line(out, w, &format!("warning:  {warning}"))?;
        }
    }
    writeln!(out)
}

/// A table's rows as text: (prefix of the first cell, the cells).
type Rows<'a> = [(String, &'a [Cell])];

fn grid(
    out: &mut dyn Write,
    v: &ViewOutput,
    rows: &Rows<'_>,
    opts: &RenderOptions,
    first_header: &str,
) -> io::Result<()> {
    let columns = &v.columns[..];
    // The columns this table can show, by index.
    let compact = v.view == View::Summary;
    let mut shown: Vec<usize> = (0..columns.len())
        .filter(|&i| {
            let c = &columns[i];
            v.columns_chosen || (c.terminal.is_some() && !(compact && c.drop >= COMPACT))
        })
        .collect();
    let header_of = |j: usize, i: usize| {
        if j == 0 && !first_header.is_empty() {
            first_header.to_owned()
        } else {
            columns[i].terminal.unwrap_or(columns[i].key).to_owned()
        }
    };
    // (a row whose time is within the probes' uncertainty: `~ ` before its name)
    let dominated_at = columns.iter().position(|c| c.key == DOMINATED_KEY);
    let dominated =
        |r: &(String, &[Cell])| dominated_at.and_then(|i| r.1.get(i)) == Some(&Cell::Bool(true));
    let text_of = |r: &(String, &[Cell]), i: usize, first: bool| -> (String, String) {
        let t = r.1.get(i).map_or("-".into(), |c| c.human(columns[i].kind));
        match (first, dominated(r)) {
            (false, _) => (String::new(), t),
            (true, false) => (r.0.clone(), t),
            (true, true) => (format!("{}~ ", r.0), t),
        }
    };
    let measure = |shown: &[usize]| -> Vec<usize> {
        shown
            .iter()
            .enumerate()
            .map(|(j, &i)| {
                let head = header_of(j, i).chars().count();
                rows.iter()
                    .map(|r| {
                        let (p, t) = text_of(r, i, j == 0);
                        p.chars().count() + t.chars().count()
                    })
                    .fold(head, usize::max)
            })
            .collect()
    };
    let total = |w: &[usize]| w.iter().sum::<usize>() + GAP * w.len().saturating_sub(1);
    let mut widths = measure(&shown);
    if let Some(limit) = opts.width {
        let natural = widths.clone();
        // Text columns wider than `to` give up characters, widest first.
        let shrink = |widths: &mut Vec<usize>, shown: &[usize], to: usize| {
            while total(widths) > limit {
                let Some(j) = (0..shown.len())
                    .filter(|&j| columns[shown[j]].kind == Kind::Text && widths[j] > to)
                    .max_by_key(|&j| widths[j])
                else {
                    break;
                };
                let excess = total(widths) - limit;
                widths[j] = widths[j].saturating_sub(excess).max(to);
            }
        };
        // Long names first come down to a readable length, then the
        // columns the view can spare go (highest `drop` first), then names
        // shrink further.
        shrink(&mut widths, &shown, SOFT_TEXT);
        let mut natural: Vec<usize> = natural;
        while total(&widths) > limit {
            let Some(j) = (0..shown.len())
                .filter(|&j| columns[shown[j]].drop > 0)
                .max_by_key(|&j| (columns[shown[j]].drop, j))
            else {
                break;
            };
            shown.remove(j);
            widths.remove(j);
            natural.remove(j);
        }
        shrink(&mut widths, &shown, MIN_TEXT);
        // Room left over goes back to the names that were cut.
        for j in 0..shown.len() {
            let spare = limit.saturating_sub(total(&widths));
            widths[j] += spare.min(natural[j] - widths[j]);
        }
    }
    let cell = |j: usize, prefix: &str, text: &str| -> String {
        // A cut keeps the prefix (tree indentation) and cuts the name; when
        // the indentation itself leaves no room, it gives up spaces first.
        let mut prefix = prefix;
        let need = (MIN_TEXT / 2).min(text.chars().count());
        while prefix.starts_with(' ') && widths[j] < prefix.chars().count() + need {
            prefix = &prefix[1..];
        }
        let room = widths[j].saturating_sub(prefix.chars().count());
        format!("{prefix}{}", shorten(text, room))
    };
    let line = |out: &mut dyn Write, cells: &[String]| -> io::Result<()> {
        let mut s = String::new();
        for (j, (text, w)) in cells.iter().zip(&widths).enumerate() {
            let pad = w.saturating_sub(text.chars().count());
            let left = columns[shown[j]].kind == Kind::Text;
            if j > 0 {
                s.push_str(&" ".repeat(GAP));
            }
            if left {
                s.push_str(text);
                if j + 1 < cells.len() {
                    s.push_str(&" ".repeat(pad));
                }
            } else {
                s.push_str(&" ".repeat(pad));
                s.push_str(text);
            }
        }
        writeln!(out, "{}", s.trim_end())
    };
    let head: Vec<String> = shown
        .iter()
        .enumerate()
        .map(|(j, &i)| cell(j, "", &header_of(j, i)))
        .collect();
    if opts.color {
        write!(out, "{BOLD}")?;
    }
    line(out, &head)?;
    if opts.color {
        write!(out, "{RESET}")?;
    }
    for r in rows {
        let cells: Vec<String> = shown
            .iter()
            .enumerate()
            .map(|(j, &i)| {
                let (p, t) = text_of(r, i, j == 0);
                cell(j, &p, &t)
            })
            .collect();
        line(out, &cells)?;
    }
    if rows.iter().any(dominated) {
        let legend = "(~ probe_dominated: within the probes' own cost, maybe off by > 25 %)";
        match opts.width {
            Some(w) => writeln!(out, "{}", cut_middle(legend, w))?,
            None => writeln!(out, "{legend}")?,
        }
    }
    Ok(())
}

/// The column that flags a row as within the probes' uncertainty.
const DOMINATED_KEY: &str = "probe_dominated";

/// Deeper tree lines than this are not indented further: their depth is
/// written as a number instead, so a 20,000-deep recursion prints one
/// short line per node, not a triangle of spaces.
pub const MAX_INDENT: usize = 16;

/// Rows without a prefix in their first cell.
fn plain(rows: &[Vec<Cell>]) -> Vec<(String, &[Cell])> {
    rows.iter().map(|r| (String::new(), &r[..])).collect()
}

/// The tree's first cell prefix: indentation by depth up to
/// [`MAX_INDENT`], then `[depth] `; `* ` marks the hot path (plain text, so
/// column widths stay right with or without colour).
fn tree_prefix(r: &TreeRow) -> String {
    let hot = if r.hot { "* " } else { "" };
    if r.indent <= MAX_INDENT {
        format!("{}{hot}", "  ".repeat(r.indent))
    } else {
        format!("{}[{}] {hot}", "  ".repeat(MAX_INDENT), r.depth)
    }
}

pub fn table(
    out: &mut dyn Write,
    file: &DataFile,
    a: &Analysis,
    v: &ViewOutput,
    opts: &RenderOptions,
    session: &Value,
) -> io::Result<()> {
    header(out, file, a, session, opts)?;
    if v.view == View::Summary && !v.hot_path.is_empty() {
        hot_path(out, opts.width, &v.hot_path)?;
        writeln!(out)?;
        writeln!(
            out,
            "top functions by exclusive {}:",
            if matches!(a, Analysis::Instr(_)) {
                "time"
            } else if session["off_cpu_ns"].is_u64() {
                "time, on the CPU (estimated) and off it"
            } else {
                "samples"
            }
        )?;
    }
    match &v.body {
        Body::Tree {
            lines,
            below_threshold,
        } => {
            let rows: Vec<(String, &[Cell])> = lines
                .iter()
                .map(|r| (tree_prefix(r), &r.cells[..]))
                .collect();
            let mut legend = String::from("(* marks the hot path");
            if lines.iter().any(|r| r.elided > 0) {
                legend.push_str("; …N stands for N levels of a long chain left out");
            }
            if lines.iter().any(|r| r.collapsed > 0) {
                legend.push_str(
                    "; …N frames… stands for N calls that pass on all their time (--no-collapse shows them)",
                );
            }
            if let Some((hidden, pct)) = below_threshold.filter(|b| b.0 > 0) {
                legend.push_str(&format!(
                    "; {hidden} lines under {pct} % of the session hidden: --threshold 0 shows them"
                ));
            }
            legend.push(')');
            wrap(out, opts.width, &legend)?;
            grid(out, v, &rows, opts, "call tree")
        }
        Body::Focus(Focus {
            function: f,
            callers,
            callees,
        }) => {
            grid(out, v, &[(String::new(), &f[..])], opts, "function")?;
            writeln!(out)?;
            grid(out, v, &plain(callers), opts, "callers")?;
            writeln!(out)?;
            grid(out, v, &plain(callees), opts, "callees")
        }
        Body::Rows(rows) => grid(out, v, &plain(rows), opts, ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_are_cut_in_the_middle() {
        assert_eq!(cut_middle("short", 10), "short");
        let name = "std::vector<std::pair<int, std::string>>::emplace_back";
        let cut = cut_middle(name, 21);
        assert_eq!(cut.chars().count(), 21);
        assert_eq!(cut, "std::vecto…place_back");
    }

    #[test]
    fn long_names_give_up_their_generic_arguments_first() {
        let name = "std::vector<std::pair<int, std::string>>::emplace_back";
        // The innermost group goes first, then the next one out.
        assert_eq!(shorten(name, 40), "std::vector<std::pair<…>>::emplace_back");
        assert_eq!(shorten(name, 30), "std::vector<…>::emplace_back");
        let rust = "<alloc::vec::Vec<T,A> as core::iter::traits::collect::Extend<T>>::extend";
        assert_eq!(
            shorten(rust, 70),
            "<alloc::vec::Vec<…> as core::iter::traits::collect::Extend<T>>::extend"
        );
        // Then the outer group: the method's name stays.
        assert_eq!(shorten(rust, 40), "<…>::extend");
        assert_eq!(shorten(rust, 12), "<…>::extend");
        assert_eq!(shorten(rust, 8).chars().count(), 8);
        // A short name, and one without brackets, as before.
        assert_eq!(shorten("main", 12), "main");
        assert_eq!(
            shorten("luaV_execute_something_long", 12),
            cut_middle("luaV_execute_something_long", 12)
        );
        // Parameter lists give way too; `operator<` is left to the cut.
        assert_eq!(shorten("ns::f(int, std::string const&)", 12), "ns::f(…)");
        assert_eq!(shorten("operator<(a, b)", 20), "operator<(a, b)");
    }
}
