//! Record-time filters (`--filter`, `--exclude`, `--depth`, `--min-time`):
//! the options, which of the executable's functions they select, and the
//! table the runtime applies them with (`csrc/filter.c`, the layout in
//! [`lapse_rt::protocol::filter`]).
//!
//! The regexes are matched here, once, against the symbol and demangled
//! names of the executable's functions (as `--function` matches in
//! reports); the runtime only looks addresses up in the sorted ranges.

use std::time::Duration;

use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
use regex::Regex;

use lapse_rt::protocol::filter as wire;

/// What `lapse record` is asked to leave out (all `None`: nothing).
#[derive(Clone, Debug, Default)]
pub struct RecordFilters {
    /// Only calls of matching functions and what they call are recorded.
    filter: Option<Regex>,
    /// Calls of matching functions are not recorded (their callees are).
    exclude: Option<Regex>,
    /// At most this many frames per thread, from its outermost recorded one.
    depth: Option<u32>,
    /// Calls shorter than this are not kept as calls of their own.
    min_time: Option<Duration>,
}

impl RecordFilters {
    /// From the flags' values; the error is one line naming the flag.
    pub fn new(
        filter: Option<&str>,
        exclude: Option<&str>,
        depth: Option<u32>,
        min_time: Option<Duration>,
    ) -> Result<RecordFilters, String> {
        let re = |flag: &str, r: &str| {
            Regex::new(r).map_err(|e| {
                // (the regex crate's message spans lines: its last says why)
                let why = e.to_string();
                let why = why.lines().last().unwrap_or("").trim().to_owned();
                format!("{flag} {r}: not a regular expression ({why})")
            })
        };
        let depth = match depth {
            Some(0) => return Err("--depth 0: the depth is at least 1".to_owned()),
            Some(n) if n > wire::MAX_DEPTH => {
                return Err(format!(
                    "--depth {n}: the depth is at most {}",
                    wire::MAX_DEPTH
                ))
            }
            d => d,
        };
        Ok(RecordFilters {
            filter: filter.map(|r| re("--filter", r)).transpose()?,
            exclude: exclude.map(|r| re("--exclude", r)).transpose()?,
            depth,
            min_time: min_time.filter(|d| !d.is_zero()),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.filter.is_none()
            && self.exclude.is_none()
            && self.depth.is_none()
            && self.min_time.is_none()
    }

    /// The filters as flags, for the session's notes (so reports can say
    /// why rows are missing); `None` without filters.
    pub fn note(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(r) = &self.filter {
            parts.push(format!("--filter {}", r.as_str()));
        }
        if let Some(r) = &self.exclude {
            parts.push(format!("--exclude {}", r.as_str()));
        }
        if let Some(n) = self.depth {
            parts.push(format!("--depth {n}"));
        }
        if let Some(d) = self.min_time {
            parts.push(format!("--min-time {}ns", d.as_nanos()));
        }
        (!parts.is_empty()).then(|| format!("{NOTE_PREFIX}{}", parts.join(" ")))
    }

    /// Whether run-time patching patches a function of these names: an
    /// excluded function is not patched at all.
    pub fn patches(&self, names: &[&str]) -> bool {
        self.exclude
            .as_ref()
            .is_none_or(|r| !names.iter().any(|n| r.is_match(n)))
    }

    /// The ranges of `functions` (start, size, symbol name) the regexes
    /// select, sorted by start, one per start address.
    pub fn select(&self, functions: &[(u64, u64, String)]) -> Vec<Selected> {
        if self.filter.is_none() && self.exclude.is_none() {
            return Vec::new();
        }
        let mut out: Vec<Selected> = Vec::new();
        for (start, size, name) in functions {
            if *size == 0 {
                continue;
            }
            let demangled = lapse_symbols::demangle(name);
            let hit = |r: &Option<Regex>| {
                r.as_ref()
                    .is_some_and(|r| r.is_match(name) || r.is_match(&demangled))
            };
            let mut flags = 0;
            if hit(&self.filter) {
                flags |= wire::MATCH;
            }
            if hit(&self.exclude) {
                flags |= wire::EXCLUDE;
            }
            if flags != 0 {
                out.push(Selected {
                    start: *start,
                    end: start.saturating_add(*size),
                    flags,
                });
            }
        }
        out.sort_by_key(|s| (s.start, std::cmp::Reverse(s.end)));
        // (aliases share a start: one range with every alias's flags; a
        // range inside another one's is the inner function's)
        let mut merged: Vec<Selected> = Vec::with_capacity(out.len());
        for s in out {
            match merged.last_mut() {
                Some(last) if last.start == s.start => last.flags |= s.flags,
                Some(last) if s.start < last.end => last.end = s.start,
                _ => {}
            }
            if merged.last().is_none_or(|l| l.start != s.start) {
                merged.push(s);
            }
        }
        merged.retain(|s| s.end > s.start);
        merged
    }

    /// The `--filter` regex, if one was given.
    pub fn filter_regex(&self) -> Option<&str> {
        self.filter.as_ref().map(Regex::as_str)
    }

    /// The table file for the executable `data` (its `dev`, `ino`), with
    /// `ticks_per_sec` to turn `--min-time` into the runtime's ticks; and
    /// how many functions `--filter` matched.
    pub fn table(&self, data: &[u8], dev: u64, ino: u64, ticks_per_sec: f64) -> (Vec<u8>, usize) {
        let ranges = self.select(&function_symbols(data));
        let matched = ranges.iter().filter(|r| r.flags & wire::MATCH != 0).count();
        let mut b = Vec::with_capacity(wire::HEADER_LEN + ranges.len() * wire::RANGE_LEN);
        let flags = if self.filter.is_some() { wire::ON } else { 0 };
        let min_ticks = self.min_time.map_or(0, |d| {
            (d.as_secs_f64() * ticks_per_sec).ceil().max(1.0) as u64
        });
        b.extend_from_slice(&wire::MAGIC.to_le_bytes());
        b.extend_from_slice(&(ranges.len() as u32).to_le_bytes());
        b.extend_from_slice(&dev.to_le_bytes());
        b.extend_from_slice(&ino.to_le_bytes());
        b.extend_from_slice(&flags.to_le_bytes());
        b.extend_from_slice(&self.depth.unwrap_or(0).to_le_bytes());
        b.extend_from_slice(&min_ticks.to_le_bytes());
        for r in &ranges {
            b.extend_from_slice(&r.start.to_le_bytes());
            b.extend_from_slice(&r.end.to_le_bytes());
            b.extend_from_slice(&r.flags.to_le_bytes());
            b.extend_from_slice(&0u32.to_le_bytes());
        }
        (b, matched)
    }
}

/// What the session's notes say filters with (`lapse info` shows it).
pub const NOTE_PREFIX: &str = "record-time filters: ";

/// One range of the table: `[start, end)` of the executable's addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Selected {
    pub start: u64,
    pub end: u64,
    pub flags: u32,
}

/// Every sized function symbol of an ELF file (`.symtab` and `.dynsym`):
/// start, size, raw name; and the `lapse` crate's site records (a probe
/// of the crate names its site's address), one byte each. Nothing when the
/// bytes are no ELF file.
fn function_symbols(data: &[u8]) -> Vec<(u64, u64, String)> {
    let Ok(file) = object::File::parse(data) else {
        return Vec::new();
    };
    let mut out: Vec<(u64, u64, String)> = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0 && s.is_definition())
        .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?.to_owned())))
        .collect();
    if let Some((at, bytes)) = file
        .section_by_name(lapse_symbols::SITES_SECTION)
        .and_then(|s| Some((s.address(), s.data().ok()?)))
    {
        out.extend(sites(bytes, at, file.is_little_endian()));
    }
    out
}

/// The site records in a `lapse_sites` section's bytes (at address `at`):
/// each at an 8-byte boundary, starting with its magic
/// (`lapse_symbols::sites` has the layout).
fn sites(bytes: &[u8], at: u64, little: bool) -> Vec<(u64, u64, String)> {
    let word = |b: &[u8]| {
        let b: [u8; 4] = b.try_into().unwrap_or_default();
        if little {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        }
    };
    let mut out = Vec::new();
    for off in (0..bytes.len()).step_by(8) {
        let Some(h) = bytes.get(off..off + 24) else {
            break;
        };
        if &h[..8] != b"LAPSITE1" {
            continue;
        }
        let len = word(&h[16..20]) as usize;
        let name = bytes.get(off + 24..).and_then(|b| b.get(..len));
        if let Some(name) = name.and_then(|n| std::str::from_utf8(n).ok()) {
            out.push((at + off as u64, 1, name.to_owned()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(start: u64, size: u64, name: &str) -> (u64, u64, String) {
        (start, size, name.to_owned())
    }

    fn filters(filter: Option<&str>, exclude: Option<&str>) -> RecordFilters {
        RecordFilters::new(filter, exclude, None, None).unwrap()
    }

    #[test]
    fn filter_and_exclude_select_their_functions_by_either_name() {
        let fns = [
            f(0x1000, 0x40, "main"),
            f(0x1040, 0x20, "fib"),
            f(0x1060, 0x20, "_ZN3app4work17h0123456789abcdefE"),
            f(0x1080, 0x10, "fibonacci_table"),
        ];
        let got = filters(Some("^fib$|app::work"), Some("table")).select(&fns);
        assert_eq!(
            got,
            vec![
                Selected {
                    start: 0x1040,
                    end: 0x1060,
                    flags: wire::MATCH
                },
                Selected {
                    start: 0x1060,
                    end: 0x1080,
                    flags: wire::MATCH
                },
                Selected {
                    start: 0x1080,
                    end: 0x1090,
                    flags: wire::EXCLUDE
                },
            ]
        );
    }

    #[test]
    fn aliases_merge_and_nested_ranges_do_not_overlap() {
        let fns = [
            f(0x2000, 0x100, "outer"),
            f(0x2000, 0x100, "outer_alias"),
            f(0x2080, 0x10, "inner_x"),
            f(0x3000, 0, "sizeless_x"),
        ];
        let got = filters(Some("outer$"), Some("alias|_x")).select(&fns);
        assert_eq!(
            got,
            vec![
                Selected {
                    start: 0x2000,
                    end: 0x2080,
                    flags: wire::MATCH | wire::EXCLUDE
                },
                Selected {
                    start: 0x2080,
                    end: 0x2090,
                    flags: wire::EXCLUDE
                },
            ]
        );
    }

    #[test]
    fn depth_or_min_time_alone_selects_no_ranges() {
        let fns = [f(0x1000, 0x10, "main")];
        let only_depth = RecordFilters::new(None, None, Some(3), None).unwrap();
        assert!(only_depth.select(&fns).is_empty());
        assert!(!only_depth.is_empty());
        assert_eq!(only_depth.note().unwrap(), "record-time filters: --depth 3");
    }

    #[test]
    fn bad_values_are_one_line_errors() {
        let e = RecordFilters::new(Some("fib("), None, None, None).unwrap_err();
        assert!(
            e.starts_with("--filter fib(: not a regular expression"),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
        let e = RecordFilters::new(None, Some("[a"), None, None).unwrap_err();
        assert!(e.starts_with("--exclude [a:"), "{e}");
        assert!(RecordFilters::new(None, None, Some(0), None).is_err());
        assert!(RecordFilters::new(None, None, Some(65), None).is_err());
        assert!(RecordFilters::new(None, None, Some(64), None).is_ok());
    }

    #[test]
    fn excluded_functions_are_not_patched() {
        let f = filters(None, Some("^std::"));
        assert!(!f.patches(&[
            "_ZN3std2io5stdio6_print17h0000000000000000E",
            "std::io::stdio::_print"
        ]));
        assert!(f.patches(&["main", "main"]));
        assert!(filters(Some("x"), None).patches(&["main"]));
    }

    #[test]
    fn the_table_has_the_header_the_runtime_reads() {
        let f =
            RecordFilters::new(Some("fib"), None, Some(2), Some(Duration::from_micros(1))).unwrap();
        let (t, matched) = f.table(b"not an elf", 7, 9, 2e9);
        assert_eq!(matched, 0);
        assert_eq!(t.len(), wire::HEADER_LEN);
        let u32_at = |o: usize| u32::from_le_bytes(t[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(t[o..o + 8].try_into().unwrap());
        assert_eq!(u32_at(wire::H_MAGIC), wire::MAGIC);
        assert_eq!(u32_at(wire::H_RANGES), 0);
        assert_eq!(u64_at(wire::H_DEV), 7);
        assert_eq!(u64_at(wire::H_INO), 9);
        assert_eq!(u32_at(wire::H_FLAGS), wire::ON);
        assert_eq!(u32_at(wire::H_DEPTH), 2);
        assert_eq!(u64_at(wire::H_MIN_TICKS), 2000);
    }
}
