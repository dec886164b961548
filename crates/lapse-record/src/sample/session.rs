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

use std::collections::{HashMap, HashSet};
use std::io::{self, Write};

use lapse_data::{
    DataWriter, Footer, FrameId, ProcessInfo, Record, Sample, SessionHeader, ThreadInfo, Timestamp,
};
use lapse_unwind::StackCopy;

use super::parse::{self, SampleLayout};
use super::stack_table::StackTable;
use super::symbols::FrameSymbols;
use super::unwind_glue::{AddressSpaces, NewMapping};
use crate::linux::records::{self, PerfRecord, SampleIdLayout};
use crate::SymbolProgress;

/// Samples buffered before they are written as one chunk.
const SAMPLE_BATCH: usize = 4096;
/// Frames per `Record::Frames` at the end (keeps records moderate in size).
const FRAME_BATCH: usize = 8192;

pub(crate) struct SampleSession<W: Write> {
    writer: DataWriter<W>,
    layout: SampleLayout,
    id_layout: SampleIdLayout,
    spaces: AddressSpaces,
    stacks: StackTable,
    symbols: FrameSymbols,
    /// Processes that belong to the target (the launched or attached one and
    /// its descendants); samples of any other process are discarded.
    targets: HashSet<u32>,
    processes: HashMap<u32, ProcessInfo>,
    threads: HashMap<(u32, u32), ThreadInfo>,
    pending: Vec<Sample>,
    addresses: Vec<u64>,
    frame_ids: Vec<FrameId>,
    samples: u64,
    discarded: u64,
    lost: u64,
    last_time: Timestamp,
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
        writer.write_record(&Record::Session(header))?;
        Ok(SampleSession {
            writer,
            layout,
            id_layout,
            spaces: AddressSpaces::default(),
            stacks: StackTable::default(),
            symbols: FrameSymbols::default(),
            targets: HashSet::new(),
            processes: HashMap::new(),
            threads: HashMap::new(),
            pending: Vec::new(),
            addresses: Vec::new(),
            frame_ids: Vec::new(),
            samples: 0,
            discarded: 0,
            lost: 0,
            last_time: start,
        })
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
        pid: u32,
        tid: u32,
        name: String,
        start: Timestamp,
    ) -> io::Result<()> {
        self.thread_started(pid, tid, Some(name), start)
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
        let new = self.spaces.map(pid, start, len, offset, path, time);
        self.write_mapping(new)
    }

    /// Takes one perf record (header included).
    pub(crate) fn handle(&mut self, record: &[u8]) -> io::Result<()> {
        let Some(parsed) = records::parse(record, &self.id_layout) else {
            return Ok(());
        };
        match parsed {
            PerfRecord::Sample { body, .. } => self.sample(body)?,
            PerfRecord::Mmap2 {
                pid,
                addr,
                len,
                pgoff,
                prot,
                path,
                id,
                ..
            } if prot & libc::PROT_EXEC as u32 != 0 && self.targets.contains(&pid) => {
                let time = Timestamp::from_nanos(id.time);
                let new = self.spaces.map(pid, addr, len, pgoff, &path, time);
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
                    let name = self.threads.get(&(ppid, ppid)).map(|t| t.name.clone());
                    self.thread_started(pid, tid, name, time)?;
                }
            }
            PerfRecord::Exit { pid, tid, time, .. } => {
                let time = Timestamp::from_nanos(time);
                if let Some(t) = self.threads.get_mut(&(pid, tid)) {
                    t.end = Some(time);
                }
                if pid == tid {
                    if let Some(p) = self.processes.get_mut(&pid) {
                        p.end = Some(time);
                    }
                }
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
                    self.spaces.exec(pid);
                    let command = read_cmdline(pid).unwrap_or_else(|| vec![name.clone()]);
                    if let Some(p) = self.processes.get_mut(&pid) {
                        p.command = command;
                        let p = p.clone();
                        self.writer.write_record(&Record::Process(p))?;
                    }
                }
                let time = Timestamp::from_nanos(id.time);
                self.thread_started(pid, tid, Some(name), time)?;
            }
            PerfRecord::Lost { lost } => self.lost += lost,
            _ => {}
        }
        Ok(())
    }

    fn thread_started(
        &mut self,
        pid: u32,
        tid: u32,
        name: Option<String>,
        time: Timestamp,
    ) -> io::Result<()> {
        let entry = self
            .threads
            .entry((pid, tid))
            .or_insert_with(|| ThreadInfo {
                pid,
                tid,
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
        if !self.targets.contains(&s.pid) {
            self.discarded += 1;
            return Ok(());
        }
        let ts = Timestamp::from_nanos(s.time);
        self.last_time = self.last_time.max(ts);
        if !self.threads.contains_key(&(s.pid, s.tid)) {
            self.thread_started(s.pid, s.tid, None, ts)?;
        }
        // Innermost first, as lookup addresses (caller frames: return address - 1).
        if self.layout.callchain {
            self.addresses.clear();
            for (i, &a) in s.user_callchain.iter().enumerate() {
                self.addresses
                    .push(if i == 0 { a } else { a.saturating_sub(1) });
            }
        } else if let Some(regs) = &s.regs {
            let stack = StackCopy {
                start: regs.sp,
                bytes: s.stack,
            };
            self.spaces.unwind(s.pid, regs, &stack, &mut self.addresses);
        } else {
            self.addresses.clear();
        }
        // The stack ends at the first address in no executable mapping: for
        // a caller that is stack garbage taken for a return address; for the
        // sampled IP it is the previous image's (a fault taken while the
        // kernel runs exec), so such a sample has no resolvable frame.
        self.frame_ids.clear();
        for &addr in &self.addresses {
            let Some((module, rel)) = self.spaces.resolve(s.pid, addr) else {
                break;
            };
            self.frame_ids.push(self.stacks.frame(module, rel));
        }
        let stack = self.stacks.stack(self.frame_ids.iter().rev().copied());
        self.pending.push(Sample {
            pid: s.pid,
            tid: s.tid,
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

    /// Writes new frames and stack nodes, then the samples that refer to them.
    fn write_pending(&mut self) -> io::Result<()> {
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
        Ok(())
    }

    /// Writes everything buffered; call at least every 100 ms.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        self.write_pending()?;
        self.writer.flush()
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
        self.write_pending()?;
        let end = end.max(self.last_time);
        if let Some((pid, status)) = exit {
            if let Some(p) = self.processes.get_mut(&pid) {
                p.exit_status = Some(status);
            }
        }
        for p in self.processes.values() {
            self.writer.write_record(&Record::Process(p.clone()))?;
        }
        let mut threads: Vec<&ThreadInfo> = self.threads.values().collect();
        threads.sort_by_key(|t| (t.pid, t.tid));
        for t in threads {
            let mut t = t.clone();
            t.end = t.end.or(Some(end));
            self.writer.write_record(&Record::Thread(t))?;
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

/// The command line of a live process, from `/proc/PID/cmdline`.
pub(crate) fn read_cmdline(pid: u32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    (!args.is_empty()).then_some(args)
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
