//! Symbolization for lapse: what function, source line and inline chain an
//! address in an ELF module stands for.
//!
//! This crate owns reading ELF modules: build-ids, `PT_LOAD` layout (to turn
//! an absolute address in a mapping into a module-relative one), the
//! `.symtab`/`.dynsym` function symbols (and PLT stubs, `foo@plt`), the
//! functions of code no symbol names (from `.eh_frame`), JIT code's perf
//! maps (`/tmp/perf-PID.map`, parsed from text), the `lapse` crate's site
//! records (the names of `#[lapse::profile]` functions and `scope!`
//! blocks, in a `lapse_sites` section), DWARF lines and inline frames (via
//! `addr2line`/`gimli`/`object`), demangling (Rust and C++), separate debug
//! files, and handing out the unwind sections (`.eh_frame`, ...) an unwinder
//! needs.
//!
//! Design constraints:
//! - Never panics on a bad ELF or DWARF: a module that cannot be parsed is a
//!   [`SymbolError`] naming the path; damaged debug info only makes lookups
//!   return less.
//! - File I/O is limited to [`ElfModule::open`] (which maps the file once and
//!   looks for a debug file in the conventional places);
//!   [`ElfModule::from_bytes`] does none.
//! - Many lookups are cheap: one parse per module ([`SymbolCache`]), symbols
//!   pre-sorted and demangled, DWARF units parsed lazily and kept.
//! - Memory follows the question: [`ElfModule::location`] parses only the
//!   unit holding the address (keeping a few recent ones) and decompresses
//!   only the sections it reads; the whole DWARF (every unit, for inline
//!   chains) is parsed by the first [`ElfModule::symbolize`] only.
//! - Addresses taken and returned are module-relative (the ELF's virtual
//!   addresses), the address `addr2line -e MODULE` takes.

mod bytes;
mod cache;
mod debugfile;
mod demangle;
mod dwarf;
mod elf;
mod error;
mod perfmap;
mod plt;
mod ranges;
mod sites;
mod symtab;

pub use bytes::{LoadSegment, Section, SectionData};
pub use cache::SymbolCache;
pub use demangle::demangle;
pub use elf::{map_file, ElfModule, SymbolFrame, Symbolized, UnwindSections};
pub use error::SymbolError;
pub use perfmap::PerfMap;
pub use ranges::{eh_frame_functions, FramePointerUse};
pub use sites::{SiteKind, SiteRecord, SITES_SECTION};
pub use symtab::FunctionSymbol;
