//! The analysis: turns collection events (instrumentation) and samples
//! (sampling) into the data values of SPEC section 2.
//!
//! Constraints: no I/O, no CLI, no threads of its own. Callers feed events
//! thread by thread ([`instrument::ThreadRun`]) into an [`instrument::Accumulator`]
//! owned by one worker, then [`instrument::Accumulator::merge`] the workers'
//! results; memory grows with threads × stack depth and with the number of
//! distinct functions, never with the number of events.

pub mod fine;
pub mod instrument;
pub mod nesting;
pub mod offcpu;
pub mod sample;
pub mod tree;
pub mod values;

pub use fine::Fine;
pub use instrument::{Accumulator, ApplicationRule, Config, ThreadRun};
pub use tree::{CallTree, FrameKey, NodeId};
pub use values::{FunctionStats, ModuleStats, SessionTotals, ThreadStats, TimeValue, TimeValues};
