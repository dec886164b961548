//! The data file while recording: every write goes through here, so the
//! event count, the periodic flush and the error context live in one place.
//!
//! The file is written under a temporary name beside the output (0600) and
//! put in place once it holds events ([`Output::commit`]): a recording that
//! fails before that, or records nothing, leaves an existing file as it was.
//! An output that is not a regular file (`/dev/null`, a pipe) is written in
//! place ([`lapse_data::output`]).
//!
//! A write that fails (a full disk) stops the recording, not the session:
//! it is said once (a [`Notice`]), every later write is skipped, and the session
//! goes on supervising the target (and draining the runtime, so that the
//! target never waits) until it ends; [`Output::failed`] then tells.
//!
//! The recorder follows threads by the kernel's ids; what is written of a
//! thread here is stamped with its id's serial ([`ThreadSerials`]), which
//! steps when the session lets the thread go ([`Output::let_go`]).

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::time::{Duration, Instant};

use lapse_data::codec::EventEncoder;
use lapse_data::{DataWriter, OutputFile, Record, ThreadKey};

use super::serials::ThreadSerials;
use crate::{Notice, Notices, RecordError};

/// The file is flushed at least this often (SPEC 8: at most ~100 ms lost).
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);

pub struct Output {
    file: OutputFile,
    writer: DataWriter<BufWriter<File>>,
    last_flush: Instant,
    pub events: u64,
    /// The first write that failed; nothing is written after it.
    failed: Option<std::io::Error>,
    /// Where the failure is said, once.
    notices: Notices,
    serials: ThreadSerials,
}

impl Output {
    pub fn create(path: &Path, notices: Notices) -> Result<Output, RecordError> {
        let err = |source| RecordError::Output {
            path: path.to_owned(),
            source,
        };
        let (pending, file) = OutputFile::create(path, "partial").map_err(err)?;
        // (event chunks in LZ4: compressed while the target runs; see
        // lapse_data::packing)
        let writer = DataWriter::new(BufWriter::with_capacity(1 << 20, file))
            .map_err(err)?
            .events_lz4();
        Ok(Output {
            file: pending,
            writer,
            last_flush: Instant::now(),
            events: 0,
            failed: None,
            notices,
            serials: ThreadSerials::default(),
        })
    }

    /// Notes a failed write: said once, and recording stops.
    fn check(&mut self, r: std::io::Result<()>) -> Result<(), RecordError> {
        if let Err(e) = r {
            if self.failed.is_none() {
                self.notices.say(Notice::WriteFailed(format!(
                    "cannot write the data file {}: {e}; recording stopped, waiting for the target to end",
                    self.file.path().display()
                )));
                self.failed = Some(e);
            }
        }
        Ok(())
    }

    /// The write that stopped the recording, if one failed.
    pub fn failed(&mut self) -> Option<std::io::Error> {
        self.failed
            .as_ref()
            .map(|e| std::io::Error::new(e.kind(), e.to_string()))
    }

    pub fn record(&mut self, record: &Record) -> Result<(), RecordError> {
        if self.failed.is_some() {
            return Ok(());
        }
        let of = |pid, tid| self.serials.of(ThreadKey::new(pid, tid)).serial;
        let serial = match record {
            Record::Thread(t) => of(t.pid, t.tid),
            Record::OsEvents(b) => of(b.pid, b.tid),
            Record::Inherited(i) => of(i.pid, i.tid),
            _ => 0,
        };
        let r = if serial == 0 {
            self.writer.write_record(record)
        } else {
            let mut record = record.clone();
            match &mut record {
                Record::Thread(t) => t.serial = serial,
                Record::OsEvents(b) => b.serial = serial,
                Record::Inherited(i) => i.serial = serial,
                _ => {}
            }
            self.writer.write_record(&record)
        };
        self.check(r)
    }

    /// Thread `thread` was let go, all of it written: what is written
    /// under its id from now on is a later thread's.
    pub fn let_go(&mut self, thread: ThreadKey) {
        self.serials.let_go(thread.tid);
    }

    pub fn events(&mut self, thread: ThreadKey, events: &EventEncoder) -> Result<(), RecordError> {
        if self.failed.is_some() {
            return Ok(());
        }
        self.events += events.len() as u64;
        let r = self
            .writer
            .write_encoded_events(self.serials.of(thread), events);
        self.check(r)
    }

    /// `thread` as the file names it (with its id's serial), for chunks
    /// made elsewhere ([`Self::chunks`]).
    pub fn stamp(&self, thread: ThreadKey) -> ThreadKey {
        self.serials.of(thread)
    }

    /// Appends event chunks a worker made (`workers.rs`) holding `events`
    /// events; `made` is the error that kept it from making them.
    pub fn chunks(
        &mut self,
        events: u64,
        chunks: &[u8],
        made: Option<std::io::Error>,
    ) -> Result<(), RecordError> {
        if self.failed.is_some() {
            return Ok(());
        }
        if let Some(e) = made {
            return self.check(Err(e));
        }
        self.events += events;
        let r = self.writer.write_chunks(chunks);
        self.check(r)
    }

    /// Flushes when the last flush is older than [`FLUSH_EVERY`] (or
    /// `force`); the first flush that wrote events puts the file in place.
    pub fn flush(&mut self, force: bool) -> Result<(), RecordError> {
        if self.failed.is_some() {
            return Ok(());
        }
        if force || self.last_flush.elapsed() >= FLUSH_EVERY {
            self.last_flush = Instant::now();
            let r = self.writer.flush();
            self.check(r)?;
            if self.events > 0 && self.failed.is_none() {
                self.commit()?;
            }
        }
        Ok(())
    }

    /// Puts the file in place under its name (replacing an older one).
    pub fn commit(&mut self) -> Result<(), RecordError> {
        let r = self.file.commit();
        self.check(r)
    }

    /// True when the periodic flush is due.
    pub fn due(&self) -> bool {
        self.last_flush.elapsed() >= FLUSH_EVERY
    }

    /// The output's name (the file is there once committed).
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// True for an output written where it is (a device, a pipe): nothing
    /// may be created beside it.
    pub fn is_in_place(&self) -> bool {
        self.file.is_in_place()
    }

    pub fn bytes(&self) -> u64 {
        self.writer.bytes_written()
    }
}
