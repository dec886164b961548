//! The lapse data file.
//!
//! This crate owns what a recording *is* on disk and in memory: the model
//! types every other stage speaks ([`model`]), the compact codec for
//! instrumentation event streams ([`codec`]), and the chunked, self-checking,
//! compressed file format ([`writer`], [`reader`]).
//!
//! Design constraints:
//! - The file is a header followed by self-checking chunks (length, raw length,
//!   CRC-32) appended as data arrives, so a file cut off at any byte still
//!   yields every complete chunk before the cut.
//! - No field of a file makes the reader allocate or work beyond what the
//!   file's contents justify: each chunk's size and event or sample count is
//!   bounded by what the writer produces (see [`mod@format`]), a compressed chunk
//!   may expand only so many times (so what a file holds is bounded by its
//!   size), and a table is as long as the entries the file holds (ids are not
//!   trusted).
//! - The reader never panics on any input; every failure is a [`DataError`]
//!   naming the file and, where it applies, the byte offset.

pub mod alloc_count;
pub mod codec;
pub mod error;
pub mod format;
pub mod model;
pub mod output;
pub mod packing;
pub mod reader;
mod scan;
pub mod varint;
pub mod writer;

pub use error::DataError;
pub use model::*;
pub use output::OutputFile;
pub use reader::{open_regular, Damage, DataFile, EventChunkRef};
pub use writer::DataWriter;
