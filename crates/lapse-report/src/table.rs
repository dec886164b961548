//! The neutral shape every view produces: named, typed columns and rows of
//! cells, rendered alike by the table, CSV and JSON writers.

use serde_json::Value;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Text,
    Int,
    /// Integer nanoseconds (human units in the terminal table).
    Nanos,
    Percent,
    /// Module-relative address, rendered as a hex string.
    Hex,
    Bool,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    Null,
    Text(String),
    Int(u64),
    Float(f64),
    Bool(bool),
}

impl Cell {
    pub fn opt_text(s: Option<&str>) -> Cell {
        s.map_or(Cell::Null, |s| Cell::Text(s.to_owned()))
    }

    pub fn to_json(&self, kind: Kind) -> Value {
        match (self, kind) {
            (Cell::Null, _) => Value::Null,
            (Cell::Int(v), Kind::Hex) => Value::String(format!("{v:#x}")),
            (Cell::Text(s), _) => Value::String(s.clone()),
            (Cell::Int(v), _) => Value::from(*v),
            (Cell::Float(v), _) => {
                serde_json::Number::from_f64(*v).map_or(Value::Null, Value::Number)
            }
            (Cell::Bool(b), _) => Value::Bool(*b),
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Cell::Int(v) => Some(*v as f64),
            Cell::Float(v) => Some(*v),
            _ => None,
        }
    }

    /// Human text of the cell for the terminal table.
    pub fn human(&self, kind: Kind) -> String {
        match (self, kind) {
            (Cell::Null, _) => "-".into(),
            (Cell::Int(v), Kind::Nanos) => crate::units::duration(*v),
            (Cell::Float(p), Kind::Percent) => crate::units::percent(*p),
            (Cell::Int(v), Kind::Hex) => format!("{v:#x}"),
            (Cell::Text(s), _) => crate::units::terminal_text(s).into_owned(),
            (Cell::Int(v), _) => v.to_string(),
            (Cell::Float(v), _) => format!("{v:.2}"),
            (Cell::Bool(b), _) => b.to_string(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Column {
    pub key: &'static str,
    pub kind: Kind,
    /// The terminal table's header, for the columns it shows (CSV and JSON
    /// show every column).
    pub terminal: Option<&'static str>,
    /// Which columns a narrow terminal drops first: the highest number
    /// first; 0 is never dropped. Columns at [`COMPACT`] and above are extras
    /// that only the full views show, when there is room.
    pub drop: u8,
}

/// Columns with `drop` at or above this are extras the summary leaves out.
pub const COMPACT: u8 = 7;

pub const fn col(key: &'static str, kind: Kind) -> Column {
    Column {
        key,
        kind,
        terminal: None,
        drop: 0,
    }
}

/// A column the terminal table shows and never drops.
pub const fn shown(key: &'static str, kind: Kind, header: &'static str) -> Column {
    shown_unless(key, kind, header, 0)
}

/// A column the terminal table shows while there is room: see [`Column::drop`].
pub const fn shown_unless(key: &'static str, kind: Kind, header: &'static str, drop: u8) -> Column {
    Column {
        key,
        kind,
        terminal: Some(header),
        drop,
    }
}

/// One line of a call tree (`calltree`), in pre-order: its depth (0 for a
/// thread's outermost calls), whether it is on the hot path, and its row.
/// Renderers nest the lines again where their format nests.
#[derive(Clone, Debug)]
pub struct TreeRow {
    pub depth: usize,
    pub hot: bool,
    pub cells: Vec<Cell>,
    /// Not 0: this row stands for that many lines of a long chain left out
    /// (its first cell says so, the others are empty).
    pub elided: usize,
    /// Not 0: this row stands for that many calls that only pass their
    /// caller's time on, collapsed (tables; `--no-collapse` shows them).
    pub collapsed: usize,
}

#[derive(Clone, Debug, Default)]
pub struct Table {
    pub columns: Vec<Column>,
    pub rows: Vec<Vec<Cell>>,
}

impl Table {
    pub fn index(&self, key: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.key == key)
    }

    pub fn row_json(columns: &[Column], row: &[Cell]) -> serde_json::Map<String, Value> {
        columns
            .iter()
            .zip(row)
            .map(|(c, v)| (c.key.to_owned(), v.to_json(c.kind)))
            .collect()
    }
}
