//! The analysis: turns collection events (instrumentation) and samples
//! (sampling) into the data values of SPEC section 2.
//!
//! Constraints: no CLI, no output, no file opened by name. The engine
//! (every module but [`run`]) has no I/O and no threads of its own: callers
//! feed events thread by thread ([`instrument::ThreadRun`]) into an
//! [`instrument::Accumulator`] owned by one worker, then
//! [`instrument::Accumulator::merge`] the workers' results; memory grows with
//! threads × stack depth and with the number of distinct functions, never
//! with the number of events. [`run`] is the driver that reports and exports
//! share: it reads an opened [`lapse_data::DataFile`]'s chunks and feeds the
//! engine on rayon's pool, as a [`run::Query`] says.

pub mod fine;
pub mod instrument;
pub mod nesting;
pub mod offcpu;
pub mod run;
pub mod sample;
pub mod summary;
pub mod tree;
pub mod values;

pub use fine::Fine;
pub use instrument::{Accumulator, ApplicationRule, Config, ThreadRun};
pub use run::{analyze, Analysis, Query, QueryError};
pub use summary::SessionSummary;
pub use tree::{CallTree, FrameKey, NodeId};
pub use values::{FunctionStats, ModuleStats, SessionTotals, ThreadStats, TimeValue, TimeValues};
