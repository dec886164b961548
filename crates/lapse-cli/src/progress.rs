//! Progress bars for work that can take more than a second (analysing a large
//! recording, resolving symbols at the end of one), drawn on stderr only
//! when it is a terminal.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use lapse_analysis::{analyze, Analysis, Query, QueryError};
use lapse_data::DataFile;
use lapse_record::{RecordError, RecordOptions, RecordOutcome, SymbolProgress};

/// Recordings smaller than this analyse in well under a second: no bar.
const MIN_EVENTS: u64 = 5_000_000;
/// Symbol resolutions of fewer addresses than this get a bar only when they
/// are still going after [`SLOW_SYMBOLS`].
const MIN_ADDRESSES: u64 = 300;
const SLOW_SYMBOLS: Duration = Duration::from_secs(1);

/// Runs the analysis, with a progress bar for large instrumentation recordings.
pub fn analyze_with_progress(
    file: &DataFile,
    mut query: Query,
) -> Result<(Analysis, Query), QueryError> {
    let total = file.total_events();
    if total < MIN_EVENTS || !std::io::stderr().is_terminal() {
        let a = analyze(file, &query)?;
        return Ok((a, query));
    }
    let counter = Arc::new(AtomicU64::new(0));
    query.progress = Some(counter.clone());
    let done = AtomicBool::new(false);
    let result = std::thread::scope(|s| {
        s.spawn(|| {
            let bar = ProgressBar::new(total);
            bar.set_style(
                ProgressStyle::with_template(
                    "analysing {bar:30} {percent:>3}% of {human_len} events ({elapsed})",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            while !done.load(Ordering::Relaxed) {
                bar.set_position(counter.load(Ordering::Relaxed));
                std::thread::sleep(Duration::from_millis(100));
            }
            bar.finish_and_clear();
        });
        let r = analyze(file, &query);
        done.store(true, Ordering::Relaxed);
        r
    });
    query.progress = None;
    Ok((result?, query))
}

/// Records as `opts` says, with a progress bar while symbols are resolved
/// at the end when that is large or slow.
pub fn record_with_progress(mut opts: RecordOptions) -> Result<RecordOutcome, RecordError> {
    if !std::io::stderr().is_terminal() {
        return lapse_record::record(&opts);
    }
    let progress = Arc::new(SymbolProgress::default());
    opts.symbol_progress = Some(progress.clone());
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let watcher = s.spawn(|| {
            let mut bar: Option<ProgressBar> = None;
            let mut started: Option<Instant> = None;
            while !done.load(Ordering::Relaxed) {
                // Woken at once when the recording ends.
                std::thread::park_timeout(Duration::from_millis(100));
                let (total, resolved) = (progress.total(), progress.done());
                if total == 0 {
                    continue;
                }
                let started = *started.get_or_insert_with(Instant::now);
                let large = total >= MIN_ADDRESSES || started.elapsed() >= SLOW_SYMBOLS;
                if bar.is_none() && resolved < total && large {
                    let b = ProgressBar::new(total);
                    b.set_style(
                        ProgressStyle::with_template(
                            "resolving symbols {bar:30} {pos}/{len} addresses ({elapsed})",
                        )
                        .unwrap_or_else(|_| ProgressStyle::default_bar()),
                    );
                    bar = Some(b);
                }
                if let Some(b) = &bar {
                    b.set_length(total);
                    b.set_position(resolved);
                }
            }
            if let Some(b) = bar {
                b.finish_and_clear();
            }
        });
        let r = lapse_record::record(&opts);
        done.store(true, Ordering::Relaxed);
        watcher.thread().unpark();
        r
    })
}

/// A reader of a file of `len` bytes with a progress bar (on a terminal,
/// for files of 50 MB and more) that follows what has been read.
pub fn reading(reader: impl std::io::Read, len: u64, what: &str) -> impl std::io::Read {
    let bar = (len >= 50 << 20 && std::io::stderr().is_terminal()).then(|| {
        let b = ProgressBar::new(len);
        b.set_style(
            ProgressStyle::with_template(&format!(
                "{what} {{bar:30}} {{percent:>3}}% of {{total_bytes}} ({{elapsed}})"
            ))
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b
    });
    Reading { inner: reader, bar }
}

struct Reading<R> {
    inner: R,
    bar: Option<ProgressBar>,
}

impl<R: std::io::Read> std::io::Read for Reading<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(b) = &self.bar {
            b.inc(n as u64);
        }
        Ok(n)
    }
}

impl<R> Drop for Reading<R> {
    fn drop(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}
