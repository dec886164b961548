//! One ELF module: its identity, layout, symbols, debug info and unwind tables.

use std::cell::OnceCell;
use std::ops::Range;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSection, ObjectSegment, SegmentFlags};

use crate::bytes::{LoadSegment, Section, SectionData};
use crate::dwarf::{has_debug_info, DwarfInfo};
use crate::ranges::{CodeRanges, FramePointerUse, RangeSource};
use crate::sites::{self, SiteRecord, SITES_SECTION};
use crate::symtab::{FunctionSymbol, SymbolTable};
use crate::{debugfile, demangle, SymbolError};

/// What an unwinder needs from a module, all addresses module-relative.
#[derive(Clone, Debug, Default)]
pub struct UnwindSections {
    pub text_svma: Option<Range<u64>>,
    pub text: Option<SectionData>,
    pub eh_frame: Option<Section>,
    pub eh_frame_hdr: Option<Section>,
    pub debug_frame: Option<Section>,
    pub got_svma: Option<Range<u64>>,
}

/// One level of the inline chain at an address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SymbolFrame {
    /// Demangled function name.
    pub name: String,
    /// Source position inside this function: the address's own line for the
    /// innermost frame, the call site of the next-inner frame otherwise.
    pub file: Option<String>,
    pub line: Option<u32>,
}

/// Everything known about one module-relative address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Symbolized {
    /// Outermost first: the last entry is the function whose code holds the
    /// address, earlier ones those it was inlined into. Empty when nothing is
    /// known about the address.
    pub frames: Vec<SymbolFrame>,
    /// The symbol-table function holding the address, when there is one.
    pub symbol: Option<FunctionSymbol>,
}

/// A parsed ELF module. Lookups take module-relative addresses (the ELF's own
/// virtual addresses); use [`ElfModule::bias`] to get there from a mapping.
pub struct ElfModule {
    path: PathBuf,
    build_id: Option<Vec<u8>>,
    segments: Vec<LoadSegment>,
    symbols: SymbolTable,
    /// The file holding `.debug_info` (the module or its debug file), if any.
    dwarf_file: Option<(PathBuf, SectionData)>,
    /// Parsed on first lookup: opening a module (as the recorder does for
    /// unwinding while the target runs) never pays for DWARF.
    dwarf: OnceCell<Option<DwarfInfo>>,
    unwind: UnwindSections,
    debug_file: Option<PathBuf>,
    /// The ELF entry point (module-relative), its byte order and address size.
    entry: u64,
    little_endian: bool,
    address_size: u8,
    /// Functions of code no symbol names, from the unwind table; parsed on
    /// the first lookup that needs them.
    ranges: OnceCell<CodeRanges>,
    /// The `lapse_sites` section (the `lapse` crate's site records).
    sites: Option<Section>,
    /// Undefined dynamic function symbols (see [`ElfModule::imports`]).
    imports: Vec<String>,
}

impl ElfModule {
    /// Maps and parses the file at `path`; when it has no DWARF, looks for a
    /// separate debug file (build-id tree, `.gnu_debuglink`).
    pub fn open(path: &Path) -> Result<ElfModule, SymbolError> {
        let data = map_file(path)?;
        let (mut module, debuglink) = ElfModule::parse(path, data)?;
        if module.dwarf_file.is_none() {
            let found = debugfile::candidates(path, module.build_id(), debuglink.as_deref());
            for candidate in found {
                if module.attach_debug_file(&candidate).is_ok() {
                    break;
                }
            }
        }
        Ok(module)
    }

    /// Parses a module held in memory; `name` is used in errors and as its path.
    /// Does no file I/O.
    pub fn from_bytes(name: &Path, bytes: Vec<u8>) -> Result<ElfModule, SymbolError> {
        ElfModule::parse(name, SectionData::from_vec(bytes)).map(|(m, _)| m)
    }

    fn parse(path: &Path, data: SectionData) -> Result<(ElfModule, Option<String>), SymbolError> {
        let file = parse_object(path, &data)?;
        let build_id = file.build_id().ok().flatten().map(<[u8]>::to_vec);
        let debuglink = file
            .gnu_debuglink()
            .ok()
            .flatten()
            .map(|(name, _crc)| String::from_utf8_lossy(name).into_owned());
        let segments = file
            .segments()
            .map(|seg| {
                let (offset, filesz) = seg.file_range();
                LoadSegment {
                    vaddr: seg.address(),
                    memsz: seg.size(),
                    offset,
                    filesz,
                    executable: matches!(seg.flags(), SegmentFlags::Elf { p_flags, .. } if p_flags.contains(object::elf::PF_X)),
                }
            })
            .collect();
        let module = ElfModule {
            path: path.to_owned(),
            build_id,
            segments,
            symbols: SymbolTable::from_object(&file),
            dwarf_file: has_debug_info(&file).then(|| (path.to_owned(), data.clone())),
            dwarf: OnceCell::new(),
            unwind: unwind_sections(&file, &data),
            debug_file: None,
            entry: file.entry(),
            little_endian: file.is_little_endian(),
            address_size: if file.is_64() { 8 } else { 4 },
            ranges: OnceCell::new(),
            sites: section(&file, &data, SITES_SECTION),
            imports: imports(&file),
        };
        Ok((module, debuglink))
    }

    /// Takes DWARF (and the symbol table, when richer) from a separate debug
    /// file. A debug file whose build-id differs from the module's is refused.
    pub fn attach_debug_file(&mut self, debug_path: &Path) -> Result<(), SymbolError> {
        let data = map_file(debug_path)?;
        let file = parse_object(debug_path, &data)?;
        let their_id = file.build_id().ok().flatten();
        if let (Some(ours), Some(theirs)) = (self.build_id.as_deref(), their_id) {
            if ours != theirs {
                return Err(SymbolError::BuildIdMismatch {
                    path: debug_path.to_owned(),
                });
            }
        }
        let symbols = SymbolTable::from_object(&file);
        if symbols.len() > self.symbols.len() {
            self.symbols = symbols;
        }
        if !has_debug_info(&file) {
            return Err(SymbolError::NoDebugInfo {
                path: debug_path.to_owned(),
            });
        }
        self.dwarf_file = Some((debug_path.to_owned(), data.clone()));
        self.dwarf = OnceCell::new();
        self.debug_file = Some(debug_path.to_owned());
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The separate debug file in use, if one was found.
    pub fn debug_file(&self) -> Option<&Path> {
        self.debug_file.as_deref()
    }

    pub fn build_id(&self) -> Option<&[u8]> {
        self.build_id.as_deref()
    }

    /// The ELF entry point (module-relative; 0 when there is none).
    pub fn entry_point(&self) -> u64 {
        self.entry
    }

    pub fn segments(&self) -> &[LoadSegment] {
        &self.segments
    }

    /// True when the module or its debug file has `.debug_info`.
    pub fn has_dwarf(&self) -> bool {
        self.dwarf_file.is_some()
    }

    /// Frees the parsed DWARF (it is parsed again if needed): lets a caller
    /// symbolize module after module with only one module's debug info in
    /// memory at a time.
    pub fn release_dwarf(&mut self) {
        self.dwarf = OnceCell::new();
    }

    /// The module's DWARF, set up on first use (each lookup then parses
    /// what it needs); `None` when there is no debug info.
    fn dwarf(&self) -> Option<&DwarfInfo> {
        self.dwarf
            .get_or_init(|| {
                let (path, data) = self.dwarf_file.as_ref()?;
                let file = parse_object(path, data).ok()?;
                DwarfInfo::new(&file, data)
            })
            .as_ref()
    }

    /// How many of the module's functions keep a frame pointer, by their
    /// unwind rules (`None`: no `.eh_frame`; x86-64 only).
    pub fn frame_pointer_use(&self) -> Option<FramePointerUse> {
        let u = self.unwind_sections();
        let eh = u.eh_frame.as_ref()?;
        Some(crate::ranges::frame_pointer_use(
            eh,
            u.text_svma.as_ref().map(|r| r.start),
        ))
    }

    pub fn unwind_sections(&self) -> &UnwindSections {
        &self.unwind
    }

    /// The value to subtract from an absolute address inside a mapping of
    /// this module (mapped at `mapping_start` from `file_offset`) to get the
    /// module-relative address. Accounts for segments whose virtual address
    /// differs from their file offset. Meant for executable mappings: when a
    /// page holds the ends of two segments, the executable one is assumed,
    /// then the lower one.
    pub fn bias(&self, mapping_start: u64, file_offset: u64) -> u64 {
        let holds = |s: &&LoadSegment| {
            let first_page = s.offset & !0xfff;
            file_offset >= first_page && file_offset < s.offset.saturating_add(s.filesz.max(1))
        };
        let segment = self
            .segments
            .iter()
            .filter(holds)
            .min_by_key(|s| (!s.executable, s.offset));
        let shift = segment.map_or(0, |s| s.vaddr.wrapping_sub(s.offset));
        mapping_start.wrapping_sub(file_offset).wrapping_sub(shift)
    }

    /// The symbol-table function holding `addr` (PLT stubs included, as
    /// `foo@plt`).
    pub fn function_at(&self, addr: u64) -> Option<&FunctionSymbol> {
        self.symbols.lookup(addr)
    }

    /// Other global names of the function symbol starting at `start`
    /// (aliases such as glibc's `fopen` for `fopen64`), demangled.
    pub fn aliases(&self, start: u64) -> Vec<String> {
        self.symbols
            .aliases(start)
            .iter()
            .map(|raw| crate::demangle(raw))
            .collect()
    }

    /// The function names this module imports (its undefined dynamic
    /// symbols, without versions): what its calls into other libraries
    /// call them.
    pub fn imports(&self) -> &[String] {
        &self.imports
    }

    /// The function holding `addr` when no symbol does: the unwind table's
    /// (`.eh_frame` FDE) range around it, named `module+0xSTART`, or
    /// `_start` at the module's entry point.
    pub fn unwind_function_at(&self, addr: u64) -> Option<FunctionSymbol> {
        let ranges = self.ranges.get_or_init(|| {
            CodeRanges::new(&RangeSource {
                eh_frame: self.unwind.eh_frame.as_ref(),
                text_svma: self.unwind.text_svma.as_ref().map(|r| r.start),
                little_endian: self.little_endian,
                address_size: self.address_size,
                entry: self.entry,
                segments: &self.segments,
                symbols: &self.symbols,
            })
        });
        let (start, size, entry) = ranges.lookup(addr)?;
        let name = if entry {
            "_start".to_owned()
        } else {
            let file = self
                .path
                .file_name()
                .map_or_else(|| self.path.to_string_lossy(), |n| n.to_string_lossy());
            format!("{file}+{start:#x}")
        };
        Some(FunctionSymbol { start, size, name })
    }

    /// The function holding `addr`: its symbol, else its unwind-table range.
    pub fn function_or_range_at(&self, addr: u64) -> Option<FunctionSymbol> {
        self.function_at(addr)
            .cloned()
            .or_else(|| self.unwind_function_at(addr))
    }

    /// The module-relative addresses of the `lapse_sites` section: where
    /// the `lapse` crate's probes have their site records.
    pub fn sites_range(&self) -> Option<Range<u64>> {
        let s = self.sites.as_ref()?;
        Some(s.svma..s.svma.checked_add(s.data.len() as u64)?)
    }

    /// The `lapse` crate's site record at `addr` (a probe's function
    /// address): `None` when `addr` is not in the module's `lapse_sites`
    /// section or no valid record starts there.
    pub fn site_at(&self, addr: u64) -> Option<SiteRecord> {
        let s = self.sites.as_ref()?;
        let offset = addr.checked_sub(s.svma)?;
        sites::read_site(&s.data, offset, self.little_endian)
    }

    /// Source file and line of `addr` from the line table (no inline chain).
    /// Parses only the compilation unit holding `addr`, not the whole DWARF.
    pub fn location(&self, addr: u64) -> (Option<String>, Option<u32>) {
        match self.dwarf() {
            Some(d) => d.location(addr),
            None => (None, None),
        }
    }

    /// Function names (with inline chain) and source positions for `addr`.
    /// The outermost function is named from the symbol table when it has an
    /// entry (so `foo.constprop.0` stays distinct, as in `perf`), from DWARF
    /// otherwise, and from the unwind table when neither knows it (see
    /// [`ElfModule::unwind_function_at`]; `symbol` is then that range).
    pub fn symbolize(&self, addr: u64) -> Symbolized {
        let mut symbol = self.symbols.lookup(addr).cloned();
        let mut dwarf_frames = match self.dwarf() {
            Some(d) => d.frames(addr),
            None => Vec::new(),
        };
        dwarf_frames.reverse();
        let mut frames = Vec::with_capacity(dwarf_frames.len().max(1));
        let outermost = dwarf_frames.first();
        let mut outer_name = symbol
            .as_ref()
            .map(|s| s.name.clone())
            .or_else(|| outermost.and_then(|f| f.name.as_deref()).map(demangle));
        if outer_name.is_none() {
            symbol = self.unwind_function_at(addr);
            outer_name = symbol.as_ref().map(|s| s.name.clone());
        }
        if let Some(name) = outer_name {
            let (file, line) = match outermost {
                Some(f) => (f.file.clone(), f.line),
                None => (None, None),
            };
            frames.push(SymbolFrame { name, file, line });
        }
        for inner in dwarf_frames.iter().skip(1) {
            if let Some(raw) = &inner.name {
                frames.push(SymbolFrame {
                    name: demangle(raw),
                    file: inner.file.clone(),
                    line: inner.line,
                });
            }
        }
        Symbolized { frames, symbol }
    }
}

/// The file at `path`, mapped read-only: what is read of it is what is
/// faulted in (a symbol table, not the whole library).
pub fn map_file(path: &Path) -> Result<SectionData, SymbolError> {
    let io = |source| SymbolError::Io {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    // SAFETY: the mapping is read-only. A module rewritten while lapse reads
    // it could change under us; that risk is shared by every profiler and
    // debugger reading binaries in place.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
    Ok(SectionData::from_map(map))
}

fn parse_object<'d>(path: &Path, data: &'d [u8]) -> Result<object::File<'d>, SymbolError> {
    let file = object::File::parse(data).map_err(|source| SymbolError::Elf {
        path: path.to_owned(),
        source,
    })?;
    if file.format() != object::BinaryFormat::Elf {
        return Err(SymbolError::NotElf {
            path: path.to_owned(),
        });
    }
    Ok(file)
}

/// The bytes of section `name` (none when it is empty or has no bytes in
/// the file).
fn section(file: &object::File<'_>, data: &SectionData, name: &str) -> Option<Section> {
    let s = file.section_by_name(name)?;
    let raw = s.uncompressed_data().ok()?;
    if raw.is_empty() {
        return None;
    }
    Some(Section {
        svma: s.address(),
        data: data.sub_slice(&raw),
    })
}

fn unwind_sections(file: &object::File<'_>, data: &SectionData) -> UnwindSections {
    let section = |name: &str| section(file, data, name);
    let text = section(".text");
    UnwindSections {
        text_svma: text.as_ref().map(|t| t.svma..t.svma + t.data.len() as u64),
        text: text.map(|t| t.data),
        eh_frame: section(".eh_frame"),
        eh_frame_hdr: section(".eh_frame_hdr"),
        debug_frame: section(".debug_frame"),
        got_svma: file
            .section_by_name(".got")
            .map(|s| s.address()..s.address() + s.size()),
    }
}

/// The names of the functions `file` imports: undefined dynamic symbols,
/// without their versions.
fn imports(file: &object::File<'_>) -> Vec<String> {
    use object::ObjectSymbol;
    let mut names: Vec<String> = file
        .dynamic_symbols()
        .filter(|s| s.is_undefined())
        .filter_map(|s| s.name().ok())
        .map(|n| n.split('@').next().unwrap_or(n))
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}
