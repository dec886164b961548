//! `ElfModule::location` (a line lookup that parses one unit at a time)
//! answers what `addr2line::Context::find_location` (which parses them all)
//! answers: at every address of a small multi-file C program built by gcc
//! at -O0 and -O2 with DWARF 5 and 4, and in every function of the C
//! library when its debug file is installed.

use std::path::Path;
use std::process::Command;
use std::rc::Rc;

use lapse_symbols::ElfModule;
use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};

type Rcs = gimli::EndianRcSlice<gimli::RunTimeEndian>;

/// A header in its own directory (an include directory in the line
/// table) with a function every caller gets inlined.
const UTIL_H: &str = r#"
static inline __attribute__((always_inline)) int scale(int x) {
    return x * 5 - (x >> 3); /* LINE_SCALE */
}
"#;

const A_C: &str = r#"
#include "util.h"

__attribute__((noinline)) int alpha(int n) {
    int s = 0;
    for (int i = 0; i < n; i++)
        s += scale(i) ^ s;
    return s;
}

__attribute__((noinline)) int beta(int n) {
    return scale(n) + alpha(n / 2);
}
"#;

const B_C: &str = r#"
#include <stdio.h>
#include "util.h"

int alpha(int n);
int beta(int n);

static __attribute__((noinline)) int gamma_(int n) {
    return n > 3 ? beta(n) : scale(n);
}

int main(int argc, char **argv) {
    (void)argv;
    printf("%d\n", gamma_(argc * 100) + alpha(argc));
    return 0;
}
"#;

/// `addr2line` over `path`'s DWARF, with every section it reads.
fn reference(path: &Path) -> addr2line::Context<Rcs> {
    let data = std::fs::read(path).expect("read the DWARF file");
    let file = object::File::parse(&*data).expect("an ELF");
    let endian = if file.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let load = |id: gimli::SectionId| -> Result<Rcs, gimli::Error> {
        let bytes = file
            .section_by_name(id.name())
            .and_then(|s| s.uncompressed_data().ok())
            .unwrap_or_default();
        Ok(Rcs::new(Rc::from(&*bytes), endian))
    };
    let dwarf = gimli::Dwarf::load(load).expect("sections load");
    addr2line::Context::from_dwarf(dwarf).expect("addr2line reads it")
}

fn expected(context: &addr2line::Context<Rcs>, addr: u64) -> (Option<String>, Option<u32>) {
    match context.find_location(addr) {
        Ok(Some(loc)) => (loc.file.map(str::to_owned), loc.line),
        _ => (None, None),
    }
}

/// `(start, size)` of every function symbol of `path`.
fn functions(path: &Path) -> Vec<(u64, u64)> {
    let data = std::fs::read(path).expect("read the ELF");
    let file = object::File::parse(&*data).expect("an ELF");
    let mut out: Vec<(u64, u64)> = file
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0 && s.size() > 0)
        .map(|s| (s.address(), s.size()))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

fn line_of(source: &str, marker: &str) -> u32 {
    let index = source.lines().position(|l| l.contains(marker));
    index.expect("marker in source") as u32 + 1
}

#[test]
fn every_address_of_a_gcc_program_matches_addr2line() {
    if lapse_testkit::tool("gcc").is_none() {
        return;
    }
    let dir = lapse_testkit::WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "lines-gcc");
    std::fs::create_dir_all(dir.join("src")).expect("src dir");
    std::fs::create_dir_all(dir.join("include")).expect("include dir");
    std::fs::write(dir.join("include/util.h"), UTIL_H).expect("write util.h");
    std::fs::write(dir.join("src/a.c"), A_C).expect("write a.c");
    std::fs::write(dir.join("src/b.c"), B_C).expect("write b.c");

    for opt in ["-O0", "-O2"] {
        for dwarf in ["-gdwarf-5", "-gdwarf-4"] {
            let name = format!("prog{opt}{dwarf}");
            // Relative paths, as a build system passes them: file names are
            // joined with the include directory and the compilation directory.
            let status = Command::new("gcc")
                .current_dir(&*dir)
                .args([opt, dwarf, "-Iinclude", "src/a.c", "src/b.c", "-o", &name])
                .status()
                .expect("run gcc");
            assert!(status.success(), "gcc {opt} {dwarf}");
            let exe = dir.join(&name);
            // Without `.debug_aranges` the unit index is built by reading
            // each unit's own ranges (`.debug_rnglists` or `.debug_ranges`).
            let bare = dir.join(format!("{name}-no-aranges"));
            let status = Command::new("objcopy")
                .args(["--remove-section", ".debug_aranges"])
                .arg(&exe)
                .arg(&bare)
                .status();
            if !status.is_ok_and(|s| s.success()) {
                lapse_testkit::skip::<()>("objcopy failed or is not installed");
                return;
            }
            for exe in [&exe, &bare] {
                same_as_addr2line_everywhere(exe);
            }
            let module = ElfModule::open(&exe).expect("gcc output parses");
            let main = functions(&exe)
                .into_iter()
                .find(|&(start, _)| module.function_at(start).is_some_and(|s| s.name == "main"))
                .expect("main");
            let (file, line) = module.location(main.0);
            let root = dir.to_string_lossy();
            assert_eq!(file, Some(format!("{root}/src/b.c")), "{name}");
            assert_eq!(line, Some(line_of(B_C, "int main")), "{name}");
        }
    }
}

/// Compares every address of every function of `exe`; some must be in the
/// inlined `scale()` of util.h.
fn same_as_addr2line_everywhere(exe: &Path) {
    let name = exe.display();
    let module = ElfModule::open(exe).expect("gcc output parses");
    let context = reference(exe);
    let mut in_header = 0;
    let mut with_line = 0;
    for (start, size) in functions(exe) {
        for addr in start..start + size {
            let got = module.location(addr);
            assert_eq!(got, expected(&context, addr), "{name} at {addr:#x}");
            with_line += usize::from(got.1.is_some());
            let header = got
                .0
                .as_deref()
                .is_some_and(|f| f.ends_with("include/util.h"));
            if header && got.1 == Some(line_of(UTIL_H, "LINE_SCALE")) {
                in_header += 1;
            }
        }
    }
    assert!(with_line > 50, "{name}: {with_line} addresses with a line");
    assert!(in_header > 0, "{name}: no address in the inlined scale()");
}

/// The C library this test runs with, from its own mappings.
fn this_libc() -> Option<std::path::PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("/libc.so.6") || p.contains("/libc-"))
        .map(Into::into)
}

#[test]
fn every_function_of_the_c_library_matches_addr2line() {
    let Some(libc) = this_libc() else {
        eprintln!("skipping: no libc.so.6 in this process's mappings");
        return;
    };
    let module = ElfModule::open(&libc).expect("libc parses");
    let Some(debug) = module.debug_file().map(Path::to_owned) else {
        eprintln!(
            "skipping: no debug file for {} (install libc6-dbg)",
            libc.display()
        );
        return;
    };
    let context = reference(&debug);
    let functions = functions(&debug);
    assert!(functions.len() > 1000, "{} functions", functions.len());
    let mut with_line = 0;
    for &(start, size) in &functions {
        for addr in [start, start + size / 3] {
            let got = module.location(addr);
            assert_eq!(got, expected(&context, addr), "at {addr:#x}");
            with_line += usize::from(got.1.is_some());
        }
    }
    assert!(
        with_line > functions.len(),
        "{with_line} of {} addresses with a line",
        2 * functions.len()
    );
}
