//! Off-CPU time (`record --off-cpu`) in the exports: the sampling recording
//! of `common` plus three periods off the CPU, whose values a person can
//! check by hand: main>hot waits 3 ms (thread 1), main>cold>inl 2 ms
//! (thread 2), and 1 ms with no stack (thread 1). Samples stand for 1 ms.

mod common;

use std::collections::BTreeMap;
use std::io::Read;

use lapse_data::{DataFile, OffCpuPeriod, StackId};
use lapse_export::{export_with, ExportOptions, Format, SampleWeight};
use prost::Message;

const MS: u64 = 1_000_000;

fn file() -> DataFile {
    let period = |tid: u32, from_us: u64, ms: u64, stack: Option<u32>| OffCpuPeriod {
        pid: 1,
        tid,
        serial: 0,
        from: common::at(from_us),
        to: common::at(from_us + ms * 1000),
        stack: stack.map(StackId),
        preempted: false,
    };
    common::sample_file_with(&[
        period(1, 200, 3, Some(1)),
        period(2, 300, 2, Some(5)),
        period(1, 5000, 1, None),
    ])
}

fn export(file: &DataFile, format: Format, weight: SampleWeight) -> Vec<u8> {
    let a = common::analysis(file);
    let mut out = Vec::new();
    export_with(
        file,
        &a,
        format,
        ExportOptions {
            weight,
            ..ExportOptions::default()
        },
        &mut out,
    )
    .unwrap();
    out
}

fn folded(file: &DataFile, weight: SampleWeight) -> BTreeMap<String, u64> {
    let text = String::from_utf8(export(file, Format::Collapsed, weight)).unwrap();
    text.lines()
        .map(|l| {
            let (stack, n) = l.rsplit_once(' ').expect("stack and count");
            (stack.to_owned(), n.parse().expect("count"))
        })
        .collect()
}

#[test]
fn collapsed_stacks_weigh_cpu_off_cpu_or_both() {
    let f = file();
    // The default is unchanged: samples.
    let cpu = folded(&f, SampleWeight::Cpu);
    assert_eq!(cpu.values().sum::<u64>(), 14);
    assert_eq!(cpu["main;hot"], 5);
    let off = folded(&f, SampleWeight::OffCpu);
    let want: BTreeMap<String, u64> = [
        ("main;hot", 3 * MS),
        ("main;cold;inl", 2 * MS),
        ("[unknown]", MS),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(off, want);
    // Both: nanoseconds; the waiting under [off-cpu], the running on the path.
    let both = folded(&f, SampleWeight::Both);
    assert_eq!(both.values().sum::<u64>(), 14 * MS + 6 * MS);
    assert_eq!(both["main;hot"], 5 * MS);
    assert_eq!(both["main;hot;[off-cpu]"], 3 * MS);
    assert_eq!(both["main;cold;inl;[off-cpu]"], 2 * MS);
    assert_eq!(both["[unknown];[off-cpu]"], MS);
    let svg = String::from_utf8(export(&f, Format::Flamegraph, SampleWeight::Both)).unwrap();
    assert!(
        svg.contains("[off-cpu]") && svg.contains(" ns"),
        "{svg:.300}"
    );
    // The waiting is drawn cold, apart from the CPU frames' warm colours:
    // every [off-cpu] frame and only those.
    let cold = "fill=\"rgb(80,130,220)\"";
    let frames: Vec<&str> = svg.split("<g>").skip(1).collect();
    let off: Vec<&&str> = frames
        .iter()
        .filter(|g| g.contains("<title>[off-cpu]"))
        .collect();
    assert_eq!(off.len(), 3, "{svg:.2000}");
    assert!(off.iter().all(|g| g.contains(cold)), "{svg:.2000}");
    assert_eq!(svg.matches(cold).count(), off.len(), "{svg:.2000}");
}

#[test]
fn a_weight_other_than_cpu_needs_off_cpu_time() {
    let f = common::sample_file();
    let a = common::analysis(&f);
    for weight in [SampleWeight::OffCpu, SampleWeight::Both] {
        let err = export_with(
            &f,
            &a,
            Format::Collapsed,
            ExportOptions {
                weight,
                ..ExportOptions::default()
            },
            &mut Vec::new(),
        )
        .expect_err("no off-CPU time");
        assert!(err.to_string().contains("--off-cpu"), "{err}");
    }
}

#[test]
fn pprof_has_an_off_cpu_sample_type() {
    let f = file();
    let gz = export(&f, Format::Pprof, SampleWeight::Cpu);
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_end(&mut raw)
        .unwrap();
    let p = lapse_export::pprof_proto::Profile::decode(&raw[..]).unwrap();
    let s = |i: i64| p.string_table[i as usize].as_str();
    let types: Vec<(&str, &str)> = p
        .sample_type
        .iter()
        .map(|t| (s(t.r#type), s(t.unit)))
        .collect();
    assert_eq!(
        types,
        [
            ("samples", "count"),
            ("cpu", "nanoseconds"),
            ("off_cpu", "nanoseconds")
        ]
    );
    assert_eq!(s(p.default_sample_type), "cpu");
    let sum = |i: usize| p.sample.iter().map(|x| x.value[i]).sum::<i64>();
    assert_eq!(
        (sum(0), sum(1), sum(2)),
        (14, 14 * MS as i64, 6 * MS as i64)
    );
}

#[test]
fn callgrind_has_an_off_cpu_event() {
    let f = file();
    let text = String::from_utf8(export(&f, Format::Callgrind, SampleWeight::Cpu)).unwrap();
    assert!(text.contains("events: Samples OffCPU\n"), "{text}");
    assert!(
        text.contains(&format!("summary: 14 {}\n", 6 * MS)),
        "{text}"
    );
    let plain =
        String::from_utf8(common::export(&common::sample_file(), Format::Callgrind)).unwrap();
    assert!(plain.contains("events: Samples\n"), "{plain}");
}

#[test]
fn speedscope_shows_wall_clock_time_with_both() {
    let f = file();
    let doc: serde_json::Value =
        serde_json::from_slice(&export(&f, Format::Speedscope, SampleWeight::Both)).unwrap();
    let ends: Vec<u64> = doc["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            assert_eq!(p["unit"], "nanoseconds");
            let weights: u64 = p["weights"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w.as_u64().unwrap())
                .sum();
            assert_eq!(p["endValue"].as_u64(), Some(weights));
            weights
        })
        .collect();
    // Thread 1: 9 samples and 4 ms off the CPU; thread 2: 5 samples and 2 ms.
    assert_eq!(ends, [9 * MS + 4 * MS, 5 * MS + 2 * MS]);
    let names: Vec<&str> = doc["shared"]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"[off-cpu]"), "{names:?}");
    // Off-CPU only: the periods, in time order.
    let doc: serde_json::Value =
        serde_json::from_slice(&export(&f, Format::Speedscope, SampleWeight::OffCpu)).unwrap();
    let weights: Vec<Vec<u64>> = doc["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            p["weights"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w.as_u64().unwrap())
                .collect()
        })
        .collect();
    assert_eq!(weights, [vec![3 * MS, MS], vec![2 * MS]]);
}
