//! The session's tables as they grow and at the end: processes, threads and
//! functions are announced at each periodic flush (so a recorder killed
//! mid-way still leaves a file that reports), threads that ended long ago
//! give up their streams, and the end completes the tables and writes the
//! footer.

use std::collections::HashSet;

use lapse_data::{
    Footer, Method, OsEventBlock, ProcessInfo, Record, ThreadInfo, ThreadKey, Timestamp,
};

use super::assemble::program_name;
use super::functions::function_table;
use super::os::{ProcessLife, ThreadLife};
use super::patch::Patching;
use super::session::{Session, RETIRE_AFTER};
use super::stalls::HeldOsEvent;
use crate::linux::clock;
use crate::{Notice, RecordError, RecordOutcome};

/// Threads let go in one flush at most.
const RETIRE_AT_ONCE: usize = 16_384;
/// How far up its parents a process's connection is looked for.
const MAX_ANCESTORS: usize = 64;

impl Session {
    /// Writes the processes, threads and functions that appeared since the
    /// last call, with what is known of them so far (the reader merges later
    /// records of the same process or thread into the first).
    pub(super) fn announce_new(&mut self) -> Result<(), RecordError> {
        // Once the target has exited, naming functions is the wrap-up the
        // user waits for: count it.
        let root_exited = self
            .os
            .processes
            .get(&self.root)
            .is_some_and(|p| p.end.is_some());
        let progress = root_exited.then(|| self.progress.clone()).flatten();
        // (names only while the program runs; wrap-up writes every
        // function again with its source line, and the reader keeps the last)
        let new_functions = function_table(
            &self.asm.book.lock(),
            self.announced_functions,
            progress.as_deref(),
            false,
        );
        if !new_functions.is_empty() {
            self.announced_functions += new_functions.len();
            self.out.record(&Record::Functions(new_functions))?;
        }
        let mut procs = Vec::new();
        for (&pid, p) in &self.asm.procs {
            if p.said_hello && self.announced_procs.insert(pid) {
                procs.push(ProcessInfo {
                    pid,
                    ppid: p.ppid,
                    command: p.command.clone(),
                    start: p.start,
                    end: None,
                    exit_status: None,
                });
            }
        }
        // (a flag in the stream, not a set beside it: a few bytes less for
        // each of tens of thousands of threads)
        let mut new_threads = Vec::new();
        for (key, s) in self.asm.threads.streams_mut() {
            if !std::mem::replace(&mut s.announced, true) {
                new_threads.push(key);
            }
        }
        let mut threads = Vec::new();
        for key in new_threads {
            let life = self.os.thread(key).cloned().unwrap_or_default();
            threads.push(self.thread_record(key, life, None));
        }
        for p in procs {
            self.out.record(&Record::Process(p))?;
        }
        for t in threads {
            self.out.record(&Record::Thread(t))?;
        }
        Ok(())
    }

    /// What a thread record says of `key`: the kernel's name, else its
    /// program's; the kernel's start, else (a main thread) its process's.
    fn thread_record(
        &self,
        key: ThreadKey,
        life: ThreadLife,
        end: Option<Timestamp>,
    ) -> ThreadInfo {
        let ThreadKey { pid, tid, serial } = key;
        let process_start = || {
            let kernel = self.os.processes.get(&pid).and_then(|p| p.start);
            kernel.or_else(|| self.asm.procs.get(&pid).and_then(|p| p.start))
        };
        let program = || program_name(&self.asm.procs.get(&pid)?.command);
        let start = life
            .start
            .get()
            .or_else(|| if tid == pid { process_start() } else { None });
        // A main thread starts no later than its runtime's first word: a
        // fork child's stream begins with the frames it inherited, entered
        // when its parent called fork, a little before the kernel made it.
        let runtime_start = self.asm.procs.get(&pid).and_then(|p| p.start);
        let start = match (start, runtime_start) {
            (Some(s), Some(r)) if tid == pid => Some(s.min(r)),
            (s, _) => s,
        };
        ThreadInfo {
            pid,
            tid,
            serial,
            name: life
                .name
                .map(|n| String::from_utf8_lossy(&n).into_owned())
                .or_else(program)
                .unwrap_or_default(),
            start,
            end,
        }
    }

    /// Threads that ended a while ago, once all they sent is in (nothing of
    /// theirs left in an arena or a socket), are let go: their last events,
    /// OS events and complete thread record are written, and nothing of them
    /// is kept, so the recorder's memory follows the threads alive, not all
    /// the threads a program ever had.
    pub(super) fn retire_ended_threads(&mut self) -> Result<(), RecordError> {
        let now = clock::monotonic_now();
        let after = RETIRE_AFTER.as_nanos() as u64;
        // (a slice at a time: after a storm of 100,000 threads ends, a list
        // of all of them would add to the recorder's peak; the rest go at
        // the next flush, a tenth of a second later)
        let ended: Vec<(ThreadKey, Timestamp)> = self
            .os
            .threads()
            .filter_map(|(key, t)| {
                let end = t.end.get()?;
                (now.since(end) > after && self.all_in(key, end)).then_some((key, end))
            })
            .take(RETIRE_AT_ONCE)
            .collect();
        for (key, real_end) in ended {
            if self.os.is_parked(key) {
                // (its id began again: the new thread's records wait for it)
                self.replace(key)?;
            } else if self.os.thread(key).is_some() {
                self.retire_thread(key, real_end)?;
            }
        }
        Ok(())
    }

    /// Lets thread `key`, which ended at `real_end`, go now: its last
    /// events, OS events and complete thread record are written, and
    /// nothing of it is kept (a later thread with its id is another).
    fn retire_thread(&mut self, key: ThreadKey, real_end: Timestamp) -> Result<(), RecordError> {
        let (life, mut held) = self.os.forget(key);
        let mut end = real_end; // (when it sent no events)
        let os = match self.asm.threads.retire(key, real_end, &mut held) {
            Some(r) => {
                self.out.events(key, &r.events)?;
                end = r.end;
                r.os
            }
            None => held.into_iter().map(HeldOsEvent::get).collect(),
        };
        if !os.is_empty() {
            self.out.record(&Record::OsEvents(OsEventBlock {
                pid: key.pid,
                tid: key.tid,
                serial: 0,
                events: os,
            }))?;
        }
        if self.inherit || key.pid == self.root {
            let record = self.thread_record(key, life, Some(end));
            self.out.record(&Record::Thread(record))?;
        }
        self.out.let_go(key);
        let last = self.retired_end.entry(key.pid).or_insert(end);
        *last = (*last).max(end);
        Ok(())
    }

    /// A thread began with the id of `key`, an ended thread still held (the
    /// kernel hands ids out again; a starved recorder holds an ended thread
    /// until it has read all it sent): the ended one is let go now, and with
    /// it its whole process when it was a main thread (a process id used
    /// again), so that the new one's events, kernel records and process
    /// record start afresh instead of landing on the old ones. The new
    /// thread's kernel records, kept back meanwhile, are applied then.
    pub(super) fn replace(&mut self, key: ThreadKey) -> Result<(), RecordError> {
        self.sync_workers()?;
        let pid = key.pid;
        let end_of = |s: &Self, k: ThreadKey| {
            let kernel = s.os.thread(k).and_then(|t| t.end.get());
            let stream = s.asm.threads.get(k).map(|t| t.last_ts());
            kernel.or(stream).unwrap_or_default()
        };
        if pid == key.tid {
            // (the old process is gone: what it left in an arena is all
            // it will ever send)
            self.salvage(|k| k.1 == pid)?;
            let mut keys: Vec<ThreadKey> = self
                .asm
                .threads
                .streams()
                .map(|(k, _)| k)
                .filter(|k| k.pid == pid)
                .collect();
            keys.extend(
                self.os
                    .threads()
                    .filter(|(k, t)| k.pid == pid && !t.end.is_none())
                    .map(|(k, _)| k),
            );
            keys.sort_unstable();
            keys.dedup();
            for k in keys {
                let end = end_of(self, k);
                self.retire_thread(k, end)?;
            }
            self.retire_process(pid)?;
        } else {
            let end = end_of(self, key);
            self.retire_thread(key, end)?;
        }
        let mut book = self.asm.book.lock();
        if pid == key.tid {
            for k in self
                .os
                .parked_threads()
                .into_iter()
                .filter(|k| k.pid == pid)
            {
                self.os.unpark(k, &mut book);
            }
        } else {
            self.os.unpark(key, &mut book);
        }
        drop(book);
        self.note_born();
        Ok(())
    }

    /// Processes that ended a while ago, once every thread of theirs has
    /// been let go and nothing of theirs is left to read, are written out
    /// and forgotten: the recorder's memory follows the processes alive, not
    /// every process a long run had (about 430 bytes each were kept). The
    /// process lapse started stays, for its exit status at the end.
    pub(super) fn retire_ended_processes(&mut self) -> Result<(), RecordError> {
        let now = clock::monotonic_now();
        let after = RETIRE_AFTER.as_nanos() as u64;
        let root = self.root;
        let ended: Vec<u32> = self
            .os
            .processes
            .iter()
            .filter(|&(&pid, p)| {
                pid != root
                    && p.end.is_some_and(|e| {
                        // (fork children share their parent's connection,
                        // which stays open while it lives)
                        now.since(e) > after && self.conns_read_since(pid, e)
                    })
            })
            .map(|(&pid, _)| pid)
            .collect();
        if ended.is_empty() {
            return Ok(());
        }
        // (one pass over what is alive, not one per process)
        let mut busy: HashSet<u32> = self.asm.threads.streams().map(|(k, _)| k.pid).collect();
        busy.extend(self.os.threads().map(|(k, _)| k.pid));
        busy.extend(self.arenas.keys().map(|&(_, pid)| pid));
        for pid in ended.into_iter().filter(|pid| !busy.contains(pid)) {
            self.retire_process(pid)?;
        }
        Ok(())
    }

    /// Writes process `pid`'s record and forgets it (its threads were let
    /// go).
    fn retire_process(&mut self, pid: u32) -> Result<(), RecordError> {
        let life = self.os.processes.remove(&pid).unwrap_or_default();
        let info = self.process_record(pid, life, None, None);
        if self.inherit {
            self.out.record(&Record::Process(info))?;
        }
        self.announced_procs.remove(&pid);
        self.asm.threads.forget_process(pid);
        // (a process that began with its id since has mappings there already)
        if !self.os.is_parked(ThreadKey::new(pid, pid)) {
            self.asm.book.forget(pid);
        }
        self.ns.forget(pid);
        for (c, _) in &mut self.conns {
            c.pids.retain(|&p| p != pid);
        }
        Ok(())
    }

    /// Process `pid`'s record, from what its runtime said (taken from the
    /// assembler) and what the kernel saw over it, ending with the latest of
    /// `threads_end` and its threads let go; the tables forget it.
    fn process_record(
        &mut self,
        pid: u32,
        life: ProcessLife,
        threads_end: Option<Timestamp>,
        exit_status: Option<i32>,
    ) -> ProcessInfo {
        let p = self.asm.procs.remove(&pid).unwrap_or_default();
        // (an exec the runtime announced counts once the kernel saw it
        // happen: a failed execvp goes on in the old image)
        let exec_done = p.exec_at.is_some_and(|at| {
            let book = self.asm.book.lock();
            book.gen_at(pid, Timestamp::from_nanos(u64::MAX)) > book.gen_at(pid, at)
        });
        if !p.said_hello || exec_done {
            // (its image, or the one it exec'd last, never loaded the
            // runtime: set-user-ID, static, or a privilege drop before exec
            // that the runtime left it out for)
            self.without_runtime.note(pid);
        }
        let retired_end = self.retired_end.remove(&pid);
        let end = threads_end
            .into_iter()
            .chain(retired_end)
            .max()
            .or(life.end);
        // What the runtime said, then what the kernel saw over it.
        let mut info = ProcessInfo {
            pid,
            ppid: p.ppid,
            command: p.command,
            start: p.start,
            end,
            exit_status,
        };
        info.merge(ProcessInfo {
            pid,
            ppid: life.ppid,
            command: Vec::new(),
            start: life.start,
            end: None,
            exit_status: None,
        });
        info
    }

    /// Whether everything thread `key`, which ended at `end`, sent has been
    /// read: no buffer of it in its process's arenas, and each of its
    /// connections closed or read through a time after `end`.
    fn all_in(&self, key: ThreadKey, end: Timestamp) -> bool {
        self.conns_read_since(key.pid, end)
            && self
                .arenas
                .iter()
                .filter(|((_, pid), _)| *pid == key.pid)
                .all(|(_, a)| !a.holds(key.tid))
    }

    /// Whether every connection process `pid` may have sent on is closed
    /// or has been read through a time after `since` (found empty by a read
    /// that began after it, or a datagram sent after it was read): whatever
    /// it sent before then has been read. Those are the connections it was
    /// read from; while none was (a starved recorder can learn a process's
    /// end from the kernel before it reads its first message), the ones its
    /// nearest ancestor was read from, which a fork child keeps using; and
    /// any connection nothing was read from yet, or not taken yet from the
    /// socket's queue (a new program's, an exec's).
    fn conns_read_since(&self, pid: u32, since: Timestamp) -> bool {
        if self.accepted_through <= since {
            return false;
        }
        let listed = |p: u32| self.conns.iter().any(|(c, _)| c.pids.contains(&p));
        let mut sender = pid;
        for _ in 0..MAX_ANCESTORS {
            if listed(sender) {
                break;
            }
            match self.os.processes.get(&sender).and_then(|l| l.ppid) {
                Some(parent) if parent != sender => sender = parent,
                _ => break,
            }
        }
        self.conns
            .iter()
            .filter(|(c, _)| c.pids.is_empty() || c.pids.contains(&sender))
            .all(|(c, closed)| *closed || c.read_through() > since)
    }

    pub(super) fn finish(
        &mut self,
        exit_status: Option<i32>,
    ) -> Result<RecordOutcome, RecordError> {
        self.sync_workers()?;
        self.pool = None; // (the workers are done)
        let end = clock::monotonic_now();
        let command = self
            .header
            .as_ref()
            .map(|h| h.command.join(" "))
            .unwrap_or_default();
        if let Some(source) = self.out.failed() {
            // (a file put in place before keeps what was written; a
            // temporary one goes, and an older output stays as it was)
            return Err(RecordError::Stopped {
                path: self.out_path(),
                source,
                exit_status: exit_status.unwrap_or(0),
            });
        }
        // (a thread whose id began again: the ended one goes first)
        for key in self.os.parked_threads() {
            if self.os.is_parked(key) {
                self.replace(key)?;
            }
        }
        // (threads let go have their records written already)
        let mut keys: Vec<ThreadKey> = self.asm.threads.streams().map(|(k, _)| k).collect();
        keys.extend(self.os.threads().map(|(k, _)| k));
        keys.sort_unstable();
        keys.dedup();
        let mut pids: Vec<u32> = keys.iter().map(|k| k.pid).collect();
        pids.extend(self.asm.procs.keys().copied());
        pids.extend(self.retired_end.keys().copied());
        pids.sort_unstable();
        pids.dedup();
        if !self.inherit {
            pids.retain(|&p| p == self.root);
        }
        for &pid in &pids {
            let life = self.os.processes.get(&pid).cloned().unwrap_or_default();
            let mut threads = Vec::new();
            for &key in keys.iter().filter(|k| k.pid == pid) {
                let t = self.os.thread(key).cloned().unwrap_or_default();
                // Ends are real times: put them on the thread's timeline.
                let real_end = t.end.get().or(life.end).unwrap_or(end);
                let end_ts = match self.asm.threads.get(key) {
                    Some(s) => s.stalls.map(real_end).max(s.last_ts()),
                    None => real_end,
                };
                threads.push(self.thread_record(key, t, Some(end_ts)));
            }
            let threads_end = threads.iter().filter_map(|t| t.end).max();
            let status = if pid == self.root { exit_status } else { None };
            let info = self.process_record(pid, life, threads_end, status);
            self.out.record(&Record::Process(info))?;
            for t in threads {
                self.out.record(&Record::Thread(t))?;
            }
        }
        for t in std::mem::take(&mut self.toggles) {
            self.out.record(&Record::Control(t))?;
        }
        if let (Some(sig), false) = (self.toggle_signal, self.asm.signal_taken.is_empty()) {
            let pids: Vec<String> = self.asm.signal_taken.iter().map(u32::to_string).collect();
            self.notices.say(Notice::Warning(format!(
                "--signal {}: the program installed its own handler for it (process {}): from then on the signal was the program's and toggled nothing",
                crate::linux::signals::signal_name(sig),
                pids.join(", ")
            )));
        }
        let removed_ns = self.asm.threads.removed_ns();
        // Naming reads symbol and line tables (a library's can take tens of
        // MiB): what the recording needed is let go first, so the peak
        // stays near the larger of the two, not their sum.
        self.arenas.clear();
        self.os.release_buffers();
        self.out.record(&Record::Functions(function_table(
            &self.asm.book.lock(),
            0,
            self.progress.as_deref(),
            true,
        )))?;
        if let Some(dropped) = self.asm.threads.dropped_record() {
            self.out.record(&dropped)?;
        }
        if let Some(mut header) = self.header.take() {
            if removed_ns > 0 {
                header.notes.push(format!(
                    "{:.3} ms of waiting for the recorder (buffer hand-overs) removed from thread timelines",
                    removed_ns as f64 / 1e6
                ));
            }
            if self.asm.threads.untraced_threads > 0 {
                header.notes.push(format!(
                    "{} thread(s) went too deep for the return trampoline: their deeper calls through -pg, -mfentry or library-call probes were not recorded",
                    self.asm.threads.untraced_threads
                ));
            }
            for p in &self.patching {
                header.notes.push(p.note());
            }
            header
                .notes
                .push(lapse_data::SessionHeader::probe_sources_note(
                    &self.probe_sources(),
                ));
            if self.asm.threads.non_entry_guards > 0 {
                header
                    .notes
                    .push(lapse_data::SessionHeader::non_entry_guards_note(
                        self.asm.threads.non_entry_guards,
                    ));
            }
            if self.asm.threads.refused_threads + self.os.refused_records > 0 {
                let why = format!(
                    "{} thread(s) were not recorded: they began while lapse followed {} threads alive at once, its limit (their events, and {} records the kernel made of threads past it, are lost events; {} raises it, at about 340 bytes of the recorder's memory a thread)",
                    self.asm.threads.refused_threads,
                    self.asm.threads.limit(),
                    self.os.refused_records,
                    super::threads::ENV_MAX_THREADS,
                );
                self.notices.say(Notice::Warning(why.clone()));
                header.notes.push(why);
            }
            if let Some(why) = self.without_runtime.note_text() {
                // (a recording of nothing says why in its one error line)
                if self.out.events > 0 {
                    self.notices.say(Notice::Warning(why.clone()));
                }
                header.notes.push(why);
            }
            if let Some(why) = self.cut_off.note_text() {
                if self.cut_off.undelivered > 0 {
                    self.notices.say(Notice::Warning(why.clone()));
                }
                header.notes.push(why);
            }
            if self.os.lost_records > 0 {
                header.notes.push(format!(
                    "{} of the lost events are the kernel's records (context switches, forks, exits) that its rings could not hold: some threads' off-CPU time is incomplete",
                    self.os.lost_records
                ));
            }
            if let Some(kib) = peak_rss_kib() {
                header.notes.push(format!(
                    "recorder peak memory: {:.1} MiB",
                    kib as f64 / 1024.0
                ));
            }
            // (everything lapse did to record, naming the functions
            // included: what the recording cost the machine besides the
            // probes in the target)
            header
                .notes
                .push(lapse_data::SessionHeader::recorder_cpu_note(
                    crate::linux::process::own_cpu_ns(),
                    self.out.events,
                ));
            // The reader keeps the last session record.
            self.out.record(&Record::Session(header))?;
        }
        let footer = Footer {
            end,
            lost_events: self.asm.threads.lost_events
                + self.os.lost_records
                + self.os.refused_records,
            discarded_samples: 0,
            target_exit_status: exit_status,
            events: self.out.events,
            samples: 0,
        };
        self.out.record(&Record::Footer(footer))?;
        if self.out.events == 0 {
            // (the file was never put in place: an older one stays as it was)
            let status = exit_status.unwrap_or(0);
            let why = if self.privileged_target {
                "it runs set-user-ID, set-group-ID or with file capabilities, and the dynamic linker does not preload lapse's runtime into such a program: record it with --method sample, or as the user it runs as".to_owned()
            } else if status > 128 {
                format!(
                    "it was killed by signal {} before its first one; is it built with -finstrument-functions?",
                    status - 128
                )
            } else if self.toggle_signal.is_some() || self.started_paused {
                "the recording started paused (--start-paused or --delay) or was paused by --signal, and the program made no instrumented call while it recorded".to_owned()
            } else if self.patch_wanted {
                let what = match &self.patching[..] {
                    [] => "run-time patching found nothing to patch (no function symbol or unwind table entry in its .text, or --patch named other modules only)".to_owned(),
                    all => all.iter().map(Patching::note).collect::<Vec<_>>().join("; "),
                };
                format!("it has no probes, and {what}; --method sample needs no probes")
            } else if self.filtered {
                "the record-time filters (--filter, --exclude, --depth, --min-time) left every call out".to_owned()
            } else {
                "is it built with -finstrument-functions, or by lapse build for Rust? --method sample needs no probes".to_owned()
            };
            // (a process attached to is still there: it ran on)
            let ran = if crate::linux::process::process_exists(self.root) {
                "ran through the window".to_owned()
            } else {
                format!("exited with status {status}")
            };
            return Err(RecordError::NothingRecorded {
                command,
                status,
                ran,
                why,
                path: self.out_path(),
            });
        }
        self.out.flush(true)?;
        Ok(RecordOutcome {
            output: self.out_path(),
            method: Method::Instrumentation,
            events: self.out.events,
            samples: 0,
            bytes: self.out.bytes(),
            exit_status: exit_status.unwrap_or(0),
        })
    }

    /// Each module with recorded functions and the probe source its
    /// events came from.
    fn probe_sources(&self) -> std::collections::BTreeMap<String, String> {
        let book = self.asm.book.lock();
        let mut ids: Vec<_> = book.functions().iter().map(|f| f.0).collect();
        ids.sort_unstable();
        ids.dedup();
        let patched = self
            .patching
            .iter()
            .filter(|p| p.patched() > 0)
            .map(|p| (p.module.clone(), p.source()))
            .collect();
        let paths = ids
            .into_iter()
            .filter_map(|id| book.module_path(id))
            .filter(|p| p.starts_with('/'));
        super::probe_sources::of_modules(paths, &patched)
    }

    fn out_path(&self) -> std::path::PathBuf {
        self.out.path().to_owned()
    }
}

/// The recorder's own peak resident memory (VmHWM), in KiB.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
