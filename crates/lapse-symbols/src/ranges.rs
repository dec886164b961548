//! Functions of code no symbol names, from the unwind table.
//!
//! Stripped code (Debian's libraries, a `strip`ped program) keeps
//! `.eh_frame`, whose FDEs each cover one function's code: so an address no
//! symbol holds still belongs to a known range, which lapse names
//! `module+0xSTART` (SPEC 2.2) instead of making every sampled address a
//! function of its own. The module's entry point, when no symbol holds it,
//! is `_start` (the dynamic loader's is in no symbol table and, being the
//! outermost frame, in no FDE either); it reaches to the next FDE or
//! symbol.
//!
//! The table is parsed on the first lookup that needs it, never while a
//! module is only opened for unwinding.

use gimli::{BaseAddresses, CieOrFde, EhFrame, RunTimeEndian, UnwindSection};

use crate::bytes::{LoadSegment, Section};
use crate::symtab::SymbolTable;

/// Code ranges (start, size) by start, from the FDEs, and the entry range.
#[derive(Debug, Default)]
pub(crate) struct CodeRanges {
    fdes: Vec<(u64, u64)>,
    entry: Option<(u64, u64)>,
}

/// What a module holds that the ranges are made from.
pub(crate) struct RangeSource<'a> {
    pub eh_frame: Option<&'a Section>,
    pub text_svma: Option<u64>,
    pub little_endian: bool,
    pub address_size: u8,
    pub entry: u64,
    pub segments: &'a [LoadSegment],
    pub symbols: &'a SymbolTable,
}

impl CodeRanges {
    pub(crate) fn new(src: &RangeSource<'_>) -> CodeRanges {
        let mut fdes = src
            .eh_frame
            .map(|eh| fde_ranges(eh, src))
            .unwrap_or_default();
        fdes.sort_unstable();
        fdes.dedup_by_key(|r| r.0);
        let entry = entry_range(&fdes, src);
        CodeRanges { fdes, entry }
    }

    /// The range holding `addr` and whether it is the entry point's.
    pub(crate) fn lookup(&self, addr: u64) -> Option<(u64, u64, bool)> {
        if let Some((start, size)) = self.entry {
            if addr >= start && addr - start < size {
                return Some((start, size, true));
            }
        }
        let i = self.fdes.partition_point(|r| r.0 <= addr);
        let &(start, size) = self.fdes[..i].last()?;
        (addr - start < size).then_some((start, size, false))
    }
}

/// Every FDE's (initial address, length); a damaged table yields what was
/// read before the damage.
fn fde_ranges(eh: &Section, src: &RangeSource<'_>) -> Vec<(u64, u64)> {
    let endian = if src.little_endian {
        RunTimeEndian::Little
    } else {
        RunTimeEndian::Big
    };
    eh_frame_ranges(
        &eh.data[..],
        eh.svma,
        src.text_svma,
        endian,
        src.address_size,
    )
}

/// Every FDE's (initial address, length) in the `.eh_frame` section `data`
/// found at address `eh_frame_addr` of a little-endian 64-bit module (`.text`
/// at `text_addr`): the functions of code no symbol names. A damaged table
/// yields what was read before the damage.
pub fn eh_frame_functions(
    data: &[u8],
    eh_frame_addr: u64,
    text_addr: Option<u64>,
) -> Vec<(u64, u64)> {
    let mut out = eh_frame_ranges(data, eh_frame_addr, text_addr, RunTimeEndian::Little, 8);
    out.sort_unstable();
    out.dedup_by_key(|r| r.0);
    out
}

fn eh_frame_ranges(
    data: &[u8],
    eh_frame_addr: u64,
    text_addr: Option<u64>,
    endian: RunTimeEndian,
    address_size: u8,
) -> Vec<(u64, u64)> {
    let mut eh_frame = EhFrame::new(data, endian);
    eh_frame.set_address_size(address_size);
    let mut bases = BaseAddresses::default().set_eh_frame(eh_frame_addr);
    if let Some(text) = text_addr {
        bases = bases.set_text(text);
    }
    let mut out = Vec::new();
    let mut entries = eh_frame.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        if let Ok(fde) =
            partial.parse(|section, bases, offset| section.cie_from_offset(bases, offset))
        {
            if fde.len() > 0 {
                out.push((fde.initial_address(), fde.len()));
            }
        }
    }
    out
}

/// The entry point's range when no symbol holds it: the FDE holding it, or
/// from it to the next FDE or symbol (at most the end of its segment).
fn entry_range(fdes: &[(u64, u64)], src: &RangeSource<'_>) -> Option<(u64, u64)> {
    let entry = src.entry;
    let segment = src
        .segments
        .iter()
        .find(|s| s.executable && entry >= s.vaddr && entry - s.vaddr < s.memsz)?;
    if entry == 0 || src.symbols.lookup(entry).is_some() {
        return None;
    }
    let i = fdes.partition_point(|r| r.0 <= entry);
    if let Some(&(start, size)) = fdes[..i].last().filter(|r| entry - r.0 < r.1) {
        return Some((start, size));
    }
    let end = [
        fdes.get(i).map(|r| r.0),
        src.symbols.next_start_after(entry),
        Some(segment.vaddr + segment.memsz),
    ]
    .into_iter()
    .flatten()
    .min()?;
    Some((entry, end - entry))
}

/// How many of a module's functions (FDEs of at least 16 bytes) keep a
/// frame pointer: their unwind rules define the frame from `rbp` at some
/// point. Code built with `-fomit-frame-pointer` (the default at `-O1` and
/// above) defines it from `rsp` throughout, so walking `rbp` through it
/// gives wrong stacks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FramePointerUse {
    pub functions: usize,
    pub with_frame_pointer: usize,
}

/// [`FramePointerUse`] of the FDEs in `eh` (x86-64 register numbers).
pub(crate) fn frame_pointer_use(eh: &Section, text_svma: Option<u64>) -> FramePointerUse {
    const RBP: gimli::Register = gimli::X86_64::RBP;
    let mut eh_frame = EhFrame::new(&eh.data[..], RunTimeEndian::Little);
    eh_frame.set_address_size(8);
    let mut bases = BaseAddresses::default().set_eh_frame(eh.svma);
    if let Some(text) = text_svma {
        bases = bases.set_text(text);
    }
    let mut out = FramePointerUse::default();
    let mut ctx = gimli::UnwindContext::new();
    let mut entries = eh_frame.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let Ok(fde) =
            partial.parse(|section, bases, offset| section.cie_from_offset(bases, offset))
        else {
            continue;
        };
        if fde.len() < 16 {
            continue;
        }
        out.functions += 1;
        let Ok(mut rows) = fde.rows(&eh_frame, &bases, &mut ctx) else {
            continue;
        };
        while let Ok(Some(row)) = rows.next_row() {
            if matches!(row.cfa(), gimli::CfaRule::RegisterAndOffset { register, .. } if *register == RBP)
            {
                out.with_frame_pointer += 1;
                break;
            }
        }
    }
    out
}
