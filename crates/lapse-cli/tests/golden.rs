//! Golden files: every `lapse report` view of a few fixed recordings
//! (`tests/data/`), in table, CSV and JSON, compared with
//! `tests/golden/<recording>/<case>.<format>`.
//!
//! Each case runs twice: on the recording as it is with one analysis thread
//! (`RAYON_NUM_THREADS=1`), and on a copy whose events and samples are cut
//! into tiny chunks with several threads. Both must give the golden output
//! byte for byte (JSON is compared as data, written pretty so a diff reads
//! well). A deliberate change of output is accepted with `LAPSE_BLESS=1`;
//! the commit that does so says which bug fix changed what.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use lapse_data::{DataFile, DataWriter, Record};
use lapse_testkit::{Lapse, WorkDir};

const LAPSE: Lapse = Lapse::new(env!("CARGO_BIN_EXE_lapse"));

/// (case name, arguments after `report FILE`).
type Case = (&'static str, &'static [&'static str]);

const INSTR_CASES: &[Case] = &[
    ("summary", &["--view", "summary"]),
    ("functions", &["--view", "functions"]),
    (
        "functions-sorted",
        &["--view", "functions", "--sort", "calls", "--limit", "4"],
    ),
    // (raw is the default; --no-compensation is kept as a no-op alias)
    (
        "functions-raw",
        &["--view", "functions", "--no-compensation"],
    ),
    (
        "functions-compensated",
        &["--view", "functions", "--compensate"],
    ),
    ("calltree", &["--view", "calltree"]),
    (
        "calltree-threshold",
        &["--view", "calltree", "--threshold", "5"],
    ),
    ("modules", &["--view", "modules"]),
    ("threads", &["--view", "threads"]),
    ("processes", &["--view", "processes"]),
    ("lines", &["--view", "lines"]),
];

const TRACE_EXTRA: &[Case] = &[
    (
        "callers-parse",
        &["--view", "callers", "--function", "parse"],
    ),
    (
        "callees-parse",
        &["--view", "callees", "--function", "parse"],
    ),
    ("callees-main", &["--view", "callees", "--function", "main"]),
    (
        "window",
        &[
            "--view",
            "functions",
            "--from",
            "0.00002",
            "--to",
            "0.00004",
        ],
    ),
    ("tid", &["--view", "functions", "--tid", "2"]),
    ("pid", &["--view", "calltree", "--pid", "7"]),
];

const INSTR_EXTRA: &[Case] = &[
    ("callers-walk", &["--view", "callers", "--function", "walk"]),
    ("callees-main", &["--view", "callees", "--function", "main"]),
    (
        "module-filter",
        &["--view", "functions", "--function", "^w"],
    ),
];

const SAMPLE_CASES: &[Case] = &[
    ("summary", &["--view", "summary"]),
    ("functions", &["--view", "functions"]),
    ("calltree", &["--view", "calltree"]),
    ("callers-hot", &["--view", "callers", "--function", "hot"]),
    (
        "callees-driver",
        &["--view", "callees", "--function", "driver"],
    ),
    ("modules", &["--view", "modules"]),
    ("threads", &["--view", "threads"]),
    ("processes", &["--view", "processes"]),
    ("lines", &["--view", "lines"]),
    ("instructions", &["--view", "instructions", "--limit", "12"]),
    (
        "module-filter",
        &["--view", "functions", "--module", "samplelib"],
    ),
];

const OFF_CPU_CASES: &[Case] = &[
    ("summary", &["--view", "summary"]),
    ("functions", &["--view", "functions"]),
    ("calltree", &["--view", "calltree"]),
    (
        "calltree-threshold",
        &["--view", "calltree", "--threshold", "10"],
    ),
    ("callers-read", &["--view", "callers", "--function", "read"]),
    ("modules", &["--view", "modules"]),
    ("threads", &["--view", "threads"]),
    ("lines", &["--view", "lines"]),
    // Periods are cut at the window's edges.
    (
        "window",
        &["--view", "functions", "--from", "0.05", "--to", "0.1"],
    ),
];

const FORMATS: [&str; 3] = ["table", "csv", "json"];

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn golden_dir(recording: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(recording)
}

/// JSON is kept pretty (keys sorted) so that a changed value shows as one line.
fn normalise(format: &str, text: &str) -> String {
    if format == "json" {
        let v: serde_json::Value = serde_json::from_str(text).expect("report is JSON");
        serde_json::to_string_pretty(&v).expect("pretty JSON") + "\n"
    } else {
        text.to_owned()
    }
}

/// A copy of `src` whose events are cut into chunks of `events` and whose
/// samples into chunks of `samples`: the analysis must not care.
fn rechunk(src: &Path, dst: &Path, events: usize, samples: usize) {
    let f = DataFile::open(src).expect("open recording");
    let mut w = DataWriter::new(std::fs::File::create(dst).expect("create copy")).unwrap();
    let mut put = |r: Record| w.write_record(&r).unwrap();
    put(Record::Session(f.session.clone()));
    f.processes
        .iter()
        .for_each(|p| put(Record::Process(p.clone())));
    f.threads
        .iter()
        .for_each(|t| put(Record::Thread(t.clone())));
    f.modules
        .iter()
        .for_each(|m| put(Record::Module(m.clone())));
    f.mappings
        .iter()
        .for_each(|m| put(Record::Mapping(m.clone())));
    put(Record::Functions(f.functions.clone()));
    put(Record::Frames(f.frames.clone()));
    put(Record::Stacks(f.stacks.clone()));
    let mut blocks: Vec<_> = f.os_events.iter().collect();
    blocks.sort_by_key(|(k, _)| **k);
    for (&lapse_data::ThreadKey { pid, tid, .. }, events) in blocks {
        put(Record::OsEvents(lapse_data::OsEventBlock {
            pid,
            tid,
            serial: 0,
            events: events.clone(),
        }));
    }
    for t in f.all_threads() {
        let mut all = Vec::new();
        let mut buf = Vec::new();
        for c in f.thread_chunks(t.key()) {
            f.read_events(c, &mut buf).expect("events decode");
            all.extend_from_slice(&buf);
        }
        for chunk in all.chunks(events) {
            w.write_events(t.pid, t.tid, chunk).unwrap();
        }
    }
    let mut all = Vec::new();
    let mut buf = Vec::new();
    for c in &f.sample_chunks {
        f.read_samples(c, &mut buf).expect("samples decode");
        all.extend_from_slice(&buf);
    }
    for chunk in all.chunks(samples) {
        w.write_samples(chunk).unwrap();
    }
    for chunk in f.off_cpu.chunks(samples) {
        w.write_record(&Record::OffCpu(chunk.to_vec())).unwrap();
    }
    if let Some(footer) = &f.footer {
        w.write_record(&Record::Footer(footer.clone())).unwrap();
    }
    w.flush().unwrap();
}

/// Runs every case on `file` (as recorded, one thread) and on its rechunked
/// copy (several threads), comparing with or writing the golden files.
fn check(recording: &str, file: &Path, cases: &[Case]) {
    let work = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), &format!("golden-{recording}"));
    let chopped = work.join("chopped.lapse");
    rechunk(file, &chopped, 5, 7);
    let bless = std::env::var_os("LAPSE_BLESS").is_some();
    let dir = golden_dir(recording);
    std::fs::create_dir_all(&dir).unwrap();
    let mut failures = Vec::new();
    for (case, args) in cases {
        for format in FORMATS {
            let golden_path = dir.join(format!("{case}.{format}"));
            let run = |path: &Path, threads: &str| {
                let mut all = vec!["report", path.to_str().unwrap(), "--format", format];
                all.extend_from_slice(args);
                let env = [
                    ("RAYON_NUM_THREADS", threads),
                    ("COLUMNS", "120"),
                    ("NO_COLOR", "1"),
                ];
                let out = LAPSE.with_env(&env).ok(&all);
                // The file name is not part of what is pinned.
                normalise(
                    format,
                    &String::from_utf8(out.stdout).expect("utf-8 output"),
                )
            };
            let one = run(file, "1");
            let many = run(&chopped, "4");
            if format == "table" {
                // Tables fit COLUMNS (120 here).
                let widest = one.lines().map(|l| l.chars().count()).max().unwrap_or(0);
                if widest > 120 {
                    failures.push(format!("{recording}/{case}.table is {widest} wide"));
                }
            }
            if one != many {
                failures.push(format!(
                    "{recording}/{case}.{format}: 1 thread and whole chunks differ from 4 threads and tiny chunks:\n{}",
                    diff(&one, &many)
                ));
                continue;
            }
            if bless {
                std::fs::write(&golden_path, &one).unwrap();
                continue;
            }
            let golden = std::fs::read_to_string(&golden_path).unwrap_or_default();
            if golden != one {
                failures.push(format!(
                    "{recording}/{case}.{format} differs from its golden file (LAPSE_BLESS=1 accepts):\n{}",
                    diff(&golden, &one)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The lines that differ, golden (`-`) against actual (`+`), with line numbers.
fn diff(want: &str, got: &str) -> String {
    let (w, g): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
    let mut out = String::new();
    for i in 0..w.len().max(g.len()) {
        let (a, b) = (w.get(i), g.get(i));
        if a != b {
            if let Some(a) = a {
                out.push_str(&format!("{:4} - {a}\n", i + 1));
            }
            if let Some(b) = b {
                out.push_str(&format!("{:4} + {b}\n", i + 1));
            }
        }
        if out.len() > 4000 {
            out.push_str("...\n");
            break;
        }
    }
    out
}

#[test]
fn tables_fit_a_100_column_terminal_even_with_long_names() {
    // A C++ name of about 800 characters, as real templates produce.
    let long = format!(
        "std::__detail::_Executor<{}>::_M_dfs(_Match_mode, long)",
        "__gnu_cxx::__normal_iterator<char const*, std::__cxx11::basic_string<char>>, ".repeat(9)
    );
    let work = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "golden-width");
    let trace = work.join("long.json");
    std::fs::write(
        &trace,
        format!(
            r#"[{{"ph":"X","name":"main","pid":1,"tid":1,"ts":0,"dur":100}},
               {{"ph":"X","name":{},"pid":1,"tid":1,"ts":10,"dur":50}}]"#,
            serde_json::Value::String(long.clone())
        ),
    )
    .unwrap();
    let file = work.join("long.lapse");
    let out = LAPSE.run([
        OsStr::new("import"),
        trace.as_os_str(),
        OsStr::new("-o"),
        file.as_os_str(),
    ]);
    assert!(out.status.success());
    let files = [
        file,
        data("instr.lapse"),
        data("sample.lapse"),
        data("offcpu.lapse"),
    ];
    for f in &files {
        for (view, _) in lapse_report::View::ALL {
            // (any exit status: the width is what is checked)
            let out = LAPSE.with_env(&[("COLUMNS", "100")]).run([
                "report",
                f.to_str().unwrap(),
                "--view",
                view,
                "--function",
                "main",
            ]);
            let text = String::from_utf8_lossy(&out.stdout);
            let widest = text.lines().map(|l| l.chars().count()).max().unwrap_or(0);
            assert!(
                widest <= 100,
                "{view} of {}: {widest} wide:\n{text}",
                f.display()
            );
        }
    }
}

#[test]
fn imported_trace() {
    let work = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "golden-import");
    let file = work.join("trace.lapse");
    // (run where the trace is, so the header's command does not hold the
    // checkout's path)
    let trace_dir = data("");
    LAPSE.in_dir(&trace_dir).ok([
        OsStr::new("import"),
        OsStr::new("trace.json"),
        OsStr::new("-o"),
        file.as_os_str(),
    ]);
    let cases: Vec<Case> = INSTR_CASES.iter().chain(TRACE_EXTRA).copied().collect();
    check("trace", &file, &cases);
}

#[test]
fn instrumentation_recording() {
    let cases: Vec<Case> = INSTR_CASES.iter().chain(INSTR_EXTRA).copied().collect();
    check("instr", &data("instr.lapse"), &cases);
}

#[test]
fn sampling_recording() {
    check("sample", &data("sample.lapse"), SAMPLE_CASES);
}

#[test]
fn sampling_recording_with_off_cpu() {
    check("offcpu", &data("offcpu.lapse"), OFF_CPU_CASES);
}
