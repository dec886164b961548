//! User-stack unwinding for lapse samples.
//!
//! This crate owns turning one sample's user registers and copy of the user
//! stack into the list of code addresses on the stack, given the modules
//! mapped in the process. It uses `framehop` (DWARF CFI from `.eh_frame`,
//! `.eh_frame_hdr` or `.debug_frame`, with instruction analysis for
//! prologues/epilogues and a frame-pointer fallback where a module has no
//! unwind information), plus signal frames, which framehop leaves out.
//!
//! Design constraints:
//! - No I/O: modules come in as [`lapse_symbols::UnwindSections`] (views of
//!   already mapped files), the stack as bytes the kernel copied.
//! - Never panics and always terminates: reads outside the stack copy fail,
//!   depth is capped at [`MAX_FRAMES`], a broken chain just ends the stack;
//!   the caller learns which ([`StackEnd`]), so a stack cut at the end of
//!   its copy can be marked as such.
//! - Output addresses are absolute *lookup* addresses: the instruction
//!   pointer for the innermost frame, return address − 1 for callers (inside
//!   the call instruction, where the call-site line and inline chain are).

mod process;
mod sigframe;
mod stack;

pub use process::{ProcessUnwinder, StackEnd};
pub use stack::{StackCopy, UserRegs};

/// Deepest stack kept; deeper stacks are cut at the outermost end.
pub const MAX_FRAMES: usize = 256;
