//! One unit's line table, reduced to what a line lookup needs.
//!
//! Mirrors `addr2line`'s own (private) line table, so both answer alike: a
//! row per address (the last of rows sharing one), sequences sorted by
//! start, file names joined with their include directory and the unit's
//! `DW_AT_comp_dir` the way `addr2line` joins them. Unlike `addr2line`, a
//! file's name is made when a lookup lands on it, not for every file of
//! the unit (a C library unit names dozens of headers, and is usually asked
//! about once).

use std::cmp::Ordering;
use std::sync::Arc;

use gimli::Reader as _;

use super::Reader;

/// A unit's line rows and what names their files; empty when it has no
/// line program.
#[derive(Default)]
pub(super) struct UnitLines {
    names: Option<FileNames>,
    sequences: Box<[Sequence]>,
}

/// What turns a row's file index into a path.
struct FileNames {
    /// The unit, for its `comp_dir` and string bases; its abbreviations are
    /// dropped (they are the bulk of a parsed unit).
    unit: gimli::Unit<Reader>,
    /// The header as the program left it (DWARF 4 can define files as it runs).
    header: gimli::LineProgramHeader<Reader>,
}

struct Sequence {
    start: u64,
    end: u64,
    rows: Box<[Row]>,
}

/// 16 bytes: a Rust binary's big unit has hundreds of thousands of rows.
struct Row {
    address: u64,
    /// The line program's file index (saturated: no unit has 4 billion files).
    file: u32,
    /// 0: the row has no line.
    line: u32,
}

impl UnitLines {
    /// Runs the unit's line program. Fails only when the program is
    /// damaged; the rows are bounded by its size, so damage cannot loop.
    pub(super) fn parse(mut unit: gimli::Unit<Reader>) -> Result<UnitLines, gimli::Error> {
        let Some(program) = unit.line_program.take() else {
            return Ok(UnitLines::default());
        };
        let mut sequences = Vec::new();
        let mut rows: Vec<Row> = Vec::new();
        let mut program_rows = program.rows();
        while let Some((_, row)) = program_rows.next_row()? {
            if row.end_sequence() {
                if let Some(start) = rows.first().map(|r| r.address) {
                    let end = row.address();
                    let done = std::mem::take(&mut rows);
                    if start < end {
                        sequences.push(Sequence {
                            start,
                            end,
                            rows: done.into_boxed_slice(),
                        });
                    }
                }
                continue;
            }
            let address = row.address();
            let file = u32::try_from(row.file_index()).unwrap_or(u32::MAX);
            // Lines past 4 billion do not exist; addr2line truncates alike.
            let line = row.line().map_or(0, |l| l.get() as u32);
            match rows.last_mut() {
                Some(last) if last.address == address => {
                    last.file = file;
                    last.line = line;
                }
                _ => rows.push(Row {
                    address,
                    file,
                    line,
                }),
            }
        }
        sequences.sort_unstable_by_key(|s| s.start);
        let header = program_rows.header().clone();
        unit.abbreviations = Arc::default();
        Ok(UnitLines {
            names: Some(FileNames { unit, header }),
            sequences: sequences.into_boxed_slice(),
        })
    }

    /// The file and line of the last row at or before `probe` in the
    /// sequence holding it; `None` when no sequence holds `probe`.
    pub(super) fn find(
        &self,
        dwarf: &gimli::Dwarf<Reader>,
        probe: u64,
    ) -> Option<(Option<String>, Option<u32>)> {
        let row = self.row(probe)?;
        let file = self.names.as_ref().and_then(|n| n.name(dwarf, row.file));
        Some((file, (row.line != 0).then_some(row.line)))
    }

    fn row(&self, probe: u64) -> Option<&Row> {
        let sequence = self
            .sequences
            .binary_search_by(|s| {
                if probe < s.start {
                    Ordering::Greater
                } else if probe >= s.end {
                    Ordering::Less
                } else {
                    Ordering::Equal
                }
            })
            .ok()
            .and_then(|i| self.sequences.get(i))?;
        let row = match sequence.rows.binary_search_by_key(&probe, |r| r.address) {
            Ok(i) => i,
            Err(0) => return None,
            Err(i) => i - 1,
        };
        sequence.rows.get(row)
    }

    /// The address ranges of the sequences (for a unit that declares none).
    pub(super) fn ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.sequences.iter().map(|s| (s.start, s.end))
    }

    /// How many rows are held: what the cache of recent units is bounded by.
    pub(super) fn row_count(&self) -> usize {
        self.sequences.iter().map(|s| s.rows.len()).sum()
    }
}

impl FileNames {
    /// The path of file `index`; `""` for a DWARF 4 file 0 the unit does not
    /// name (as `addr2line` says), `None` for a file the table lacks or a
    /// name that cannot be read.
    fn name(&self, dwarf: &gimli::Dwarf<Reader>, index: u32) -> Option<String> {
        match self.header.file(u64::from(index)) {
            Some(file) => {
                let unit = gimli::UnitRef::new(dwarf, &self.unit);
                render_file(unit, file, &self.header).ok()
            }
            None => (index == 0).then(String::new),
        }
    }
}

/// `comp_dir`, then the file's directory (unless it is directory 0, the
/// compilation directory), then its name; an absolute part replaces what
/// came before. The same string `addr2line` makes.
fn render_file(
    unit: gimli::UnitRef<'_, Reader>,
    file: &gimli::FileEntry<Reader>,
    header: &gimli::LineProgramHeader<Reader>,
) -> Result<String, gimli::Error> {
    let mut path = match &unit.comp_dir {
        Some(dir) => dir.to_string_lossy()?.into_owned(),
        None => String::new(),
    };
    if file.directory_index() != 0 {
        if let Some(directory) = file.directory(header) {
            push_path(&mut path, &unit.attr_string(directory)?.to_string_lossy()?);
        }
    }
    push_path(
        &mut path,
        &unit.attr_string(file.path_name())?.to_string_lossy()?,
    );
    Ok(path)
}

fn push_path(path: &mut String, part: &str) {
    if has_forward_slash_root(part) || has_backward_slash_root(part) {
        *path = part.to_owned();
    } else {
        let separator = if has_backward_slash_root(path) {
            '\\'
        } else {
            '/'
        };
        if !path.is_empty() && !path.ends_with(separator) {
            path.push(separator);
        }
        path.push_str(part);
    }
}

fn has_forward_slash_root(p: &str) -> bool {
    p.starts_with('/') || p.get(1..3) == Some(":/")
}

fn has_backward_slash_root(p: &str) -> bool {
    p.starts_with('\\') || p.get(1..3) == Some(":\\")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_join_like_addr2line() {
        let joined = |parts: &[&str]| {
            let mut path = String::new();
            for p in parts {
                push_path(&mut path, p);
            }
            path
        };
        assert_eq!(joined(&["/src", "include", "a.h"]), "/src/include/a.h");
        assert_eq!(joined(&["/src/", "a.c"]), "/src/a.c");
        assert_eq!(joined(&["/src", "/usr/include", "b.h"]), "/usr/include/b.h");
        assert_eq!(joined(&["", "a.c"]), "a.c");
        assert_eq!(joined(&["C:\\src", "a.c"]), "C:\\src\\a.c");
    }

    #[test]
    fn the_last_row_at_or_before_the_address_answers() {
        let lines = UnitLines {
            names: None,
            sequences: vec![Sequence {
                start: 0x100,
                end: 0x120,
                rows: vec![
                    Row {
                        address: 0x100,
                        file: 1,
                        line: 3,
                    },
                    Row {
                        address: 0x110,
                        file: 1,
                        line: 0,
                    },
                    Row {
                        address: 0x118,
                        file: 9,
                        line: 5,
                    },
                ]
                .into_boxed_slice(),
            }]
            .into_boxed_slice(),
        };
        let line = |probe| lines.row(probe).map(|r| (r.file, r.line));
        assert_eq!(line(0xff), None);
        assert_eq!(line(0x100), Some((1, 3)));
        assert_eq!(line(0x10f), Some((1, 3)));
        assert_eq!(line(0x110), Some((1, 0)));
        assert_eq!(line(0x11f), Some((9, 5)));
        assert_eq!(line(0x120), None);
        assert_eq!(lines.row_count(), 3);
        let dwarf = super::super::sections::Sections::new(
            crate::bytes::SectionData::default(),
            gimli::RunTimeEndian::Little,
        )
        .dwarf(&[]);
        assert_eq!(lines.find(&dwarf, 0x110), Some((None, None)));
        assert_eq!(lines.find(&dwarf, 0x100), Some((None, Some(3))));
    }
}
