//! End to end: record-time filters (`--filter`, `--exclude`, `--depth`),
//! applied by the runtime, with every probe source and with run-time
//! patching: the rows they leave out are absent, the ones they keep have
//! their calls, and the time of what was left out stays in the caller's
//! exclusive time (checked against the same program recorded whole).

use lapse_testkit::{stderr, Lapse, WorkDir};

mod probe_sources;
use probe_sources::*;

const LAPSE: Lapse = Lapse::new(env!("CARGO_BIN_EXE_lapse"));

const ALL: [Source; 5] = [Cyg, Pg, Fentry, Sancov, Patch];

/// (No tail calls: with the trampoline's probe sources a tail callee
/// follows its caller rather than nesting in it.)
/// `work` burns `ms` of CPU time in its own frame (its calls to cpu_ms,
/// every 20,000 rounds, are a sliver of it).
const PROGRAM: &str = r#"
NOIPA uint64_t work(double ms) {
    uint64_t x = 88172645463325252ULL; double end = cpu_ms() + ms;
    while (cpu_ms() < end) for (int i = 0; i < 20000; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; }
    return x;
}
NOIPA void skipped(void) { leaf(2); sink = work(6.0); }
NOIPA void noise(void) { sink = spin(4.0); }
NOIPA void parent(void) { skipped(); noise(); sink += leaf(0); }
NOIPA void wanted(void) { leaf(1); sink = spin(8.0); }
int main(void) {
    parent();
    wanted();
    printf("done\n");
    return 0;
}
"#;

fn app_excl_ms(v: &serde_json::Value, name: &str) -> f64 {
    ms(row(v, name), "application_exclusive_ns")
}

fn app_incl_ms(v: &serde_json::Value, name: &str) -> f64 {
    ms(row(v, name), "application_inclusive_ns")
}

fn absent(r: &Run, v: &serde_json::Value, names: &[&str]) {
    for name in names {
        assert_eq!(calls(v, name), 0, "{:?}: {name} was left out", r.source);
    }
}

#[test]
fn filter_records_matches_and_their_callees_only() {
    for source in ALL {
        let Some(r) = run_with(
            "filter",
            "gcc",
            source,
            PROGRAM,
            &[],
            &["--filter", "^wanted$"],
        ) else {
            return;
        };
        let v = report(&r, "functions", &[]);
        assert_calls(&r, &v, &[("wanted", 1), ("spin", 1), ("leaf", 1)]);
        assert!(
            calls(&v, "cpu_ms") > 0,
            "{source:?}: wanted's callees' callees"
        );
        absent(&r, &v, &["main", "parent", "skipped", "noise", "work"]);
        let wanted = app_incl_ms(&v, "wanted");
        assert!(
            (7.0..=14.0).contains(&wanted),
            "{source:?}: wanted {wanted:.1} ms of 8"
        );
        let i = info(&r);
        assert!(
            i.contains("record-time filters: --filter ^wanted$"),
            "{source:?}: info says which filters: {i}"
        );
    }
}

#[test]
fn exclude_leaves_the_function_out_and_its_time_in_the_caller() {
    for source in ALL {
        let Some(whole) = run("exclude-whole", "gcc", source, PROGRAM, &[]) else {
            return;
        };
        let Some(r) = run_with(
            "exclude",
            "gcc",
            source,
            PROGRAM,
            &[],
            &["--exclude", "^skipped$"],
        ) else {
            return;
        };
        let v = report(&r, "functions", &[]);
        let w = report(&whole, "functions", &[]);
        absent(&r, &v, &["skipped"]);
        // its callees are recorded, under its caller
        assert_calls(
            &r,
            &v,
            &[("main", 1), ("parent", 1), ("work", 1), ("noise", 1)],
        );
        assert_eq!(calls(&v, "leaf"), 3, "{source:?}: leaf");
        let parent = roots(&r)
            .iter()
            .find_map(|m| child(m, "parent").cloned())
            .expect("main > parent");
        assert!(
            child(&parent, "work").is_some(),
            "{source:?}: skipped's callee work shows under parent"
        );
        // skipped's own time (about nothing here: work does the spinning)
        // is parent's now; work keeps its 6 ms
        let expected = app_excl_ms(&w, "parent") + app_excl_ms(&w, "skipped");
        let got = app_excl_ms(&v, "parent");
        assert!(
            (got - expected).abs() <= 0.5 + 0.25 * expected,
            "{source:?}: parent's exclusive {got:.2} ms, whole recording's parent + skipped {expected:.2} ms"
        );
        let work = app_excl_ms(&v, "work");
        assert!(
            (5.0..=10.0).contains(&work),
            "{source:?}: work {work:.1} ms of 6"
        );
        if source == Patch {
            // an excluded function is not patched at all
            let note = info(&r)
                .lines()
                .find(|l| l.contains("run-time patching:"))
                .map(str::to_owned)
                .unwrap_or_default();
            assert!(
                note.contains("not selected") && note.ends_with("skipped"),
                "{source:?}: {note}"
            );
        }
    }
}

#[test]
fn an_excluded_function_holding_the_time_gives_it_to_its_caller() {
    // `work` does the spinning: left out, its 6 ms are skipped's own time
    for source in ALL {
        let Some(r) = run_with(
            "exclude-work",
            "gcc",
            source,
            PROGRAM,
            &[],
            &["--exclude", "^work$"],
        ) else {
            return;
        };
        let v = report(&r, "functions", &[]);
        absent(&r, &v, &["work"]);
        let skipped = app_excl_ms(&v, "skipped");
        assert!(
            (5.0..=10.0).contains(&skipped),
            "{source:?}: skipped's exclusive {skipped:.1} ms holds work's 6 ms"
        );
        // work's calls of cpu_ms are recorded, skipped's callees now
        let callees = report(&r, "callees", &["--function", "^skipped$"]);
        let names: Vec<&str> = callees["callees"]
            .as_array()
            .map(|c| c.iter().filter_map(|r| r["function"].as_str()).collect())
            .unwrap_or_default();
        assert!(
            names.contains(&"cpu_ms"),
            "{source:?}: skipped's callees {names:?}"
        );
    }
}

#[test]
fn depth_keeps_the_top_levels_and_their_time() {
    for source in ALL {
        let Some(r) = run_with(
            "depth",
            "gcc",
            source,
            PROGRAM,
            &[],
            &["--filter", "^parent$", "--depth", "2"],
        ) else {
            return;
        };
        let v = report(&r, "functions", &[]);
        // (parent's leaf is at depth 2, skipped's at 3)
        assert_calls(
            &r,
            &v,
            &[("parent", 1), ("skipped", 1), ("noise", 1), ("leaf", 1)],
        );
        absent(&r, &v, &["main", "wanted", "work", "spin", "cpu_ms"]);
        // what is below the depth is its caller's own time now
        let noise = app_excl_ms(&v, "noise");
        assert!(
            (3.5..=8.0).contains(&noise),
            "{source:?}: noise {noise:.1} ms of 4"
        );
        let skipped = app_excl_ms(&v, "skipped");
        assert!(
            (5.0..=10.0).contains(&skipped),
            "{source:?}: skipped {skipped:.1} ms of 6"
        );
        let deepest = roots(&r).iter().map(depth).max().unwrap_or(0);
        assert_eq!(deepest, 2, "{source:?}: recorded nesting");

        let Some(r) = run_with("depth1", "gcc", source, PROGRAM, &[], &["--depth", "1"]) else {
            return;
        };
        let v = report(&r, "functions", &[]);
        assert_calls(&r, &v, &[("main", 1)]);
        absent(&r, &v, &["parent", "wanted", "spin", "work"]);
        let main = app_excl_ms(&v, "main");
        assert!(
            (16.0..=30.0).contains(&main),
            "{source:?}: main {main:.1} ms of 18"
        );
    }
}

#[test]
fn filters_stay_balanced_across_longjmp() {
    // 300 rounds: main > jumper(3) > ... > jumper(0), which longjmps back
    // to main; then main > level1 > level2 > level3. With --depth 3 the
    // jumpers' frames must not count once the jump left them.
    let body = r#"
static jmp_buf jb;
NOIPA void jumper(int d) { leaf(d); if (d == 0) longjmp(jb, 1); jumper(d - 1); leaf(d); }
NOIPA void level3(int r) { leaf(r); }
NOIPA void level2(int r) { level3(r); leaf(r); }
NOIPA void level1(int r) { level2(r); leaf(r); }
int main(void) {
    long n = 0;
    for (int r = 0; r < 300; r++) { if (setjmp(jb) == 0) jumper(3); else n++; level1(r); }
    printf("%ld\n", n);
    return 0;
}
"#;
    for source in [Cyg, Pg, Fentry, Sancov] {
        let Some(r) = run_with("longjmp-depth", "gcc", source, body, &[], &["--depth", "3"]) else {
            return;
        };
        let v = report(&r, "functions", &[]);
        assert_calls(
            &r,
            &v,
            &[
                ("main", 1),
                ("jumper", 600),
                ("level1", 300),
                ("level2", 300),
            ],
        );
        absent(&r, &v, &["level3"]);
        // --filter: after the jump left the match, main's calls are outside
        let Some(r) = run_with(
            "longjmp-filter",
            "gcc",
            source,
            body,
            &[],
            &["--filter", "^jumper$"],
        ) else {
            return;
        };
        let v = report(&r, "functions", &[]);
        assert_calls(&r, &v, &[("jumper", 1200), ("leaf", 1200)]);
        absent(&r, &v, &["main", "level1", "level2", "level3"]);
    }
}

#[test]
fn bad_filters_are_one_line_errors() {
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "bad-filters");
    for (args, says) in [
        (&["--filter", "fib("][..], "--filter fib("),
        (&["--exclude", "[a"][..], "--exclude [a"),
        (&["--depth", "0"][..], "--depth 0"),
        (&["--depth", "65"][..], "--depth 65"),
        (&["--min-time", "soon"][..], "soon"),
        (
            &["--filter", "x", "--method", "sample"][..],
            "for instrumentation",
        ),
    ] {
        let mut all = vec!["record"];
        all.extend_from_slice(args);
        all.extend(["-o", "x.lapse", "--", "true"]);
        let out = LAPSE.in_dir(&dir).run(&all);
        let err = stderr(&out);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{args:?}: one line: {err}"
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn min_time_drops_short_calls_counts_them_and_keeps_their_time() {
    let body = r#"
NOIPA uint64_t work(double ms) {
    uint64_t x = 88172645463325252ULL; double end = cpu_ms() + ms;
    while (cpu_ms() < end) for (int i = 0; i < 20000; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; }
    return x;
}
NOIPA void burst(void) { for (int i = 0; i < 5000; i++) leaf(i); sink += leaf(0); }
NOIPA void slow(void) { sink = work(2.0); }
int main(void) {
    burst();
    for (int i = 0; i < 10; i++) slow();
    printf("done\n");
    return 0;
}
"#;
    for source in ALL {
        let Some(whole) = run("min-time-whole", "gcc", source, body, &[]) else {
            return;
        };
        let Some(r) = run_with(
            "min-time",
            "gcc",
            source,
            body,
            &[],
            &["--min-time", "20us"],
        ) else {
            return;
        };
        let v = report(&r, "functions", &[]);
        let w = report(&whole, "functions", &[]);
        let dropped = |name: &str| row(&v, name)["dropped_calls"].as_u64().unwrap_or(u64::MAX);
        // every leaf call is far below 20 us, and burst (5,001 of them)
        // above; a leaf call the kernel preempted (or whose buffer was
        // handed over in the middle) is longer, and kept: a few at most
        let leaf = calls(&v, "leaf");
        assert!(leaf <= 3, "{source:?}: {leaf} leaf calls kept");
        assert_eq!(leaf + dropped("leaf"), 5001, "{source:?}: leaf's calls");
        assert_calls(
            &r,
            &v,
            &[("main", 1), ("burst", 1), ("slow", 10), ("work", 10)],
        );
        assert_eq!(dropped("burst"), 0, "{source:?}: burst dropped");
        assert_eq!(dropped("work"), 0, "{source:?}: work dropped");
        // cpu_ms calls are short: dropped, save one preempted mid-call
        let cpu = calls(&v, "cpu_ms");
        assert!(
            dropped("cpu_ms") >= 9 * cpu.max(1),
            "{source:?}: cpu_ms kept {cpu}, dropped {}",
            dropped("cpu_ms")
        );
        // what was dropped is its caller's own time now
        let expected = ms(row(&w, "burst"), "application_inclusive_ns");
        let got = ms(row(&v, "burst"), "application_exclusive_ns");
        assert!(
            got >= 0.5 * expected && got <= 2.0 * expected + 0.2,
            "{source:?}: burst's exclusive {got:.3} ms, its inclusive recorded whole {expected:.3} ms"
        );
        let work = ms(row(&v, "work"), "application_exclusive_ns");
        assert!(
            (18.0..=40.0).contains(&work),
            "{source:?}: work {work:.1} ms of 20"
        );
        let i = info(&r);
        assert!(
            info_count(&i, "dropped:") >= dropped("leaf") + dropped("cpu_ms"),
            "{source:?}: {i}"
        );
        // a recording without --min-time has no such column
        assert!(row(&w, "leaf").get("dropped_calls").is_none(), "{source:?}");
    }
}

#[test]
fn filters_stay_balanced_across_exceptions() {
    // 200 rounds: main > thrower(3) > ... > thrower(0), which throws; main
    // catches, then calls after(). Once the catch left the match, after()
    // is outside it.
    let body = r#"
NOIPA void thrower(int d) { leaf(d); if (d == 0) throw d; thrower(d - 1); sink += leaf(d); }
NOIPA long after(long x) { return leaf(x) + 1; }
int main() {
    long n = 0;
    for (int r = 0; r < 200; r++) { try { thrower(3); } catch (int v) { n += v + 1; } n += after(r) & 1; }
    printf("%ld\n", n);
    return 0;
}
"#;
    for source in [Cyg, Pg, Fentry, Sancov] {
        let Some(r) = run_with(
            "throw-filter",
            "g++",
            source,
            body,
            &[],
            &["--filter", "^thrower"],
        ) else {
            return;
        };
        let v = report(&r, "functions", &[]);
        assert_calls(&r, &v, &[("thrower(int)", 800)]);
        absent(&r, &v, &["main", "after(long)"]);
        // leaf: the 800 calls before each throw, inside the match
        assert_eq!(calls(&v, "leaf(long)"), 800, "{source:?}: leaf");
    }
}

#[test]
fn a_filter_matching_nothing_says_so() {
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "filter-nothing");
    let src = format!(
        "{}\nint main(void) {{ leaf(1); printf(\"x\\n\"); return 0; }}\n",
        probe_sources::PRELUDE
    );
    let Some(exe) = lapse_testkit::compile(
        &dir,
        "gcc",
        "nothing",
        &src,
        &["-O2", "-finstrument-functions"],
    ) else {
        return;
    };
    let data = dir.join("out.lapse");
    let Some(out) =
        LAPSE
            .in_dir(&dir)
            .record(&["--filter", "^no_such_function$"], &data, &exe, &[])
    else {
        return;
    };
    let err = stderr(&out);
    assert!(!out.status.success(), "nothing recorded is an error: {err}");
    assert!(err.contains("matches no function of"), "{err}");
    assert!(err.contains("record-time filters"), "{err}");
    assert!(!data.exists(), "no data file");
}

#[test]
fn an_execd_program_gets_depth_but_not_the_regexes() {
    // parent > hop, then exec ./child: main > leaf. The regexes were
    // matched against parent only; --depth holds for both.
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "filter-exec");
    let prelude = probe_sources::PRELUDE;
    let child = format!(
        "{prelude}\nint main(void) {{ sink += leaf(1); printf(\"child\\n\"); return 0; }}\n"
    );
    let parent = format!(
        "{prelude}\nNOIPA void hop(void) {{ sink += leaf(2); }}\n\
         int main(void) {{ hop(); fflush(stdout); execl(\"./child\", \"child\", (char *)0); return 9; }}\n"
    );
    let flags = ["-O2", "-finstrument-functions"];
    let Some(_) = lapse_testkit::compile(&dir, "gcc", "child", &child, &flags) else {
        return;
    };
    let Some(exe) = lapse_testkit::compile(&dir, "gcc", "parent", &parent, &flags) else {
        return;
    };
    let data = dir.join("out.lapse");
    let options = ["--filter", "^hop$", "--depth", "1"];
    let Some(out) = LAPSE.in_dir(&dir).record(&options, &data, &exe, &[]) else {
        return;
    };
    assert!(out.status.success(), "{}", stderr(&out));
    let v = LAPSE.in_dir(&dir).report(&data, "functions", &[]);
    let calls_in = |name: &str, module: &str| {
        row_in(&v, name, module).map_or(0, |r| r["calls"].as_u64().unwrap_or(0))
    };
    assert_eq!(calls_in("hop", "parent"), 1, "{v:#}");
    assert_eq!(
        calls_in("main", "parent"),
        0,
        "parent's main is outside the match"
    );
    assert_eq!(calls_in("leaf", "parent"), 0, "below the depth");
    assert_eq!(
        calls_in("main", "child"),
        1,
        "the child is not filtered by name"
    );
    assert_eq!(calls_in("leaf", "child"), 0, "but its depth holds");
}
