//! What a report asks for: the view and how its rows are chosen, ordered
//! and cut ([`ViewSpec`], for [`crate::build`]), and how the built view is
//! written ([`RenderOptions`], for [`fn@crate::render`]).

use crate::views::View;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    Csv,
    Json,
}

impl Format {
    pub const ALL: [(&'static str, Format); 3] = [
        ("table", Format::Table),
        ("csv", Format::Csv),
        ("json", Format::Json),
    ];
}

/// The calltree threshold of a table when none is given, in percent: a
/// table is read in a terminal, where ten thousand lines of branches under
/// 0.5 % are not; JSON and CSV keep every branch.
pub const TABLE_THRESHOLD_PCT: f64 = 0.5;

/// How many rows the summary shows when no limit is given.
pub const SUMMARY_ROWS: usize = 10;

/// One view of a report, as asked: which rows, in which order, how many,
/// which columns. The rows' filters (`--function`, `--module`, threads,
/// time) are the [`lapse_analysis::Query`] the analysis ran with.
#[derive(Clone, Debug)]
pub struct ViewSpec {
    pub view: View,
    /// The format the view will be written in: a table hides more by
    /// default (calltree's threshold).
    pub format: Format,
    /// callers/callees: the function they are about (its exact name, else
    /// the first function the pattern matches as a regex).
    pub function: Option<String>,
    /// calltree: re-rooted at the functions this regex matches, each
    /// one's call sites merged, with what it calls below (`--focus`).
    pub focus: Option<String>,
    /// calltree: runs of calls that only pass their time on are shown in
    /// full (tables collapse them; JSON and CSV never do).
    pub no_collapse: bool,
    /// calltree: branches under this share of the session (%) are left
    /// out; [`TABLE_THRESHOLD_PCT`] for tables and 0 otherwise when `None`.
    pub threshold_pct: Option<f64>,
    /// The column rows are ordered by; the view's default when `None`.
    pub sort: Option<String>,
    /// At most this many rows (and callers, and callees); the summary
    /// shows [`SUMMARY_ROWS`] when `None`.
    pub limit: Option<usize>,
    /// Only these columns, in this order (identity columns stay in front);
    /// all when empty.
    pub columns: Vec<String>,
}

impl ViewSpec {
    /// `view` as it comes: every row in the default order, every column.
    pub fn new(view: View, format: Format) -> ViewSpec {
        ViewSpec {
            view,
            format,
            function: None,
            focus: None,
            no_collapse: false,
            threshold_pct: None,
            sort: None,
            limit: None,
            columns: Vec::new(),
        }
    }

    pub(crate) fn threshold(&self) -> f64 {
        self.threshold_pct.unwrap_or(match self.format {
            Format::Table => TABLE_THRESHOLD_PCT,
            Format::Csv | Format::Json => 0.0,
        })
    }

    /// Whether a call tree collapses its runs of calls of equal time.
    pub(crate) fn collapse(&self) -> bool {
        self.format == Format::Table && !self.no_collapse
    }

    pub(crate) fn row_limit(&self) -> Option<usize> {
        self.limit
            .or((self.view == View::Summary).then_some(SUMMARY_ROWS))
    }
}

/// How a built view is written.
#[derive(Clone, Copy, Debug)]
pub struct RenderOptions {
    pub format: Format,
    /// ANSI colour in the table (only on a terminal, never with NO_COLOR).
    pub color: bool,
    /// The table's width in characters (the terminal's, or COLUMNS); `None`
    /// for no limit.
    pub width: Option<usize>,
}

impl RenderOptions {
    /// `format` without colour or a width limit (files, pipes, tests).
    pub fn plain(format: Format) -> RenderOptions {
        RenderOptions {
            format,
            color: false,
            width: None,
        }
    }
}
