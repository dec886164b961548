//! The line lookup against `addr2line` on this test's own executable: a
//! Rust program of many units (DWARF 4 without `.debug_aranges`, so the
//! unit index is built by walking the units), big enough that the cache of
//! recent units is filled and emptied many times.

use gimli::SectionId;
use object::{Object, ObjectSymbol, SymbolKind};

use super::{DwarfInfo, FRAME_SECTIONS};
use crate::bytes::SectionData;

/// The executable's bytes and the addresses to ask about: each function's
/// start (which has a row of its own) and a point a third into it (which
/// usually falls between rows).
fn this_executable() -> (SectionData, Vec<u64>) {
    let path = std::env::current_exe().expect("test executable path");
    let bytes = SectionData::from_vec(std::fs::read(&path).expect("test executable"));
    let file = object::File::parse(&*bytes).expect("an ELF");
    let mut starts: Vec<u64> = file
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0 && s.address() != 0)
        .flat_map(|s| [s.address(), s.address() + s.size() / 3])
        .collect();
    starts.sort_unstable();
    starts.dedup();
    (bytes, starts)
}

fn dwarf_of(bytes: &SectionData) -> DwarfInfo {
    let file = object::File::parse(&**bytes).expect("an ELF");
    DwarfInfo::new(&file, bytes).expect("the test executable has DWARF")
}

#[test]
fn lines_match_addr2line_in_every_function_of_this_executable() {
    let (bytes, starts) = this_executable();
    let dwarf = dwarf_of(&bytes);
    let reference = addr2line::Context::from_dwarf(dwarf.sections.dwarf(FRAME_SECTIONS))
        .expect("addr2line reads this executable");
    // Shuffled (a fixed stride through the list), so consecutive lookups
    // hit different units and the recent-unit cache has to evict.
    let n = starts.len();
    assert!(n > 1000, "only {n} addresses");
    let stride = (0..)
        .map(|k| 7919 + k)
        .find(|s| gcd(*s, n) == 1)
        .unwrap_or(1);
    let mut with_line = 0;
    for i in 0..n {
        let addr = starts[(i * stride) % n];
        let expected = match reference.find_location(addr) {
            Ok(Some(loc)) => (loc.file.map(str::to_owned), loc.line),
            _ => (None, None),
        };
        let got = dwarf.location(addr);
        assert_eq!(got, expected, "at {addr:#x}");
        with_line += usize::from(got.1.is_some());
    }
    assert!(
        with_line > n / 2,
        "{with_line} of {n} addresses have a line"
    );
    let lines = dwarf.lines.get().expect("the line lookup was built");
    assert!(lines.index_len() > 100, "{} unit ranges", lines.index_len());
    assert!(lines.recent_units() <= super::location::RECENT_UNITS);
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[test]
fn location_builds_no_addr2line_context_and_reads_only_line_sections() {
    let (bytes, starts) = this_executable();
    let dwarf = dwarf_of(&bytes);
    assert!(
        dwarf.loaded_sections().is_empty(),
        "nothing read before a lookup"
    );
    let here = starts[starts.len() / 2];
    let located = starts
        .iter()
        .filter(|&&a| dwarf.location(a).1.is_some())
        .count();
    assert!(located > 0);
    assert!(
        !dwarf.context_built(),
        "location built the addr2line context"
    );
    let allowed = [
        SectionId::DebugInfo,
        SectionId::DebugAbbrev,
        SectionId::DebugLine,
        SectionId::DebugStr,
        SectionId::DebugLineStr,
        SectionId::DebugStrOffsets,
        SectionId::DebugAddr,
        SectionId::DebugAranges,
        SectionId::DebugRanges,
        SectionId::DebugRngLists,
    ];
    for id in dwarf.loaded_sections() {
        assert!(allowed.contains(&id), "location read {id:?}");
    }

    // The first inline-chain lookup builds it; locations then answer alike.
    let before = dwarf.location(here);
    let _ = dwarf.frames(here);
    assert!(dwarf.context_built());
    assert_eq!(dwarf.location(here), before);
}

#[test]
fn damaged_dwarf_answers_less_and_never_panics() {
    let (bytes, starts) = this_executable();
    let file = object::File::parse(&*bytes).expect("an ELF");
    let sections = [
        ".debug_info",
        ".debug_abbrev",
        ".debug_line",
        ".debug_aranges",
        ".debug_rnglists",
        ".debug_ranges",
        ".debug_str_offsets",
    ];
    let probes: Vec<u64> = starts
        .iter()
        .step_by(starts.len() / 500 + 1)
        .copied()
        .collect();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for name in sections {
        let Some((offset, size)) = file
            .section_by_name(name)
            .and_then(|s| object::ObjectSection::file_range(&s))
        else {
            continue;
        };
        for density in [64u64, 4096] {
            let mut damaged = bytes.to_vec();
            // Overwrite one byte in every `density` (on average) with noise.
            for _ in 0..(size / density).max(1) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let at = offset + seed % size;
                damaged[at as usize] = (seed >> 32) as u8;
            }
            let damaged = SectionData::from_vec(damaged);
            let dwarf = dwarf_of(&damaged);
            for &addr in &probes {
                let _ = dwarf.location(addr);
            }
            assert!(!dwarf.context_built());
        }
    }
}

/// A three-unit C program (built in a directory `name` of its own) built with its debug sections compressed (as
/// distributions ship them) and `.debug_aranges`, and where each of its
/// functions starts; `None` when gcc cannot build it.
fn compressed_program(name: &str) -> Option<(SectionData, Vec<(String, u64)>)> {
    lapse_testkit::tool("gcc")?;
    let tmp = std::env::temp_dir();
    let dir = lapse_testkit::WorkDir::new(tmp.to_str()?, name);
    let mut sources = Vec::new();
    for (i, name) in ["first", "second", "third"].into_iter().enumerate() {
        // (enough types and code that each unit is a good part of the section)
        let mut text = format!("struct s{i} {{ int a, b, c; double d[4]; }};\n");
        for k in 0..40 {
            text += &format!(
                "__attribute__((noinline)) int {name}_{k}(struct s{i} *p, int n) {{\n    \
                 for (int j = 0; j < n; j++) p->a += p->b * j + {k};\n    return p->a;\n}}\n"
            );
        }
        if i == 2 {
            text += "int main(void) { struct s2 v = {0}; return third_0(&v, 3); }\n";
        }
        let path = dir.join(format!("{name}.c"));
        std::fs::write(&path, text).expect("write a unit");
        sources.push(path);
    }
    let exe = dir.join("prog");
    let built = std::process::Command::new("gcc")
        .args(["-O1", "-g", "-gz=zlib", "-o"])
        .arg(&exe)
        .args(&sources)
        .status()
        .is_ok_and(|s| s.success());
    if !built {
        return lapse_testkit::skip("gcc cannot compress debug sections (-gz=zlib)");
    }
    let bytes = SectionData::from_vec(std::fs::read(&exe).expect("the program"));
    let file = object::File::parse(&*bytes).expect("an ELF");
    let functions = file
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0)
        .filter_map(|s| Some((s.name().ok()?.to_owned(), s.address())))
        .collect();
    Some((bytes, functions))
}

#[test]
fn a_compressed_debug_info_is_inflated_only_through_the_units_asked_for() {
    let Some((bytes, functions)) = compressed_program("dwarf-gz") else {
        return;
    };
    let at = |name: &str| {
        functions
            .iter()
            .find(|(n, _)| n == name)
            .map(|&(_, a)| a)
            .expect("the function")
    };
    let dwarf = dwarf_of(&bytes);
    let reference = addr2line::Context::from_dwarf(dwarf.sections.dwarf(FRAME_SECTIONS))
        .expect("addr2line reads the program");
    let expected = |addr| match reference.find_location(addr) {
        Ok(Some(loc)) => (loc.file.map(str::to_owned), loc.line),
        _ => (None, None),
    };
    let inflated = |dwarf: &DwarfInfo| dwarf.lines.get().and_then(|l| l.inflated());

    let first = dwarf.location(at("first_7"));
    assert!(first.0.as_deref().is_some_and(|f| f.ends_with("first.c")));
    assert_eq!(first, expected(at("first_7")));
    let (after_first, size) = inflated(&dwarf).expect("read unit by unit");
    assert!(
        after_first * 2 < size,
        "{after_first} of {size} bytes inflated for the first unit"
    );
    let second = dwarf.location(at("second_3"));
    assert!(second.0.as_deref().is_some_and(|f| f.ends_with("second.c")));
    assert_eq!(second, expected(at("second_3")));
    let (after_second, _) = inflated(&dwarf).expect("still unit by unit");
    assert!(after_first < after_second && after_second < size);
    // An earlier unit is read again from what was inflated, not again.
    assert_eq!(dwarf.location(at("first_30")), expected(at("first_30")));
    assert_eq!(inflated(&dwarf), Some((after_second, size)));

    // Every function answers as addr2line does; one outside every unit
    // `.debug_aranges` lists (the C runtime's `_start`, when it has no
    // DWARF) completes the index and reads the section whole.
    for &(_, addr) in &functions {
        assert_eq!(dwarf.location(addr), expected(addr), "at {addr:#x}");
    }
    if expected(at("_start")).1.is_none() {
        assert_eq!(inflated(&dwarf), None, "the index was completed");
    }
}

#[test]
fn a_damaged_compressed_debug_info_answers_less_and_never_panics() {
    let Some((bytes, functions)) = compressed_program("dwarf-gz-damaged") else {
        return;
    };
    let file = object::File::parse(&*bytes).expect("an ELF");
    let (offset, size) = file
        .section_by_name(".debug_info")
        .and_then(|s| object::ObjectSection::file_range(&s))
        .expect("a .debug_info");
    // (past the compression header: the stream itself, and its size word)
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for round in 0..24 {
        let mut damaged = bytes.to_vec();
        let (from, span) = if round % 6 == 0 {
            (8, 8)
        } else {
            (24, size - 24)
        };
        for _ in 0..(1 + round % 3) {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            damaged[(offset + from + seed % span) as usize] = (seed >> 32) as u8;
        }
        let damaged = SectionData::from_vec(damaged);
        let dwarf = dwarf_of(&damaged);
        for &(_, addr) in &functions {
            let _ = dwarf.location(addr);
        }
    }
    // A size word of 2^60 and `.debug_aranges` naming units far past the
    // real ones: memory grows with what the stream holds, nothing more.
    let (aranges, aranges_size) = file
        .section_by_name(".debug_aranges")
        .and_then(|s| object::ObjectSection::file_range(&s))
        .expect("gcc writes .debug_aranges");
    let mut damaged = bytes.to_vec();
    let at = (offset + 8) as usize;
    damaged[at..at + 8].copy_from_slice(&(1u64 << 60).to_le_bytes());
    for k in (aranges..aranges + aranges_size).step_by(7) {
        damaged[k as usize] ^= 0x5a;
    }
    let damaged = SectionData::from_vec(damaged);
    let dwarf = dwarf_of(&damaged);
    for &(_, addr) in &functions {
        let _ = dwarf.location(addr);
    }
}
