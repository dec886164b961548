//! The data file while recording: every write goes through here, so the
//! event count, the periodic flush and the error context live in one place.
//!
//! The file is written under a temporary name beside the output (0600) and
//! put in place once it holds events ([`Output::commit`]): a recording that
//! fails before that, or records nothing, leaves an existing file as it was.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::time::{Duration, Instant};

use lapse_data::codec::EventEncoder;
use lapse_data::{DataWriter, Record};

use crate::output_file::PendingFile;
use crate::RecordError;

/// The file is flushed at least this often (SPEC 8: at most ~100 ms lost).
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);

pub struct Output {
    file: PendingFile,
    writer: DataWriter<BufWriter<File>>,
    last_flush: Instant,
    pub events: u64,
}

impl Output {
    pub fn create(path: &Path) -> Result<Output, RecordError> {
        let err = |source| RecordError::Output {
            path: path.to_owned(),
            source,
        };
        let (pending, file) = PendingFile::create(path, "partial").map_err(err)?;
        let writer = DataWriter::new(BufWriter::with_capacity(1 << 20, file)).map_err(err)?;
        Ok(Output {
            file: pending,
            writer,
            last_flush: Instant::now(),
            events: 0,
        })
    }

    fn err(&self) -> impl Fn(std::io::Error) -> RecordError + '_ {
        |source| RecordError::Output {
            path: self.file.final_path().to_owned(),
            source,
        }
    }

    pub fn record(&mut self, record: &Record) -> Result<(), RecordError> {
        let r = self.writer.write_record(record);
        r.map_err(self.err())
    }

    pub fn events(&mut self, pid: u32, tid: u32, events: &EventEncoder) -> Result<(), RecordError> {
        self.events += events.len() as u64;
        let r = self.writer.write_encoded_events(pid, tid, events);
        r.map_err(self.err())
    }

    /// Flushes when the last flush is older than [`FLUSH_EVERY`] (or
    /// `force`); the first flush that wrote events puts the file in place.
    pub fn flush(&mut self, force: bool) -> Result<(), RecordError> {
        if force || self.last_flush.elapsed() >= FLUSH_EVERY {
            self.last_flush = Instant::now();
            let r = self.writer.flush();
            r.map_err(self.err())?;
            if self.events > 0 {
                self.commit()?;
            }
        }
        Ok(())
    }

    /// Puts the file in place under its name (replacing an older one).
    pub fn commit(&mut self) -> Result<(), RecordError> {
        let r = self.file.commit();
        r.map_err(self.err())
    }

    /// True when the periodic flush is due.
    pub fn due(&self) -> bool {
        self.last_flush.elapsed() >= FLUSH_EVERY
    }

    /// The output's name (the file is there once committed).
    pub fn path(&self) -> &Path {
        self.file.final_path()
    }

    pub fn bytes(&self) -> u64 {
        self.writer.bytes_written()
    }
}
