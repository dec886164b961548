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
//! - A thread's timeline runs from its first to its last event.

mod parse;

pub use parse::{import, ImportError, Imported};
