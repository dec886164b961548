//! Which compilation units hold an address, without keeping any unit.
//!
//! Built once per module from `.debug_aranges`; a unit that has no (or
//! only empty) address ranges there is parsed on its own, its root DIE's
//! ranges read (else its line program's sequences, as `addr2line` does),
//! and dropped before the next. What stays is one entry per range.

use std::cell::OnceCell;

use gimli::{DebugInfoOffset, SectionId};

use super::lines::UnitLines;
use super::sections::Sections;
use super::Reader;

/// What reading a unit's range list needs.
const RANGE_SECTIONS: &[SectionId] = &[
    SectionId::DebugAddr,
    SectionId::DebugRanges,
    SectionId::DebugRngLists,
];

pub(super) struct UnitIndex {
    /// Sorted by `(end, unit)`, as `addr2line` sorts them, so units that
    /// overlap are tried in the same order.
    ranges: Box<[UnitRange]>,
}

struct UnitRange {
    begin: u64,
    end: u64,
    /// The lowest `begin` of this entry and every later one: ends a search early.
    min_begin: u64,
    unit: DebugInfoOffset<usize>,
}

impl UnitIndex {
    /// Reads `.debug_aranges` and the units it misses. `dwarf` has the line
    /// sections; the range sections are loaded only if a missed unit needs them.
    pub(super) fn build(sections: &Sections, dwarf: &gimli::Dwarf<Reader>) -> UnitIndex {
        let mut ranges = Vec::new();
        let mut covered = from_aranges(sections, &mut ranges);
        covered.sort_unstable();
        covered.dedup();

        let with_ranges = OnceCell::new();
        let mut units = dwarf.units();
        while let Ok(Some(header)) = units.next() {
            let Some(offset) = header.debug_info_offset() else {
                continue;
            };
            // Type units hold no code; partial units are only referred to.
            if matches!(
                header.type_(),
                gimli::UnitType::Type { .. }
                    | gimli::UnitType::SplitType { .. }
                    | gimli::UnitType::Partial
            ) || covered.binary_search(&offset.0).is_ok()
            {
                continue;
            }
            let Ok(unit) = dwarf.unit(header) else {
                continue;
            };
            let before = ranges.len();
            let range_dwarf = || with_ranges.get_or_init(|| sections.dwarf(RANGE_SECTIONS));
            root_ranges(dwarf, &unit, range_dwarf, |begin, end| {
                ranges.push(UnitRange::new(begin, end, offset));
            });
            if ranges.len() == before {
                if let Ok(lines) = UnitLines::parse(unit) {
                    let found = lines.ranges().map(|(b, e)| UnitRange::new(b, e, offset));
                    ranges.extend(found);
                }
            }
        }

        UnitIndex::sorted(ranges)
    }

    fn sorted(mut ranges: Vec<UnitRange>) -> UnitIndex {
        ranges.sort_unstable_by_key(|r| (r.end, r.unit.0));
        let mut min = u64::MAX;
        for r in ranges.iter_mut().rev() {
            min = min.min(r.begin);
            r.min_begin = min;
        }
        UnitIndex {
            ranges: ranges.into_boxed_slice(),
        }
    }

    /// The units `.debug_aranges` lists, alone; `None` when it lists none
    /// (it is missing, empty or damaged from its start).
    pub(super) fn from_aranges(sections: &Sections) -> Option<UnitIndex> {
        let mut ranges = Vec::new();
        from_aranges(sections, &mut ranges);
        if ranges.is_empty() {
            return None;
        }
        Some(UnitIndex::sorted(ranges))
    }

    /// The units whose ranges hold `probe`, in `addr2line`'s order. Several
    /// can (weak symbols, a unit declaring one range over a gap); the caller
    /// asks each until one has a row for `probe`.
    pub(super) fn find(&self, probe: u64) -> impl Iterator<Item = DebugInfoOffset<usize>> + '_ {
        // The first range that ends after `probe`.
        let first = self.ranges.partition_point(|r| r.end <= probe);
        self.ranges[first..]
            .iter()
            .take_while(move |r| probe >= r.min_begin)
            .filter(move |r| r.begin <= probe && probe < r.end)
            .map(|r| r.unit)
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.ranges.len()
    }
}

impl UnitRange {
    fn new(begin: u64, end: u64, unit: DebugInfoOffset<usize>) -> UnitRange {
        UnitRange {
            begin,
            end,
            min_begin: 0,
            unit,
        }
    }
}

/// Pushes every non-empty range of `.debug_aranges` and returns the units
/// (`.debug_info` offsets) that got at least one. Damage ends the reading:
/// the units not yet seen are then read from `.debug_info`.
fn from_aranges(sections: &Sections, ranges: &mut Vec<UnitRange>) -> Vec<usize> {
    let mut covered = Vec::new();
    let aranges = gimli::DebugAranges::from(sections.reader(SectionId::DebugAranges));
    let mut headers = aranges.headers();
    while let Ok(Some(header)) = headers.next() {
        let unit = header.debug_info_offset();
        let mut entries = header.entries();
        let mut any = false;
        loop {
            match entries.next() {
                Ok(Some(entry)) if entry.length() != 0 => {
                    let range = entry.range();
                    ranges.push(UnitRange::new(range.begin, range.end, unit));
                    any = true;
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                // An entry whose end overflows is skipped; other errors
                // empty the iterator, so the next call ends the loop.
                Err(_) => {}
            }
        }
        if any {
            covered.push(unit.0);
        }
    }
    covered
}

/// Calls `push` with each non-empty range the unit's root DIE declares
/// (`DW_AT_ranges`, else `DW_AT_low_pc` with `DW_AT_high_pc`), as
/// `addr2line` reads them; damaged attributes give fewer ranges, never an
/// error. `dwarf` resolves `.debug_addr` indexes; `range_dwarf` is asked
/// for only when the unit has a range list.
fn root_ranges<'d>(
    dwarf: &gimli::Dwarf<Reader>,
    unit: &gimli::Unit<Reader>,
    range_dwarf: impl FnOnce() -> &'d gimli::Dwarf<Reader>,
    mut push: impl FnMut(u64, u64),
) {
    let (mut low, mut high, mut size, mut list) = (None, None, None, None);
    let Ok(mut entries) = unit.entries_raw(None) else {
        return;
    };
    let Ok(Some(abbrev)) = entries.read_abbreviation() else {
        return;
    };
    let address = |value| match value {
        gimli::AttributeValue::Addr(a) => Some(a),
        gimli::AttributeValue::DebugAddrIndex(i) => dwarf.address(unit, i).ok(),
        _ => None,
    };
    for spec in abbrev.attributes() {
        let Ok(attr) = entries.read_attribute(*spec) else {
            return;
        };
        match (attr.name(), attr.value()) {
            (gimli::DW_AT_low_pc, value) => low = address(value),
            (gimli::DW_AT_high_pc, gimli::AttributeValue::Udata(n)) => size = Some(n),
            (gimli::DW_AT_high_pc, value) => high = address(value),
            (gimli::DW_AT_ranges, value) => list = Some(value),
            _ => {}
        }
    }
    let mut add = |begin, end| {
        if begin < end {
            push(begin, end);
        }
    };
    if let Some(value) = list {
        let d = range_dwarf();
        if let Ok(Some(offset)) = d.attr_ranges_offset(unit, value) {
            if let Ok(mut iter) = d.ranges(unit, offset) {
                // Each entry read consumes bytes: damage cannot loop.
                while let Ok(Some(r)) = iter.next() {
                    add(r.begin, r.end);
                }
            }
            return;
        }
    }
    match (low, high, size) {
        (Some(begin), Some(end), _) => add(begin, end),
        // A -1 tombstone overflows here and is dropped by `add`.
        (Some(begin), None, Some(size)) => add(begin, begin.wrapping_add(size)),
        _ => {}
    }
}
