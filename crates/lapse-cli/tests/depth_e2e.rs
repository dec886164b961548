//! No input depth becomes lapse's own recursion depth (SPEC 8): a program
//! that recurses 20,000 deep (fine natively) is recorded, and every report
//! view and export of it works; the call tree prints one short line per
//! level (indentation stops growing), not a triangle of spaces.

use lapse_testkit::{compile, perf_refused, skip, Lapse, WorkDir, EXPORT_FORMATS};

/// (tables as wide as a 100-column terminal)
const LAPSE: Lapse = Lapse::new(env!("CARGO_BIN_EXE_lapse")).with_env(&[("COLUMNS", "100")]);

const DEPTH: usize = 20_000;

const PROGRAM: &str = r#"
#include <stdint.h>
#include <stdio.h>
volatile uint64_t sink;
__attribute__((noinline)) uint64_t dive(int n) {
    uint64_t x = n ? dive(n - 1) : 1;
    __asm__ volatile("" : "+r"(x));
    return x + 1;
}
int main(void) { sink = dive(20000); printf("%llu\n", (unsigned long long)sink); return 0; }
"#;

/// The deepest nesting of `[`/`{` in JSON text, found without recursion.
fn json_depth(text: &str) -> usize {
    let (mut depth, mut max, mut in_string, mut escaped) = (0usize, 0, false, false);
    for c in text.chars() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '[' | '{' => {
                depth += 1;
                max = max.max(depth);
            }
            ']' | '}' => depth = depth.checked_sub(1).expect("balanced JSON"),
            _ => {}
        }
    }
    assert_eq!(depth, 0, "balanced JSON");
    max
}

#[test]
fn a_20000_deep_recursion_reports_and_exports() {
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "depth_e2e");
    let Some(exe) = compile(
        &dir,
        "gcc",
        "deep",
        PROGRAM,
        &["-finstrument-functions", "-O1", "-g"],
    ) else {
        return;
    };
    let out = LAPSE
        .in_dir(&dir)
        .run(["record", "-o", "deep.lapse", exe.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if perf_refused(&stderr) && !dir.join("deep.lapse").exists() {
        return skip(stderr).unwrap_or(());
    }
    assert!(out.status.success(), "{stderr}");
    for view in ["summary", "functions", "calltree", "callers", "callees"] {
        for format in ["table", "csv", "json"] {
            let out = LAPSE.in_dir(&dir).run([
                "report",
                "deep.lapse",
                "--view",
                view,
                "--format",
                format,
                "--function",
                "dive",
                // (every level: a table's calltree hides the deepest,
                // under 0.5 % each, by default)
                "--threshold",
                "0",
            ]);
            assert!(
                out.status.success(),
                "{view} {format}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let text = String::from_utf8_lossy(&out.stdout);
            if format == "json" {
                let d = json_depth(&text);
                if view == "calltree" {
                    // The chain's first and last levels nest (each node an
                    // object holding its children's array), the middle is
                    // one node saying how many levels it stands for.
                    assert!((100..400).contains(&d), "the JSON tree's nesting: {d}");
                    // (deeper than serde_json parses: the text is read)
                    let elided: Vec<&str> = text.split("\"elided\":").skip(1).collect();
                    assert_eq!(elided.len(), 1, "one node stands for the middle");
                    assert!(
                        elided[0].starts_with(&format!("{},", DEPTH + 2 - 2 * 32)),
                        "levels left out"
                    );
                }
            }
            if view == "calltree" && format == "table" {
                // Before: one line per level (and 2 million levels took
                // 40 s and 3 GB); the middle of the chain is one line now.
                let lines = text.lines().count();
                assert!(lines < 100, "a chain's middle is left out: {lines} lines");
                assert!(text.contains(&format!("…{}", DEPTH + 2 - 64)), "{text}");
                let widest = text.lines().map(|l| l.chars().count()).max().unwrap_or(0);
                assert!(widest <= 100, "indentation stops growing: {widest} wide");
                assert!(
                    text.contains(&format!("[{DEPTH}] ")),
                    "deep levels say their depth"
                );
            }
        }
    }
    let calls = LAPSE.in_dir(&dir).run([
        "report",
        "deep.lapse",
        "--view",
        "functions",
        "--format",
        "csv",
    ]);
    let text = String::from_utf8_lossy(&calls.stdout);
    let dive = text
        .lines()
        .find(|l| l.starts_with("dive,"))
        .expect("a dive row");
    let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    let calls_at = header.iter().position(|h| *h == "calls").unwrap();
    assert_eq!(dive.split(',').nth(calls_at), Some("20001"));
    // (every format but html, as before)
    for format in EXPORT_FORMATS.into_iter().filter(|&f| f != "html") {
        let out_name = format!("deep.{format}");
        let out =
            LAPSE
                .in_dir(&dir)
                .run(["export", "deep.lapse", "--format", format, "-o", &out_name]);
        assert!(
            out.status.success(),
            "export {format}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(std::fs::metadata(dir.join(&out_name)).unwrap().len() > 0);
    }
}
