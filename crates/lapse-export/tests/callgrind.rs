//! Callgrind files parsed as KCachegrind reads them: self costs per `fn=`
//! block, call costs after each `calls=` line; they must be the report's
//! exclusive values and the callees' inclusive values per caller. When
//! valgrind's `callgrind_annotate` is installed it must read the file too.

mod common;

use std::collections::HashMap;
use std::process::Command;

use lapse_export::Format;

#[derive(Debug, Default)]
struct Parsed {
    events: Vec<String>,
    summary: Vec<u64>,
    own: HashMap<String, Vec<u64>>,
    /// (caller, callee) → (calls, inclusive costs)
    calls: HashMap<(String, String), (u64, Vec<u64>)>,
}

fn parse(text: &str) -> Parsed {
    let mut p = Parsed::default();
    let mut current = String::new();
    let mut callee: Option<String> = None;
    let mut pending: Option<(String, u64)> = None;
    let numbers =
        |s: &str| -> Vec<u64> { s.split_whitespace().map(|x| x.parse().unwrap()).collect() };
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("events: ") {
            p.events = v.split_whitespace().map(str::to_owned).collect();
        } else if let Some(v) = line.strip_prefix("summary: ") {
            p.summary = numbers(v);
        } else if let Some(v) = line.strip_prefix("fn=") {
            current = v.to_owned();
        } else if let Some(v) = line.strip_prefix("cfn=") {
            callee = Some(v.to_owned());
        } else if let Some(v) = line.strip_prefix("calls=") {
            let count = v.split_whitespace().next().unwrap().parse().unwrap();
            pending = Some((callee.take().expect("cfn before calls"), count));
        } else if line.starts_with(|c: char| c.is_ascii_digit()) {
            let mut v = numbers(line);
            v.remove(0); // the position (line number)
            assert_eq!(v.len(), p.events.len(), "{line}");
            match pending.take() {
                Some((to, count)) => {
                    p.calls.insert((current.clone(), to), (count, v));
                }
                None => {
                    let own = p.own.entry(current.clone()).or_insert(vec![0; v.len()]);
                    for (a, b) in own.iter_mut().zip(v) {
                        *a += b;
                    }
                }
            }
        }
    }
    p
}

#[test]
fn instrumentation_costs_are_the_four_times() {
    let file = common::instr_file();
    let text = String::from_utf8(common::export(&file, Format::Callgrind)).unwrap();
    assert!(text.starts_with("# callgrind format\n"));
    let p = parse(&text);
    assert_eq!(p.events, ["Elapsed", "Application"]);
    let us = common::US;
    assert_eq!(p.own["main"], [40 * us, 40 * us]);
    // work's recursion is split by level: work [20,50] and the open call on
    // thread 2 are level 1 (20 + 4 µs of their own), the inner work [30,40]
    // is work'2; together they are work's 34 µs.
    assert_eq!(p.own["work"], [24 * us, 22 * us]);
    assert_eq!(p.own["work'2"], [10 * us, 10 * us]);
    assert_eq!(p.own["helper"], [50 * us, 50 * us]);
    assert_eq!(p.summary, [124 * us, 122 * us]);
    let key = |a: &str, b: &str| (a.to_owned(), b.to_owned());
    assert_eq!(p.calls[&key("main", "work")], (1, vec![30 * us, 28 * us]));
    assert_eq!(p.calls[&key("main", "helper")], (1, vec![10 * us, 10 * us]));
    assert_eq!(p.calls[&key("work", "work'2")], (1, vec![10 * us, 10 * us]));
    // The threads' outermost calls come from [root]: main (80 µs), helper
    // (40 µs on thread 2) and work (4 µs, open on thread 2).
    assert_eq!(p.calls[&key("[root]", "main")].1[0], 80 * us);
    assert_eq!(p.calls[&key("[root]", "helper")].1[0], 40 * us);
    assert_eq!(p.calls[&key("[root]", "work")].1[0], 4 * us);
    assert_eq!(p.calls.len(), 6, "{:?}", p.calls);
    // work's inclusive cost as a consumer adds it up is its real 34 µs.
    let work_incl = p.own["work"][0] + p.calls[&key("work", "work'2")].1[0];
    assert_eq!(work_incl, 34 * us);
    // main's inclusive cost as KCachegrind adds it up: self + calls.
    let main_incl = p.own["main"][0]
        + p.calls[&key("main", "work")].1[0]
        + p.calls[&key("main", "helper")].1[0];
    assert_eq!(main_incl, 80 * us);
}

#[test]
fn sampling_costs_are_samples() {
    let file = common::sample_file();
    let text = String::from_utf8(common::export(&file, Format::Callgrind)).unwrap();
    let p = parse(&text);
    assert_eq!(p.events, ["Samples"]);
    assert_eq!(p.own["hot"], [5]);
    assert_eq!(p.own["cold"], [3]);
    assert_eq!(p.own["inl"], [2]);
    assert_eq!(p.own["main"], [0]);
    // Every sample: the unresolved address and the one with no stack too.
    assert_eq!(p.summary, [14]);
    assert_eq!(p.own["[unknown]"], [1]);
    assert_eq!(p.own["[app+0x999]"], [1]);
    let key = |a: &str, b: &str| (a.to_owned(), b.to_owned());
    assert_eq!(p.calls[&key("main", "hot")].1, [7]);
    assert_eq!(p.calls[&key("main", "cold")].1, [5]);
    assert_eq!(p.calls[&key("cold", "inl")].1, [2]);
    assert_eq!(p.calls[&key("hot", "memcpy")].1, [2]);
}

#[test]
fn callgrind_annotate_reads_it_when_installed() {
    if lapse_testkit::tool("callgrind_annotate").is_none() {
        return;
    }
    let file = common::instr_file();
    let dir = std::env::temp_dir().join(format!("lapse-callgrind-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("callgrind.out.lapse");
    std::fs::write(&path, common::export(&file, Format::Callgrind)).unwrap();
    let out = Command::new("callgrind_annotate")
        .arg("--inclusive=yes")
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Totals (124 µs elapsed, 122 µs application) and main's inclusive 80 µs.
    assert!(
        text.contains("124,000") && text.contains("122,000"),
        "{text}"
    );
    // Recursion counted once: work's inclusive time is its 34 µs (30 under
    // main, 4 on thread 2), not more; helper's is 50 (10 + 40).
    let line = |name: &str| {
        text.lines()
            .find(|l| {
                l.ends_with(&format!("app.c:{name} [/usr/bin/app]"))
                    || l.ends_with(&format!("app.c:{name} [/lib/libc.so.6]"))
            })
            .unwrap_or_else(|| panic!("no {name} in {text}"))
            .to_owned()
    };
    assert!(
        line("work").trim_start().starts_with("34,000 "),
        "{}",
        line("work")
    );
    assert!(
        line("helper").trim_start().starts_with("50,000 "),
        "{}",
        line("helper")
    );
    assert!(
        text.lines()
            .any(|l| l.contains("80,000") && l.contains("main")),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
