//! Progress bars for work that can take more than a second (analysing a large
//! recording), drawn on stderr only when it is a terminal.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use lapse_data::DataFile;
use lapse_report::{analyze, Analysis, Query, ReportError};

/// Recordings smaller than this analyse in well under a second: no bar.
const MIN_EVENTS: u64 = 5_000_000;

/// Runs the analysis, with a progress bar for large instrumentation recordings.
pub fn analyze_with_progress(
    file: &DataFile,
    mut query: Query,
) -> Result<(Analysis, Query), ReportError> {
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
