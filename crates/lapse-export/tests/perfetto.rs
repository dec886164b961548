//! Perfetto traces decoded by `protoc` against the published field numbers
//! (`tests/data/perfetto_trace_subset.proto`): every packet must decode
//! with no unknown field, slices must nest per thread track, and their
//! durations must be the report's times.

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::process::{Command, Stdio};

use lapse_export::Format;

/// `protoc --decode=perfetto.protos.Trace` of `bytes`, or `None` (a skip)
/// without protoc.
fn decode(bytes: &[u8]) -> Option<String> {
    lapse_testkit::tool("protoc")?;
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");
    let mut child = Command::new("protoc")
        .arg(format!("--proto_path={data}"))
        .arg("--decode=perfetto.protos.Trace")
        .arg("perfetto_trace_subset.proto")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run protoc");
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "protoc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).unwrap())
}

/// The decoded packets as (timestamp, type, track, name) events, and the
/// interned names by iid.
fn events(text: &str) -> Vec<(u64, String, u64, Option<String>)> {
    let mut names: HashMap<u64, String> = HashMap::new();
    let mut out = Vec::new();
    let (mut ts, mut ty, mut track, mut name_iid) = (0, String::new(), 0, None);
    let (mut iid, mut in_names, mut depth) = (0, false, 0);
    for line in text.lines().map(str::trim) {
        let value = |l: &str| {
            l.split_once(": ")
                .map(|(_, v)| v.trim_matches('"').to_owned())
        };
        if line.ends_with('{') {
            depth += 1;
            in_names = line == "event_names {";
        } else if line == "}" {
            depth -= 1;
            // The end of a packet: its event, with names interned by it.
            if depth == 0 && !ty.is_empty() {
                let name = name_iid.map(|i| names[&i].clone());
                out.push((ts, std::mem::take(&mut ty), track, name));
            }
            if depth == 0 {
                (ts, track, name_iid) = (0, 0, None);
            }
        } else if line.starts_with("timestamp:") {
            ts = value(line).unwrap().parse().unwrap();
        } else if line.starts_with("type:") {
            ty = value(line).unwrap();
        } else if line.starts_with("track_uuid:") {
            track = value(line).unwrap().parse().unwrap();
        } else if line.starts_with("name_iid:") {
            name_iid = Some(value(line).unwrap().parse::<u64>().unwrap());
        } else if in_names && line.starts_with("iid:") {
            iid = value(line).unwrap().parse().unwrap();
        } else if in_names && line.starts_with("name:") {
            names.insert(iid, value(line).unwrap());
        }
    }
    out
}

#[test]
fn instrumentation_decodes_with_nested_slices_of_the_reported_lengths() {
    let file = common::instr_file();
    let bytes = common::export(&file, Format::Perfetto);
    let Some(text) = decode(&bytes) else { return };
    // Everything lapse wrote is a declared field.
    for line in text.lines() {
        let first = line.trim_start().chars().next();
        assert!(
            !first.is_some_and(|c| c.is_ascii_digit()),
            "unknown field: {line}"
        );
    }
    assert!(text.contains("pid: 1") && text.contains("thread_name: \"worker\""));
    // Per track, slices nest; each function's slices add up to its
    // inclusive time in the report (once per outermost call).
    let mut open: HashMap<u64, Vec<(u64, String)>> = HashMap::new();
    let mut inclusive: HashMap<String, u64> = HashMap::new();
    for (ts, ty, track, name) in events(&text) {
        match ty.as_str() {
            "TYPE_SLICE_BEGIN" => open.entry(track).or_default().push((ts, name.unwrap())),
            "TYPE_SLICE_END" => {
                let stack = open.get_mut(&track).expect("an end has a begin");
                let (from, name) = stack.pop().expect("an end has a begin");
                if !stack.iter().any(|(_, n)| *n == name) {
                    *inclusive.entry(name).or_default() += ts - from;
                }
            }
            other => panic!("unexpected event type {other}"),
        }
    }
    assert!(
        open.values().all(Vec::is_empty),
        "every slice ended: {open:?}"
    );
    let us = common::US;
    assert_eq!(inclusive["main"], 80 * us);
    assert_eq!(inclusive["work"], 34 * us);
    assert_eq!(inclusive["helper"], 50 * us);
    assert_eq!(
        inclusive["off-CPU"],
        2 * us,
        "the off-CPU period, on its own track"
    );
}

#[test]
fn sampling_decodes_one_instant_per_sample() {
    let file = common::sample_file();
    let Some(text) = decode(&common::export(&file, Format::Perfetto)) else {
        return;
    };
    let ev = events(&text);
    assert_eq!(ev.len(), 14);
    assert!(ev.iter().all(|e| e.1 == "TYPE_INSTANT"));
    let hot = ev.iter().filter(|e| e.3.as_deref() == Some("hot")).count();
    assert_eq!(hot, 5);
}

#[test]
fn smaller_than_the_chrome_trace() {
    let file = common::instr_file();
    let perfetto = common::export(&file, Format::Perfetto).len();
    let chrome = common::export(&file, Format::Chrome).len();
    assert!(
        perfetto * 3 < chrome,
        "{perfetto} bytes against Chrome's {chrome}"
    );
}
