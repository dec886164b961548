//! `lapse recover`: what the runtime kept in `<output>.spill` after the
//! recorder went away, merged into the data file.
//!
//! Like `uftrace recover`, this is an explicit step that rewrites the
//! recording: the intact chunks of the data file are copied to a temporary
//! file next to it (0600, created, never through a symlink), the spill's
//! events are appended (ticks converted with the file's own calibration,
//! addresses resolved against the file's modules,
//! mappings and functions, new functions named from the module files on disk
//! when their build-id still matches), then the tables are completed, a note
//! and a footer are added, the copy replaces the file and the spill is
//! removed. A spill still open in a live process is refused (it is still
//! growing).
//!
//! What cannot come back: events the recorder had received but not written
//! when it died (counted as lost where the runtime's event indices show the
//! gap), and OS events after that moment (no switches were recorded, so that
//! time is application time).

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use lapse_data::codec::EventEncoder;
use lapse_data::{
    format, DataFile, DataWriter, Footer, ProcessInfo, Record, ThreadInfo, ThreadKey, Timestamp,
};
use lapse_rt::protocol::{self, Msg};

use super::address::AddressBook;
use super::assemble::{program_name, thread_of, Assembler, Proc, Sink};
use super::functions::function_table;
use super::tick_clock::TickClock;
use crate::linux::fs::open_no_follow;
use crate::RecordError;

/// Where the runtime spills when the recorder of `output` is gone.
pub fn spill_path(output: &Path) -> PathBuf {
    let mut name = output.as_os_str().to_owned();
    name.push(".spill");
    PathBuf::from(name)
}

/// The newest temporary file (`.NAME.partial-PID-N`) that a recorder of
/// `output`, gone now, left beside it.
fn abandoned_partial(output: &Path) -> Option<PathBuf> {
    let dir = match output.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    let prefix = format!(".{}.partial-", output.file_name()?.to_string_lossy());
    std::fs::read_dir(&dir)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid: u32 = name
                .strip_prefix(&prefix)?
                .split('-')
                .next()?
                .parse()
                .ok()?;
            let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
            let meta = std::fs::symlink_metadata(e.path()).ok()?;
            (!alive && meta.is_file()).then(|| (meta.modified().ok(), e.path()))
        })
        .max()
        .map(|(_, path)| path)
}

/// What a recovery added.
#[derive(Clone, Debug)]
pub struct RecoverOutcome {
    pub output: PathBuf,
    pub spill: PathBuf,
    pub events: u64,
    pub threads: usize,
    /// Events the runtime sent that reached neither the file nor the spill.
    pub lost_events: u64,
}

/// Merges `<file>.spill` into `file`. Streams: the spill is read one
/// datagram at a time and what the assembler makes of it goes straight to
/// the new file, so memory stays bounded whatever the spill's size.
pub fn recover(file: &Path) -> Result<RecoverOutcome, RecordError> {
    let spill = spill_path(file);
    let fail = |what: String| RecordError::Recover {
        path: spill.clone(),
        what,
    };
    if let Some(pid) = writer_of(&spill) {
        return Err(fail(format!(
            "still being written by process {pid} (the target runs on); recover once it has exited"
        )));
    }
    // (a spill is never a symlink)
    let spill_file = match open_no_follow(&spill) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(fail("no spill file: nothing to recover".into()))
        }
        Err(e) => return Err(fail(e.to_string())),
    };
    // A recorder killed before its first flush of events left its file
    // under the temporary name only: that is the file to recover.
    let partial = if file.exists() {
        None
    } else {
        abandoned_partial(file)
    };
    let source = partial.clone().unwrap_or_else(|| file.to_owned());
    let data = DataFile::open(&source)?;
    let Some(calibration) = data.session.tsc else {
        return Err(fail(format!(
            "{} holds no tick calibration (not an instrumentation recording)",
            file.display()
        )));
    };
    let clock = TickClock::from_calibration(&calibration);
    let functions: Vec<_> = data
        .functions
        .iter()
        .map(|f| (f.module, f.address))
        .collect();
    let book = AddressBook::resume(&data.modules, &data.mappings, &functions);
    // The new file is written beside the old one (0600, never through a
    // symlink) and replaces it only when complete: first the old file's
    // intact part, then what the spill adds.
    let out_err = |source| RecordError::Output {
        path: file.to_owned(),
        source,
    };
    let (mut pending, tmp) = lapse_data::OutputFile::create(file, "recovering").map_err(out_err)?;
    let intact = data
        .damage
        .as_ref()
        .map_or(data.file_len, |d| d.offset)
        .max(format::FILE_HEADER_LEN as u64);
    let mut out = BufWriter::with_capacity(1 << 20, tmp);
    let copied = File::open(&source)
        .and_then(|f| io::copy(&mut f.take(intact), &mut out))
        .map_err(out_err)?;
    if copied != intact {
        return Err(out_err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the data file shrank while being recovered",
        )));
    }
    let writer = DataWriter::new(SkipHeader {
        inner: out,
        skip: format::FILE_HEADER_LEN,
    })
    .map_err(out_err)?;
    let mut m = Merge {
        asm: Assembler::new(book, clock, usize::MAX),
        out: Streamed {
            w: writer,
            path: file.to_owned(),
            events: 0,
        },
        first_index: HashMap::new(),
    };
    // The processes the file knows said hello before the break: a hello
    // from one of them in the spill is a new image.
    for p in &data.processes {
        m.asm.procs.insert(
            p.pid,
            Proc {
                command: p.command.clone(),
                ppid: p.ppid,
                start: p.start,
                exec_at: None,
                said_hello: true,
            },
        );
    }
    let mut datagrams = SpillReader::new(BufReader::with_capacity(1 << 20, spill_file));
    while let Some(datagram) = datagrams.next().map_err(|e| fail(e.to_string()))? {
        // (each process's first datagram says which recording it spilled for)
        match protocol::spill_session(datagram) {
            Some(id) if id != data.session.start_unix_ns => {
                return Err(fail(format!(
                "it belongs to another recording than {} (session {id}, not {}); left as it was",
                source.display(),
                data.session.start_unix_ns
            )))
            }
            Some(_) => {}
            None => m.handle(datagram)?,
        }
    }
    let outcome = m.finish(&data, file, &spill).map_err(out_err)?;
    pending.commit().map_err(out_err)?;
    let _ = std::fs::remove_file(&spill);
    if let Some(partial) = partial {
        // (its content is in the recovered file now)
        let _ = std::fs::remove_file(partial);
    }
    Ok(outcome)
}

/// The spill's datagrams (`u32` length, then the datagram), one at a time
/// into a reused buffer. A torn last one, or a length no runtime writes
/// (the rest cannot be framed), ends it.
struct SpillReader<R> {
    r: R,
    buf: Vec<u8>,
}

impl<R: Read> SpillReader<R> {
    fn new(r: R) -> Self {
        SpillReader { r, buf: Vec::new() }
    }

    fn next(&mut self) -> io::Result<Option<&[u8]>> {
        let mut len = [0u8; 4];
        if !read_all(&mut self.r, &mut len)? {
            return Ok(None);
        }
        let len = u32::from_ne_bytes(len) as usize;
        if len > protocol::MAX_DATAGRAM {
            return Ok(None);
        }
        self.buf.resize(len, 0);
        Ok(read_all(&mut self.r, &mut self.buf)?.then_some(&self.buf[..]))
    }
}

/// Fills `buf`; false when the input ends first.
fn read_all(r: &mut impl Read, buf: &mut [u8]) -> io::Result<bool> {
    match r.read_exact(buf) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

/// A live process holding `path` open, if any.
fn writer_of(path: &Path) -> Option<u32> {
    let target = std::fs::canonicalize(path).ok()?;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l == target) {
                return Some(pid);
            }
        }
    }
    None
}

/// The recovered part of the new file, written as the assembler hands it
/// out.
struct Streamed<W: Write> {
    w: DataWriter<W>,
    /// The data file (for messages).
    path: PathBuf,
    events: u64,
}

impl<W: Write> Sink for Streamed<W> {
    fn record(&mut self, record: &Record) -> Result<(), RecordError> {
        self.w
            .write_record(record)
            .map_err(|source| RecordError::Output {
                path: self.path.clone(),
                source,
            })
    }

    fn events(&mut self, thread: ThreadKey, events: &EventEncoder) -> Result<(), RecordError> {
        self.events += events.len() as u64;
        self.w
            .write_encoded_events(thread, events)
            .map_err(|source| RecordError::Output {
                path: self.path.clone(),
                source,
            })
    }
}

/// The new file's writer: appends to the copy of the intact part.
type NewFile = SkipHeader<BufWriter<File>>;

struct Merge {
    asm: Assembler,
    out: Streamed<NewFile>,
    /// Index of each thread's first event in the spill.
    first_index: HashMap<ThreadKey, u64>,
}

impl Merge {
    /// One spilled datagram, through the recorder's own assembler.
    fn handle(&mut self, datagram: &[u8]) -> Result<(), RecordError> {
        let Ok(msg) = Msg::parse(datagram) else {
            return Ok(());
        };
        if let Msg::Events { batch, from } = msg {
            if !batch.discard {
                self.first_index
                    .entry(thread_of(from))
                    .or_insert(batch.first_index);
            }
        }
        self.asm.message(
            msg,
            protocol::events(datagram),
            protocol::control_text(datagram),
            &mut self.out,
        )?;
        Ok(())
    }

    /// Writes what the streams still hold, the tables and the footer.
    fn finish(mut self, data: &DataFile, file: &Path, spill: &Path) -> io::Result<RecoverOutcome> {
        let as_io = |e: RecordError| io::Error::other(e.to_string());
        let rest: Vec<_> = self
            .asm
            .threads
            .streams_mut()
            .filter_map(|(key, s)| s.take_batch(true).map(|b| (key, b)))
            .collect();
        for (thread, b) in rest {
            self.out.events(thread, &b).map_err(as_io)?;
        }
        self.asm.write_book(&mut self.out).map_err(as_io)?;
        let recovered = self.out.events;
        // Each recovered thread's last event.
        let last: BTreeMap<ThreadKey, Timestamp> = self
            .asm
            .threads
            .streams()
            .map(|(key, s)| (key, s.last_ts()))
            .collect();
        let w = &mut self.out.w;
        let new_functions = function_table(&self.asm.book.lock(), data.functions.len(), None, true);
        if !new_functions.is_empty() {
            w.write_record(&Record::Functions(new_functions))?;
        }
        if let Some(dropped) = self.asm.threads.dropped_record() {
            // (--min-time: the spill's counts add to the file's)
            w.write_record(&dropped)?;
        }
        let lost = self.lost_events(data);
        self.write_tables(data, &last)?;
        let w = &mut self.out.w;
        let end = last.values().max().copied();
        let mut session = data.session.clone();
        let lost_note = if lost > 0 {
            format!("about {lost} events lost at the break; ")
        } else {
            String::new()
        };
        session.notes.push(format!(
            "{recovered} events of {} threads recovered from {} after the recorder ended \
             ({lost_note}no OS events after it)",
            last.len(),
            spill.display()
        ));
        w.write_record(&Record::Session(session))?;
        let old = data.footer.clone().unwrap_or_default();
        w.write_record(&Record::Footer(Footer {
            end: end.map_or(old.end, |e| e.max(old.end)),
            lost_events: old.lost_events + lost,
            events: data.total_events() + recovered,
            ..old
        }))?;
        w.flush()?;
        let out = self.out.w.into_inner().inner;
        out.into_inner()
            .map_err(io::IntoInnerError::into_error)?
            .sync_all()?;
        Ok(RecoverOutcome {
            output: file.to_owned(),
            spill: spill.to_owned(),
            events: recovered,
            threads: last.len(),
            lost_events: lost,
        })
    }

    /// Events the runtime numbered but neither the file nor the spill holds:
    /// for threads the file already had, the gap between the events it holds
    /// and the index of the first spilled one; within the spill, the gaps
    /// the stream noticed.
    fn lost_events(&self, data: &DataFile) -> u64 {
        let mut in_file: HashMap<ThreadKey, u64> = HashMap::new();
        for c in &data.event_chunks {
            *in_file.entry(c.key()).or_default() += u64::from(c.count);
        }
        let mut lost = self.asm.threads.lost_events;
        for (key, &first) in &self.first_index {
            // The stream began at index 0, so it counted the first index as lost.
            lost = lost.saturating_sub(first);
            lost += first.saturating_sub(in_file.get(key).copied().unwrap_or(0));
        }
        lost
    }

    /// Thread ends (their last event) and the processes that began after the break.
    fn write_tables(
        &mut self,
        data: &DataFile,
        last: &BTreeMap<ThreadKey, Timestamp>,
    ) -> io::Result<()> {
        let command_of = |pid: u32| -> Vec<String> {
            let mut p = Some(pid);
            // (bounded: a damaged spill can make processes each other's parent)
            let mut hops = 0;
            while let Some(q) = p.filter(|_| hops < 64) {
                hops += 1;
                if let Some(info) = data.processes.iter().find(|x| x.pid == q) {
                    return info.command.clone();
                }
                p = self
                    .asm
                    .procs
                    .get(&q)
                    .and_then(|s| s.ppid)
                    .filter(|&pp| pp != q);
            }
            Vec::new()
        };
        // Each process's last thread end (the keys are in pid order).
        let mut ends: Vec<(u32, Timestamp)> = Vec::new();
        for (k, &t) in last {
            match ends.last_mut() {
                Some((pid, end)) if *pid == k.pid => *end = (*end).max(t),
                _ => ends.push((k.pid, t)),
            }
        }
        let known_pids: std::collections::HashSet<u32> =
            data.processes.iter().map(|p| p.pid).collect();
        let known_threads: HashMap<ThreadKey, &ThreadInfo> =
            data.threads.iter().map(|t| (t.key(), t)).collect();
        for (pid, end) in ends {
            let end = Some(end);
            let known = known_pids.contains(&pid);
            let sp = self.asm.procs.get(&pid);
            self.out.w.write_record(&Record::Process(ProcessInfo {
                pid,
                ppid: if known { None } else { sp.and_then(|p| p.ppid) },
                command: if known { Vec::new() } else { command_of(pid) },
                start: if known {
                    None
                } else {
                    sp.and_then(|p| p.start)
                },
                end,
                exit_status: None,
            }))?;
        }
        for (&key, &end) in last {
            let ThreadKey { pid, tid, serial } = key;
            let known = known_threads.get(&key).copied();
            let name = match known {
                Some(t) => t.name.clone(),
                None => program_name(&command_of(pid)).unwrap_or_default(),
            };
            let start = match known {
                Some(t) => t.start,
                None if pid == tid => self.asm.procs.get(&pid).and_then(|p| p.start),
                None => None,
            };
            self.out.w.write_record(&Record::Thread(ThreadInfo {
                pid,
                tid,
                serial,
                name,
                start,
                end: Some(known.and_then(|t| t.end).map_or(end, |e| e.max(end))),
            }))?;
        }
        Ok(())
    }
}

/// The data writer starts every file with a file header; the copy being
/// appended to has one already, so those bytes are dropped.
struct SkipHeader<W: Write> {
    inner: W,
    skip: usize,
}

impl<W: Write> Write for SkipHeader<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.skip > 0 {
            let n = self.skip.min(buf.len());
            self.skip -= n;
            return Ok(n);
        }
        self.inner.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(parts: &[&[u8]]) -> Vec<u8> {
        let mut b = Vec::new();
        for d in parts {
            b.extend_from_slice(&(d.len() as u32).to_ne_bytes());
            b.extend_from_slice(d);
        }
        b
    }

    fn read(bytes: Vec<u8>) -> Vec<Vec<u8>> {
        let mut r = SpillReader::new(std::io::Cursor::new(bytes));
        let mut got = Vec::new();
        while let Some(d) = r.next().unwrap() {
            got.push(d.to_vec());
        }
        got
    }

    #[test]
    fn spill_datagrams_are_split_and_a_torn_tail_dropped() {
        let mut b = frames(&[b"abc", b"de"]);
        b.extend_from_slice(&9u32.to_ne_bytes());
        b.extend_from_slice(b"xy");
        assert_eq!(read(b), [b"abc".to_vec(), b"de".to_vec()]);
        // a torn length
        let mut b = frames(&[b"abc"]);
        b.extend_from_slice(&[1, 0]);
        assert_eq!(read(b), [b"abc".to_vec()]);
    }

    #[test]
    fn a_length_no_runtime_writes_ends_the_spill_without_allocating_it() {
        let mut b = frames(&[b"abc"]);
        b.extend_from_slice(&u32::MAX.to_ne_bytes());
        b.extend_from_slice(&[0; 64]);
        assert_eq!(read(b), [b"abc".to_vec()]);
    }

    #[test]
    fn the_header_is_skipped_once() {
        let mut w = SkipHeader {
            inner: Vec::new(),
            skip: 3,
        };
        w.write_all(b"ab").and_then(|()| w.write_all(b"cdef")).ok();
        assert_eq!(w.inner, b"def");
    }

    #[test]
    fn spill_path_appends_to_the_name() {
        assert_eq!(
            spill_path(Path::new("d/x.lapse")),
            Path::new("d/x.lapse.spill")
        );
    }
}
