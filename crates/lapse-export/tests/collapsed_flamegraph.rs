//! Folded stacks parsed back and summed; the flame graph SVG parsed as XML
//! and its frame titles checked against the same numbers.

mod common;

use std::collections::{BTreeMap, HashSet};

use lapse_export::Format;
use quick_xml::events::Event as Xml;
use quick_xml::Reader;

/// Parses folded stacks the way flamegraph.pl does: the count after the last space.
fn parse(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let (stack, n) = line.rsplit_once(' ').expect("stack and count");
        *out.entry(stack.to_owned()).or_default() += n.parse::<u64>().expect("count");
    }
    out
}

/// (exclusive, inclusive) of `name` over folded stacks, inclusive once per stack.
fn totals(stacks: &BTreeMap<String, u64>, name: &str) -> (u64, u64) {
    let mut excl = 0;
    let mut incl = 0;
    for (stack, n) in stacks {
        let frames: Vec<&str> = stack.split(';').collect();
        if frames.last() == Some(&name) {
            excl += n;
        }
        if frames
            .iter()
            .copied()
            .collect::<HashSet<_>>()
            .contains(name)
        {
            incl += n;
        }
    }
    (excl, incl)
}

#[test]
fn instrumentation_paths_weigh_elapsed_exclusive_ns() {
    let file = common::instr_file();
    let text = String::from_utf8(common::export(&file, Format::Collapsed)).unwrap();
    let stacks = parse(&text);
    let us = common::US;
    let expected: BTreeMap<String, u64> = [
        ("main", 40 * us),
        ("main;work", 20 * us),
        ("main;work;work", 10 * us),
        ("main;helper", 10 * us),
        ("helper", 40 * us),
        ("work", 4 * us),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(stacks, expected, "{text}");
    assert_eq!(stacks.values().sum::<u64>(), 124 * us);
    // Per function, the folded stacks give back the report's values.
    assert_eq!(totals(&stacks, "main"), (40 * us, 80 * us));
    assert_eq!(totals(&stacks, "work").0, 34 * us);
    assert_eq!(totals(&stacks, "helper"), (50 * us, 50 * us));
}

#[test]
fn sampling_paths_count_every_kept_sample() {
    let file = common::sample_file();
    let text = String::from_utf8(common::export(&file, Format::Collapsed)).unwrap();
    let stacks = parse(&text);
    assert_eq!(stacks.values().sum::<u64>(), 14, "{text}");
    assert_eq!(stacks["main;hot"], 5);
    assert_eq!(stacks["main;hot;memcpy"], 2);
    assert_eq!(stacks["main;cold;inl"], 2);
    assert_eq!(stacks["main;[app+0x999]"], 1);
    assert_eq!(stacks["[unknown]"], 1);
    assert_eq!(totals(&stacks, "main"), (0, 13));
    assert_eq!(totals(&stacks, "hot"), (5, 7));
    assert_eq!(totals(&stacks, "cold"), (3, 5));
}

/// Frame titles of an inferno SVG: `<title>NAME (N unit, P%)</title>` per frame.
fn svg_titles(svg: &[u8]) -> Vec<String> {
    let mut reader = Reader::from_reader(svg);
    let mut titles = Vec::new();
    let mut in_title = false;
    let mut buf = Vec::new();
    loop {
        match reader.read_event_into(&mut buf).expect("well-formed SVG") {
            Xml::Start(e) if e.name().as_ref() == b"title" => in_title = true,
            Xml::End(e) if e.name().as_ref() == b"title" => in_title = false,
            Xml::Text(t) if in_title => titles.push(t.decode().unwrap().into_owned()),
            Xml::GeneralRef(r) if in_title => {
                // Entities such as &lt; arrive separately; keep them readable.
                if let Some(last) = titles.last_mut() {
                    last.push_str(&format!("&{};", String::from_utf8_lossy(&r)));
                }
            }
            Xml::Eof => break,
            _ => {}
        }
        buf.clear();
    }
    titles
}

#[test]
fn flamegraph_is_svg_with_a_frame_per_path() {
    let file = common::instr_file();
    let svg = common::export(&file, Format::Flamegraph);
    assert!(svg.starts_with(b"<?xml"));
    let titles = svg_titles(&svg);
    let has = |prefix: &str| titles.iter().any(|t| t.starts_with(prefix));
    // Inclusive widths: all 124 µs, main 80 µs, root-level helper 40 µs.
    assert!(has("all (124,000 ns, 100%)"), "{titles:?}");
    assert!(has("main (80,000 ns"), "{titles:?}");
    assert!(has("helper (40,000 ns"), "{titles:?}");
    assert!(has("work (30,000 ns"), "{titles:?}");
    let text = String::from_utf8_lossy(&svg);
    assert!(
        text.contains("a frame&apos;s width is its elapsed inclusive time")
            || text.contains("a frame's width is its elapsed inclusive time"),
        "the subtitle says what widths mean"
    );

    let file = common::sample_file();
    let titles = svg_titles(&common::export(&file, Format::Flamegraph));
    let has = |prefix: &str| titles.iter().any(|t| t.starts_with(prefix));
    assert!(has("all (14 samples, 100%)"), "{titles:?}");
    assert!(has("hot (7 samples"), "{titles:?}");
    assert!(has("inl (2 samples"), "{titles:?}");
}
