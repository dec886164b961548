//! Builds small C programs with gcc during the test and checks what
//! lapse-symbols says about them against the source.

use std::path::{Path, PathBuf};
use std::process::Command;

use lapse_symbols::{ElfModule, SymbolCache, SymbolError};

const SOURCE: &str = r#"
static inline __attribute__((always_inline)) int inner(int x) {
    return x * 3 + (x >> 2); /* LINE_INNER */
}

__attribute__((noinline)) int outer(int x) {
    int s = 0;
    for (int i = 0; i < x; i++)
        s += inner(i) ^ s; /* LINE_CALL */
    return s;
}

int main(int argc, char **argv) {
    (void)argv;
    return outer(argc * 1000) & 1;
}
"#;

fn line_of(marker: &str) -> u32 {
    let idx = SOURCE
        .lines()
        .position(|l| l.contains(marker))
        .expect("marker in source");
    idx as u32 + 1
}

/// Compiles `source` with gcc into a fresh temp dir; `None` when gcc is missing.
fn build(name: &str, source: &str, args: &[&str]) -> Option<PathBuf> {
    let dir = std::env::temp_dir().join(format!("lapse-symbols-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).ok()?;
    let out = dir.join(name);
    let status = Command::new("gcc")
        .args(args)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .ok()?;
    status.success().then_some(out)
}

fn module(path: &Path) -> ElfModule {
    ElfModule::open(path).expect("gcc output parses")
}

#[test]
fn names_lines_and_inline_chain() {
    let Some(exe) = build("inline", SOURCE, &["-g", "-O1"]) else {
        lapse_testkit::skip::<()>("gcc not available");
        return;
    };
    let m = module(&exe);
    assert!(m.has_dwarf());
    assert!(m.build_id().is_some_and(|id| !id.is_empty()));

    let outer = (0..0x10_0000u64)
        .step_by(1)
        .find_map(|a| m.function_at(a).filter(|s| s.name == "outer").cloned())
        .expect("outer in the symbol table");
    assert!(outer.size > 0);

    // Somewhere in outer's body the inlined `inner` must show as a second frame.
    let chain = (outer.start..outer.start + outer.size)
        .map(|a| m.symbolize(a))
        .find(|s| s.frames.len() == 2)
        .expect("an address inside the inlined inner()");
    assert_eq!(chain.frames[0].name, "outer");
    assert_eq!(chain.frames[1].name, "inner");
    assert_eq!(chain.frames[0].line, Some(line_of("LINE_CALL")));
    assert_eq!(chain.frames[1].line, Some(line_of("LINE_INNER")));
    let file = chain.frames[1].file.as_deref().unwrap_or("");
    assert!(file.ends_with("inline.c"), "file {file}");
    assert_eq!(chain.symbol.as_ref().map(|s| s.start), Some(outer.start));

    // main calls outer: its first address is in main, one frame.
    let main = (0..0x10_0000u64)
        .find_map(|a| m.function_at(a).filter(|s| s.name == "main").cloned())
        .expect("main in the symbol table");
    let s = m.symbolize(main.start);
    assert_eq!(s.frames.len(), 1);
    assert_eq!(s.frames[0].name, "main");
}

#[test]
fn stripped_module_falls_back_to_symbols() {
    let Some(exe) = build("nodebug", SOURCE, &["-O1"]) else {
        return;
    };
    let m = module(&exe);
    assert!(!m.has_dwarf());
    let outer = (0..0x10_0000u64)
        .find_map(|a| m.function_at(a).filter(|s| s.name == "outer").cloned())
        .expect("outer in the symbol table");
    let s = m.symbolize(outer.start + 1);
    assert_eq!(s.frames.len(), 1);
    assert_eq!(s.frames[0].name, "outer");
    assert_eq!(s.frames[0].line, None);
}

/// The functions of an -O2 program, by name, from its symbol table.
fn functions_of(m: &ElfModule, names: &[&str]) -> Vec<lapse_symbols::FunctionSymbol> {
    names
        .iter()
        .map(|name| {
            (0..0x10_0000u64)
                .find_map(|a| m.function_at(a).filter(|s| s.name == *name).cloned())
                .unwrap_or_else(|| panic!("{name} in the symbol table"))
        })
        .collect()
}

#[test]
fn stripped_code_is_grouped_by_the_unwind_table() {
    let Some(exe) = build("tostrip", SOURCE, &["-O2"]) else {
        return;
    };
    let stripped = exe.with_file_name("stripped");
    let ok = Command::new("strip")
        .arg("-o")
        .arg(&stripped)
        .arg(&exe)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        lapse_testkit::skip::<()>("strip not available");
        return;
    }
    let full = module(&exe);
    let bare = module(&stripped);
    for f in functions_of(&full, &["outer", "main"]) {
        assert!(
            bare.function_at(f.start).is_none(),
            "{} has no symbol",
            f.name
        );
        // Every address of the function is in one range, named by its start.
        let names: std::collections::BTreeSet<String> = (f.start..f.start + f.size)
            .map(|a| bare.function_or_range_at(a).expect("a range").name)
            .collect();
        assert_eq!(
            names.into_iter().collect::<Vec<_>>(),
            [format!("stripped+{:#x}", f.start)],
            "{}",
            f.name
        );
        let s = bare.symbolize(f.start + 1);
        assert_eq!(s.frames.len(), 1);
        assert_eq!(s.frames[0].name, format!("stripped+{:#x}", f.start));
        assert_eq!(s.symbol.map(|s| s.start), Some(f.start));
    }
    // The entry point is _start, stripped or not.
    let entry = bare.entry_point();
    assert_eq!(
        bare.function_or_range_at(entry).map(|s| s.name).as_deref(),
        Some("_start")
    );
}

#[test]
fn plt_stubs_are_named_after_their_target() {
    let src = "#include <stdio.h>\n#include <stdlib.h>\nint main(int c, char **v) { puts(v[0]); return rand() & c; }\n";
    let Some(exe) = build("plt", src, &["-O2"]) else {
        return;
    };
    let m = module(&exe);
    let names: std::collections::BTreeSet<String> = (0..0x10_0000u64)
        .filter_map(|a| m.function_at(a).map(|s| s.name.clone()))
        .filter(|n| n.ends_with("@plt"))
        .collect();
    assert!(
        names.contains("puts@plt") && names.contains("rand@plt"),
        "{names:?}"
    );
}

#[test]
fn the_dynamic_loaders_start_is_named() {
    let Some(ld) = ["/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"]
        .iter()
        .map(Path::new)
        .find(|p| p.exists())
    else {
        lapse_testkit::skip::<()>("no dynamic loader at the usual paths");
        return;
    };
    let m = module(ld);
    let start = m
        .function_or_range_at(m.entry_point())
        .expect("a function at the entry");
    assert_eq!(start.name, "_start", "{}", ld.display());
    assert!(start.size > 0);
}

#[test]
fn bias_maps_every_load_segment_to_its_vaddr() {
    let lib_src = "int hot(int x) { return x * 7; }\n";
    let Some(lib) = build("libhot.so", lib_src, &["-g", "-O2", "-shared", "-fPIC"]) else {
        return;
    };
    let m = module(&lib);
    assert!(m.segments().iter().any(|s| s.executable));
    let load_base = 0x7f00_0000_0000u64;
    for seg in m.segments().iter().filter(|s| s.executable) {
        // The kernel maps whole pages: the mapping starts at the page holding
        // the segment's first file byte.
        let page_offset = seg.offset & !0xfff;
        let mapping_start = load_base + (seg.vaddr & !0xfff);
        let bias = m.bias(mapping_start, page_offset);
        let abs = mapping_start + (seg.offset - page_offset);
        assert_eq!(abs - bias, seg.vaddr, "segment {seg:?}");
    }
    let hot = (0..0x10_0000u64)
        .find_map(|a| m.function_at(a).filter(|s| s.name == "hot").cloned())
        .expect("hot in the symbol table");
    assert!(m.symbolize(hot.start).frames[0].line.is_some());
    assert!(m.unwind_sections().eh_frame.is_some());
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let err = ElfModule::open(Path::new("/nonexistent/lapse/module.so"));
    assert!(matches!(err, Err(SymbolError::Io { .. })));
    assert!(ElfModule::from_bytes(Path::new("junk"), b"not an elf".to_vec()).is_err());

    // Every truncation of a real ELF either parses or fails cleanly.
    let Some(exe) = build("trunc", SOURCE, &["-g", "-O1"]) else {
        return;
    };
    let bytes = std::fs::read(&exe).expect("read gcc output");
    for cut in (0..bytes.len()).step_by(97) {
        if let Ok(m) = ElfModule::from_bytes(Path::new("cut"), bytes[..cut].to_vec()) {
            for a in (0..0x3000).step_by(13) {
                let _ = m.symbolize(a);
            }
        }
    }
    // Flipped bytes in the debug info must not panic either.
    let mut noisy = bytes.clone();
    for i in (64..noisy.len()).step_by(31) {
        noisy[i] ^= 0x5a;
    }
    if let Ok(m) = ElfModule::from_bytes(Path::new("noisy"), noisy) {
        for a in (0..0x3000).step_by(7) {
            let _ = m.symbolize(a);
        }
    }
}

#[test]
fn cache_opens_each_module_once_and_remembers_failures() {
    let mut cache = SymbolCache::new();
    let missing = Path::new("/nonexistent/lapse/other.so");
    assert!(cache.module(missing).is_err());
    assert!(cache.symbolize(missing, 0x1000).frames.is_empty());
}

#[test]
fn separate_debug_file_through_gnu_debuglink() {
    let Some(exe) = build("linked", SOURCE, &["-g", "-O1"]) else {
        return;
    };
    let debug = exe.with_extension("debug");
    let run = |args: &[&std::ffi::OsStr]| {
        let tool = args[0];
        Command::new(tool)
            .args(&args[1..])
            .status()
            .is_ok_and(|s| s.success())
    };
    let (e, d) = (exe.as_os_str(), debug.as_os_str());
    let link = format!("--add-gnu-debuglink={}", debug.display());
    let ok = run(&["objcopy".as_ref(), "--only-keep-debug".as_ref(), e, d])
        && run(&["strip".as_ref(), "--strip-debug".as_ref(), e])
        && run(&["objcopy".as_ref(), link.as_ref(), e]);
    if !ok {
        lapse_testkit::skip::<()>("binutils not available");
        return;
    }
    let m = module(&exe);
    assert!(m.has_dwarf(), "debug info found through .gnu_debuglink");
    assert_eq!(m.debug_file(), Some(debug.as_path()));
    let outer = (0..0x10_0000u64)
        .find_map(|a| m.function_at(a).filter(|s| s.name == "outer").cloned())
        .expect("outer in the symbol table");
    let s = m.symbolize(outer.start);
    assert!(
        s.frames[0].line.is_some(),
        "lines from the debug file: {s:?}"
    );
}

#[test]
fn cpp_names_are_demangled() {
    let dir = std::env::temp_dir().join(format!("lapse-symbols-{}-cpp", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let src = dir.join("names.cpp");
    let exe = dir.join("names");
    let code =
        "namespace shapes { __attribute__((noinline)) int area(int w, int h) { return w * h; } }\n\
                int main(int argc, char **) { return shapes::area(argc, 3); }\n";
    if std::fs::write(&src, code).is_err() {
        return;
    }
    let built = Command::new("g++")
        .args(["-g", "-O1", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .is_ok_and(|s| s.success());
    if !built {
        lapse_testkit::skip::<()>("g++ not available");
        return;
    }
    let m = module(&exe);
    let f = (0..0x10_0000u64)
        .find_map(|a| {
            m.function_at(a)
                .filter(|s| s.name.contains("area"))
                .cloned()
        })
        .expect("area in the symbol table");
    assert_eq!(f.name, "shapes::area(int, int)");
    let s = m.symbolize(f.start);
    assert_eq!(
        s.frames.last().map(|f| f.name.as_str()),
        Some("shapes::area(int, int)")
    );
}

#[test]
fn global_name_wins_over_gcc_localalias() {
    // With -fPIC, gcc gives a recursive global function a local alias
    // `walk.localalias` at the same address; users know it as `walk`.
    let src = "int walk(int n) { return n <= 0 ? 0 : 1 + walk(n - 1); }\n\
               int main(int c, char **v) { (void)v; return walk(c * 5) & 1; }\n";
    let Some(exe) = build("localalias", src, &["-O1", "-fPIC"]) else {
        lapse_testkit::skip::<()>("gcc not available");
        return;
    };
    let m = module(&exe);
    let nm = Command::new("nm").arg(&exe).output().expect("nm");
    let text = String::from_utf8_lossy(&nm.stdout);
    let Some(line) = text.lines().find(|l| l.ends_with(" walk")) else {
        panic!("no walk symbol in\n{text}");
    };
    let addr = u64::from_str_radix(line.split_whitespace().next().unwrap_or("0"), 16)
        .expect("hex address");
    let f = m.function_at(addr).expect("walk resolves");
    assert_eq!(f.name, "walk");
}
