//! The session fed with hand-made perf records, read back from the bytes it
//! wrote: what a sample of the target, of another process, a fork and a
//! thread name become in the data file.

use lapse_data::{DataFile, Method, SessionHeader, ThreadKey, Timestamp};
use perf_event_open_sys::bindings as sys;

use super::SampleSession;
use crate::linux::proc_scan;
use crate::linux::records::SampleIdLayout;
use crate::sample::parse::{regs, SampleLayout};

const SAMPLE_TYPE: u64 = (sys::PERF_SAMPLE_IP
    | sys::PERF_SAMPLE_TID
    | sys::PERF_SAMPLE_TIME
    | sys::PERF_SAMPLE_CPU
    | sys::PERF_SAMPLE_PERIOD
    | sys::PERF_SAMPLE_REGS_USER
    | sys::PERF_SAMPLE_STACK_USER) as u64;

/// A record: header, body, then the sample_id trailer (pid, tid, time, cpu).
fn record(kind: u32, misc: u16, body: &[u8], trailer: Option<(u32, u32, u64)>) -> Vec<u8> {
    let mut rest = body.to_vec();
    if let Some((pid, tid, time)) = trailer {
        rest.extend_from_slice(&pid.to_ne_bytes());
        rest.extend_from_slice(&tid.to_ne_bytes());
        rest.extend_from_slice(&time.to_ne_bytes());
        rest.extend_from_slice(&[0u8; 8]);
    }
    let mut r = Vec::new();
    r.extend_from_slice(&kind.to_ne_bytes());
    r.extend_from_slice(&misc.to_ne_bytes());
    r.extend_from_slice(&((8 + rest.len()) as u16).to_ne_bytes());
    r.extend_from_slice(&rest);
    r
}

fn words(ws: &[u64]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

fn pid_tid(pid: u32, tid: u32) -> u64 {
    u64::from(pid) | (u64::from(tid) << 32)
}

/// A user-mode sample at `ip` with no stack copy (unwinds to just the IP).
fn sample(pid: u32, tid: u32, time: u64, ip: u64) -> Vec<u8> {
    let mut body = words(&[ip, pid_tid(pid, tid), time, 0, 1_000_000]);
    let mut user = [0u64; regs::COUNT];
    user[regs::COUNT - 1] = ip; // the IP is the highest-numbered register requested
    body.extend(words(&[2]));
    body.extend(words(&user));
    body.extend(words(&[0])); // no stack bytes
    record(sys::PERF_RECORD_SAMPLE, 0, &body, None)
}

fn header() -> SessionHeader {
    SessionHeader {
        command: vec!["test".into()],
        start: Timestamp::from_nanos(1),
        host: String::new(),
        lapse_version: String::new(),
        ..SessionHeader::example(Method::Sampling)
    }
}

#[inline(never)]
fn profiled_marker() -> usize {
    std::hint::black_box(42)
}

#[test]
fn samples_forks_and_thread_names_end_up_in_the_file() {
    let dir = std::env::temp_dir().join(format!("lapse-sample-session-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("s.lapse");
    let file = std::fs::File::create(&path).expect("create");
    let layout = SampleLayout {
        callchain: false,
        user_state: true,
        id: false,
    };
    let mut session = SampleSession::new(file, header(), layout, SampleIdLayout::new(SAMPLE_TYPE))
        .expect("write");
    let (pid, child, stranger) = (100, 101, 999);
    let t0 = Timestamp::from_nanos(10);
    session
        .add_target(pid, vec!["prog".into()], t0)
        .expect("write");
    session
        .add_thread(ThreadKey::new(pid, pid), "prog".into(), t0)
        .expect("write");
    // This test binary's own code mappings stand in for the target's.
    let ip = profiled_marker as *const () as u64 + 1;
    for m in proc_scan::executable_mappings(std::process::id()) {
        session
            .add_mapping(pid, m.start, m.end - m.start, m.offset, &m.path, t0)
            .expect("write");
    }
    let fork = [child, pid, child, pid].map(|v| v.to_ne_bytes()).concat();
    let fork = [fork, 20u64.to_ne_bytes().to_vec()].concat();
    let fork = record(sys::PERF_RECORD_FORK, 0, &fork, Some((child, child, 20)));
    let comm = [pid.to_ne_bytes(), (pid + 5).to_ne_bytes()].concat();
    let comm = [comm, b"worker\0\0".to_vec()].concat();
    let comm = record(sys::PERF_RECORD_COMM, 0, &comm, Some((pid, pid + 5, 25)));
    for rec in [
        sample(pid, pid, 30, ip),
        fork,
        comm,
        sample(pid, pid + 5, 40, ip),
        sample(child, child, 50, ip),
        sample(stranger, stranger, 60, ip), // not the target: discarded
        sample(pid, pid, 70, 0x10),         // in no mapping: no resolvable frame
    ] {
        session.handle(&rec).expect("write");
    }
    let progress = crate::SymbolProgress::default();
    session
        .finish(Some((pid, 3)), Timestamp::from_nanos(100), Some(&progress))
        .expect("finish");

    let f = DataFile::open(&path).expect("read back");
    assert!(f.is_complete());
    let footer = f.footer.clone().expect("footer");
    assert_eq!((footer.samples, footer.discarded_samples), (4, 1));
    assert_eq!(footer.target_exit_status, Some(3));
    let mut samples = Vec::new();
    for c in &f.sample_chunks {
        let mut v = Vec::new();
        f.read_samples(c, &mut v).expect("samples decode");
        samples.extend(v);
    }
    assert_eq!(samples.len(), 4);
    assert!(
        samples[3].stack.is_none(),
        "an IP in no mapping has no frame"
    );
    let stack = samples[0].stack.expect("a resolved frame");
    let frame = &f.frames[f.stacks[stack.0 as usize].frame.0 as usize];
    let names: Vec<&str> = frame
        .functions
        .iter()
        .map(|ff| f.functions[ff.function.0 as usize].name.as_str())
        .collect();
    assert!(
        names.last().is_some_and(|n| n.ends_with("profiled_marker")),
        "frame names {names:?}"
    );
    assert_eq!(samples[2].pid, child);
    assert_eq!(
        samples[2].stack, samples[0].stack,
        "the child inherits the mappings"
    );
    let mut pids: Vec<u32> = f.processes.iter().map(|p| p.pid).collect();
    pids.sort();
    assert_eq!(pids, vec![pid, child]);
    let worker = f.threads.iter().find(|t| t.tid == pid + 5).expect("thread");
    assert_eq!(worker.name, "worker");
    // Every frame resolved at the end was counted, as announced.
    assert_eq!(progress.total(), f.frames.len() as u64);
    assert_eq!(progress.done(), progress.total());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--off-cpu`: a sample of the off-CPU event at each switch-out, then the
/// kernel's switch records; the samples carry their event's id.
#[test]
fn switch_outs_and_switch_ins_make_off_cpu_periods() {
    const OFF: u64 = 7;
    const ON: u64 = 8;
    let sample_type = SAMPLE_TYPE | u64::from(sys::PERF_SAMPLE_ID);
    // Header, body, then the trailer: pid/tid, time, id, cpu.
    let rec = |kind: u32, misc: u16, body: &[u8], pid: u32, time: u64, id: Option<u64>| {
        let mut rest = body.to_vec();
        if let Some(id) = id {
            rest.extend(words(&[pid_tid(pid, pid), time, id, 0]));
        }
        let mut r = Vec::new();
        r.extend_from_slice(&kind.to_ne_bytes());
        r.extend_from_slice(&misc.to_ne_bytes());
        r.extend_from_slice(&((8 + rest.len()) as u16).to_ne_bytes());
        r.extend_from_slice(&rest);
        r
    };
    let ip = profiled_marker as *const () as u64 + 1;
    let sample = |pid: u32, time: u64, id: u64| {
        let mut body = words(&[ip, pid_tid(pid, pid), time, id, 0, 1]);
        let mut user = [0u64; regs::COUNT];
        user[regs::COUNT - 1] = ip;
        body.extend(words(&[2]));
        body.extend(words(&user));
        body.extend(words(&[0]));
        rec(sys::PERF_RECORD_SAMPLE, 0, &body, pid, time, None)
    };
    let out = sys::PERF_RECORD_MISC_SWITCH_OUT as u16;
    let preempt =
        (sys::PERF_RECORD_MISC_SWITCH_OUT | sys::PERF_RECORD_MISC_SWITCH_OUT_PREEMPT) as u16;
    let switch = |misc: u16, pid: u32, time: u64| {
        rec(sys::PERF_RECORD_SWITCH, misc, &[], pid, time, Some(OFF))
    };

    let dir = std::env::temp_dir().join(format!("lapse-off-cpu-session-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("s.lapse");
    let file = std::fs::File::create(&path).expect("create");
    let layout = SampleLayout {
        callchain: false,
        user_state: true,
        id: true,
    };
    let mut session = SampleSession::new(file, header(), layout, SampleIdLayout::new(sample_type))
        .expect("write");
    session.set_off_cpu_ids(vec![OFF]);
    let (pid, stranger) = (100, 999);
    let t0 = Timestamp::from_nanos(10);
    session
        .add_target(pid, vec!["prog".into()], t0)
        .expect("write");
    session
        .add_thread(ThreadKey::new(pid, pid), "prog".into(), t0)
        .expect("write");
    for m in proc_scan::executable_mappings(std::process::id()) {
        session
            .add_mapping(pid, m.start, m.end - m.start, m.offset, &m.path, t0)
            .expect("write");
    }
    for r in [
        // Blocked from 100 to 300, with a stack.
        sample(pid, 100, OFF),
        switch(out, pid, 101),
        switch(0, pid, 300),
        // The switch-out record lost: the sample alone starts the period.
        sample(pid, 400, OFF),
        switch(0, pid, 450),
        // The sample lost: preempted from 500 to 520, no stack.
        switch(preempt, pid, 500),
        switch(0, pid, 520),
        // An on-CPU sample, and another process' switches: not periods.
        sample(pid, 600, ON),
        switch(out, stranger, 610),
        switch(0, stranger, 620),
        // Still off the CPU when the recording ends at 1000.
        sample(pid, 700, OFF),
        switch(out, pid, 701),
    ] {
        session.handle(&r).expect("write");
    }
    session
        .finish(None, Timestamp::from_nanos(1000), None)
        .expect("finish");

    let f = DataFile::open(&path).expect("read back");
    assert_eq!(f.footer.as_ref().map(|f| f.samples), Some(1));
    let got: Vec<(u64, u64, bool, bool)> = f
        .off_cpu
        .iter()
        .map(|p| {
            (
                p.from.as_nanos(),
                p.to.as_nanos(),
                p.stack.is_some(),
                p.preempted,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (100, 300, true, false),
            (400, 450, true, false),
            (500, 520, false, true),
            (700, 1000, true, false),
        ]
    );
    assert!(f
        .off_cpu
        .iter()
        .all(|p| p.key() == ThreadKey::new(pid, pid)));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A session of process 100 whose code is this test binary's (its own
/// mappings stand in), writing to a fresh `name` directory under /tmp.
fn own_code_session(
    name: &str,
    layout: SampleLayout,
    sample_type: u64,
) -> (SampleSession<std::fs::File>, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("lapse-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = std::fs::File::create(dir.join("s.lapse")).expect("create");
    let mut session = SampleSession::new(file, header(), layout, SampleIdLayout::new(sample_type))
        .expect("write");
    let t0 = Timestamp::from_nanos(10);
    session
        .add_target(100, vec!["prog".into()], t0)
        .expect("write");
    for m in proc_scan::executable_mappings(std::process::id()) {
        session
            .add_mapping(100, m.start, m.end - m.start, m.offset, &m.path, t0)
            .expect("write");
    }
    (session, dir)
}

/// Finishes the session and reads back the name of every frame of every
/// sample, outermost first; the directory goes. (Its callers each cut a
/// stack, so the `[truncated]` pseudo module must be in the file.)
fn finish_and_read_stacks(
    session: SampleSession<std::fs::File>,
    dir: &std::path::Path,
) -> Vec<Vec<String>> {
    session
        .finish(None, Timestamp::from_nanos(100), None)
        .expect("finish");
    let f = DataFile::open(&dir.join("s.lapse")).expect("read back");
    let mut samples = Vec::new();
    for c in &f.sample_chunks {
        let mut v = Vec::new();
        f.read_samples(c, &mut v).expect("samples decode");
        samples.extend(v);
    }
    let stacks = samples
        .iter()
        .map(|s| {
            frames_outermost_first(&f, s.stack.expect("a stack"))
                .iter()
                .map(|&fr| {
                    let fun = f.frames[fr as usize].functions[0].function;
                    f.functions[fun.0 as usize].name.clone()
                })
                .collect()
        })
        .collect();
    assert!(f.modules.iter().any(|m| m.path == "[truncated]"));
    let _ = std::fs::remove_dir_all(dir);
    stacks
}

/// `--call-graph fp`: a user callchain as long as the kernel gives is cut,
/// and gets `[truncated]` at its root; a short one does not.
#[test]
fn a_callchain_at_the_limit_is_marked_truncated() {
    let sample_type = (sys::PERF_SAMPLE_IP
        | sys::PERF_SAMPLE_TID
        | sys::PERF_SAMPLE_TIME
        | sys::PERF_SAMPLE_CPU
        | sys::PERF_SAMPLE_PERIOD
        | sys::PERF_SAMPLE_CALLCHAIN) as u64;
    let ip = profiled_marker as *const () as u64 + 1;
    let chain_sample = |time: u64, depth: usize| {
        let mut body = words(&[ip, pid_tid(100, 100), time, 0, 1_000_000]);
        body.extend(words(&[depth as u64 + 1, (-512i64) as u64])); // PERF_CONTEXT_USER
        body.extend(words(&vec![ip; depth]));
        record(sys::PERF_RECORD_SAMPLE, 0, &body, None)
    };
    let layout = SampleLayout {
        callchain: true,
        user_state: false,
        id: false,
    };
    let (mut session, dir) = own_code_session("truncated-session", layout, sample_type);
    session.handle(&chain_sample(20, 3)).expect("write");
    session.handle(&chain_sample(30, 126)).expect("write");
    let stacks = finish_and_read_stacks(session, &dir);
    assert_ne!(stacks[0][0], "[truncated]");
    assert_eq!(stacks[1][0], "[truncated]");
}

/// Frame ids of `stack`, outermost first.
fn frames_outermost_first(f: &DataFile, stack: lapse_data::StackId) -> Vec<u32> {
    let mut out = Vec::new();
    let mut cur = Some(stack);
    while let Some(id) = cur {
        let node = f.stacks[id.0 as usize];
        out.push(node.frame.0);
        cur = node.parent;
    }
    out.reverse();
    out
}

/// DWARF unwinding: a sample whose stack copy the kernel cut short (it could
/// not read a page from the interrupt) is a partial path: `[truncated]` at
/// its root, not a root in the middle of the program. Before, only a copy
/// of the full size asked for counted as cut.
#[test]
fn a_stack_copy_cut_short_by_the_kernel_is_marked_truncated() {
    let layout = SampleLayout {
        callchain: false,
        user_state: true,
        id: false,
    };
    let (mut session, dir) = own_code_session("short-copy", layout, SAMPLE_TYPE);
    // In profiled_marker; 4 KiB of stack asked for, none copied (the page
    // at the stack pointer was not there): its return address is beyond.
    let ip = profiled_marker as *const () as u64 + 1;
    let mut body = words(&[ip, pid_tid(100, 100), 20, 0, 1_000_000]);
    let mut user = [0u64; regs::COUNT];
    user[regs::COUNT - 1] = ip;
    user[regs::COUNT - 2] = 0x7fff_0000; // sp
    body.extend(words(&[2]));
    body.extend(words(&user));
    body.extend(words(&[4096]));
    body.extend(vec![0u8; 4096]);
    body.extend(words(&[0])); // dyn_size: nothing copied
    session
        .handle(&record(sys::PERF_RECORD_SAMPLE, 0, &body, None))
        .expect("write");
    let stacks = finish_and_read_stacks(session, &dir);
    assert_eq!(stacks.len(), 1);
    let names = &stacks[0];
    assert_eq!(names.len(), 2, "{names:?}");
    assert_eq!(names[0], "[truncated]");
    assert!(names[1].contains("profiled_marker"), "{names:?}");
}

/// The kernel's fork or exit record of thread `tid` of `pid`, whose parent
/// process is `ppid`, at `time` (pid, ppid, tid, ptid, time; the same
/// layout for both).
fn task(kind: u32, pid: u32, ppid: u32, tid: u32, time: u64) -> Vec<u8> {
    let body = [pid, ppid, tid, ppid].map(u32::to_ne_bytes).concat();
    let body = [body, time.to_ne_bytes().to_vec()].concat();
    record(kind, 0, &body, Some((pid, tid, time)))
}

#[test]
fn threads_and_processes_that_ended_are_written_out_and_let_go() {
    // SPEC 7: the recorder's memory is bounded whatever the run length.
    // 5,000 threads, then 2,000 processes, come and go (a process's address
    // space and unwinder took about 18 KiB: 6,000 short processes made the
    // recorder 157 MB); half a second after its end each is written out
    // and the session keeps nothing of it, and the file still has every
    // one with its start and end.
    const N: u32 = 5_000;
    const P: u32 = 2_000;
    let layout = SampleLayout {
        callchain: false,
        user_state: true,
        id: false,
    };
    let (mut session, dir) = own_code_session("sample-retire", layout, SAMPLE_TYPE);
    let path = dir.join("s.lapse");
    let pid = 100;
    session
        .add_thread(
            ThreadKey::new(pid, pid),
            "prog".into(),
            Timestamp::from_nanos(10),
        )
        .expect("write");
    let ms = 1_000_000;
    for i in 0..N + P {
        // (threads of the target, then processes it forks)
        let (child, tid) = if i < N {
            (pid, 1_000 + i)
        } else {
            (10_000 + i, 10_000 + i)
        };
        let at = u64::from(i) * ms;
        session
            .handle(&task(sys::PERF_RECORD_FORK, child, pid, tid, at + 1))
            .expect("write");
        session
            .handle(&task(sys::PERF_RECORD_EXIT, child, pid, tid, at + 2))
            .expect("write");
        if i % 100 == 0 {
            session.flush().expect("flush");
        }
    }
    session.flush().expect("flush");
    // (the target, and the processes that ended within the last half second)
    let kept = session.kept();
    assert_eq!(
        kept,
        (501, 501, 501),
        "threads, processes, address spaces kept"
    );
    session
        .finish(
            Some((pid, 0)),
            Timestamp::from_nanos(u64::from(N + P) * ms),
            None,
        )
        .expect("finish");
    let f = DataFile::open(&path).expect("read back");
    assert_eq!(f.threads.len(), (N + P) as usize + 1);
    assert_eq!(f.processes.len(), P as usize + 1);
    for t in f.threads.iter().filter(|t| t.tid != pid) {
        let i = if t.tid < 10_000 {
            t.tid - 1_000
        } else {
            t.tid - 10_000
        };
        let at = u64::from(i) * ms;
        let span = (
            Some(Timestamp::from_nanos(at + 1)),
            Some(Timestamp::from_nanos(at + 2)),
        );
        assert_eq!((t.start, t.end), span, "thread {}", t.tid);
    }
    let root = f.processes.iter().find(|p| p.pid == pid).expect("root");
    assert_eq!(root.exit_status, Some(0));
    let _ = std::fs::remove_dir_all(&dir);
}

/// #31 item 16: thread id 200 of the target is given out three times: again
/// 1 ms after its first thread ended (the fork record lets the first go at
/// once), then after the second was let go in its time. Each is a thread of
/// its own, with its own samples and off-CPU periods.
#[test]
fn a_thread_id_given_out_again_is_another_thread() {
    const OFF: u64 = 7;
    const ON: u64 = 8;
    let sample_type = SAMPLE_TYPE | u64::from(sys::PERF_SAMPLE_ID);
    let ip = profiled_marker as *const () as u64 + 1;
    // Header, body, then the trailer: pid/tid, time, id, cpu.
    let rec = |kind: u32, misc: u16, body: &[u8], tid: u32, time: u64| {
        let mut rest = body.to_vec();
        rest.extend(words(&[pid_tid(100, tid), time, OFF, 0]));
        let mut r = Vec::new();
        r.extend_from_slice(&kind.to_ne_bytes());
        r.extend_from_slice(&misc.to_ne_bytes());
        r.extend_from_slice(&((8 + rest.len()) as u16).to_ne_bytes());
        r.extend_from_slice(&rest);
        r
    };
    let sample = |tid: u32, time: u64, id: u64| {
        let mut body = words(&[ip, pid_tid(100, tid), time, id, 0, 1]);
        let mut user = [0u64; regs::COUNT];
        user[regs::COUNT - 1] = ip;
        body.extend(words(&[2]));
        body.extend(words(&user));
        body.extend(words(&[0]));
        let mut r = Vec::new();
        r.extend_from_slice(&sys::PERF_RECORD_SAMPLE.to_ne_bytes());
        r.extend_from_slice(&0u16.to_ne_bytes());
        r.extend_from_slice(&((8 + body.len()) as u16).to_ne_bytes());
        r.extend_from_slice(&body);
        r
    };
    let task = |kind: u32, tid: u32, time: u64| {
        let body = [100u32, 100, tid, 100].map(u32::to_ne_bytes).concat();
        let body = [body, time.to_ne_bytes().to_vec()].concat();
        rec(kind, 0, &body, tid, time)
    };
    let out = sys::PERF_RECORD_MISC_SWITCH_OUT as u16;
    let layout = SampleLayout {
        callchain: false,
        user_state: true,
        id: true,
    };
    let (mut session, dir) = own_code_session("tid-again", layout, sample_type);
    session.set_off_cpu_ids(vec![OFF]);
    let ms = 1_000_000;
    // Thread `n` of id 200 begins at `at` ms, is sampled `n` times, is off
    // the CPU for n µs, and ends.
    let life = |session: &mut SampleSession<_>, n: u64, at: u64| {
        let t = at * ms;
        let mut recs = vec![task(sys::PERF_RECORD_FORK, 200, t)];
        for i in 0..n {
            recs.push(sample(200, t + 10 + i, ON));
        }
        recs.push(sample(200, t + 100, OFF));
        recs.push(rec(sys::PERF_RECORD_SWITCH, out, &[], 200, t + 101));
        recs.push(rec(
            sys::PERF_RECORD_SWITCH,
            0,
            &[],
            200,
            t + 100 + n * 1000,
        ));
        recs.push(task(sys::PERF_RECORD_EXIT, 200, t + ms / 2));
        // (its last switch-out, after its exit record)
        recs.push(sample(200, t + ms / 2 + 1, OFF));
        recs.push(rec(sys::PERF_RECORD_SWITCH, out, &[], 200, t + ms / 2 + 2));
        for r in recs {
            session.handle(&r).expect("write");
        }
        session.flush().expect("flush");
    };
    life(&mut session, 1, 1);
    life(&mut session, 2, 2);
    // (the main thread's sample, 600 ms on, lets the second go in its time)
    session.handle(&sample(100, 600 * ms, ON)).expect("write");
    session.flush().expect("flush");
    life(&mut session, 3, 700);
    session
        .finish(None, Timestamp::from_nanos(800 * ms), None)
        .expect("finish");

    let f = DataFile::open(&dir.join("s.lapse")).expect("read back");
    let mut threads: Vec<_> = f
        .threads
        .iter()
        .filter(|t| t.tid == 200)
        .map(|t| (t.serial, t.start.map(|s| s.as_nanos() / ms)))
        .collect();
    threads.sort();
    assert_eq!(threads, [(0, Some(1)), (1, Some(2)), (2, Some(700))]);
    let mut samples = Vec::new();
    for c in &f.sample_chunks {
        let mut v = Vec::new();
        f.read_samples(c, &mut v).expect("samples decode");
        samples.extend(v);
    }
    let mut off: Vec<(u16, u64)> = f
        .off_cpu
        .iter()
        .filter(|p| p.tid == 200)
        .map(|p| (p.serial, p.len_ns()))
        .collect();
    off.sort();
    for serial in 0..3u16 {
        let n = u64::from(serial) + 1;
        let count = samples
            .iter()
            .filter(|s| s.key() == ThreadKey::reused(100, 200, serial))
            .count();
        assert_eq!(count as u64, n, "samples of serial {serial}");
        assert_eq!(off[serial as usize], (serial, n * 1000));
    }
    assert_eq!(off.len(), 3, "{off:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
