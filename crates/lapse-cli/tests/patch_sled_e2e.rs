//! End to end: programs built with NOP sleds for patching
//! (`-fpatchable-function-entry=5`, `-pg -mfentry -mnop-mcount
//! -mrecord-mcount`) have no probes until lapse patches the sleds: `--method
//! auto` samples them, `--method instrument` jumps from each sled to its
//! stub and counts every call as the `-finstrument-functions` build does.

mod probe_sources;
use probe_sources::*;

const BODY: &str = r#"
NOIPA long tiny(long x) { return x + 1; }
NOIPA long small(long x) { long r = x * 3; __asm__ volatile("" : "+r"(r)); return tiny(r) + 1; }
NOIPA long rec(int d) { if (d == 0) return 1; long r = rec(d - 1); __asm__ volatile("" : "+r"(r)); return r + 1; }
NOIPA void *worker(void *a) { long s = 0; for (long i = 0; i < 3000; i++) s += leaf(i); return (void *)(s + (long)a); }
int main(void) {
    long s = 0;
    for (long i = 0; i < 50000; i++) s += small(i);
    s += rec(25);
    pthread_t t[2];
    for (long i = 0; i < 2; i++) pthread_create(&t[i], 0, worker, (void *)i);
    for (int i = 0; i < 2; i++) { void *r; pthread_join(t[i], &r); s += (long)r; }
    printf("%ld\n", s);
    return 0;
}
"#;

const EXPECTED: &[(&str, u64)] = &[
    ("main", 1),
    ("small", 50_000),
    ("tiny", 50_000),
    ("rec", 26),
    ("worker", 2),
    ("leaf", 6000),
];

#[test]
fn nop_sled_builds_are_sampled_by_auto_and_patched_at_their_sleds() {
    let Some(cyg) = run("sled", "gcc", Cyg, BODY, &["-O1"]) else {
        return;
    };
    let v = report(&cyg, "functions", &[]);
    assert_calls(&cyg, &v, EXPECTED);
    let sleds: [(&str, &[&str]); 2] = [
        ("pfe", &["-O1", "-fpatchable-function-entry=5"]),
        (
            "nop-mcount",
            // (-mnop-mcount is not implemented for position-independent code)
            &[
                "-O1",
                "-fno-pie",
                "-no-pie",
                "-pg",
                "-mfentry",
                "-mnop-mcount",
                "-mrecord-mcount",
            ],
        ),
    ];
    for (name, flags) in sleds {
        let dir = lapse_testkit::WorkDir::new(env!("CARGO_TARGET_TMPDIR"), &format!("sled-{name}"));
        let mut all = vec!["-O2", "-g", "-pthread"];
        all.extend_from_slice(flags);
        let Some(exe) =
            lapse_testkit::compile(&dir, "gcc", name, &format!("{PRELUDE}\n{BODY}"), &all)
        else {
            return;
        };
        // auto: no probes, so sampling
        let data = dir.join("auto.lapse");
        if record_like_native(&dir, &exe, &[], &[], &data, name).is_none() {
            return;
        }
        let sampled = Run {
            dir,
            data,
            source: Patch,
        };
        let v = report(&sampled, "summary", &[]);
        assert_eq!(v["method"], "sampling", "{name}: --method auto");
        // instrument: patched at the sleds, every call counted
        let Some(r) = run(&format!("sled-{name}"), "gcc", Patch, BODY, flags) else {
            return;
        };
        let v = report(&r, "functions", &[]);
        assert_calls(&r, &v, EXPECTED);
        let module = format!("sled-{name}-patch");
        let sources = &v["session"]["probe_sources"];
        assert_eq!(
            sources[module.as_str()],
            "patched-nop-sled",
            "{name}: {sources}"
        );
        let i = info(&r);
        assert!(
            i.contains("planned at the NOP sleds it was built with"),
            "{name}: {i}"
        );
    }
}
