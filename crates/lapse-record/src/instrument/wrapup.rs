//! The session's tables as they grow and at the end: processes, threads and
//! functions are announced at each periodic flush (so a recorder killed
//! mid-way still leaves a file that reports), threads that ended long ago
//! give up their streams, and the end completes the tables and writes the
//! footer.

use std::collections::HashMap;

use lapse_data::{
    Footer, Method, OsEventBlock, ProcessInfo, Record, ThreadInfo, ThreadKey, Timestamp,
};

use super::functions::function_table;
use super::session::{Session, RETIRE_AFTER};
use crate::linux::clock;
use crate::{RecordError, RecordOutcome};

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
            &self.asm.book,
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
        let mut threads = Vec::new();
        let keys: Vec<ThreadKey> = self.asm.threads.streams().map(|s| s.key).collect();
        for key in keys {
            let ThreadKey { pid, tid } = key;
            if self.announced_threads.insert(key) {
                let life = self.os.threads.get(&key).cloned().unwrap_or_default();
                threads.push(ThreadInfo {
                    pid,
                    tid,
                    name: life.name.unwrap_or_default(),
                    start: life.start.or(if pid == tid {
                        self.asm.procs.get(&pid).and_then(|p| p.start)
                    } else {
                        None
                    }),
                    end: None,
                });
            }
        }
        for p in procs {
            self.out.record(&Record::Process(p))?;
        }
        for t in threads {
            self.out.record(&Record::Thread(t))?;
        }
        Ok(())
    }

    /// Threads that ended a while ago (all their datagrams are in) give up
    /// their streams, so a program that keeps creating threads does not make
    /// the recorder grow.
    pub(super) fn retire_ended_threads(&mut self) -> Result<(), RecordError> {
        let now = clock::monotonic_now();
        let ended: Vec<(ThreadKey, Timestamp)> = self
            .asm
            .threads
            .streams()
            .filter_map(|s| {
                let end = self.os.threads.get(&s.key)?.end?;
                (now.since(end) > RETIRE_AFTER.as_nanos() as u64).then_some((s.key, end))
            })
            .collect();
        for (key, end) in ended {
            if let Some((events, os)) = self.asm.threads.retire(key, end) {
                self.out.events(key, &events)?;
                if !os.is_empty() {
                    self.out.record(&Record::OsEvents(OsEventBlock {
                        pid: key.pid,
                        tid: key.tid,
                        events: os,
                    }))?;
                }
            }
        }
        Ok(())
    }

    pub(super) fn finish(
        &mut self,
        exit_status: Option<i32>,
    ) -> Result<RecordOutcome, RecordError> {
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
        let mut last_ts: HashMap<ThreadKey, Timestamp> = HashMap::new();
        for s in self.asm.threads.streams() {
            last_ts.insert(s.key, s.last_ts());
        }
        for (&key, r) in &self.asm.threads.retired {
            last_ts.insert(key, r.last_ts);
        }
        let mut keys: Vec<ThreadKey> = last_ts.keys().copied().collect();
        keys.extend(self.os.threads.keys().copied());
        keys.sort_unstable();
        keys.dedup();
        let mut pids: Vec<u32> = keys.iter().map(|k| k.pid).collect();
        pids.extend(self.asm.procs.keys().copied());
        pids.sort_unstable();
        pids.dedup();
        if !self.inherit {
            pids.retain(|&p| p == self.root);
        }
        for &pid in &pids {
            let p = self.asm.procs.remove(&pid).unwrap_or_default();
            let life = self.os.processes.get(&pid).cloned().unwrap_or_default();
            let mut threads = Vec::new();
            for &key in keys.iter().filter(|k| k.pid == pid) {
                let tid = key.tid;
                let t = self.os.threads.get(&key).cloned().unwrap_or_default();
                let stream = self.asm.threads.get(key);
                // Ends are real times: put them on the thread's timeline.
                let real_end = t.end.or(life.end).unwrap_or(end);
                let retired = self.asm.threads.retired.get(&key);
                let mut end_ts = match (stream, retired) {
                    (Some(s), _) => s.stalls.map(real_end),
                    (None, Some(r)) => r.end,
                    (None, None) => real_end,
                };
                if let Some(&last) = last_ts.get(&key) {
                    end_ts = end_ts.max(last);
                }
                let start_ts = t.start.or(if tid == pid {
                    life.start.or(p.start)
                } else {
                    None
                });
                let fallback = p
                    .command
                    .first()
                    .map(|c| c.rsplit('/').next().unwrap_or(c).to_owned());
                threads.push(ThreadInfo {
                    pid,
                    tid,
                    name: t.name.or(fallback).unwrap_or_default(),
                    start: start_ts,
                    end: Some(end_ts),
                });
            }
            let proc_end = threads.iter().filter_map(|t| t.end).max().or(life.end);
            let is_root = pid == self.root;
            // What the runtime said, then what the kernel saw over it.
            let mut info = ProcessInfo {
                pid,
                ppid: p.ppid,
                command: p.command.clone(),
                start: p.start,
                end: proc_end,
                exit_status: if is_root { exit_status } else { None },
            };
            info.merge(ProcessInfo {
                pid,
                ppid: life.ppid,
                command: Vec::new(),
                start: life.start,
                end: None,
                exit_status: None,
            });
            self.out.record(&Record::Process(info))?;
            for t in threads {
                self.out.record(&Record::Thread(t))?;
            }
        }
        let removed_ns: u64 = self
            .asm
            .threads
            .streams()
            .map(|s| s.stalls.removed_ns())
            .sum::<u64>()
            + self
                .asm
                .threads
                .retired
                .values()
                .map(|r| r.removed_ns)
                .sum::<u64>();
        // Naming reads symbol and line tables (a library's can take tens of
        // MiB): what the recording needed is let go first, so the peak
        // stays near the larger of the two, not their sum.
        self.arenas.clear();
        self.os.release_buffers();
        self.out.record(&Record::Functions(function_table(
            &self.asm.book,
            0,
            self.progress.as_deref(),
            true,
        )))?;
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
            if let Some(kib) = peak_rss_kib() {
                header.notes.push(format!(
                    "recorder peak memory: {:.1} MiB",
                    kib as f64 / 1024.0
                ));
            }
            // The reader keeps the last session record.
            self.out.record(&Record::Session(header))?;
        }
        let footer = Footer {
            end,
            lost_events: self.asm.threads.lost_events + self.os.lost_records,
            discarded_samples: 0,
            target_exit_status: exit_status,
            events: self.out.events,
            samples: 0,
        };
        self.out.record(&Record::Footer(footer))?;
        if self.out.events == 0 {
            // (the file was never put in place: an older one stays as it was)
            return Err(RecordError::NothingRecorded {
                command,
                status: exit_status.unwrap_or(0),
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

/// Gives freed heap pages back to the kernel. Threads come and go with
/// batches of very different sizes, and glibc's allocator otherwise keeps the
/// high-water mark resident; this keeps the recorder's RSS near its live data.
pub(super) fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns unused memory; no pointers change.
    unsafe {
        libc::malloc_trim(0);
    }
}
