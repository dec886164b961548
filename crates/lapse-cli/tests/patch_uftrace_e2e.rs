//! End to end: run-time patching against uftrace's own (`uftrace record
//! -P .`), on the same `-O1 -g` binary built without any profiling flag.
//! Every function of the program that uftrace counts, and every library
//! function the program calls, lapse counts the same number of times, and lapse counts every function the source keeps out of
//! line. (uftrace leaves some functions alone that lapse patches, such as
//! ones shorter than its jump plus what it needs to move: those are lapse's
//! alone, and the test names them.) Skips when uftrace is not installed.

use std::collections::BTreeMap;
use std::process::Command;

use lapse_testkit::{compile, skip, WorkDir};

mod probe_sources;
use probe_sources::*;

const BODY: &str = r#"
static volatile long g;
__attribute__((noinline)) long leaf2(long x) { g += x; return x + 1; }
__attribute__((noinline)) long mid(long x) { long s = 0; for (int i = 0; i < 3; i++) s += leaf2(x + i); return s; }
__attribute__((noinline)) long rec(int d) { if (d <= 0) return 1; return rec(d - 1) + leaf2(d); }
static long helper(long x) { return x * 2; } /* inlined: no row for either tool */
__attribute__((noinline)) int cmp(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }
__attribute__((noinline)) double fp(double a) { return a * 1.5 + g; }
__attribute__((noinline)) void *worker(void *a) { long s = 0; for (long i = 0; i < 500; i++) s += mid(i); return (void *)(s + (long)a); }
int main(void) {
    long s = 0;
    for (int i = 0; i < 1000; i++) s += mid(i) + helper(i);
    s += rec(50);
    double d = 1; for (int i = 0; i < 300; i++) d = fp(d) / 1.4;
    int v[100]; for (int i = 0; i < 100; i++) v[i] = (i * 37) % 100;
    qsort(v, 100, sizeof v[0], cmp);
    pthread_t t; pthread_create(&t, 0, worker, 0); void *r; pthread_join(t, &r);
    printf("%ld %d %.3f %ld\n", s, v[99], d, (long)r);
    return 0;
}
"#;

/// `uftrace report -f call`'s rows: function name -> calls.
fn uftrace_calls(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (n, name) = l.trim().split_once(char::is_whitespace)?;
            Some((name.trim().to_owned(), n.parse().ok()?))
        })
        .collect()
}

#[test]
fn uftrace_parser_reads_its_call_report() {
    let text = "       Calls  Function\n  ==========  ====================\n           1  main\n        3050  leaf\n           1  linux:schedule (pre-empted)\n";
    let got = uftrace_calls(text);
    assert_eq!(got["main"], 1);
    assert_eq!(got["leaf"], 3050);
    assert_eq!(got.len(), 3);
}

#[test]
fn every_function_uftrace_counts_lapse_counts_the_same() {
    compare();
}

/// (`None`: skipped)
fn compare() -> Option<()> {
    if Command::new("uftrace").arg("--version").output().is_err() {
        return skip("uftrace is not installed");
    }
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "patch-uftrace");
    let src = format!("{PRELUDE}\n{BODY}");
    let exe = compile(&dir, "gcc", "prog", &src, &["-O1", "-g", "-pthread"])?;
    let traced = Command::new("uftrace")
        .args(["record", "-d", "uftrace.data", "-P", "."])
        .arg(&exe)
        .current_dir(&dir)
        .output()
        .expect("run uftrace");
    if !traced.status.success() {
        return skip(format!(
            "uftrace record failed here: {}",
            String::from_utf8_lossy(&traced.stderr)
        ));
    }
    let out = Command::new("uftrace")
        .args(["report", "--no-pager", "-d", "uftrace.data", "-f", "call"])
        .current_dir(&dir)
        .output()
        .expect("run uftrace report");
    let theirs = uftrace_calls(&String::from_utf8_lossy(&out.stdout));
    let data = dir.join("out.lapse");
    record_like_native(&dir, &exe, &[], &["--method", "instrument"], &data, "prog")?;
    let r = Run {
        dir,
        data,
        source: Patch,
    };
    let v = report(&r, "functions", &[]);
    // (the program's functions, and the library functions it calls)
    let ours: BTreeMap<String, u64> = rows(&v)
        .iter()
        .map(|row| {
            (
                row["function"].as_str().unwrap_or("").to_owned(),
                row["calls"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    // What the source keeps out of line, with the calls it makes.
    let expected = [
        ("main", 1),
        ("mid", 1500),
        ("leaf2", 4550),
        ("rec", 51),
        ("cmp", 0),
        ("fp", 300),
        ("worker", 1),
    ];
    for (name, n) in expected {
        let got = ours.get(name).copied();
        assert!(got.is_some(), "{name} has no row: {ours:?}");
        if n > 0 {
            assert_eq!(got, Some(n), "calls of {name}");
        }
    }
    assert!(!ours.contains_key("helper"), "inlined");
    let mut compared = 0;
    for (name, n) in &ours {
        if let Some(u) = theirs.get(name) {
            assert_eq!(n, u, "calls of {name}: lapse {n}, uftrace {u}");
            compared += 1;
        }
    }
    // the program's six, and pthread_create, pthread_join, qsort, printf
    assert!(compared >= 10, "lapse {ours:?}, uftrace {theirs:?}");
    // uftrace counts nothing of the program that lapse does not
    for name in theirs.keys() {
        let of_program = [
            "main", "mid", "leaf2", "rec", "cmp", "fp", "worker", "spin", "leaf", "cpu_ms",
        ];
        if of_program.contains(&name.as_str()) {
            assert!(
                ours.contains_key(name),
                "uftrace counts {name}, lapse does not"
            );
        }
    }
    Some(())
}
