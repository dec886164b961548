//! The data file while recording: every write goes through here, so the
//! event count, the periodic flush and the error context live in one place.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lapse_data::codec::EventEncoder;
use lapse_data::{DataWriter, Record};

use crate::RecordError;

/// The file is flushed at least this often (SPEC 8: at most ~100 ms lost).
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);

pub struct Output {
    path: PathBuf,
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
        let file = File::create(path).map_err(err)?;
        let writer = DataWriter::new(BufWriter::with_capacity(1 << 20, file)).map_err(err)?;
        Ok(Output {
            path: path.to_owned(),
            writer,
            last_flush: Instant::now(),
            events: 0,
        })
    }

    fn err(&self) -> impl Fn(std::io::Error) -> RecordError + '_ {
        |source| RecordError::Output {
            path: self.path.clone(),
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

    /// Flushes when the last flush is older than [`FLUSH_EVERY`] (or `force`).
    pub fn flush(&mut self, force: bool) -> Result<(), RecordError> {
        if force || self.last_flush.elapsed() >= FLUSH_EVERY {
            self.last_flush = Instant::now();
            let r = self.writer.flush();
            r.map_err(self.err())?;
        }
        Ok(())
    }

    /// True when the periodic flush is due.
    pub fn due(&self) -> bool {
        self.last_flush.elapsed() >= FLUSH_EVERY
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn bytes(&self) -> u64 {
        self.writer.bytes_written()
    }
}
