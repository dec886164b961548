//! Inputs that are not files to read (issue #13, item 15) and the error line
//! a user sees for them (item 16): `report`, `info` and `import` refuse a
//! FIFO, a directory or a device at once with one line and a non-zero exit,
//! and an I/O or JSON error names its cause once. Also `lapse recover` of
//! the spills the fuzzer found neither panics nor hangs.
//!
//! Every run has a deadline, so a regression that blocks (opening a FIFO
//! waits for a writer) fails the test instead of hanging the suite.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use lapse_testkit::{Lapse, WorkDir};

/// (plain output: no colours)
const LAPSE: Lapse = Lapse::new(env!("CARGO_BIN_EXE_lapse")).with_env(&[("NO_COLOR", "1")]);

/// How long a command may take before the test calls it a hang.
const DEADLINE: Duration = Duration::from_secs(30);

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(rc, 0, "mkfifo {}", path.display());
}

/// Fails unless `out` is a failure with exactly one line on stderr holding
/// `needle`, no panic, and nothing on stdout.
#[track_caller]
fn one_line_error(out: &Output, needle: &str) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "succeeded: {err}");
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.starts_with("lapse: error: "), "{err}");
    assert!(err.contains(needle), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    err
}

#[test]
fn a_fifo_is_refused_not_waited_on() {
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "bad-input-fifo");
    mkfifo(&dir.join("pipe"));
    for args in [
        &["report", "pipe"][..],
        &["report", "pipe", "--view", "functions"],
        &["info", "pipe"],
        &["import", "pipe", "-o", "out.data"],
        &["export", "pipe", "--format", "collapsed", "-o", "out.txt"],
    ] {
        let out = LAPSE.in_dir(&dir).run_in_time(args, DEADLINE);
        one_line_error(&out, "pipe: is a FIFO (named pipe), not a regular file");
    }
    assert!(!dir.join("out.data").exists());
}

#[test]
fn directories_and_devices_are_refused() {
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "bad-input-special");
    std::fs::create_dir(dir.join("sub")).unwrap();
    for cmd in ["report", "info", "import"] {
        let out = LAPSE.in_dir(&dir).run_in_time([cmd, "sub"], DEADLINE);
        one_line_error(&out, "sub: is a directory, not a regular file");
        let out = LAPSE.in_dir(&dir).run_in_time([cmd, "/dev/zero"], DEADLINE);
        one_line_error(&out, "/dev/zero: is a character device, not a regular file");
    }
}

#[test]
fn a_cause_is_said_once() {
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "bad-input-cause");
    let once = |err: &str, cause: &str| {
        assert_eq!(err.matches(cause).count(), 1, "{err}");
    };
    for args in [
        &["info", "missing.data"][..],
        &["report", "missing.data"],
        &["import", "missing.json"],
    ] {
        let err = one_line_error(&LAPSE.in_dir(&dir).run_in_time(args, DEADLINE), "missing.");
        once(&err, "No such file or directory");
    }
    std::fs::write(dir.join("broken.json"), "{\"traceEvents\": [").unwrap();
    let err = one_line_error(
        &LAPSE
            .in_dir(&dir)
            .run_in_time(["import", "broken.json"], DEADLINE),
        "not valid JSON",
    );
    once(&err, "EOF while parsing");
}

#[test]
fn values_that_would_be_changed_or_select_nothing_are_refused() {
    // Before: -F 0 and -F above the kernel's limit were clamped, --period 0
    // became 1, --duration with a command was ignored, and --from nan or
    // inf, a --from after --to, and --threshold inf gave empty or full
    // reports without a word.
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "bad-input-values");
    std::fs::write(dir.join("rec.data"), recording()).unwrap();
    std::fs::write(dir.join("keep.data"), "what the user had").unwrap();
    let limit: Option<u64> = std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .ok()
        .and_then(|s| s.trim().parse().ok());
    let above = limit.map(|l| (l + 1).to_string());
    let record = |extra: &[&str]| {
        let mut args = vec!["record", "-o", "keep.data"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "/bin/true"]);
        args.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let owned = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut cases = vec![
        (record(&["-F", "0"]), "-F 0".to_owned()),
        (
            record(&["--method", "sample", "--period", "0"]),
            "--period 0".into(),
        ),
        (
            owned(&["record", "-o", "keep.data", "--pid", "1", "--duration", "0"]),
            "more than 0".into(),
        ),
        (
            owned(&[
                "record",
                "-o",
                "keep.data",
                "--pid",
                "1",
                "--duration",
                "nan",
            ]),
            "not a finite number".into(),
        ),
        // (1e30 panicked; 1e19 overflowed the deadline into an instant,
        // empty recording)
        (
            owned(&[
                "record",
                "-o",
                "keep.data",
                "--pid",
                "1",
                "--duration",
                "1e30",
            ]),
            "at most".into(),
        ),
        (
            owned(&[
                "record",
                "-o",
                "keep.data",
                "--pid",
                "1",
                "--duration",
                "1e19",
            ]),
            "at most".into(),
        ),
        (
            owned(&["report", "rec.data", "--from", "nan"]),
            "nan is not a finite number".into(),
        ),
        (
            owned(&["report", "rec.data", "--to", "inf"]),
            "inf is not a finite number".into(),
        ),
        (
            owned(&["report", "rec.data", "--from", "2", "--to", "1"]),
            "--from 2 is after --to 1".into(),
        ),
        (
            owned(&[
                "report",
                "rec.data",
                "--view",
                "calltree",
                "--threshold",
                "inf",
            ]),
            "inf".into(),
        ),
        (owned(&["report", "rec.data", "--limit", "-1"]), "-1".into()),
        // (an empty table, silently, before)
        (
            owned(&["report", "rec.data", "--tid", "999999"]),
            "holds no thread 999999".into(),
        ),
        (
            owned(&["report", "rec.data", "--pid", "999999"]),
            "holds no process 999999".into(),
        ),
        // (a file here that is not on PATH: "command not found" before)
        (
            owned(&["record", "-o", "keep.data", "--", "keep.data"]),
            "give ./keep.data".into(),
        ),
        (
            owned(&["diff", "rec.data", "rec.data", "--threshold", "NaN"]),
            "NaN".into(),
        ),
    ];
    if let (Some(above), Some(limit)) = (&above, limit) {
        let said = format!("at most {limit} times a second");
        cases.push((record(&["--method", "sample", "-F", above]), said));
    }
    for (args, needle) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = LAPSE.in_dir(&dir).run_in_time(&args, DEADLINE);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "{args:?} succeeded: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("lapse: error: "), "{args:?}: {err}");
        assert!(err.contains(needle.as_str()), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("keep.data")).unwrap(),
        "what the user had"
    );
}

#[test]
fn a_target_that_cannot_run_is_refused_before_anything_is_written() {
    // Before: "could not execute the target", then a data file of 0 samples
    // and "target exited with status 127".
    use std::os::unix::fs::PermissionsExt;
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "bad-input-target");
    std::fs::write(dir.join("plain.c"), "int main(void) { return 0; }\n").unwrap();
    std::fs::write(dir.join("text"), "echo hello\n").unwrap();
    std::fs::set_permissions(dir.join("text"), std::fs::Permissions::from_mode(0o755)).unwrap();
    for (target, needle) in [
        ("./plain.c", "cannot run ./plain.c: it is not executable"),
        (
            "./text",
            "cannot run ./text: it is neither a program (ELF) nor a script",
        ),
    ] {
        for method in ["auto", "sample", "instrument"] {
            let out = LAPSE.in_dir(&dir).run_in_time(
                ["record", "--method", method, "-o", "out.data", "--", target],
                DEADLINE,
            );
            one_line_error(&out, needle);
            assert!(!dir.join("out.data").exists(), "{target} {method}");
        }
    }
}

/// The session record of an instrumentation recording of `./app`.
fn header(tsc: Option<lapse_data::TscCalibration>) -> lapse_data::SessionHeader {
    lapse_data::SessionHeader {
        tsc,
        ..lapse_data::SessionHeader::example(lapse_data::Method::Instrumentation)
    }
}

/// A small instrumentation recording with a tick calibration (1 tick = 1 ns).
fn recording() -> Vec<u8> {
    use lapse_data::*;
    let mut w = DataWriter::new(Vec::new()).unwrap();
    let tsc = TscCalibration {
        ticks_per_sec: 1e9,
        ref_ticks: 0,
        ref_ns: 0,
    };
    w.write_record(&Record::Session(header(Some(tsc)))).unwrap();
    w.write_record(&Record::Footer(Footer::default())).unwrap();
    w.into_inner()
}

/// One spilled datagram (`u32` length, then the runtime's message): header
/// fields as in `lapse_rt::protocol`, then `(address, ticks, is_exit)` events.
fn datagram(
    kind: u16,
    pid: u32,
    tid: u32,
    abcd: (u64, u64, u32),
    events: &[(u64, u64, bool)],
) -> Vec<u8> {
    let (a, b, c) = abcd;
    let mut m = Vec::new();
    m.extend_from_slice(&0x3153_504c_u32.to_ne_bytes());
    m.extend_from_slice(&kind.to_ne_bytes());
    m.extend_from_slice(&0u16.to_ne_bytes());
    m.extend_from_slice(&pid.to_ne_bytes());
    m.extend_from_slice(&tid.to_ne_bytes());
    m.extend_from_slice(&a.to_ne_bytes());
    m.extend_from_slice(&b.to_ne_bytes());
    let c = if kind == 2 { events.len() as u32 } else { c };
    m.extend_from_slice(&c.to_ne_bytes());
    m.extend_from_slice(&c.to_ne_bytes()); // d: parent tid for CHILD, unused otherwise
    for &(f, ticks, exit) in events {
        m.extend_from_slice(&f.to_ne_bytes());
        m.extend_from_slice(&((ticks << 1) | u64::from(exit)).to_ne_bytes());
    }
    let mut out = (m.len() as u32).to_ne_bytes().to_vec();
    out.extend(m);
    out
}

/// Found by the `recover` fuzz target (fuzz/fuzz_targets/recover.rs). Each
/// spill must give a report or one error line, not a panic or a hang.
#[test]
fn recover_of_a_crafted_spill_neither_panics_nor_hangs() {
    const EVENTS: u16 = 2;
    const CHILD: u16 = 4;
    let call = |t: u64| [(0x1000, t, false), (0x1000, t + 10, true)];
    let spills = [
        // Event indices that claim 2^63 lost events on each of two threads:
        // the lost count overflows (threads.rs, `lost_events += lost`).
        [
            datagram(EVENTS, 1, 1, (1 << 63, 0, 0), &call(100)),
            datagram(EVENTS, 1, 2, (1 << 63, 0, 0), &call(100)),
        ]
        .concat(),
        // A hand-over time whose events start before the thread's previous
        // ones: the cut ends before it begins (stalls.rs, `to - from`).
        [
            datagram(EVENTS, 1, 1, (0, 0, 0), &call(1000)),
            datagram(EVENTS, 1, 1, (2, 500, 0), &call(10)),
        ]
        .concat(),
        // Two processes each other's parent: naming them loops for ever
        // (recover.rs, `command_of`).
        [
            datagram(CHILD, 5, 5, (0, 100, 6), &[]),
            datagram(CHILD, 6, 6, (0, 100, 5), &[]),
            datagram(EVENTS, 5, 5, (0, 0, 0), &call(200)),
        ]
        .concat(),
    ];
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "bad-input-spill");
    let mut faults = Vec::new();
    for (i, spill) in spills.iter().enumerate() {
        std::fs::write(dir.join("r.data"), recording()).unwrap();
        std::fs::write(dir.join("r.data.spill"), spill).unwrap();
        match LAPSE
            .in_dir(&dir)
            .run_within(["recover", "r.data"], Duration::from_secs(10))
        {
            None => faults.push(format!("spill {i}: still running after 10 s")),
            Some(out) => {
                let err = String::from_utf8_lossy(&out.stderr);
                if err.contains("panicked") || err.trim_end().lines().count() != 1 {
                    faults.push(format!("spill {i}: {err}"));
                }
            }
        }
    }
    assert!(faults.is_empty(), "{}", faults.join("\n"));
}

/// The fixed recording with its event chunks' layout flag flipped (the
/// chunk header's flags are not under the checksum): every chunk is read in
/// the wrong layout.
#[test]
fn event_chunks_read_in_the_wrong_layout_are_refused_not_taken_for_calls() {
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "bad-input-layout");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/instr.lapse");
    let mut bytes = std::fs::read(fixture).unwrap();
    let (mut pos, mut flipped) = (16, 0);
    while pos + 16 <= bytes.len() {
        let stored = u32::from_le_bytes(bytes[pos + 4..pos + 8].try_into().unwrap()) as usize;
        if bytes[pos] == 2 {
            bytes[pos + 1] ^= 2; // FLAG_COLUMNS
            flipped += 1;
        }
        pos += 16 + stored;
    }
    assert!(flipped > 0);
    std::fs::write(dir.join("flipped.lapse"), &bytes).unwrap();
    let out = LAPSE
        .in_dir(&dir)
        .run_in_time(["report", "flipped.lapse"], DEADLINE);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!("{flipped} chunks do not decode")),
        "{err}"
    );
    // no call of the recording's functions is made up from the bytes
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(!table.contains("main"), "{table}");
    let info = LAPSE
        .in_dir(&dir)
        .run_in_time(["info", "flipped.lapse"], DEADLINE);
    let text = String::from_utf8_lossy(&info.stdout);
    assert!(
        text.contains(&format!("invalid:     {flipped} events or chunks skipped")),
        "{text}"
    );
}

/// A well-formed file built to be slow: one thread `n` calls deep in
/// `deep`, then `n` unwinds and `n` exits of `absent` (a function with no
/// frame open), then the `n` exits of `deep`.
fn deep_stack_then_strays(n: u64) -> Vec<u8> {
    use lapse_data::*;
    let mut w = DataWriter::new(Vec::new()).unwrap();
    w.write_record(&Record::Session(header(None))).unwrap();
    w.write_record(&Record::Module(ModuleInfo {
        id: ModuleId(0),
        path: "/crafted".into(),
        build_id: None,
    }))
    .unwrap();
    let function = |id, name: &str| FunctionInfo {
        id: FunctionId(id),
        module: ModuleId(0),
        address: 0x1000 + u64::from(id) * 16,
        name: name.into(),
        source_file: None,
        line: None,
    };
    w.write_record(&Record::Functions(vec![
        function(0, "deep"),
        function(1, "absent"),
    ]))
    .unwrap();
    let kinds = [
        (EventKind::Enter, 0),
        (EventKind::Unwind, 1),
        (EventKind::Exit, 1),
        (EventKind::Exit, 0),
    ];
    let mut ts = 0;
    let mut batch = Vec::with_capacity(16_384);
    for (kind, f) in kinds {
        for _ in 0..n {
            ts += 1;
            batch.push(Event {
                ts: Timestamp::from_nanos(ts),
                kind,
                function: FunctionId(f),
            });
            if batch.len() == batch.capacity() {
                w.write_events(1, 1, &batch).unwrap();
                batch.clear();
            }
        }
    }
    w.write_events(1, 1, &batch).unwrap();
    w.write_record(&Record::Thread(ThreadInfo {
        pid: 1,
        tid: 1,
        serial: 0,
        name: "crafted".into(),
        start: Some(Timestamp::from_nanos(0)),
        end: Some(Timestamp::from_nanos(ts + 1)),
    }))
    .unwrap();
    w.write_record(&Record::Footer(Footer {
        events: 4 * n,
        ..Footer::default()
    }))
    .unwrap();
    w.into_inner()
}

/// Item 11 ("no input makes lapse hang"): exits and unwinds of a function
/// with no open frame, under a deep stack, each searched the whole stack in
/// the report and in the timeline exports: 400,000 of each under 400,000
/// frames took minutes. Now the stack counts each function's open frames.
#[test]
fn strays_under_a_deep_stack_are_dropped_without_a_search() {
    const N: u64 = 400_000;
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "bad-input-deep-strays");
    std::fs::write(dir.join("deep.lapse"), deep_stack_then_strays(N)).unwrap();
    let info = LAPSE
        .in_dir(&dir)
        .run_in_time(["info", "deep.lapse"], DEADLINE);
    let text = String::from_utf8_lossy(&info.stdout);
    assert!(info.status.success(), "{text}");
    assert!(
        text.contains(&format!("unmatched:   {} exits", 2 * N)),
        "{text}"
    );
    let out = LAPSE.in_dir(&dir).run_in_time(
        [
            "report",
            "deep.lapse",
            "--view",
            "functions",
            "--format",
            "csv",
        ],
        DEADLINE,
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deep = table
        .lines()
        .find(|l| l.starts_with("deep,"))
        .unwrap_or_else(|| panic!("no row of deep in {table}"));
    assert!(deep.contains(&format!(",{N},")), "{deep}");
    assert!(!table.contains("absent"), "{table}");
    for format in ["perfetto", "speedscope"] {
        let out = LAPSE.in_dir(&dir).run_in_time(
            [
                "export",
                "deep.lapse",
                "--format",
                format,
                "-o",
                "out.trace",
            ],
            DEADLINE,
        );
        assert!(
            out.status.success(),
            "{format}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
