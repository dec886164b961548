//! speedscope files validated against speedscope's published file-format
//! schema, then replayed: evented profiles must nest, and the time each
//! frame spends on top must equal the report's exclusive values.

mod common;

use std::collections::HashMap;

use lapse_export::Format;
use serde_json::Value;

/// speedscope's own schema (speedscope 1.25.0, MIT licence, Jamie Wong),
/// the file https://www.speedscope.app/file-format-schema.json serves.
const SCHEMA: &str = include_str!("data/speedscope-file-format-schema.json");

/// Validates against the published schema, then checks the references it
/// cannot express (frame indices inside the frame table).
fn check_schema(doc: &Value) {
    let schema: Value = serde_json::from_str(SCHEMA).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("schema compiles");
    let errors: Vec<String> = validator.iter_errors(doc).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "schema violations: {errors:?}");
    assert_eq!(
        doc["$schema"],
        "https://www.speedscope.app/file-format-schema.json"
    );
    for key in ["shared", "profiles"] {
        assert!(doc.get(key).is_some(), "missing {key}");
    }
    let frames = doc["shared"]["frames"].as_array().expect("shared.frames");
    for f in frames {
        assert!(f["name"].is_string(), "frame without a name: {f}");
    }
    for p in doc["profiles"].as_array().unwrap() {
        for key in ["type", "name", "unit", "startValue", "endValue"] {
            assert!(p.get(key).is_some(), "profile missing {key}");
        }
        let unit = p["unit"].as_str().unwrap();
        assert!([
            "none",
            "nanoseconds",
            "microseconds",
            "milliseconds",
            "seconds",
            "bytes"
        ]
        .contains(&unit));
        match p["type"].as_str().unwrap() {
            "evented" => {
                for e in p["events"].as_array().expect("events") {
                    assert!(e["type"] == "O" || e["type"] == "C");
                    assert!(e["at"].is_number());
                    let i = e["frame"].as_u64().unwrap() as usize;
                    assert!(i < frames.len());
                }
            }
            "sampled" => {
                let samples = p["samples"].as_array().expect("samples");
                let weights = p["weights"].as_array().expect("weights");
                assert_eq!(samples.len(), weights.len());
                for s in samples {
                    for i in s.as_array().unwrap() {
                        assert!((i.as_u64().unwrap() as usize) < frames.len());
                    }
                }
            }
            other => panic!("unknown profile type {other}"),
        }
    }
}

/// Replays evented profiles: nanoseconds each frame name was on top.
fn on_top_times(doc: &Value) -> HashMap<String, u64> {
    let frames = doc["shared"]["frames"].as_array().unwrap();
    let mut on_top: HashMap<String, u64> = HashMap::new();
    for p in doc["profiles"].as_array().unwrap() {
        let mut stack: Vec<u64> = Vec::new();
        let mut last = p["startValue"].as_u64().unwrap();
        for e in p["events"].as_array().unwrap() {
            let at = e["at"].as_u64().unwrap();
            if let Some(&top) = stack.last() {
                let name = frames[top as usize]["name"].as_str().unwrap().to_owned();
                *on_top.entry(name).or_default() += at - last;
            }
            last = at;
            let f = e["frame"].as_u64().unwrap();
            if e["type"] == "O" {
                stack.push(f);
            } else {
                stack.pop();
            }
        }
    }
    on_top
}

#[test]
fn evented_profiles_are_probe_cost_compensated_like_the_report() {
    // 1 µs per probe: every interval between two probes is 1 µs shorter in
    // the report, and so in the timeline, with --compensate (raw, the
    // default: neither).
    let file = common::instr_file_costing(1000.0);
    for raw in [false, true] {
        let a = lapse_analysis::analyze(
            &file,
            &lapse_analysis::Query {
                compensate: !raw,
                ..lapse_export::needs()
            },
        )
        .unwrap();
        let mut out = Vec::new();
        lapse_export::export(&file, &a, Format::Speedscope, &mut out).unwrap();
        let doc: Value = serde_json::from_slice(&out).unwrap();
        check_schema(&doc);
        let on_top = on_top_times(&doc);
        let report = common::report_json(&file, lapse_report::View::Functions, !raw);
        for row in report["rows"].as_array().unwrap() {
            let name = row["function"].as_str().unwrap();
            assert_eq!(
                on_top[name],
                row["elapsed_exclusive_ns"].as_u64().unwrap(),
                "{name} (no compensation: {raw})"
            );
        }
        // main: its exclusive intervals [10,20], [50,60], [70,90] lose 1 µs each.
        let expected = if raw { 40_000 } else { 37_000 };
        assert_eq!(on_top["main"], expected);
    }
}

#[test]
fn evented_profiles_replay_to_the_reported_exclusive_times() {
    let file = common::instr_file();
    let doc: Value = serde_json::from_slice(&common::export(&file, Format::Speedscope)).unwrap();
    check_schema(&doc);
    let frames = doc["shared"]["frames"].as_array().unwrap();
    let profiles = doc["profiles"].as_array().unwrap();
    assert_eq!(profiles.len(), 2);
    assert_eq!(profiles[1]["name"], "worker (pid 1, tid 2)");
    let mut on_top: HashMap<String, u64> = HashMap::new();
    for p in profiles {
        assert_eq!(p["type"], "evented");
        assert_eq!(p["unit"], "nanoseconds");
        let mut stack: Vec<u64> = Vec::new();
        let mut last = p["startValue"].as_u64().unwrap();
        for e in p["events"].as_array().unwrap() {
            let at = e["at"].as_u64().unwrap();
            assert!(at >= last, "events out of order");
            if let Some(&top) = stack.last() {
                let name = frames[top as usize]["name"].as_str().unwrap().to_owned();
                *on_top.entry(name).or_default() += at - last;
            }
            last = at;
            let f = e["frame"].as_u64().unwrap();
            if e["type"] == "O" {
                stack.push(f);
            } else {
                assert_eq!(stack.pop(), Some(f), "C of a frame not on top");
            }
        }
        assert!(stack.is_empty(), "unclosed frames");
        assert!(p["endValue"].as_u64().unwrap() >= last);
    }
    let us = common::US;
    assert_eq!(on_top["main"], 40 * us);
    assert_eq!(on_top["work"], 34 * us);
    assert_eq!(on_top["helper"], 50 * us);
    assert_eq!(frames[0]["file"], "app.c");
}

#[test]
fn sampled_profiles_hold_every_sample_in_time_order() {
    let file = common::sample_file();
    let doc: Value = serde_json::from_slice(&common::export(&file, Format::Speedscope)).unwrap();
    check_schema(&doc);
    let frames = doc["shared"]["frames"].as_array().unwrap();
    let name = |i: &Value| {
        frames[i.as_u64().unwrap() as usize]["name"]
            .as_str()
            .unwrap()
    };
    let profiles = doc["profiles"].as_array().unwrap();
    assert_eq!(profiles.len(), 2);
    let mut total = 0;
    let mut top: HashMap<String, u64> = HashMap::new();
    for p in profiles {
        assert_eq!(p["type"], "sampled");
        // cpu-clock at 1 ms: each sample weighs its period, in nanoseconds.
        assert_eq!(p["unit"], "nanoseconds");
        let weights: u64 = p["weights"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_u64().unwrap())
            .sum();
        assert_eq!(p["endValue"].as_u64().unwrap(), weights);
        total += weights;
        for s in p["samples"].as_array().unwrap() {
            let s = s.as_array().unwrap();
            *top.entry(name(s.last().unwrap()).to_owned()).or_default() += 1;
        }
    }
    assert_eq!(total, 14 * 1_000_000);
    assert_eq!(top["hot"], 5);
    assert_eq!(top["inl"], 2);
    assert_eq!(top["[app+0x999]"], 1);
    let first = profiles[0]["samples"][0].as_array().unwrap();
    let names: Vec<&str> = first.iter().map(name).collect();
    assert_eq!(names, ["main", "hot"]);
}

#[test]
fn the_schema_check_catches_a_broken_file() {
    let file = common::instr_file();
    let mut doc: Value =
        serde_json::from_slice(&common::export(&file, Format::Speedscope)).unwrap();
    doc["profiles"][0]["unit"] = Value::from("furlongs");
    let result = std::panic::catch_unwind(|| check_schema(&doc));
    assert!(result.is_err(), "an unknown unit must fail the schema");
}
