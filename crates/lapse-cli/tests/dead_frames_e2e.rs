//! End to end: calls whose exit never comes (SPEC 8, "stacks stay balanced
//! through longjmp and C++ exceptions"), with every probe source. The
//! recorder closes such a call as soon as a later event proves its frame
//! gone (its stack pointer lies below the next entry's, or below a longjmp's
//! or a catch's target), not when an outer function happens to return: so
//! the next call nests where it really is, and a loop of jumps or throws
//! keeps the recorded stack at the real depth.

use lapse_testkit::compile;

mod probe_sources;
use probe_sources::*;

/// No damage beyond the repairs this is about: nothing lost, no exit
/// without its entry, no call left open.
fn assert_clean(r: &Run) {
    let i = info(r);
    for key in ["lost:", "unmatched:", "open calls:"] {
        assert_eq!(info_count(&i, key), 0, "{:?}: {key}\n{i}", r.source);
    }
}

#[test]
fn after_a_longjmp_the_next_call_nests_under_the_caller() {
    let body = r#"
static jmp_buf jb;
NOIPA void foo(int jump) { leaf(1); if (jump) longjmp(jb, 1); }
NOIPA void bar(void) { sink = spin(5.0); }
int main(void) {
    if (setjmp(jb) == 0) foo(1);
    bar();
    printf("done\n");
    return 0;
}
"#;
    for source in [Cyg, Pg, Fentry, Sancov] {
        let Some(r) = run("after_longjmp", "gcc", source, body, &[]) else {
            return;
        };
        let roots = roots(&r);
        let main = roots
            .iter()
            .find(|n| n["function"] == "main")
            .expect("main is a root");
        let foo = child(main, "foo").expect("main > foo");
        assert!(
            child(foo, "bar").is_none(),
            "{source:?}: bar nests under foo, which was gone"
        );
        assert!(child(main, "bar").is_some(), "{source:?}: main > bar");
        // foo's call ended at the jump: it does not hold bar's 5 ms
        let v = report(&r, "functions", &[]);
        assert!(
            ms(row(&v, "foo"), "elapsed_inclusive_ns") < 2.0,
            "{source:?}: foo's inclusive time {:.2} ms",
            ms(row(&v, "foo"), "elapsed_inclusive_ns")
        );
        assert_calls(&r, &v, &[("main", 1), ("foo", 1), ("bar", 1)]);
        assert_clean(&r);
    }
}

#[test]
fn many_longjmps_keep_the_nesting_at_the_real_depth() {
    // 300 rounds: main > jumper(4) > ... > jumper(0), which longjmps back to
    // main. The real stack is never deeper than main + 5 jumpers (+ leaf).
    let body = r#"
static jmp_buf jb;
NOIPA void jumper(int d) { leaf(d); if (d == 0) longjmp(jb, 1); jumper(d - 1); leaf(d); }
int main(void) {
    long n = 0;
    for (int r = 0; r < 300; r++) { if (setjmp(jb) == 0) jumper(4); else n++; leaf(r); }
    printf("%ld\n", n);
    return 0;
}
"#;
    for source in [Cyg, Pg, Fentry, Sancov] {
        let Some(r) = run("many_longjmps", "gcc", source, body, &[]) else {
            return;
        };
        let deepest = roots(&r).iter().map(depth).max().unwrap_or(0);
        assert!(
            (6..=7).contains(&deepest),
            "{source:?}: recorded nesting {deepest} deep"
        );
        let v = report(&r, "functions", &[]);
        assert_calls(&r, &v, &[("main", 1), ("jumper", 1500), ("leaf", 1800)]);
        assert_inclusive_within_threads(&r, &v);
        assert_clean(&r);
    }
}

#[test]
fn exceptions_through_c_without_exceptions_keep_the_stack_bounded() {
    // C code built without -fexceptions has no exit probes on the unwinding
    // path: C++ throws through it, 1000 times, and catches in main.
    let c_part = r#"
#ifdef __clang__
#define NOIPA __attribute__((noinline, optnone))
#else
#define NOIPA __attribute__((noipa))
#endif
void cb(int);
static volatile long c_sink;
NOIPA long c_leaf(long x) { c_sink += x; return x; }
NOIPA void c_middle(int d) { c_leaf(d); if (d == 0) cb(d); else c_middle(d - 1); c_leaf(d); }
"#;
    let cpp_main = r#"
extern "C" void c_middle(int d);
extern "C" NOIPA void cb(int d) { leaf(d); if (d < 1000000) throw d + 1; }
NOIPA long after(long x) { return leaf(x); }
int main() {
    long n = 0;
    for (int r = 0; r < 1000; r++) { try { c_middle(4); } catch (int v) { n += v; } n += after(r) & 1; }
    printf("%ld\n", n);
    return 0;
}
"#;
    for source in [Cyg, Pg, Fentry, Sancov] {
        let dir = lapse_testkit::WorkDir::new(
            env!("CARGO_TARGET_TMPDIR"),
            &format!("dead_frames_e2e-cpart-{}", source.tag()),
        );
        let mut flags = vec!["-O2", "-c", "-fno-exceptions"];
        flags.extend_from_slice(source.flags());
        let Some(obj) = compile(&dir, source.compiler("gcc"), "c_part.o", c_part, &flags) else {
            return;
        };
        let obj = obj.to_str().expect("utf-8 path").to_owned();
        let Some(r) = run("through_c", "g++", source, cpp_main, &[&obj]) else {
            return;
        };
        let deepest = roots(&r).iter().map(depth).max().unwrap_or(0);
        assert!(
            deepest <= 9,
            "{source:?}: recorded nesting {deepest} deep (real: main > c_middle x5 > cb > leaf)"
        );
        let v = report(&r, "functions", &[]);
        assert_calls(
            &r,
            &v,
            &[
                ("main", 1),
                ("c_middle", 5000),
                ("cb", 1000),
                ("after(long)", 1000),
            ],
        );
        assert_inclusive_within_threads(&r, &v);
        assert_clean(&r);
    }
}

#[test]
fn a_function_inlined_into_another_does_not_close_it() {
    // With -finstrument-functions, gcc keeps the probes of a function it
    // inlines: they run in its caller's frame, at the caller's stack
    // pointer. That proves nothing gone (before, `outer` was closed by its
    // inlined helper's first entry and reported with 1 ns).
    let body = r#"
static inline __attribute__((always_inline)) double now_ms(void) { return cpu_ms(); }
NOIPA uint64_t outer(double ms) {
    uint64_t x = 1; double end = now_ms() + ms;
    while (now_ms() < end) for (int i = 0; i < 20000; i++) x = x * 6364136223846793005ULL + 1;
    return x;
}
int main(void) { sink = outer(20.0); printf("done\n"); return 0; }
"#;
    let Some(r) = run("inlined", "gcc", Cyg, body, &["-O2"]) else {
        return;
    };
    let roots = roots(&r);
    let main = roots
        .iter()
        .find(|n| n["function"] == "main")
        .expect("main is a root");
    let outer = child(main, "outer").expect("main > outer");
    let helper = child(outer, "now_ms").expect("outer > now_ms (inlined, with its probes)");
    assert!(child(helper, "cpu_ms").is_some(), "outer > now_ms > cpu_ms");
    let v = report(&r, "functions", &[]);
    let outer_ms = ms(row(&v, "outer"), "elapsed_inclusive_ns");
    assert!(
        outer_ms >= 19.0,
        "outer spins 20 ms of CPU time; lapse says {outer_ms:.3} ms"
    );
    assert_eq!(info_count(&info(&r), "repaired:"), 0);
    assert_clean(&r);
}

#[test]
fn a_context_stack_inside_a_live_frame_closes_nothing() {
    // uftrace's t014_ucontext (#31 item 20): the context runs on an array
    // local to main, so bar's frame lies above foo's. Before, bar's entry
    // took foo (and main, with -finstrument-functions) for gone: bar was a
    // root or main's child, baz a root, and main's exit matched nothing.
    let body = r#"
#include <ucontext.h>
/* (not a tail call: foo's frame stays while the context runs) */
NOIPA int foo(ucontext_t *old, ucontext_t *new) { int r = swapcontext(old, new); sink += r; return r; }
NOIPA int bar(int c) { return c + getpid(); }
NOIPA int baz(int c) { return c % 2; }
int main(int argc, char *argv[]) {
    int n = 10;
    char stack[8192];
    ucontext_t curr, new;
    if (argc > 1) n = atoi(argv[1]);
    getcontext(&new);
    new.uc_link = &curr;
    new.uc_stack.ss_sp = stack;
    new.uc_stack.ss_size = sizeof stack;
    makecontext(&new, (void (*)(void))bar, 1, n);
    foo(&curr, &new);
    n = baz(n);
    printf("done %d\n", n);
    return !(n < 2);
}
"#;
    // (swapcontext and getpid are library calls: not traced from sancov
    // programs, nor with --no-libcalls, when foo's own frame is the barrier)
    let cases = [
        (Cyg, &[][..], &["foo", "swapcontext", "bar", "getpid"][..]),
        (Cyg, &["--no-libcalls"], &["foo", "bar"]),
        (Pg, &[], &["foo", "swapcontext", "bar", "getpid"]),
        (Fentry, &[], &["foo", "swapcontext", "bar", "getpid"]),
        (Sancov, &[], &["foo", "bar"]),
    ];
    for (source, options, path) in cases {
        let Some(r) = run_with("ucontext", "gcc", source, body, &[], options) else {
            return;
        };
        let roots = roots(&r);
        let main = roots.iter().find(|n| n["function"] == "main");
        let main = main.unwrap_or_else(|| panic!("{source:?}: main is a root"));
        let mut at = main;
        for &name in path {
            at = child(at, name).unwrap_or_else(|| {
                panic!("{source:?}: no {name} under {}: {main}", at["function"])
            });
        }
        assert!(child(main, "baz").is_some(), "{source:?}: main > baz");
        for name in ["bar", "baz", "foo", "swapcontext"] {
            assert!(
                roots.iter().all(|n| n["function"] != name),
                "{source:?}: {name} is a root"
            );
        }
        let v = report(&r, "functions", &[]);
        assert_calls(&r, &v, &[("main", 1), ("foo", 1), ("bar", 1), ("baz", 1)]);
        assert_eq!(info_count(&info(&r), "repaired:"), 0, "{source:?}");
        assert_clean(&r);
    }
}

#[test]
fn coroutines_that_switch_back_and_forth_keep_a_bounded_tree() {
    // Two contexts (one on main's stack, one on the heap) switch to each
    // other 300 times through one function: each resumed swapcontext
    // returns past what the other context left on the recorded stack, and
    // the program runs as without lapse.
    let body = r#"
#include <ucontext.h>
static ucontext_t mainc, c1, c2;
NOIPA void yield_to(ucontext_t *from, ucontext_t *to) { sink += swapcontext(from, to); }
NOIPA void f1(void) { for (long i = 0; i < 300; i++) { leaf(i); yield_to(&c1, &c2); } }
NOIPA void f2(void) { for (long i = 0; i < 300; i++) { leaf(-i); yield_to(&c2, &c1); } }
int main(void) {
    char st1[16384];
    char *st2 = malloc(65536);
    getcontext(&c1);
    c1.uc_stack.ss_sp = st1, c1.uc_stack.ss_size = sizeof st1, c1.uc_link = &mainc;
    makecontext(&c1, f1, 0);
    getcontext(&c2);
    c2.uc_stack.ss_sp = st2, c2.uc_stack.ss_size = 65536, c2.uc_link = &c1;
    makecontext(&c2, f2, 0);
    swapcontext(&mainc, &c1);
    printf("sink %lu\n", (unsigned long)sink);
    return 0;
}
"#;
    for source in [Cyg, Pg, Fentry, Sancov] {
        let Some(r) = run("coroutines", "gcc", source, body, &[]) else {
            return;
        };
        let roots = roots(&r);
        let main = roots.iter().find(|n| n["function"] == "main");
        let main = main.unwrap_or_else(|| panic!("{source:?}: main is a root"));
        // main > swapcontext > f1 > yield_to > swapcontext > (f2's calls)
        assert!(depth(main) <= 10, "{source:?}: {} deep", depth(main));
        let v = report(&r, "functions", &[]);
        assert_calls(&r, &v, &[("f1", 1), ("f2", 1), ("leaf", 600)]);
        let i = info(&r);
        for key in ["lost:", "unmatched:", "open calls:"] {
            assert_eq!(info_count(&i, key), 0, "{source:?}: {key}\n{i}");
        }
    }
}
