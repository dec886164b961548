//! Site records of the `lapse` crate: the names of `#[lapse::profile]`
//! functions and `lapse::scope!` blocks, read from a module's `lapse_sites`
//! section.
//!
//! A probe of the crate passes the address of its site's record as the
//! event's function address; the record (written by the compiler, see
//! `crates/lapse/src/site.rs`, whose layout this reads) holds the name,
//! source file and line inline:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `LAPSITE1` |
//! | 8 | 4 | kind: 1 function, 2 scope |
//! | 12 | 4 | line (0: unknown) |
//! | 16 | 4 | name length |
//! | 20 | 4 | file length |
//! | 24 | | the name (UTF-8), then the file |
//!
//! Integers are in the module's byte order. Anything that does not fit
//! (a bad magic or kind, lengths past the section's end, a name that is not
//! UTF-8) is no record: the caller names the address as it would any other.

/// The ELF section holding site records.
pub const SITES_SECTION: &str = "lapse_sites";

const MAGIC: &[u8; 8] = b"LAPSITE1";
const HEADER_LEN: usize = 24;

/// What a site stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SiteKind {
    /// A `#[lapse::profile]` function.
    Function,
    /// A `lapse::scope!` block.
    Scope,
}

/// One site record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteRecord {
    pub kind: SiteKind,
    /// The name its events are recorded under.
    pub name: String,
    /// `file!()` where the site is (relative to its package, as rustc
    /// writes it); `None` when empty.
    pub file: Option<String>,
    /// Its line: the function's `fn` line, or the `scope!` line.
    pub line: Option<u32>,
}

/// The record at `offset` in the section's bytes `section`, if a whole,
/// valid one is there.
pub(crate) fn read_site(section: &[u8], offset: u64, little_endian: bool) -> Option<SiteRecord> {
    let offset = usize::try_from(offset).ok()?;
    let record = section.get(offset..)?;
    let header = record.get(..HEADER_LEN)?;
    if &header[..8] != MAGIC {
        return None;
    }
    let word = |at: usize| {
        let bytes: [u8; 4] = header[at..at + 4].try_into().ok()?;
        Some(if little_endian {
            u32::from_le_bytes(bytes)
        } else {
            u32::from_be_bytes(bytes)
        })
    };
    let kind = match word(8)? {
        1 => SiteKind::Function,
        2 => SiteKind::Scope,
        _ => return None,
    };
    let line = word(12)?;
    let name_len = usize::try_from(word(16)?).ok()?;
    let file_len = usize::try_from(word(20)?).ok()?;
    let text_end = HEADER_LEN.checked_add(name_len)?.checked_add(file_len)?;
    let text = record.get(HEADER_LEN..text_end)?;
    let (name, file) = text.split_at(name_len);
    let name = std::str::from_utf8(name).ok()?;
    let file = String::from_utf8_lossy(file);
    Some(SiteRecord {
        kind,
        name: name.to_owned(),
        file: (!file.is_empty()).then(|| file.into_owned()),
        line: (line != 0).then_some(line),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record as the crate lays it out, little-endian.
    fn record(kind: u32, line: u32, name: &[u8], file: &[u8]) -> Vec<u8> {
        let mut r = MAGIC.to_vec();
        for w in [kind, line, name.len() as u32, file.len() as u32] {
            r.extend(w.to_le_bytes());
        }
        r.extend(name);
        r.extend(file);
        while !r.len().is_multiple_of(4) {
            r.push(0);
        }
        r
    }

    #[test]
    fn records_side_by_side() {
        let mut section = record(1, 12, b"app::worker::spin", b"src/main.rs");
        let second = section.len() as u64;
        section.extend(record(2, 0, b"phase one", b""));
        assert_eq!(
            read_site(&section, 0, true),
            Some(SiteRecord {
                kind: SiteKind::Function,
                name: "app::worker::spin".into(),
                file: Some("src/main.rs".into()),
                line: Some(12),
            })
        );
        assert_eq!(
            read_site(&section, second, true),
            Some(SiteRecord {
                kind: SiteKind::Scope,
                name: "phase one".into(),
                file: None,
                line: None,
            })
        );
    }

    #[test]
    fn big_endian_modules() {
        let mut r = MAGIC.to_vec();
        for w in [2u32, 7, 2, 0] {
            r.extend(w.to_be_bytes());
        }
        r.extend(b"ab");
        let site = read_site(&r, 0, false).expect("a big-endian record");
        assert_eq!((site.name.as_str(), site.line), ("ab", Some(7)));
        assert_eq!(
            read_site(&r, 0, true),
            None,
            "read in the wrong order, the kind is bad"
        );
    }

    #[test]
    fn damaged_records_are_none() {
        let good = record(1, 3, b"name", b"f.rs");
        assert!(read_site(&good, 0, true).is_some());
        // not at a record's start; past the end; an offset beyond usize
        assert_eq!(read_site(&good, 4, true), None);
        assert_eq!(read_site(&good, good.len() as u64, true), None);
        assert_eq!(read_site(&good, u64::MAX, true), None);
        // bad magic, bad kind
        let mut bad = good.clone();
        bad[0] = b'X';
        assert_eq!(read_site(&bad, 0, true), None);
        let mut bad = good.clone();
        bad[8] = 9;
        assert_eq!(read_site(&bad, 0, true), None);
        // lengths past the section's end, lengths that overflow
        let mut bad = good.clone();
        bad[16..20].copy_from_slice(&1000u32.to_le_bytes());
        assert_eq!(read_site(&bad, 0, true), None);
        let mut bad = good.clone();
        bad[16..24].copy_from_slice(&[0xff; 8]);
        assert_eq!(read_site(&bad, 0, true), None);
        // a header cut short; a name that is not UTF-8
        assert_eq!(read_site(&good[..20], 0, true), None);
        let bad = record(1, 3, &[0xff, 0xfe], b"");
        assert_eq!(read_site(&bad, 0, true), None);
        // a file that is not UTF-8 is still a file, shown as well as it can be
        let odd = record(1, 3, b"n", &[b'a', 0xff]);
        assert_eq!(
            read_site(&odd, 0, true).and_then(|s| s.file),
            Some("a\u{fffd}".into())
        );
    }
}
