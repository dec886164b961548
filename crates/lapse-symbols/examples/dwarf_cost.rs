//! What naming every function of a module costs, in time and peak memory.
//!
//! ```text
//! cargo run --release -p lapse-symbols --example dwarf_cost -- MODULE MODE [N]
//! ```
//!
//! MODE is `lines` (`ElfModule::location`, what the recorder does),
//! `addr2line` (`addr2line::Context::find_location` over the same DWARF
//! and reader type, the context built first: what `location` did before) or `frames`
//! (`ElfModule::symbolize`, inline chains, as sampling symbolization does).
//! One mode per process, so the printed peak (VmHWM) is that mode's. With
//! N, only every (count/N)th function is named, as a recording that saw N
//! functions of the module would.

use std::borrow::Cow;
use std::collections::HashSet;
use std::path::Path;
use std::time::Instant;

use lapse_symbols::{ElfModule, SectionData};
use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};

type Reader = gimli::EndianReader<gimli::RunTimeEndian, SectionData>;

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (module, mode, wanted) = match args.as_slice() {
        [module, mode] => (module, mode, None),
        [module, mode, n] => (module, mode, n.parse::<usize>().ok()),
        _ => {
            eprintln!("usage: dwarf_cost MODULE lines|addr2line|frames [N]");
            return std::process::ExitCode::FAILURE;
        }
    };
    let before = peak_kib();
    let started = Instant::now();
    let module = match ElfModule::open(Path::new(module)) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("{e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let dwarf_path = module.debug_file().unwrap_or(module.path()).to_owned();
    let mut starts = function_starts(&dwarf_path);
    if let Some(n) = wanted {
        let step = (starts.len() / n.max(1)).max(1);
        starts = starts.into_iter().step_by(step).take(n).collect();
    }
    let opened = started.elapsed();

    let started = Instant::now();
    let mut with_line = 0usize;
    match mode.as_str() {
        "lines" => {
            for &a in &starts {
                with_line += usize::from(module.location(a).1.is_some());
            }
        }
        "addr2line" => {
            let map = map(&dwarf_path);
            let file = object::File::parse(&*map).expect("an ELF");
            let context = context(&file);
            for &a in &starts {
                let line = context.find_location(a).ok().flatten().and_then(|l| l.line);
                with_line += usize::from(line.is_some());
            }
        }
        "frames" => {
            for &a in &starts {
                let s = module.symbolize(a);
                with_line += usize::from(s.frames.iter().any(|f| f.line.is_some()));
            }
        }
        other => {
            eprintln!("unknown mode {other}");
            return std::process::ExitCode::FAILURE;
        }
    }
    let named = started.elapsed();
    let n = starts.len().max(1);
    println!(
        "{mode}: {} functions ({with_line} with a line) in {:.1} ms, {:.2} us per function; \
         open {:.1} ms; peak RSS {} KiB (at start {} KiB)",
        starts.len(),
        named.as_secs_f64() * 1e3,
        named.as_secs_f64() * 1e6 / n as f64,
        opened.as_secs_f64() * 1e3,
        peak_kib(),
        before,
    );
    std::process::ExitCode::SUCCESS
}

/// Function symbols' start addresses in symbol-table order (the linker's:
/// roughly object file by object file), each once.
fn function_starts(path: &Path) -> Vec<u64> {
    let map = map(path);
    let Ok(file) = object::File::parse(&*map) else {
        return Vec::new();
    };
    let mut seen = HashSet::new();
    file.symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0 && s.size() > 0)
        .map(|s| s.address())
        .filter(|a| seen.insert(*a))
        .collect()
}

/// Mapped, as lapse maps modules (a heap copy would inflate the peak).
fn map(path: &Path) -> memmap2::Mmap {
    let file = std::fs::File::open(path).expect("open the module");
    // SAFETY: read-only mapping of a file nobody rewrites during the run.
    unsafe { memmap2::Mmap::map(&file) }.expect("map the module")
}

/// `addr2line` over every DWARF section but variable locations, read
/// through the same reader type as lapse's (decompressed sections are
/// moved in; mapped ones are copied, which inflates this mode's peak for a
/// module whose sections are not compressed).
fn context(file: &object::File<'_>) -> addr2line::Context<Reader> {
    let endian = if file.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let load = |id: gimli::SectionId| -> Result<Reader, gimli::Error> {
        let skip = matches!(
            id,
            gimli::SectionId::DebugLoc | gimli::SectionId::DebugLocLists
        );
        let bytes = match file.section_by_name(id.name()).filter(|_| !skip) {
            Some(s) => match s.uncompressed_data() {
                Ok(Cow::Owned(v)) => v,
                Ok(Cow::Borrowed(b)) => b.to_vec(),
                Err(_) => Vec::new(),
            },
            None => Vec::new(),
        };
        Ok(gimli::EndianReader::new(
            SectionData::from_vec(bytes),
            endian,
        ))
    };
    let dwarf = gimli::Dwarf::load(load).expect("sections load");
    addr2line::Context::from_dwarf(dwarf).expect("addr2line reads it")
}

fn peak_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
