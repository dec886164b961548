//! End to end: run-time patching of programs built without any profiling
//! flag (issue #28). Each program is built during the test, run as it is
//! and under `lapse record --method instrument`: it must print and exit
//! exactly the same, and the recording must count every call of every
//! function that was not inlined, as the `-finstrument-functions` build of
//! the same source does. (The trampoline's own trials, exceptions, longjmp,
//! signals, fork and threads, run for this source too: trampoline_e2e.rs.)

use lapse_testkit::rows;
use serde_json::Value;

mod probe_sources;
use probe_sources::*;

/// The calls of every function row, by (module, function), leaving out
/// what depends on time (the CPU-time loop of `spin`).
fn call_counts(v: &Value) -> Vec<(String, String, u64)> {
    let mut out: Vec<(String, String, u64)> = rows(v)
        .iter()
        .map(|r| {
            (
                r["module"].as_str().unwrap_or("").to_owned(),
                r["function"].as_str().unwrap_or("").to_owned(),
                r["calls"].as_u64().unwrap_or(0),
            )
        })
        .filter(|(_, f, _)| f != "cpu_ms" && f != "clock_gettime")
        .map(|(m, f, n)| (m.split('-').next().unwrap_or("").to_owned(), f, n))
        .collect();
    out.sort();
    out
}

#[test]
fn a_plain_o1_build_counts_every_call_as_finstrument_functions_does() {
    let body = r#"
#include <stdarg.h>
static volatile long g;
NOIPA void outer_spin(void) { sink = spin(40.0); }
NOIPA long small(long x) { return x * 3 + 1; }
NOIPA long global_first(void) { return g++; }
NOIPA long rec(int d) { if (d == 0) return 1; long r = rec(d - 1); __asm__ volatile("" : "+r"(r)); return r + 1; }
NOIPA double fp(double a, double b) { return a * b + 0.5; }
NOIPA long varargs(int n, ...) {
    va_list ap; va_start(ap, n); long s = 0;
    for (int i = 0; i < n; i++) s += va_arg(ap, long);
    va_end(ap); return s;
}
NOIPA double fvarargs(int n, ...) {
    va_list ap; va_start(ap, n); double s = 0;
    for (int i = 0; i < n; i++) s += va_arg(ap, double);
    va_end(ap); return s;
}
NOIPA void many_calls(void) { for (long i = 0; i < 200000; i++) sink += small(i); sink = spin(20.0); }
NOIPA void *worker(void *a) { long n = (long)a; for (long i = 0; i < 10000; i++) leaf(i); return (void *)(n + global_first()); }
NOIPA int in_child(void) { for (int i = 0; i < 7; i++) leaf(i); return 5; }
int main(void) {
    outer_spin(); many_calls(); sink = rec(20);
    double d = 1; for (int i = 0; i < 1000; i++) d = fp(d, 1.000001);
    long v = varargs(3, 1L, 2L, 3L) + varargs(0);
    double fv = fvarargs(2, 0.25, 0.5);
    pthread_t t[3]; long tot = 0;
    for (long i = 0; i < 3; i++) pthread_create(&t[i], 0, worker, (void *)i);
    for (int i = 0; i < 3; i++) { void *rv; pthread_join(t[i], &rv); tot += (long)rv; }
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) _exit(in_child());
    int st = 0; waitpid(p, &st, 0);
    printf("%.6f %ld %.2f %ld %d\n", d, v, fv, tot, WEXITSTATUS(st));
    return 7;
}
"#;
    let mut counts = Vec::new();
    let mut spins = Vec::new();
    for source in [Cyg, Patch] {
        let Some(r) = run("plain", "gcc", source, body, &["-O1"]) else {
            return;
        };
        let v = report(&r, "functions", &[]);
        assert_eq!(v["method"], "instrumentation", "{source:?}");
        assert_calls(
            &r,
            &v,
            &[
                ("main", 1),
                ("outer_spin", 1),
                ("many_calls", 1),
                ("small", 200_000),
                ("rec", 21),
                ("fp", 1000),
                ("varargs", 2),
                ("fvarargs", 1),
                ("worker", 3),
                ("global_first", 3),
                ("in_child", 1),
                ("leaf", 30_007),
                ("spin", 2),
            ],
        );
        assert_inclusive_within_threads(&r, &v);
        let i = info(&r);
        assert_eq!(info_count(&i, "unmatched:"), 0, "{source:?}: {i}");
        let expected = source.probe_source();
        let sources = &v["session"]["probe_sources"];
        assert_eq!(
            sources[format!("plain-{}", source.tag())],
            expected,
            "{sources}"
        );
        assert_eq!(sources["libc.so.6"], "libcalls", "{sources}");
        assert!(
            i.lines()
                .any(|l| l.starts_with("probes:") && l.contains(expected)),
            "{i}"
        );
        if source == Patch {
            let note = i
                .lines()
                .find(|l| l.contains("run-time patching: "))
                .unwrap_or_else(|| panic!("no patching note in {i}"));
            assert!(note.contains("patched at entry"), "{note}");
            assert!(!note.contains("patched none"), "{note}");
            let session = &v["session"];
            assert!(
                session["patched_functions"].as_u64().unwrap_or(0) >= 12,
                "{session}"
            );
            assert!(session["unpatched_functions"].is_u64(), "{session}");
        }
        counts.push(call_counts(&v));
        spins.push((
            source,
            ms(row(&v, "outer_spin"), "application_inclusive_ns"),
            ms(row(&v, "many_calls"), "application_inclusive_ns"),
        ));
    }
    assert_eq!(
        counts[0], counts[1],
        "every function's calls, -finstrument-functions vs patched"
    );
    // CPU-time spins: each source sees them as they are.
    for &(source, outer, many) in &spins {
        assert_spins(source, outer, many);
    }
}

#[test]
fn functions_that_cannot_be_patched_safely_are_left_alone_and_listed() {
    // Hand-written functions: one whose loop goes back into its first
    // bytes, one shorter than the jump, one with a call in its first bytes
    // that is not their last instruction; each must run as built, and
    // `lapse info` says why it was not patched. One that starts with a
    // direct call is patched (the call is made to return into it).
    let body = r#"
__asm__(
    ".text\n"
    ".globl loopy\n.type loopy, @function\n"
    "loopy:\n xor %eax, %eax\n1: add %edi, %eax\n dec %edi\n jnz 1b\n ret\n"
    ".size loopy, .-loopy\n"
    ".globl tiny\n.type tiny, @function\n"
    "tiny:\n lea 1(%rdi), %eax\n ret\n"
    ".size tiny, .-tiny\n"
    ".globl calls_first\n.type calls_first, @function\n"
    "calls_first:\n push %rbx\n call *%rsi\n pop %rbx\n ret\n"
    ".size calls_first, .-calls_first\n"
    ".globl calls_direct\n.type calls_direct, @function\n"
    "calls_direct:\n call tiny\n ret\n"
    ".size calls_direct, .-calls_direct\n");
int loopy(int n);
int tiny(int n);
int calls_first(int n, int (*f)(int));
int calls_direct(int n);
NOIPA int patched(int n) { return loopy(n) + tiny(n) + calls_first(n, tiny) + calls_direct(n) + (int)leaf(n); }
int main(void) {
    long s = 0;
    for (int i = 1; i < 100; i++) s += patched(i);
    printf("%ld\n", s);
    return 0;
}
"#;
    let Some(r) = run("unsafe", "gcc", Patch, body, &["-O1"]) else {
        return;
    };
    let v = report(&r, "functions", &[]);
    assert_calls(
        &r,
        &v,
        &[
            ("main", 1),
            ("patched", 99),
            ("leaf", 99),
            ("loopy", 0),
            ("tiny", 0),
            ("calls_first", 0),
            ("calls_direct", 99),
        ],
    );
    let i = info(&r);
    let note = i
        .lines()
        .find(|l| l.contains("run-time patching: "))
        .unwrap_or_else(|| panic!("no patching note in {i}"));
    for (why, name) in [
        ("a branch goes into the bytes the jump replaces: ", "loopy"),
        ("shorter than the 5-byte jump: ", "tiny"),
        ("a call in the bytes the jump replaces: ", "calls_first"),
    ] {
        let listed = note
            .split("; ")
            .any(|part| part.contains(why) && part.contains(name));
        assert!(listed, "{name} left alone ({why}): {note}");
    }
}

#[test]
fn patch_and_no_patch_choose_the_functions() {
    let body = r#"
NOIPA long small(long x) { return leaf(x) * 3 + 1; }
NOIPA long other(long x) { return leaf(x) - 1; }
int main(void) {
    long s = 0;
    for (long i = 0; i < 1000; i++) s += small(i) + other(i);
    printf("%ld\n", s);
    return 0;
}
"#;
    let options = ["--patch", "^(leaf|small|other)$", "--no-patch", "^oth"];
    let Some(r) = run_with("select", "gcc", Patch, body, &["-O1"], &options) else {
        return;
    };
    let v = report(&r, "functions", &[]);
    assert_calls(
        &r,
        &v,
        &[("main", 0), ("small", 1000), ("other", 0), ("leaf", 2000)],
    );
    let note = info(&r);
    assert!(
        note.contains("not selected (--patch, --no-patch): "),
        "{note}"
    );
}

#[test]
fn a_stripped_program_is_patched_by_its_unwind_table() {
    // No symbol table: the functions are the .eh_frame FDEs' ranges,
    // named module+0xSTART as sampling names them.
    let body = r#"
NOIPA long a(long x) { return leaf(x) + 1; }
NOIPA long b(long x) { return leaf(x) * 2; }
NOIPA long c(long x) { return leaf(x) - 3; }
int main(void) {
    long s = 0;
    for (long i = 0; i < 3; i++) s += a(i);
    for (long i = 0; i < 5; i++) s += b(i);
    for (long i = 0; i < 7; i++) s += c(i);
    printf("%ld\n", s);
    return 0;
}
"#;
    let Some(r) = run("stripped", "gcc", Patch, body, &["-O1", "-s"]) else {
        return;
    };
    let v = report(&r, "functions", &[]);
    let mut counts: Vec<u64> = rows(&v)
        .iter()
        .filter(|r| r["module"] == "stripped-patch")
        .map(|r| {
            let name = r["function"].as_str().unwrap_or("");
            assert!(name.starts_with("stripped-patch+0x"), "{name}");
            r["calls"].as_u64().unwrap_or(0)
        })
        .collect();
    counts.sort_unstable();
    assert_eq!(counts, [1, 3, 5, 7, 15], "main, a, b, c, leaf: {v}");
}

#[test]
fn a_plain_optimised_rust_program_counts_its_inline_never_functions_through_panics() {
    // rustc -O, no profiling anything: std itself is patched too, its
    // panic machinery and personality routine included, which run while
    // the unwinder walks the patched frames.
    let source = r#"
#[inline(never)]
fn small(x: u64) -> u64 { std::hint::black_box(x * 3 + 1) }
#[inline(never)]
fn rec(d: u32) -> u64 { if d == 0 { return 1; } let r = rec(d - 1); std::hint::black_box(r) + 1 }
#[inline(never)]
fn panicky(x: u64) -> u64 { if std::hint::black_box(x) % 7 == 0 { panic!("seven"); } small(x) + 1 }
fn main() {
    let mut s = 0;
    for i in 0..1000 { s += small(i); }
    s += rec(20);
    std::panic::set_hook(Box::new(|_| {}));
    for i in 0..50 { if let Ok(v) = std::panic::catch_unwind(|| panicky(i)) { s += v; } }
    println!("{s}");
    std::process::exit((s % 100) as i32);
}
"#;
    let Some(rustc) = lapse_testkit::tool("rustc") else {
        return;
    };
    let dir = lapse_testkit::WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "patch-rust");
    let src = dir.join("prog.rs");
    std::fs::write(&src, source).expect("write the source");
    let exe = dir.join("prog");
    let built = std::process::Command::new(rustc)
        .args(["-O", "-g", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("run rustc");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let data = dir.join("out.lapse");
    let options = Patch.record_options();
    let Some(_) = record_like_native(&dir, &exe, &[], options, &data, "rust") else {
        return;
    };
    let r = Run {
        dir,
        data,
        source: Patch,
    };
    let v = report(&r, "functions", &[]);
    assert_calls(
        &r,
        &v,
        &[
            ("prog::main", 1),
            ("prog::small", 1000 + 42),
            ("prog::rec", 21),
            ("prog::panicky", 50),
        ],
    );
    assert_inclusive_within_threads(&r, &v);
    let i = info(&r);
    assert_eq!(info_count(&i, "unmatched:"), 0, "{i}");
}

#[test]
fn the_flags_a_function_is_entered_with_are_its_own() {
    // Hand-written functions that read the flags they were called with
    // (no C function does: the ABI says nothing of them at a call; a
    // patched entry keeps them all the same).
    let body = r#"
__asm__(
    ".text\n"
    ".globl cf_in\n.type cf_in, @function\n"
    "cf_in:\n setc %al\n movzbl %al, %eax\n ret\n"
    ".size cf_in, .-cf_in\n"
    ".globl of_in\n.type of_in, @function\n"
    "of_in:\n seto %al\n movzbl %al, %eax\n ret\n"
    ".size of_in, .-of_in\n"
    ".globl zf_in\n.type zf_in, @function\n"
    "zf_in:\n setz %al\n movzbl %al, %eax\n ret\n"
    ".size zf_in, .-zf_in\n"
    ".globl with_flags\n.type with_flags, @function\n"
    "with_flags:\n push %rbx\n"
    " mov $0x7f, %ecx\n add $1, %cl\n call of_in\n mov %eax, %ebx\n"
    " stc\n call cf_in\n lea (%rbx,%rax,2), %ebx\n"
    " xor %ecx, %ecx\n call zf_in\n lea (%rbx,%rax,4), %eax\n"
    " pop %rbx\n ret\n"
    ".size with_flags, .-with_flags\n");
int with_flags(void);
int main(void) {
    int all = 0;
    for (int i = 0; i < 10; i++) all += with_flags();
    printf("%d\n", all);
    return all == 70 ? 0 : 1;
}
"#;
    let Some(r) = run("flags", "gcc", Patch, body, &["-O1"]) else {
        return;
    };
    let v = report(&r, "functions", &[]);
    assert_calls(
        &r,
        &v,
        &[
            ("with_flags", 10),
            ("of_in", 10),
            ("cf_in", 10),
            ("zf_in", 10),
        ],
    );
}

#[test]
fn a_program_with_its_own_unwinder_is_patched_and_its_exceptions_counted() {
    // -static-libgcc: the exception's unwinder is the program's, called
    // without passing lapse's wrappers that unhook the frames first; its
    // entries get stubs that do it instead, and the one function that
    // reads its own return address to start the walk is left alone.
    let body = r#"
#include <stdexcept>
NOIPA void thrower(int d) { if (d == 0) throw std::runtime_error("x"); thrower(d - 1); leaf(d); }
NOIPA int catcher(int i) { try { thrower(3); } catch (std::exception &) { return i % 3; } return -1; }
int main() { long s = 0; for (int i = 0; i < 100; i++) s += catcher(i) + leaf(i); printf("%ld\n", s); return 0; }
"#;
    let flags = ["-O1", "-static-libgcc", "-static-libstdc++"];
    let Some(r) = run("own-unwinder", "g++", Patch, body, &flags) else {
        return;
    };
    let v = report(&r, "functions", &["--limit", "10000"]);
    assert_calls(
        &r,
        &v,
        &[
            ("main", 1),
            ("catcher(int)", 100),
            ("thrower(int)", 400),
            ("leaf(long)", 100),
        ],
    );
    let i = info(&r);
    assert_eq!(info_count(&i, "unmatched:"), 0, "{i}");
    assert_eq!(info_count(&i, "open calls:"), 0, "{i}");
    assert!(
        i.contains("the unwinder's own start, which reads its return address: uw_init_context_1"),
        "{i}"
    );
}
