//! Unwinds a stack captured from a real program: a C program built with
//! `-O2 -fomit-frame-pointer` records its own registers and stack inside a
//! three-deep call chain, then the test unwinds that copy with the modules
//! from the program's `/proc/self/maps` and checks the function names.

use std::path::{Path, PathBuf};
use std::process::Command;

use lapse_symbols::ElfModule;
use lapse_unwind::{ProcessUnwinder, StackCopy, StackEnd, UserRegs};

const PROGRAM: &str = r#"
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

static unsigned char stack_copy[16384];
volatile int sink;

__attribute__((noinline)) void level_c(int n) {
    unsigned long ip, sp, bp;
    __asm__ volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2"
                     : "=r"(ip), "=r"(sp), "=r"(bp));
    /* Like the kernel, copy no further than the end of the stack mapping. */
    static char maps_text[65536];
    FILE *maps = fopen("/proc/self/maps", "r");
    size_t len = fread(maps_text, 1, sizeof maps_text - 1, maps);
    fclose(maps);
    maps_text[len] = 0;
    unsigned long lo = 0, hi = 0;
    for (char *line = maps_text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : 0)
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && sp >= lo && sp < hi) break;
    size_t avail = hi - sp < sizeof stack_copy ? hi - sp : sizeof stack_copy;
    memcpy(stack_copy, (void *)sp, avail);
    FILE *out = fopen(getenv("DUMP"), "wb");
    fwrite(&ip, 8, 1, out); fwrite(&sp, 8, 1, out); fwrite(&bp, 8, 1, out);
    fwrite(stack_copy, 1, sizeof stack_copy, out);
    fwrite(maps_text, 1, len, out);
    fclose(out);
    sink = n;
}
#ifdef VIA_SIGNAL
#include <signal.h>
static void handler(int sig) { level_c(sig); sink += 1; }
__attribute__((noinline)) void level_b(int n) { raise(SIGUSR1); sink += n; }
#else
__attribute__((noinline)) void level_b(int n) { level_c(n * 3); sink += n; }
#endif
__attribute__((noinline)) void level_a(int n) { level_b(n + 1); sink += n; }
int main(int argc, char **argv) {
    (void)argv;
#ifdef VIA_SIGNAL
    signal(SIGUSR1, handler);
#endif
    level_a(argc);
    return 0;
}
"#;

/// Stacks can be deeper than 16 KiB only when the environment is huge.
const STACK_BYTES: usize = 16384;

fn build_and_run(dir: &Path, defines: &[&str]) -> Option<Vec<u8>> {
    std::fs::create_dir_all(dir).ok()?;
    let src = dir.join("captured.c");
    std::fs::write(&src, PROGRAM).ok()?;
    let exe = dir.join("captured");
    let ok = Command::new("gcc")
        .args(["-O2", "-fomit-frame-pointer", "-g"])
        .args(defines)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .status()
        .ok()?
        .success();
    if !ok {
        return None;
    }
    let dump = dir.join("dump.bin");
    let ran = Command::new(&exe).env("DUMP", &dump).status().ok()?;
    assert!(ran.success(), "capture program failed");
    std::fs::read(&dump).ok()
}

struct Mapping {
    start: u64,
    end: u64,
    offset: u64,
    path: PathBuf,
}

fn executable_mappings(maps: &str) -> Vec<Mapping> {
    let mut out = Vec::new();
    for line in maps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 6 || !fields[1].contains('x') || !fields[5].starts_with('/') {
            continue;
        }
        let Some((start, end)) = fields[0].split_once('-') else {
            continue;
        };
        let hex = |s: &str| u64::from_str_radix(s, 16).ok();
        if let (Some(start), Some(end), Some(offset)) = (hex(start), hex(end), hex(fields[2])) {
            out.push(Mapping {
                start,
                end,
                offset,
                path: PathBuf::from(fields[5]),
            });
        }
    }
    out
}

/// Builds and runs the capture program with `defines`, unwinds its copy
/// and names every frame; `None` when gcc is missing.
fn unwound_names(name: &str, defines: &[&str]) -> Option<Vec<String>> {
    unwound(name, defines, usize::MAX).map(|(names, _)| names)
}

/// [`unwound_names`] with the stack copy cut to `keep` bytes, and why the
/// unwinding stopped.
fn unwound(name: &str, defines: &[&str], keep: usize) -> Option<(Vec<String>, StackEnd)> {
    let dir = std::env::temp_dir().join(format!("lapse-unwind-{}-{name}", std::process::id()));
    let dump = build_and_run(&dir, defines)?;
    let word = |i: usize| u64::from_le_bytes(dump[i * 8..i * 8 + 8].try_into().unwrap());
    let regs = UserRegs {
        ip: word(0),
        sp: word(1),
        fp: word(2),
        lr: 0,
    };
    let stack = &dump[24..24 + STACK_BYTES.min(keep)];
    let maps = String::from_utf8_lossy(&dump[24 + STACK_BYTES..]).into_owned();

    let mut unwinder = ProcessUnwinder::new();
    let mut modules = Vec::new();
    for m in executable_mappings(&maps) {
        let Ok(module) = ElfModule::open(&m.path) else {
            continue;
        };
        let bias = module.bias(m.start, m.offset);
        let name = m.path.display().to_string();
        unwinder.add_module(&name, m.start..m.end, bias, module.unwind_sections());
        modules.push((m, bias, module));
    }

    let mut frames = Vec::new();
    let end = unwinder.unwind(
        &regs,
        &StackCopy {
            start: regs.sp,
            bytes: stack,
        },
        &mut frames,
    );
    let names: Vec<String> = frames
        .iter()
        .map(|&addr| {
            modules
                .iter()
                .find(|(m, _, _)| addr >= m.start && addr < m.end)
                .and_then(|(_, bias, module)| {
                    module
                        .symbolize(addr - bias)
                        .frames
                        .last()
                        .map(|f| f.name.clone())
                })
                .unwrap_or_else(|| format!("{addr:#x}"))
        })
        .collect();
    eprintln!("unwound ({name}): {names:?} ({end:?})");
    let _ = std::fs::remove_dir_all(&dir);
    Some((names, end))
}

#[test]
fn a_stack_cut_by_its_copy_says_so() {
    let Some((whole, end)) = unwound("whole", &[], usize::MAX) else {
        lapse_testkit::skip::<()>("gcc not available");
        return;
    };
    assert_eq!(end, StackEnd::Root, "{whole:?}");
    // 48 bytes hold level_c's and level_b's frames at most: the unwinding
    // needs what lies beyond.
    let Some((cut, end)) = unwound("cut", &[], 48) else {
        return;
    };
    assert_eq!(end, StackEnd::CopyEnd, "{cut:?}");
    assert!(cut.len() < whole.len(), "{cut:?} / {whole:?}");
    assert_eq!(cut[0], "level_c");
}

#[test]
fn unwinds_an_optimised_stack_without_frame_pointers() {
    let Some(names) = unwound_names("plain", &[]) else {
        lapse_testkit::skip::<()>("gcc not available");
        return;
    };
    let expected = ["level_c", "level_b", "level_a", "main"];
    assert!(
        names.len() >= 4 && names[..4] == expected,
        "unwound stack: {names:?}"
    );
}

#[test]
fn unwinds_through_a_signal_handler() {
    let Some(names) = unwound_names("signal", &["-DVIA_SIGNAL"]) else {
        lapse_testkit::skip::<()>("gcc not available");
        return;
    };
    // level_c runs in the handler; below the signal frame the interrupted
    // code (inside raise) and its callers follow.
    let pos = |n: &str| names.iter().position(|x| x == n);
    assert_eq!(pos("level_c"), Some(0), "unwound stack: {names:?}");
    let (b, a, main) = (pos("level_b"), pos("level_a"), pos("main"));
    assert!(
        b.is_some() && b < a && a < main,
        "callers of the interrupted code missing: {names:?}"
    );
}
