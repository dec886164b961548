//! The file format's promises: round trip, recovery of a truncated file,
//! clear errors for foreign, empty, corrupted and missing files.

use std::path::Path;

use lapse_data::*;

fn session() -> SessionHeader {
    SessionHeader {
        command: vec!["./app".into(), "x".into()],
        start_unix_ns: 1,
        start: Timestamp::from_nanos(1000),
        probe_cost_ns: 12.5,
        os_events: vec!["switch".into()],
        lapse_version: "0".into(),
        ..SessionHeader::example(Method::Instrumentation)
    }
}

fn events(n: u64, base: u64) -> Vec<Event> {
    (0..n)
        .map(|i| Event {
            ts: Timestamp::from_nanos(base + i * 10),
            kind: if i % 2 == 0 {
                EventKind::Enter
            } else {
                EventKind::Exit
            },
            function: FunctionId(0),
        })
        .collect()
}

fn sample_file() -> Vec<u8> {
    let mut w = DataWriter::new(Vec::new()).unwrap();
    w.write_record(&Record::Session(session())).unwrap();
    w.write_record(&Record::Thread(ThreadInfo {
        pid: 1,
        tid: 1,
        serial: 0,
        name: "main".into(),
        start: None,
        end: None,
    }))
    .unwrap();
    for block in 0..4 {
        w.write_events(1, 1, &events(100, 1000 + block * 1000))
            .unwrap();
    }
    w.write_record(&Record::Footer(Footer {
        events: 400,
        ..Default::default()
    }))
    .unwrap();
    w.into_inner()
}

fn open(bytes: Vec<u8>) -> Result<DataFile, DataError> {
    DataFile::from_bytes(Path::new("t.data"), bytes)
}

#[test]
fn round_trip() {
    let f = open(sample_file()).unwrap();
    assert_eq!(f.session, session());
    assert_eq!(f.threads.len(), 1);
    assert_eq!(f.event_chunks.len(), 4);
    assert!(f.is_complete());
    let mut out = Vec::new();
    f.read_events(&f.event_chunks[2], &mut out).unwrap();
    assert_eq!(out, events(100, 3000));
}

#[test]
fn every_truncation_recovers_complete_chunks_or_errors_cleanly() {
    let full = sample_file();
    for cut in 0..full.len() {
        match open(full[..cut].to_vec()) {
            Ok(f) => {
                assert!(!f.is_complete(), "cut at {cut} not flagged");
                for c in &f.event_chunks {
                    let mut out = Vec::new();
                    f.read_events(c, &mut out).unwrap();
                    assert_eq!(out.len(), 100);
                }
            }
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.starts_with("t.data: "), "{msg}");
                assert!(!msg.contains('\n'));
            }
        }
    }
}

#[test]
fn foreign_empty_and_corrupted() {
    assert!(matches!(
        open(b"{\"traceEvents\": []}".to_vec()),
        Err(DataError::Foreign { .. })
    ));
    assert!(matches!(open(Vec::new()), Err(DataError::Empty { .. })));
    // Flip a byte inside the third event chunk: reading stops there with damage noted.
    let mut bytes = sample_file();
    let f = open(bytes.clone()).unwrap();
    let off = f.event_chunks[2].offset as usize + 20;
    bytes[off] ^= 0xff;
    let f = open(bytes).unwrap();
    assert_eq!(f.event_chunks.len(), 2);
    assert!(f.damage.as_ref().unwrap().what.contains("checksum"));
}

#[test]
fn huge_length_field_does_not_allocate() {
    let mut bytes = sample_file();
    // First chunk header starts at 16: set stored_len to 4 GiB - 1.
    bytes[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
    let err = open(bytes).err().unwrap();
    assert!(err.to_string().contains("out of range"), "{err}");
}

#[test]
fn missing_file_names_the_path() {
    let err = DataFile::open(Path::new("/nonexistent/lapse.data"))
        .err()
        .unwrap();
    assert!(
        err.to_string().starts_with("/nonexistent/lapse.data: "),
        "{err}"
    );
}

#[test]
fn off_cpu_periods_round_trip_and_files_without_them_have_none() {
    assert!(open(sample_file()).unwrap().off_cpu.is_empty());
    let period = |i: u64| OffCpuPeriod {
        pid: 1,
        tid: 2 + (i % 3) as u32,
        serial: 0,
        from: Timestamp::from_nanos(1_000 + i * 100),
        to: Timestamp::from_nanos(1_050 + i * 100),
        stack: i.is_multiple_of(2).then_some(StackId(i as u32)),
        preempted: i.is_multiple_of(5),
    };
    let mut w = DataWriter::new(Vec::new()).unwrap();
    w.write_record(&Record::Session(session())).unwrap();
    let first: Vec<OffCpuPeriod> = (0..10).map(period).collect();
    // A batch larger than one record may be: the writer splits it.
    let second: Vec<OffCpuPeriod> = (10..1_500_010).map(period).collect();
    w.write_record(&Record::OffCpu(first.clone())).unwrap();
    w.write_record(&Record::OffCpu(second.clone())).unwrap();
    let f = open(w.into_inner()).unwrap();
    assert_eq!(f.off_cpu.len(), first.len() + second.len());
    assert_eq!(&f.off_cpu[..10], &first[..]);
    assert_eq!(f.off_cpu.last(), second.last());
    assert_eq!(f.off_cpu[0].len_ns(), 50);
}

#[test]
fn later_records_of_a_process_or_thread_fill_in_what_they_know() {
    // Announced early (command, start), completed at the end (end, exit
    // status; command unknown to that record): one process, both halves.
    let proc = |command: &[&str], start: Option<u64>, end: Option<u64>, exit_status| {
        Record::Process(ProcessInfo {
            pid: 5,
            ppid: None,
            command: command.iter().map(|c| c.to_string()).collect(),
            start: start.map(Timestamp::from_nanos),
            end: end.map(Timestamp::from_nanos),
            exit_status,
        })
    };
    let thread = |name: &str, end: Option<u64>| {
        Record::Thread(ThreadInfo {
            pid: 5,
            tid: 6,
            serial: 0,
            name: name.into(),
            start: None,
            end: end.map(Timestamp::from_nanos),
        })
    };
    let mut w = DataWriter::new(Vec::new()).unwrap();
    w.write_record(&Record::Session(session())).unwrap();
    for r in [
        proc(&["./app"], Some(10), None, None),
        proc(&[], None, Some(90), Some(3)),
        thread("worker", None),
        thread("", Some(80)),
    ] {
        w.write_record(&r).unwrap();
    }
    let f = open(w.into_inner()).unwrap();
    assert_eq!(f.processes.len(), 1);
    let p = &f.processes[0];
    assert_eq!(p.command, ["./app"]);
    assert_eq!(
        (p.start, p.end),
        (
            Some(Timestamp::from_nanos(10)),
            Some(Timestamp::from_nanos(90))
        )
    );
    assert_eq!(p.exit_status, Some(3));
    assert_eq!(f.threads.len(), 1);
    assert_eq!(
        (f.threads[0].name.as_str(), f.threads[0].end),
        ("worker", Some(Timestamp::from_nanos(80)))
    );
}

#[test]
fn a_later_thread_under_a_used_id_reads_apart_and_the_first_as_before() {
    // The id's first thread is written as it always was; a later one's
    // records are wrapped, its event chunks carry the serial in their
    // header (two bytes that were reserved, 0).
    let thread = |serial| ThreadInfo {
        pid: 1,
        tid: 7,
        serial,
        name: format!("t{serial}"),
        start: None,
        end: None,
    };
    let first = Record::Thread(thread(0));
    assert_eq!(
        postcard::to_stdvec(&*first.as_written()).unwrap(),
        postcard::to_stdvec(&first).unwrap()
    );
    let mut w = DataWriter::new(Vec::new()).unwrap();
    w.write_record(&Record::Session(session())).unwrap();
    w.write_record(&first).unwrap();
    w.write_record(&Record::Thread(thread(1))).unwrap();
    w.write_record(&Record::Inherited(InheritedFrames {
        pid: 1,
        tid: 7,
        serial: 1,
        frames: 2,
    }))
    .unwrap();
    w.write_events(1, 7, &events(2, 100)).unwrap();
    w.write_thread_events(ThreadKey::reused(1, 7, 1), &events(4, 900))
        .unwrap();
    let f = open(w.into_inner()).unwrap();
    let keys: Vec<_> = f
        .threads
        .iter()
        .map(|t| (t.key(), t.name.clone()))
        .collect();
    assert_eq!(
        keys,
        [
            (ThreadKey::new(1, 7), "t0".to_owned()),
            (ThreadKey::reused(1, 7, 1), "t1".to_owned())
        ]
    );
    let counts = |key| f.thread_chunks(key).map(|c| c.count).collect::<Vec<_>>();
    assert_eq!(counts(ThreadKey::new(1, 7)), [2]);
    assert_eq!(counts(ThreadKey::reused(1, 7, 1)), [4]);
    assert_eq!(f.inherited.get(&ThreadKey::reused(1, 7, 1)), Some(&2));
    assert_eq!(f.inherited.get(&ThreadKey::new(1, 7)), None);
}

#[test]
fn samples_and_off_cpu_periods_of_a_later_thread_under_a_used_id_read_apart() {
    // Sampling: a chunk holds the samples of one serial (in its header); a
    // later thread's off-CPU periods are wrapped. Without such threads the
    // bytes are those of a file written before serials.
    let sample = |i: u64, serial| Sample {
        pid: 1,
        tid: 7,
        serial,
        ts: Timestamp::from_nanos(1_000 + i * 10),
        cpu: 0,
        stack: None,
        weight: 1,
    };
    let period = |i: u64, serial| OffCpuPeriod {
        pid: 1,
        tid: 7,
        serial,
        from: Timestamp::from_nanos(1_000 + i * 100),
        to: Timestamp::from_nanos(1_050 + i * 100),
        stack: None,
        preempted: false,
    };
    let write = |samples: &[Sample], periods: Vec<OffCpuPeriod>| {
        let mut w = DataWriter::new(Vec::new()).unwrap();
        w.write_record(&Record::Session(session())).unwrap();
        w.write_samples(samples).unwrap();
        w.write_record(&Record::OffCpu(periods)).unwrap();
        w.into_inner()
    };
    // (serials 0, 2 and 1 mixed, as a batch has them)
    let serial_of = |i: u64| [0, 2, 1, 0][(i % 4) as usize];
    let samples: Vec<Sample> = (0..20_000).map(|i| sample(i, serial_of(i))).collect();
    let periods: Vec<OffCpuPeriod> = (0..10).map(|i| period(i, serial_of(i))).collect();
    let f = open(write(&samples, periods.clone())).unwrap();
    let mut read = Vec::new();
    let mut buf = Vec::new();
    for c in &f.sample_chunks {
        f.read_samples(c, &mut buf).unwrap();
        assert!(buf.iter().all(|s| s.serial == c.serial));
        read.extend_from_slice(&buf);
    }
    let count = |v: &[Sample], serial| v.iter().filter(|s| s.serial == serial).count();
    assert_eq!(read.len(), samples.len());
    for serial in 0..3 {
        assert_eq!(count(&read, serial), count(&samples, serial));
        // Each thread's samples in their order.
        let of = |v: &[Sample]| -> Vec<Sample> {
            v.iter().filter(|s| s.serial == serial).copied().collect()
        };
        assert_eq!(of(&read), of(&samples));
    }
    let mut got = f.off_cpu.clone();
    got.sort_by_key(|p| p.from);
    assert_eq!(got, periods);
    assert_eq!(
        f.off_cpu
            .iter()
            .filter(|p| p.key() == ThreadKey::reused(1, 7, 2))
            .count(),
        3
    );
    // The first thread alone: as before serials (one chunk, the serial
    // bytes 0, the periods unwrapped).
    let first: Vec<Sample> = (0..100).map(|i| sample(i, 0)).collect();
    let f = open(write(&first, (0..3).map(|i| period(i, 0)).collect())).unwrap();
    assert_eq!(f.sample_chunks.len(), 1);
    assert_eq!(f.sample_chunks[0].serial, 0);
    assert_eq!(f.off_cpu.len(), 3);
    let first_period = Record::OffCpu(vec![period(0, 0)]);
    assert_eq!(
        postcard::to_stdvec(&*first_period.as_written()).unwrap(),
        postcard::to_stdvec(&first_period).unwrap()
    );
}
