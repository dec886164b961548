//! pprof exports gunzipped and decoded back into the profile.proto structs;
//! flat and cum values computed the way pprof computes them must be the
//! report's exclusive and inclusive values.

mod common;

use std::collections::{HashMap, HashSet};
use std::io::Read;

use lapse_export::pprof_proto::Profile;
use lapse_export::Format;
use prost::Message;

fn decode(bytes: &[u8]) -> Profile {
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut raw)
        .expect("gzip");
    Profile::decode(raw.as_slice()).expect("profile.proto message")
}

/// Checks every reference resolves, then returns (flat, cum) per function
/// name for sample value `index`, as `go tool pprof -top` would list them.
fn flat_cum(p: &Profile, index: usize) -> HashMap<String, (i64, i64)> {
    assert_eq!(p.string_table[0], "");
    let s = |i: i64| p.string_table[i as usize].clone();
    let functions: HashMap<u64, String> = p.function.iter().map(|f| (f.id, s(f.name))).collect();
    let mappings: HashSet<u64> = p.mapping.iter().map(|m| m.id).collect();
    let locations: HashMap<u64, Vec<String>> = p
        .location
        .iter()
        .map(|l| {
            assert!(l.mapping_id == 0 || mappings.contains(&l.mapping_id));
            let names = l
                .line
                .iter()
                .map(|line| functions[&line.function_id].clone())
                .collect();
            (l.id, names)
        })
        .collect();
    let mut out: HashMap<String, (i64, i64)> = HashMap::new();
    for sample in &p.sample {
        assert_eq!(sample.value.len(), p.sample_type.len());
        let v = sample.value[index];
        let frames: Vec<&Vec<String>> =
            sample.location_id.iter().map(|id| &locations[id]).collect();
        if let Some(leaf) = frames.first().and_then(|l| l.first()) {
            out.entry(leaf.clone()).or_default().0 += v;
        }
        let distinct: HashSet<&String> = frames.iter().flat_map(|l| l.iter()).collect();
        for f in distinct {
            out.entry(f.clone()).or_default().1 += v;
        }
    }
    out
}

fn types(p: &Profile) -> Vec<String> {
    p.sample_type
        .iter()
        .map(|t| {
            format!(
                "{}/{}",
                p.string_table[t.r#type as usize], p.string_table[t.unit as usize]
            )
        })
        .collect()
}

#[test]
fn instrumentation_flat_and_cum_are_exclusive_and_inclusive_times() {
    let file = common::instr_file();
    let p = decode(&common::export(&file, Format::Pprof));
    assert_eq!(
        types(&p),
        [
            "calls/count",
            "elapsed/nanoseconds",
            "application/nanoseconds"
        ]
    );
    assert_eq!(p.string_table[p.default_sample_type as usize], "elapsed");
    let us = common::US as i64;
    let elapsed = flat_cum(&p, 1);
    assert_eq!(elapsed["main"], (40 * us, 80 * us));
    assert_eq!(elapsed["work"], (34 * us, 34 * us));
    assert_eq!(elapsed["helper"], (50 * us, 50 * us));
    let application = flat_cum(&p, 2);
    assert_eq!(application["main"], (40 * us, 78 * us));
    assert_eq!(application["work"], (32 * us, 32 * us));
    let calls = flat_cum(&p, 0);
    assert_eq!(calls["work"].0, 3);
    assert_eq!(calls["helper"].0, 2);
    // Functions carry their files and lines; modules their mappings.
    let main = p
        .function
        .iter()
        .find(|f| p.string_table[f.name as usize] == "main")
        .unwrap();
    assert_eq!(p.string_table[main.filename as usize], "app.c");
    assert_eq!(main.start_line, 10);
    let files: HashSet<&str> = p
        .mapping
        .iter()
        .map(|m| p.string_table[m.filename as usize].as_str())
        .collect();
    assert_eq!(files, HashSet::from(["/usr/bin/app", "/lib/libc.so.6"]));
    // The profiled program's mapping comes first: pprof shows it as "File:".
    assert_eq!(
        p.string_table[p.mapping[0].filename as usize],
        "/usr/bin/app"
    );
    let app = p
        .mapping
        .iter()
        .find(|m| p.string_table[m.filename as usize] == "/usr/bin/app")
        .unwrap();
    assert_eq!(app.memory_start, 0x55_0000_0000);
    let main_loc = p
        .location
        .iter()
        .find(|l| l.line[0].function_id == main.id)
        .unwrap();
    assert_eq!(main_loc.address, 0x55_0000_0000 + 0x1100);
    assert_eq!(p.duration_nanos, 100 * us);
}

#[test]
fn sampling_counts_samples_with_inline_frames_as_lines() {
    let file = common::sample_file();
    let p = decode(&common::export(&file, Format::Pprof));
    assert_eq!(types(&p), ["samples/count", "cpu/nanoseconds"]);
    assert_eq!(p.period, 1_000_000);
    let samples = flat_cum(&p, 0);
    let total: i64 = p.sample.iter().map(|s| s.value[0]).sum();
    assert_eq!(total, 14);
    assert_eq!(samples["hot"], (5, 7));
    assert_eq!(samples["cold"], (3, 5));
    assert_eq!(samples["inl"], (2, 2));
    assert_eq!(samples["main"], (0, 13));
    assert_eq!(samples["[unknown]"], (1, 1));
    let cpu = flat_cum(&p, 1);
    assert_eq!(cpu["hot"].0, 5_000_000);
    // The inline location: inl first, then the function it was inlined into.
    let inline = p.location.iter().find(|l| l.line.len() == 2).unwrap();
    let names: Vec<&str> = inline
        .line
        .iter()
        .map(|l| {
            let f = p.function.iter().find(|f| f.id == l.function_id).unwrap();
            p.string_table[f.name as usize].as_str()
        })
        .collect();
    assert_eq!(names, ["inl", "cold"]);
    // A function known only as inlined code has the file its position names.
    let inl = p
        .function
        .iter()
        .find(|f| p.string_table[f.name as usize] == "inl")
        .unwrap();
    assert_eq!(p.string_table[inl.filename as usize], "inl.h");
    assert_eq!(
        p.string_table[p.mapping[0].filename as usize],
        "/usr/bin/app"
    );
    // Thread labels.
    let tid = p.string_table.iter().position(|s| s == "tid").unwrap() as i64;
    let tids: HashSet<i64> = p
        .sample
        .iter()
        .flat_map(|s| s.label.iter().filter(|l| l.key == tid).map(|l| l.num))
        .collect();
    assert_eq!(tids, HashSet::from([1, 2]));
}

/// `go tool pprof -top` lines: flat, flat%, sum%, cum, cum%, name.
fn go_top(path: &std::path::Path, sample_index: &str) -> Option<HashMap<String, (i64, i64)>> {
    let out = std::process::Command::new("go")
        .args(["tool", "pprof", "-top", "-unit=ns", "-nodecount=1000"])
        .arg(format!("-sample_index={sample_index}"))
        .arg(path)
        .output()
        .ok()?;
    assert!(
        out.status.success(),
        "go tool pprof: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ns = |s: &str| s.trim_end_matches("ns").parse::<i64>().ok();
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let (flat, cum) = (ns(f.first()?)?, ns(f.get(3)?)?);
                Some((f.get(5)?.to_string(), (flat, cum)))
            })
            .collect(),
    )
}

#[test]
fn go_tool_pprof_reads_it_when_installed() {
    if lapse_testkit::tool("go").is_none() {
        return;
    }
    let file = common::instr_file();
    let dir = std::env::temp_dir().join(format!("lapse-pprof-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("instr.pb.gz");
    std::fs::write(&path, common::export(&file, Format::Pprof)).unwrap();
    let us = common::US as i64;
    let elapsed = go_top(&path, "elapsed").expect("go tool pprof runs");
    assert_eq!(elapsed["main"], (40 * us, 80 * us), "{elapsed:?}");
    assert_eq!(elapsed["helper"], (50 * us, 50 * us));
    let application = go_top(&path, "application").expect("go tool pprof runs");
    assert_eq!(application["main"], (40 * us, 78 * us), "{application:?}");
    // pprof names the profile after its first mapping: the program.
    let sampled = dir.join("sample.pb.gz");
    std::fs::write(
        &sampled,
        common::export(&common::sample_file(), Format::Pprof),
    )
    .unwrap();
    let out = std::process::Command::new("go")
        .args(["tool", "pprof", "-top"])
        .arg(&sampled)
        .output()
        .expect("go tool pprof runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().any(|l| l.trim() == "File: app"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
