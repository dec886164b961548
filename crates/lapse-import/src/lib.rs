//! Chrome Trace Event Format in, lapse instrumentation data out.
//!
//! Any tool that writes Chrome traces (tracing-chrome, Perfetto, `uftrace
//! dump --chrome`) thereby gets lapse's data values. Read: `B`/`E` duration
//! events, `X` complete events (`ts`/`dur` in microseconds, fractional
//! allowed), `M` metadata (`process_name`, `thread_name`), and instant events
//! named `lapse:switch_out` / `lapse:switch_in` as OS events. Both the
//! `{"traceEvents": [...]}` object and a bare array are accepted. Everything
//! else is skipped and counted.
//!
//! Choices where the format is loose:
//! - A function's module is the event's `cat` (category); events without
//!   one belong to a module named after the trace file.
//! - Events are ordered by timestamp; equal timestamps keep file order,
//!   except that the end of an `X` event comes before anything else at the
//!   same time, inner (later-starting) `X` events first, so nesting holds.
//!   A zero-length `X` is a call that contains nothing.
//! - An `E` with a name closes the innermost open event of that name (its
//!   category does not matter); without a name, the innermost open event.
//!   Frames it skips are closed with it, as the analysis repairs any exit.
//! - The file is read as a stream: memory holds the events, not the text.
//! - A thread's timeline runs from its first to its last event.

mod parse;
mod stream;

pub use parse::{import, import_reader, ImportError, Imported};
