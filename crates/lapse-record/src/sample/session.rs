//! Sampling: turning the kernel's records into the data file.
//!
//! Records arrive here in time order (the driver merges the per-CPU rings).
//! Side records keep processes, threads and address spaces current; each
//! sample is unwound at once, its frames and stack interned, and only the
//! stack id is kept, so the file holds addresses and ids, never stack
//! copies. [`SampleSession::flush`] writes what is new (functions and frames
//! named from symbol tables, stack nodes, then the samples that use them);
//! [`SampleSession::finish`] resolves every frame in full (inline chains,
//! lines), rewrites the frame and function tables and ends with the footer.
//!
//! With `--off-cpu`, a second event samples each target thread as it is
//! switched out (its samples carry that event's id); its stack is kept
//! until the kernel's switch-in record for the thread, and the two make an
//! off-CPU period ([`OffCpuPeriod`]) written beside the samples.
//!
//! A thread id the kernel gives out again is another thread (#31 item 16):
//! each thread keeps the serial its id had when it began (the number of
//! threads with the id let go before, [`ThreadSerials`]), and its samples,
//! off-CPU periods and records carry it. A thread is let go some time after
//! its end, or at once when the kernel says a thread with its id began (a
//! fork record; or the first record of a thread not known under its process).

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{self, Write};

use lapse_data::{
    DataWriter, Footer, FrameId, OffCpuPeriod, ProcessInfo, Record, Sample, SessionHeader, StackId,
    ThreadInfo, ThreadKey, Timestamp,
};
use lapse_unwind::{StackCopy, StackEnd};

use super::attr::CALLCHAIN_MAX;
use super::parse::{self, RawSample, SampleLayout};
use super::stack_table::StackTable;
use super::symbols::FrameSymbols;
use super::unwind_glue::{AddressSpaces, MapRequest, NewMapping};
use crate::instrument::serials::ThreadSerials;
use crate::linux::records::{self, PerfRecord, SampleIdLayout};
use crate::SymbolProgress;

/// Samples buffered before they are written as one chunk.
const SAMPLE_BATCH: usize = 4096;
/// Frames per `Record::Frames` at the end (keeps records moderate in size).
const FRAME_BATCH: usize = 8192;
/// The frame at the root of a stack cut at the copy limit.
pub(crate) const TRUNCATED: &str = "[truncated]";
/// `--call-graph fp`: warn when more than half of at least this many
/// stacks have a single frame.
const SHORT_STACKS_MIN: u64 = 50;
/// A thread that ended this long before the latest record seen is written
/// out and let go (records from other CPUs' rings are ordered within
/// milliseconds): the session's memory follows the threads alive, not all
/// the threads a long run ever had.
const RETIRE_AFTER_NS: u64 = 500_000_000;

/// A thread switched out and not back in yet (`--off-cpu`).
#[derive(Clone, Copy, Debug)]
struct SwitchedOut {
    from: Timestamp,
    stack: Option<StackId>,
    preempted: bool,
    /// The kernel's switch-out record was seen (after the sample, which
    /// comes first); a second one means the switch-in between was lost.
    recorded: bool,
}

pub(crate) struct SampleSession<W: Write> {
    writer: DataWriter<W>,
    header: SessionHeader,
    layout: SampleLayout,
    id_layout: SampleIdLayout,
    spaces: AddressSpaces,
    stacks: StackTable,
    symbols: FrameSymbols,
    /// Processes that belong to the target (the launched or attached one and
    /// its descendants); samples of any other process are discarded.
    targets: HashSet<u32>,
    processes: HashMap<u32, ProcessInfo>,
    threads: HashMap<ThreadKey, ThreadInfo>,
    /// Threads ended, in the order of their ends, to let go (a process
    /// with its main thread).
    ended: VecDeque<(Timestamp, ThreadKey)>,
    /// The process of each thread ended and not let go yet, by thread id.
    ending: HashMap<u32, u32>,
    /// The serial of each thread id, for the threads that begin.
    serials: ThreadSerials,
    /// The processes lapse launched or attached to (kept to the end: their
    /// exit status goes into their record).
    roots: HashSet<u32>,
    pending: Vec<Sample>,
    addresses: Vec<u64>,
    frame_ids: Vec<FrameId>,
    samples: u64,
    discarded: u64,
    lost: u64,
    last_time: Timestamp,
    /// Ids of the off-CPU events (`--off-cpu`): their samples are switch-outs.
    off_cpu_ids: Vec<u64>,
    switched_out: HashMap<ThreadKey, SwitchedOut>,
    /// Off-CPU periods not written yet.
    off_cpu: Vec<OffCpuPeriod>,
    /// Launched targets not yet through their exec: their samples are of
    /// lapse's own image (a CPU-wide event sees them), discarded.
    awaiting_exec: HashSet<u32>,
    /// The header gained notes since it was written.
    header_changed: bool,
    /// The `[truncated]` frame, once a stack needed it.
    truncated: Option<FrameId>,
    /// Modules made while recording that are still to be written.
    new_modules: Vec<lapse_data::ModuleInfo>,
    /// Stacks with frames, and those with just one (`--call-graph fp`
    /// on code without frame pointers gives one-frame stacks).
    stacks_seen: u64,
    one_frame_stacks: u64,
}

impl<W: Write> SampleSession<W> {
    /// Starts the file with `header`.
    pub(crate) fn new(
        out: W,
        header: SessionHeader,
        layout: SampleLayout,
        id_layout: SampleIdLayout,
    ) -> io::Result<Self> {
        let start = header.start;
        let mut writer = DataWriter::new(out)?;
        writer.write_record(&Record::Session(header.clone()))?;
        Ok(SampleSession {
            writer,
            header,
            layout,
            id_layout,
            spaces: AddressSpaces::default(),
            stacks: StackTable::default(),
            symbols: FrameSymbols::default(),
            targets: HashSet::new(),
            processes: HashMap::new(),
            threads: HashMap::new(),
            ended: VecDeque::new(),
            ending: HashMap::new(),
            serials: ThreadSerials::default(),
            roots: HashSet::new(),
            pending: Vec::new(),
            addresses: Vec::new(),
            frame_ids: Vec::new(),
            samples: 0,
            discarded: 0,
            lost: 0,
            last_time: start,
            off_cpu_ids: Vec::new(),
            switched_out: HashMap::new(),
            off_cpu: Vec::new(),
            awaiting_exec: HashSet::new(),
            header_changed: false,
            truncated: None,
            new_modules: Vec::new(),
            stacks_seen: 0,
            one_frame_stacks: 0,
        })
    }

    /// `pid` was launched and has not exec'd the command yet.
    pub(crate) fn await_exec(&mut self, pid: u32) {
        self.awaiting_exec.insert(pid);
    }

    /// Samples of the events with these ids are switch-outs (`--off-cpu`).
    pub(crate) fn set_off_cpu_ids(&mut self, ids: Vec<u64>) {
        self.off_cpu_ids = ids;
    }

    /// Writes a record as it is (pauses, resumes, marks).
    pub(crate) fn record(&mut self, record: &Record) -> io::Result<()> {
        self.writer.write_record(record)
    }

    pub(crate) fn samples(&self) -> u64 {
        self.samples
    }

    /// Declares a target process (the launched child, or the attached one).
    pub(crate) fn add_target(
        &mut self,
        pid: u32,
        command: Vec<String>,
        start: Timestamp,
    ) -> io::Result<()> {
        self.targets.insert(pid);
        self.roots.insert(pid);
        let p = ProcessInfo {
            pid,
            ppid: None,
            command,
            start: Some(start),
            end: None,
            exit_status: None,
        };
        self.writer.write_record(&Record::Process(p.clone()))?;
        self.processes.insert(pid, p);
        Ok(())
    }

    /// Declares a thread that already runs (attach) or is about to (launch).
    pub(crate) fn add_thread(
        &mut self,
        thread: ThreadKey,
        name: String,
        start: Timestamp,
    ) -> io::Result<()> {
        self.thread_started(thread, Some(name), start, false)
    }

    /// An executable mapping that existed before recording began (attach).
    pub(crate) fn add_mapping(
        &mut self,
        pid: u32,
        start: u64,
        len: u64,
        offset: u64,
        path: &str,
        time: Timestamp,
    ) -> io::Result<()> {
        let new = self.spaces.map(MapRequest {
            pid,
            start,
            len,
            file_offset: offset,
            path,
            inode: None,
            time,
        });
        self.write_mapping(new)
    }

    /// Takes one perf record (header included).
    pub(crate) fn handle(&mut self, record: &[u8]) -> io::Result<()> {
        let Some(parsed) = records::parse(record, &self.id_layout) else {
            return Ok(());
        };
        match parsed {
            PerfRecord::Sample { body, .. } => self.sample(body)?,
            PerfRecord::Switch { out, preempted, id }
                if !self.off_cpu_ids.is_empty() && self.targets.contains(&id.pid) =>
            {
                self.switch(
                    ThreadKey::new(id.pid, id.tid),
                    out,
                    preempted,
                    Timestamp::from_nanos(id.time),
                );
            }
            PerfRecord::Mmap2 {
                pid,
                addr,
                len,
                pgoff,
                prot,
                path,
                inode,
                id,
                ..
            } if records::is_executable(prot) && self.targets.contains(&pid) => {
                let time = Timestamp::from_nanos(id.time);
                let new = self.spaces.map(MapRequest {
                    pid,
                    start: addr,
                    len,
                    file_offset: pgoff,
                    path: &path,
                    inode,
                    time,
                });
                self.write_mapping(new)?;
            }
            PerfRecord::Fork {
                pid,
                ppid,
                tid,
                time,
                ..
            } => {
                let time = Timestamp::from_nanos(time);
                if pid != ppid && self.targets.contains(&ppid) && self.targets.insert(pid) {
                    self.spaces.fork(ppid, pid);
                    let parent_command = self.processes.get(&ppid).map(|p| p.command.clone());
                    let p = ProcessInfo {
                        pid,
                        ppid: Some(ppid),
                        command: parent_command.unwrap_or_default(),
                        start: Some(time),
                        end: None,
                        exit_status: None,
                    };
                    self.writer.write_record(&Record::Process(p.clone()))?;
                    self.processes.insert(pid, p);
                }
                if self.targets.contains(&pid) {
                    let parent = ThreadKey::new(ppid, ppid);
                    let name = self.threads.get(&parent).map(|t| t.name.clone());
                    self.thread_started(ThreadKey::new(pid, tid), name, time, true)?;
                }
            }
            PerfRecord::Exit { pid, tid, time, .. } => {
                let time = Timestamp::from_nanos(time);
                let thread = ThreadKey::new(pid, tid);
                self.switched_out.remove(&thread);
                let mut known = false;
                if let Some(t) = self.threads.get_mut(&thread) {
                    t.end = Some(time);
                    known = true;
                }
                if pid == tid {
                    if let Some(p) = self.processes.get_mut(&pid) {
                        p.end = Some(time);
                        known = true;
                    }
                }
                if self.threads.contains_key(&thread) {
                    self.ending.insert(tid, pid);
                }
                if known {
                    self.ended.push_back((time, thread));
                }
                self.last_time = self.last_time.max(time);
            }
            PerfRecord::Comm {
                pid,
                tid,
                name,
                exec,
                id,
            } => {
                if !self.targets.contains(&pid) {
                    return Ok(());
                }
                if exec {
                    self.awaiting_exec.remove(&pid);
                    self.spaces.exec(pid);
                    let command = crate::linux::proc_scan::read_cmdline(pid)
                        .unwrap_or_else(|| vec![name.clone()]);
                    if let Some(p) = self.processes.get_mut(&pid) {
                        p.command = command;
                        let p = p.clone();
                        self.writer.write_record(&Record::Process(p))?;
                    }
                }
                let time = Timestamp::from_nanos(id.time);
                self.thread_started(ThreadKey::new(pid, tid), Some(name), time, false)?;
            }
            PerfRecord::Lost { lost } => self.lost += lost,
            _ => {}
        }
        Ok(())
    }

    /// A thread seen (`fork`: the kernel says it began). A thread not known
    /// under its process, or one that began where an ended thread had its
    /// ids, is a new thread: a thread ended under its id is let go first,
    /// so that the new one has the next serial.
    fn thread_started(
        &mut self,
        thread: ThreadKey,
        name: Option<String>,
        time: Timestamp,
        fork: bool,
    ) -> io::Result<()> {
        let new = self
            .threads
            .get(&thread)
            .is_none_or(|t| fork && t.end.is_some());
        if new {
            if let Some(&pid) = self.ending.get(&thread.tid) {
                self.let_go(ThreadKey::new(pid, thread.tid))?;
            }
            // (an ended thread's last switch-out, not the new thread's)
            self.switched_out.remove(&thread);
        }
        let serial = self.serials.of(thread).serial;
        let entry = self.threads.entry(thread).or_insert_with(|| ThreadInfo {
            pid: thread.pid,
            tid: thread.tid,
            serial,
            name: String::new(),
            start: Some(time),
            end: None,
        });
        if let Some(name) = name.filter(|n| *n != entry.name) {
            entry.name = name;
            let t = entry.clone();
            self.writer.write_record(&Record::Thread(t))?;
        }
        Ok(())
    }

    fn write_mapping(&mut self, new: NewMapping) -> io::Result<()> {
        if let Some(module) = new.module {
            self.writer.write_record(&Record::Module(module))?;
        }
        self.writer.write_record(&Record::Mapping(new.mapping))
    }

    fn sample(&mut self, body: &[u8]) -> io::Result<()> {
        let Some(s) = parse::parse(self.layout, body) else {
            return Ok(());
        };
        let switch_out = !self.off_cpu_ids.is_empty() && self.off_cpu_ids.contains(&s.id);
        let pid = s.thread.pid;
        if !self.targets.contains(&pid) || self.awaiting_exec.contains(&pid) {
            if !switch_out {
                self.discarded += 1;
            }
            return Ok(());
        }
        let ts = Timestamp::from_nanos(s.time);
        self.last_time = self.last_time.max(ts);
        let serial = match self.threads.get(&s.thread) {
            Some(t) => t.serial,
            None => {
                self.thread_started(s.thread, None, ts, false)?;
                self.serial(s.thread)
            }
        };
        let stack = self.unwind(&s);
        if switch_out {
            // The thread goes off the CPU here; its switch-in ends the period.
            self.switched_out.insert(
                s.thread,
                SwitchedOut {
                    from: ts,
                    stack,
                    preempted: false,
                    recorded: false,
                },
            );
            return Ok(());
        }
        self.pending.push(Sample {
            pid: s.thread.pid,
            tid: s.thread.tid,
            serial,
            ts,
            cpu: s.cpu,
            stack,
            weight: s.period,
        });
        self.samples += 1;
        if self.pending.len() >= SAMPLE_BATCH {
            self.write_pending()?;
        }
        Ok(())
    }

    /// Unwinds a sample and interns its stack; `None` when no frame
    /// resolves. A stack cut at the copy limit gets `[truncated]` at its
    /// root, so that its partial paths are one branch, not roots of their
    /// own.
    fn unwind(&mut self, s: &RawSample<'_>) -> Option<StackId> {
        // Innermost first, as lookup addresses (caller frames: return address - 1).
        let mut cut = false;
        if self.layout.callchain {
            self.addresses.clear();
            for (i, &a) in s.user_callchain.iter().enumerate() {
                self.addresses
                    .push(if i == 0 { a } else { a.saturating_sub(1) });
            }
            // (the chain's entries include one context marker)
            cut = s.user_callchain.len() + 1 >= usize::from(CALLCHAIN_MAX);
        } else if let Some(regs) = &s.regs {
            let stack = StackCopy {
                start: regs.sp,
                bytes: s.stack,
            };
            cut = match self
                .spaces
                .unwind(s.thread.pid, regs, &stack, &mut self.addresses)
            {
                StackEnd::Root => false,
                // The unwinder needed bytes beyond the copy: the stack goes
                // on, whether the kernel copied all it was asked for or
                // stopped short at a page it could not read from the
                // interrupt (one not mapped in yet, or being migrated: in
                // CI on a busy machine about one sample in 200 of a deep
                // recursion came as a partial path rooted in the recursion).
                StackEnd::CopyEnd => true,
                StackEnd::DepthLimit => true,
            };
        } else {
            self.addresses.clear();
        }
        // The stack ends at the first address in no executable mapping: for
        // a caller that is stack garbage taken for a return address; for the
        // sampled IP it is the previous image's (a fault taken while the
        // kernel runs exec), so such a sample has no resolvable frame.
        self.frame_ids.clear();
        for &addr in &self.addresses {
            let Some((module, rel)) = self.spaces.resolve(s.thread.pid, addr) else {
                // (an address in no mapping ends the stack, whatever the
                // unwinder said: that is not the copy's limit)
                cut = false;
                break;
            };
            self.frame_ids.push(self.stacks.frame(module, rel));
        }
        if !self.frame_ids.is_empty() {
            self.stacks_seen += 1;
            if self.frame_ids.len() == 1 {
                self.one_frame_stacks += 1;
            }
            if cut {
                let marker = self.truncated_frame();
                self.frame_ids.push(marker);
            }
        }
        self.stacks.stack(self.frame_ids.iter().rev().copied())
    }

    /// The `[truncated]` frame (its pseudo module written with the next batch).
    fn truncated_frame(&mut self) -> FrameId {
        if let Some(f) = self.truncated {
            return f;
        }
        let (module, info) = self.spaces.modules.intern_marker(TRUNCATED);
        self.new_modules.extend(info);
        let f = self.stacks.frame(module, 0);
        self.truncated = Some(f);
        f
    }

    /// `--call-graph fp` gave mostly one-frame stacks: what to tell the
    /// user (the code likely has no frame pointers).
    pub(crate) fn short_stacks_warning(&self) -> Option<String> {
        if !self.layout.callchain || self.stacks_seen < SHORT_STACKS_MIN {
            return None;
        }
        let share = 100.0 * self.one_frame_stacks as f64 / self.stacks_seen as f64;
        (share > 50.0).then(|| {
            format!(
                "{share:.0} % of the stacks have a single frame: --call-graph fp needs code built with frame pointers (-fno-omit-frame-pointer); --call-graph dwarf (the default) does not"
            )
        })
    }

    /// A switch record of a target thread (`--off-cpu`). A switch-out
    /// follows the thread's off-CPU sample and says whether it was
    /// preempted; without that sample (lost) the period still counts, with
    /// no stack. A switch-in ends the period.
    fn switch(&mut self, thread: ThreadKey, out: bool, preempted: bool, time: Timestamp) {
        self.last_time = self.last_time.max(time);
        if out {
            let fresh = SwitchedOut {
                from: time,
                stack: None,
                preempted,
                recorded: true,
            };
            let entry = self.switched_out.entry(thread).or_insert(fresh);
            if entry.recorded {
                *entry = fresh; // the sample of this switch was lost, or the last switch-in
            } else {
                entry.preempted = preempted;
                entry.recorded = true;
            }
        } else if let Some(o) = self.switched_out.remove(&thread) {
            self.close_off_cpu(thread, o, time);
        }
    }

    fn close_off_cpu(&mut self, thread: ThreadKey, o: SwitchedOut, to: Timestamp) {
        if to < o.from {
            return;
        }
        let serial = self.serial(thread);
        self.off_cpu.push(OffCpuPeriod {
            pid: thread.pid,
            tid: thread.tid,
            serial,
            from: o.from,
            to,
            stack: o.stack,
            preempted: o.preempted,
        });
    }

    /// The serial of thread `thread` (known by its ids): the one it began
    /// with, or for a thread not known, its id's now.
    fn serial(&self, thread: ThreadKey) -> u16 {
        match self.threads.get(&thread) {
            Some(t) => t.serial,
            None => self.serials.of(thread).serial,
        }
    }

    /// Writes the record of `thread`, which ended, and lets it go: a later
    /// thread with its id is another one.
    fn let_go(&mut self, thread: ThreadKey) -> io::Result<()> {
        self.ending.remove(&thread.tid);
        if let Some(t) = self.threads.remove(&thread) {
            self.writer.write_record(&Record::Thread(t))?;
        }
        self.serials.let_go(thread.tid);
        Ok(())
    }

    /// Writes new frames and stack nodes, then the samples that refer to them.
    fn write_pending(&mut self) -> io::Result<()> {
        for module in std::mem::take(&mut self.new_modules) {
            self.writer.write_record(&Record::Module(module))?;
        }
        let (mut frames, nodes) = self.stacks.take_new();
        if !frames.is_empty() {
            self.symbols.quick(&mut frames, &self.spaces.modules);
            let functions = self.symbols.take_new_functions();
            if !functions.is_empty() {
                self.writer.write_record(&Record::Functions(functions))?;
            }
            self.writer.write_record(&Record::Frames(frames))?;
        }
        if !nodes.is_empty() {
            self.writer.write_record(&Record::Stacks(nodes))?;
        }
        self.writer.write_samples(&self.pending)?;
        self.pending.clear();
        if !self.off_cpu.is_empty() {
            let periods = std::mem::take(&mut self.off_cpu);
            self.writer.write_record(&Record::OffCpu(periods))?;
        }
        Ok(())
    }

    /// Writes everything buffered; call at least every 100 ms.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        self.write_pending()?;
        self.retire_ended_threads()?;
        self.writer.flush()
    }

    /// Writes the records of threads and processes that ended a while ago
    /// and lets them go (a sample of a thread after that starts a later
    /// thread with its id).
    fn retire_ended_threads(&mut self) -> io::Result<()> {
        let before = self.last_time.as_nanos().saturating_sub(RETIRE_AFTER_NS);
        while let Some(&(end, key)) = self.ended.front() {
            if end.as_nanos() > before {
                break;
            }
            self.ended.pop_front();
            // (still ended then, not let go already: not a later thread
            // with the same id)
            if self.ending.get(&key.tid) == Some(&key.pid)
                && self.threads.get(&key).is_some_and(|t| t.end == Some(end))
            {
                self.let_go(key)?;
            }
            let pid = key.pid;
            let gone = self.processes.get(&pid).is_some_and(|p| p.end == Some(end));
            if key.tid == pid && gone && !self.roots.contains(&pid) {
                if let Some(p) = self.processes.remove(&pid) {
                    self.writer.write_record(&Record::Process(p))?;
                }
                self.spaces.forget(pid);
                self.targets.remove(&pid);
            }
        }
        if self.threads.capacity() > 4 * self.threads.len().max(256) {
            self.threads.shrink_to_fit(); // (after a storm of threads)
        }
        if self.processes.capacity() > 4 * self.processes.len().max(64) {
            self.processes.shrink_to_fit();
        }
        Ok(())
    }

    /// Threads, processes and address spaces kept in memory.
    #[cfg(test)]
    pub(crate) fn kept(&self) -> (usize, usize, usize) {
        (self.threads.len(), self.processes.len(), self.spaces.len())
    }

    /// Ends the file: final process and thread records, the symbolized frame
    /// table, the function table and the footer. Returns the bytes written.
    /// Ends the file; `progress` counts the frames resolved meanwhile.
    pub(crate) fn finish(
        mut self,
        exit: Option<(u32, i32)>,
        end: Timestamp,
        progress: Option<&SymbolProgress>,
    ) -> io::Result<u64> {
        let end = end.max(self.last_time);
        // Threads still switched out (attach: the recording ended first)
        // were off the CPU until the end, as far as the recording knows.
        let mut still_out: Vec<_> = self.switched_out.drain().collect();
        still_out.sort_by_key(|&(k, _)| k);
        for (thread, o) in still_out {
            let ended = self.threads.get(&thread).is_some_and(|t| t.end.is_some());
            if !ended {
                self.close_off_cpu(thread, o, end);
            }
        }
        self.write_pending()?;
        if let Some(warning) = self.short_stacks_warning() {
            self.header.notes.push(format!("warning: {warning}"));
            self.header_changed = true;
        }
        if self.header_changed {
            // A later session record replaces the first.
            self.writer
                .write_record(&Record::Session(self.header.clone()))?;
        }
        if let Some((pid, status)) = exit {
            if let Some(p) = self.processes.get_mut(&pid) {
                p.exit_status = Some(status);
            }
        }
        for p in self.processes.values() {
            self.writer.write_record(&Record::Process(p.clone()))?;
        }
        let mut threads: Vec<&ThreadInfo> = self.threads.values().collect();
        threads.sort_by_key(|t| t.key());
        for t in threads {
            let mut t = t.clone();
            t.end = t.end.or(Some(end));
            self.writer.write_record(&Record::Thread(t))?;
        }
        // JIT code is named by the perf maps its processes wrote by now;
        // such a module is then called after its map.
        for module in self.spaces.modules.load_perf_maps() {
            self.writer.write_record(&Record::Module(module))?;
        }
        let frames = self
            .symbols
            .full(&self.stacks, &mut self.spaces.modules, progress);
        for batch in self.symbols.functions().chunks(FRAME_BATCH) {
            self.writer
                .write_record(&Record::Functions(batch.to_vec()))?;
        }
        for batch in frames.chunks(FRAME_BATCH) {
            self.writer.write_record(&Record::Frames(batch.to_vec()))?;
        }
        self.writer.write_record(&Record::Footer(Footer {
            end,
            lost_events: self.lost,
            discarded_samples: self.discarded,
            target_exit_status: exit.map(|(_, s)| s),
            events: 0,
            samples: self.samples,
        }))?;
        self.writer.flush()?;
        Ok(self.writer.bytes_written())
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
