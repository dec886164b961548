//! The sampling method (`--method sample`, `--pid`): the kernel interrupts
//! the target, each sample's user stack is unwound at once and only its
//! interned stack id is kept; symbols are resolved when the target is done.
//!
//! The journey of a sample, one file per stage: [`attr`] says how the event
//! is opened, [`rings`] opens it on the target and merges the per-CPU rings
//! in time order, [`parse`] decodes a sample's body, [`session`] keeps the
//! address spaces current ([`unwind_glue`]), unwinds, interns frames and
//! stacks ([`stack_table`]) and writes the file, [`symbols`] names the
//! frames. [`driver`] runs it all for a launched command or an attached pid;
//! [`control`] hears the program's pauses, resumes and marks.

mod attr;
mod control;
mod driver;
mod parse;
mod rings;
mod session;
mod stack_table;
mod symbols;
mod unwind_glue;

pub(crate) use driver::record;
