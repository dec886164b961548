//! `marks`: the program's marks (`lapse_mark`), one row each in time order:
//! when (nanoseconds since the session's start), the thread, the text.
//! `--pid`, `--tid` and `--from`/`--to` select them as they select threads
//! and time.

use lapse_analysis::run::Query;
use lapse_data::DataFile;

use super::ViewOutput;
use crate::columns::key;
use crate::table::{shown, Cell, Column, Kind};

const COLUMNS: [Column; 4] = [
    shown("time_ns", Kind::Nanos, "time"),
    shown(key::PID, Kind::Int, "pid"),
    shown(key::TID, Kind::Int, "tid"),
    shown("text", Kind::Text, "mark"),
];

pub fn view(file: &DataFile, q: &Query) -> ViewOutput {
    let start = file.session.start;
    let window = q.window(file);
    let rows = file
        .marks
        .iter()
        .filter(|m| q.wants_thread(lapse_data::ThreadKey::new(m.pid, m.tid)))
        .filter(|m| window.is_none_or(|(from, to)| m.at >= from && m.at <= to))
        .map(|m| {
            vec![
                Cell::Int(m.at.since(start)),
                Cell::Int(u64::from(m.pid)),
                Cell::Int(u64::from(m.tid)),
                Cell::Text(m.text.clone()),
            ]
        })
        .collect();
    ViewOutput::rows(COLUMNS.to_vec(), rows)
}
