//! Run-time patching of an executable built without probes (issue #28):
//! the plan the runtime applies at start-up (`lapse-rt/csrc/patch.c`).
//!
//! For every function of the executable's symbol table in `.text`, the
//! jump to a per-function stub replaces the instructions at its entry; the
//! stub calls the runtime's entry hook (which hooks the return address to
//! the return trampoline, as `-pg -mfentry` does), runs the displaced
//! instructions relocated, and jumps back. A function is skipped, never
//! half-patched, when it is shorter than the jump, when an instruction in
//! the displaced bytes cannot move (a call, an interrupt, one the encoder
//! cannot relocate), or when any branch of the program goes into the
//! displaced bytes past their first instruction.
//!
//! The stubs are built here, for a region at a fixed distance below the
//! executable's lowest segment: every rel32 between stubs and code is then
//! the same wherever ASLR loads the executable, and the runtime only copies
//! bytes (or, when that place is taken, as below a shared library, maps the
//! region elsewhere and moves the plan's fixup fields by the difference).
//! The plans work on the file's bytes; `select.rs` picks the modules.

mod relocate;
mod select;

pub use select::plan_patching;

use std::collections::BTreeMap;
use std::fmt;

use object::elf::{PF_X, PT_LOAD};
use object::read::elf::{ElfFile64, FileHeader, ProgramHeader};
use object::{Object, ObjectSection, ObjectSymbol, SectionKind, SymbolKind};

use lapse_rt::protocol::plan as wire;
use relocate::Function;

/// Virtual addresses are the module's plus this: positive whatever the
/// region's (negative) offset, so the encoder never sees a wrapped address.
const BASE: u64 = 1 << 40;
/// Stub records start 16-byte aligned.
const ALIGN: usize = 16;
/// The region ends this far below the executable's lowest segment.
const GAP: u64 = 1 << 16;
const PAGE: u64 = 4096;
/// The lowest address a region may take (`vm.mmap_min_addr`'s default).
const MIN_ADDR: u64 = 1 << 16;

/// Why a function is not patched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Skip {
    /// Fewer bytes than the 5-byte jump.
    TooShort,
    /// The displaced bytes hold a call (its return address would be in the
    /// stub, where no unwinder finds a frame).
    CallInPrologue,
    /// An instruction the decoder does not know.
    Undecodable,
    /// An instruction in the displaced bytes cannot be relocated.
    Unrelocatable,
    /// A branch of the program goes into the displaced bytes.
    BranchIntoPatch,
    /// C run-time start-up code (`_start` and the like: no caller to return to).
    StartUp,
    /// A part of another function (gcc's `f.cold`), entered by a jump from
    /// inside it: no return address on top of the stack.
    PartOfAnother,
    /// Left out by `--patch` or `--no-patch`.
    NotSelected,
    /// The helpers of lapse's own header (`lapse header`): they talk to
    /// the recorder, they are not the program's work.
    LapseApi,
    /// No room for its stub below the executable.
    NoRoom,
    /// The program carries its own unwinder (a static libgcc): the runtime
    /// cannot unhook the frames before it walks them.
    OwnUnwinder,
    /// A part of the program's own unwinder that reads its own return
    /// address to find where unwinding starts.
    UnwinderStart,
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Skip::TooShort => "shorter than the 5-byte jump",
            Skip::CallInPrologue => "a call in the bytes the jump replaces",
            Skip::Undecodable => "an instruction the decoder does not know",
            Skip::Unrelocatable => "an instruction that cannot be relocated",
            Skip::BranchIntoPatch => "a branch goes into the bytes the jump replaces",
            Skip::StartUp => "C run-time start-up code",
            Skip::PartOfAnother => "a part of another function, entered by a jump",
            Skip::NotSelected => "not selected (--patch, --no-patch)",
            Skip::LapseApi => "lapse's own header (lapse.h)",
            Skip::NoRoom => "no room for its stub below the executable",
            Skip::OwnUnwinder => "the program has its own unwinder (static libgcc), which lapse cannot keep away from the return trampoline",
            Skip::UnwinderStart => "the unwinder's own start, which reads its return address",
        })
    }
}

/// The entries of a program's own unwinder (a static libgcc): their stubs
/// call `lapse_patch_unwind` (the region's second word), which gives every
/// hooked frame its real return address back before they walk the stack,
/// as lapse's wrappers of the shared libgcc's do (`unwind.c`).
const UNWINDER: &[&str] = &[
    "_Unwind_RaiseException",
    "_Unwind_Resume",
    "_Unwind_Resume_or_Rethrow",
    "_Unwind_ForcedUnwind",
    "_Unwind_Backtrace",
];
/// The unwinder's function that takes its own return address for the
/// first frame to walk (libgcc's unwind-dw2.c): never hooked.
const UNWINDER_START: &str = "uw_init_context_1";
/// The region's word for `lapse_patch_unwind`.
const UNWIND_SLOT: usize = 8;

/// Functions that the C run-time's start-up files add (no caller, or run
/// before the runtime could see them).
/// The prefixes of the helpers `lapse header`'s functions use (static
/// functions, so in every program that includes it).
const LAPSE_API: &[&str] = &["lapse_api_", "lapse_nop_"];

const START_UP: &[&str] = &[
    "_start",
    "_init",
    "_fini",
    "deregister_tm_clones",
    "register_tm_clones",
    "__do_global_dtors_aux",
    "frame_dummy",
    "__libc_csu_init",
    "__libc_csu_fini",
    "_dl_relocate_static_pie",
];

/// One function to patch.
#[derive(Clone, Debug)]
pub struct Site {
    /// The jump's address, module-relative.
    pub at: u64,
    /// Its stub's offset in the region.
    pub stub: u32,
    /// The bytes the jump displaces, as the file holds them.
    pub orig: Vec<u8>,
}

/// What the runtime applies, and what was left alone.
#[derive(Debug, Default)]
pub struct Plan {
    /// The region's address minus the load bias.
    pub region: i64,
    pub stubs: Vec<u8>,
    pub entry_slot: u64,
    pub sites: Vec<Site>,
    /// Fields of the stubs to move when the region moves (`lapse_rt.h`'s
    /// fixup words).
    pub fixups: Vec<u32>,
    /// Functions left alone, by reason (names in address order).
    pub skipped: BTreeMap<Skip, Vec<String>>,
    /// The module has NOP sleds for patching (`-fpatchable-function-entry`,
    /// `-mnop-mcount -mrecord-mcount`), and this many sites are sleds.
    pub sleds: Option<usize>,
}

impl Plan {
    /// The plan for the module `data` (an executable or a shared library)
    /// and the functions `wanted` says yes to (by symbol name), or `None`
    /// when it is no x86-64 ELF file or names no function.
    pub fn for_module(data: &[u8], wanted: impl Fn(&str) -> bool) -> Option<Plan> {
        let elf = ElfFile64::<object::Endianness>::parse(data).ok()?;
        if elf.architecture() != object::Architecture::X86_64 {
            return None;
        }
        let endian = elf.endian();
        let mut lowest = u64::MAX;
        let mut code: Vec<(u64, &[u8])> = Vec::new();
        for ph in elf.elf_program_headers() {
            if ph.p_type(endian) != PT_LOAD {
                continue;
            }
            let vaddr = ph.p_vaddr(endian);
            lowest = lowest.min(vaddr);
            if ph.p_flags(endian).0 & PF_X.0 != 0 {
                code.push((vaddr, ph.data(endian, data).ok()?));
            }
        }
        let bytes_at = |start: u64, size: u64| -> Option<&[u8]> {
            code.iter().find_map(|&(v, b)| {
                let off = start.checked_sub(v)?;
                let end = off.checked_add(size)?;
                b.get(usize::try_from(off).ok()?..usize::try_from(end).ok()?)
            })
        };
        let functions = text_functions(&elf);
        if functions.is_empty() {
            return None;
        }
        let entry = elf.entry();
        let mut plan = Plan::default();
        let sled_sections = ["__patchable_function_entries", "__mcount_loc"];
        if sled_sections
            .iter()
            .any(|n| elf.section_by_name(n).is_some())
        {
            plan.sleds = Some(0);
        }
        // (lapse unhooks every frame before an exception walks them, in its
        // wrapper of the shared libgcc's _Unwind_RaiseException; a program
        // linked with its own calls that one directly: its own unwinder's
        // entries get stubs that unhook them, or nothing is patched)
        let own_unwinder = functions.iter().any(|f| f.2 == "_Unwind_RaiseException");
        let refuse = |mut plan: Plan| {
            plan.skipped.clear();
            for f in &functions {
                plan.skip(Skip::OwnUnwinder, &f.2);
            }
            plan
        };
        // (every function's branches count, patched or not: one left out
        // by --patch may still jump into another's first bytes)
        let mut targets = Vec::new();
        for &(start, size, _) in &functions {
            if let Some(code) = bytes_at(start, size) {
                let start = start + BASE;
                relocate::targets(&Function { start, code }, &mut targets);
            }
        }
        targets.sort_unstable();
        targets.dedup();
        let mut found: Vec<(&str, Function<'_>)> = Vec::new();
        for (start, size, name) in &functions {
            let (start, size, name) = (*start, *size, name.as_str());
            if START_UP.contains(&name) || (start..start + size).contains(&entry) {
                plan.skip(Skip::StartUp, name);
                continue;
            }
            if name.contains(".cold") {
                plan.skip(Skip::PartOfAnother, name);
                continue;
            }
            if LAPSE_API.iter().any(|p| name.starts_with(p)) {
                plan.skip(Skip::LapseApi, name);
                continue;
            }
            if own_unwinder && name.starts_with(UNWINDER_START) {
                plan.skip(Skip::UnwinderStart, name);
                continue;
            }
            let unwinder = own_unwinder && UNWINDER.contains(&name);
            if !unwinder && !wanted(name) {
                plan.skip(Skip::NotSelected, name);
                continue;
            }
            match bytes_at(start, size) {
                Some(code) => found.push((
                    name,
                    Function {
                        start: start + BASE,
                        code,
                    },
                )),
                None => plan.skip(Skip::Undecodable, name),
            }
        }
        let mut moves = Vec::new();
        for (name, f) in &found {
            let unwinder = own_unwinder && UNWINDER.contains(name);
            match relocate::displaced(f) {
                // (a branch to the first displaced instruction reaches the
                // jump, as a call would: only the ones past it harm)
                Ok(d) if into(&targets, d.at + 1, d.at + d.len as u64) => {
                    if unwinder {
                        return Some(refuse(plan));
                    }
                    plan.skip(Skip::BranchIntoPatch, name)
                }
                Ok(d) => moves.push((*name, f, d)),
                Err(_) if unwinder => return Some(refuse(plan)),
                Err(why) => plan.skip(why, name),
            }
        }
        // The region: the entry word, then the stubs; below the lowest
        // segment (an estimate of its size places it, then it is filled).
        let estimate: u64 = 16 + moves.len() as u64 * 80;
        let size = estimate.div_ceil(PAGE) * PAGE;
        // (a position-independent executable is loaded high, with room
        // below; a fixed one must leave room above the lowest address)
        let lowest = lowest / PAGE * PAGE;
        let pie = elf.elf_header().e_type(endian) == object::elf::ET_DYN;
        if !pie && lowest < size + GAP + MIN_ADDR {
            if own_unwinder {
                return Some(refuse(plan));
            }
            return Some(plan.none_fit(moves.iter().map(|m| m.0)));
        }
        let region = lowest as i64 - (GAP + size) as i64;
        let region_at = |off: usize| (BASE as i64 + region) as u64 + off as u64;
        plan.region = region;
        plan.entry_slot = 0;
        plan.stubs = vec![0u8; ALIGN];
        for (name, f, d) in moves {
            let s = plan.stubs.len() + 8;
            // (an unwinder entry's stub calls the region's second word)
            let unwinder = own_unwinder && UNWINDER.contains(&name);
            let slot = region_at(if unwinder { UNWIND_SLOT } else { 0 });
            let relocate::Stub { bytes, fixups } = match relocate::stub(f, &d, region_at(s), slot) {
                Ok(b) if (plan.stubs.len() + b.bytes.len()) as u64 <= size => b,
                other => {
                    if unwinder {
                        return Some(refuse(plan));
                    }
                    let why = if other.is_ok() {
                        Skip::NoRoom
                    } else {
                        Skip::Unrelocatable
                    };
                    plan.skip(why, name);
                    continue;
                }
            };
            let from = (s - 8) as u32;
            plan.fixups.extend(fixups.iter().map(|f| match *f {
                relocate::Fixup::Rel32(at) => from + at,
                relocate::Fixup::Rel64(at) => (from + at) | wire::FIXUP64,
            }));
            plan.stubs.extend_from_slice(&bytes);
            plan.stubs
                .resize(plan.stubs.len().next_multiple_of(ALIGN), 0xcc);
            if let Some(n) = plan.sleds.as_mut() {
                *n += usize::from(d.only_nops());
            }
            let at = d.at - BASE;
            let off = (at - (f.start - BASE)) as usize;
            plan.sites.push(Site {
                at,
                stub: s as u32,
                orig: f.code[off..off + d.len].to_vec(),
            });
        }
        Some(plan)
    }

    fn skip(&mut self, why: Skip, name: &str) {
        self.skipped.entry(why).or_default().push(name.to_owned());
    }

    /// No room below the executable for a region: nothing is patched.
    fn none_fit<'a>(mut self, names: impl Iterator<Item = &'a str>) -> Plan {
        for n in names {
            self.skip(Skip::NoRoom, n);
        }
        self
    }

    /// Functions left alone.
    pub fn skipped_count(&self) -> usize {
        self.skipped.values().map(Vec::len).sum()
    }

    /// The plan file (`struct lapse_plan_header` in `lapse_rt.h`) for the
    /// module with device `dev` and inode `ino`.
    pub fn to_bytes(&self, dev: u64, ino: u64) -> Vec<u8> {
        let mut out = vec![0u8; wire::HEADER_LEN];
        out[wire::H_MAGIC..][..4].copy_from_slice(&wire::MAGIC.to_le_bytes());
        out[wire::H_SITES..][..4].copy_from_slice(&(self.sites.len() as u32).to_le_bytes());
        out[wire::H_DEV..][..8].copy_from_slice(&dev.to_le_bytes());
        out[wire::H_INO..][..8].copy_from_slice(&ino.to_le_bytes());
        out[wire::H_REGION..][..8].copy_from_slice(&self.region.to_le_bytes());
        out[wire::H_REGION_BYTES..][..8].copy_from_slice(&(self.stubs.len() as u64).to_le_bytes());
        out[wire::H_ENTRY_SLOT..][..8].copy_from_slice(&self.entry_slot.to_le_bytes());
        out[wire::H_FIXUPS..][..4].copy_from_slice(&(self.fixups.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.stubs);
        for s in &self.sites {
            let mut rec = [0u8; wire::SITE_LEN];
            rec[wire::S_AT..][..8].copy_from_slice(&s.at.to_le_bytes());
            rec[wire::S_STUB..][..4].copy_from_slice(&s.stub.to_le_bytes());
            rec[wire::S_LEN] = s.orig.len() as u8;
            rec[wire::S_ORIG..][..s.orig.len()].copy_from_slice(&s.orig);
            out.extend_from_slice(&rec);
        }
        for f in &self.fixups {
            out.extend_from_slice(&f.to_le_bytes());
        }
        out
    }

    /// The session note: what was patched and what was left alone, why.
    pub fn note(&self, module: &str, patched: usize, applied: Option<&str>) -> String {
        let left_alone = self.sites.len() - patched.min(self.sites.len()) + self.skipped_count();
        let mut text =
            lapse_data::SessionHeader::patching_note(module, patched as u64, left_alone as u64);
        if let Some(n) = self.sleds.filter(|&n| n > 0) {
            text.push_str(&format!(
                " ({n} planned at the NOP sleds it was built with)"
            ));
        }
        for (why, names) in &self.skipped {
            let shown: Vec<&str> = names.iter().take(8).map(String::as_str).collect();
            let more = names.len().saturating_sub(shown.len());
            text.push_str(&format!("; {} {why}: {}", names.len(), shown.join(", ")));
            if more > 0 {
                text.push_str(&format!(" and {more} more"));
            }
        }
        if let Some(why) = applied {
            text.push_str(&format!(" (the runtime patched none: {why})"));
        }
        text
    }
}

/// A plan handed to the runtime, and where the runtime says what it did.
pub struct Patching {
    pub plan: Plan,
    /// The module's file name.
    pub module: String,
    /// A shared library (which the program may never load), not the executable.
    pub library: bool,
    /// The runtime's report (`patch.c`: "patched N", "changed N", "failed WHY").
    pub done: std::path::PathBuf,
}

/// Why a library's plan was not applied: it was not loaded.
const NEVER_LOADED: &str = "the program never loaded it";

/// What the runtime said it did with a plan.
struct Outcome {
    patched: usize,
    /// Why it patched none, when it did not.
    failed: Option<String>,
    /// Sites whose bytes in memory were not the file's.
    changed: Option<String>,
    /// Sites left alone because other threads ran and their jump could
    /// not be written in one store (`patch.c`).
    racy: Option<String>,
}

impl Patching {
    fn outcome(&self) -> Outcome {
        let done = std::fs::read_to_string(&self.done).unwrap_or_default();
        let field = |key: &str| {
            done.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
                .map(str::to_owned)
        };
        let failed = match field("failed") {
            None if self.plan.sites.is_empty() => None,
            None if self.library => Some(NEVER_LOADED.to_owned()),
            None => Some("the program never started it".to_owned()),
            Some(f) if f == "-" => None,
            Some(f) => Some(f),
        };
        let patched = match failed {
            Some(_) => 0,
            None => field("patched")
                .and_then(|n| n.parse().ok())
                .unwrap_or(self.plan.sites.len()),
        };
        Outcome {
            patched,
            failed,
            changed: field("changed").filter(|n| n != "0"),
            racy: field("racy").filter(|n| n != "0"),
        }
    }

    /// Functions the runtime patched.
    pub fn patched(&self) -> usize {
        self.outcome().patched
    }

    /// The module's probe source (`probe_sources.rs`).
    pub fn source(&self) -> &'static str {
        match self.plan.sleds {
            Some(n) if n > 0 => "patched-nop-sled",
            _ => "patched",
        }
    }

    /// The session note, with what the runtime did when it said.
    pub fn note(&self) -> String {
        let o = self.outcome();
        // (a library the program never loaded: nothing to count)
        if self.library && o.failed.as_deref() == Some(NEVER_LOADED) {
            return format!(
                "run-time patching: {} was never loaded, its {} planned function(s) were not patched",
                self.module,
                self.plan.sites.len()
            );
        }
        let mut text = self.plan.note(&self.module, o.patched, o.failed.as_deref());
        if let Some(n) = o.changed {
            text.push_str(&format!(
                "; {n} function(s) held other bytes in memory than in the file: left alone"
            ));
        }
        if let Some(n) = o.racy {
            text.push_str(&format!(
                "; {n} function(s) left alone: other threads ran when it was loaded, and their jump could not be written in one store"
            ));
        }
        text
    }
}

/// Whether any of the sorted `targets` is in `from..to`.
fn into(targets: &[u64], from: u64, to: u64) -> bool {
    let i = targets.partition_point(|&t| t < from);
    targets.get(i).is_some_and(|&t| t < to)
}

/// The functions of `.text` (start, size, name) in address order, one per
/// address, from the symbol table; a stripped file's from the dynamic
/// symbol table and, for the code no symbol there holds, the unwind table
/// (`.eh_frame` FDEs, named by their address).
fn text_functions(elf: &ElfFile64<'_, object::Endianness>) -> Vec<(u64, u64, String)> {
    let Some(text) = elf
        .sections()
        .find(|s| s.name() == Ok(".text") && s.kind() == SectionKind::Text)
    else {
        return Vec::new();
    };
    let in_text = |a: u64| a >= text.address() && a - text.address() < text.size();
    let stripped = elf.symbols().next().is_none();
    let symbols: Vec<_> = if stripped {
        elf.dynamic_symbols().collect()
    } else {
        elf.symbols().collect()
    };
    let mut out: Vec<(u64, u64, String)> = Vec::new();
    for s in symbols {
        if s.kind() != SymbolKind::Text || s.size() == 0 || s.section_index() != Some(text.index())
        {
            continue;
        }
        let Ok(name) = s.name() else { continue };
        out.push((s.address(), s.size(), name.to_owned()));
    }
    if stripped {
        let eh = elf
            .section_by_name(".eh_frame")
            .and_then(|s| Some((s.address(), s.data().ok()?)));
        if let Some((at, data)) = eh {
            let named: Vec<u64> = out.iter().map(|f| f.0).collect();
            for (start, size) in lapse_symbols::eh_frame_functions(data, at, Some(text.address())) {
                if in_text(start) && !named.contains(&start) {
                    out.push((start, size, format!("{start:#x}")));
                }
            }
        }
    }
    // (aliases: the global name wins over a local one at the same address)
    out.sort_by(|a, b| {
        (a.0, a.2.starts_with('_'), a.2.len()).cmp(&(b.0, b.2.starts_with('_'), b.2.len()))
    });
    out.dedup_by_key(|f| f.0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_past_a_sites_first_byte_are_into_it() {
        let t = [10, 20, 30];
        assert!(!into(&t, 11, 16));
        assert!(into(&t, 15, 21));
        assert!(!into(&t, 31, 40));
    }

    #[test]
    fn this_test_programs_plan_patches_most_and_says_why_it_skips() {
        let exe = std::env::current_exe().expect("the test executable");
        let data = std::fs::read(exe).expect("readable");
        let plan = Plan::for_module(&data, |_| true).expect("a plan");
        assert!(
            plan.sites.len() > 100,
            "{}",
            plan.note("t", plan.sites.len(), None)
        );
        let file = plan.to_bytes(1, 2);
        assert_eq!(
            file.len(),
            wire::HEADER_LEN
                + plan.stubs.len()
                + plan.sites.len() * wire::SITE_LEN
                + plan.fixups.len() * 4
        );
        // every stub's .quad, and its jump back at least
        assert!(plan.fixups.len() >= 2 * plan.sites.len());
        for f in &plan.fixups {
            let at = (f & !wire::FIXUP64) as usize;
            let len = if f & wire::FIXUP64 != 0 { 8 } else { 4 };
            assert!(at + len <= plan.stubs.len(), "{at:#x}");
        }
        assert!(plan.region < 0, "below the executable (PIE: at 0)");
        for s in &plan.sites {
            assert!((relocate::JMP..=wire::ORIG).contains(&s.orig.len()));
        }
    }

    #[test]
    fn the_note_says_what_the_runtime_did() {
        let site = |at| Site {
            at,
            stub: 16,
            orig: vec![0x90; 5],
        };
        let mut plan = Plan {
            sites: vec![site(0x1000), site(0x1010), site(0x1020)],
            ..Plan::default()
        };
        plan.skip(Skip::TooShort, "tiny");
        let dir = std::env::temp_dir().join(format!("lapse-patch-note-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory");
        let done = dir.join("patch.plan.done");
        let p = Patching {
            plan,
            module: "app".into(),
            library: false,
            done: done.clone(),
        };
        let note = p.note();
        assert!(note.starts_with("run-time patching: 0 function(s) of app patched at entry, 4 left alone; 1 shorter than the 5-byte jump: tiny"), "{note}");
        assert!(
            note.contains("patched none: the program never started it"),
            "{note}"
        );
        std::fs::write(&done, "patched 2\nchanged 1\nfailed -\n").expect("write");
        let note = p.note();
        assert!(
            note.contains(": 2 function(s) of app patched at entry, 2 left alone"),
            "{note}"
        );
        assert!(
            note.ends_with(
                "; 1 function(s) held other bytes in memory than in the file: left alone"
            ),
            "{note}"
        );
        std::fs::write(
            &done,
            "patched 0\nchanged 0\nfailed other threads were already running\n",
        )
        .expect("write");
        assert!(p
            .note()
            .contains("patched none: other threads were already running"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
