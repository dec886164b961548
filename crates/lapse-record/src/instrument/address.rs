//! From absolute addresses in a process to (module, module-relative address),
//! and from there to the session's dense function ids.
//!
//! Mappings come from perf MMAP2 records as they are processed and, when an
//! address falls outside every known mapping (the perf records lag behind the
//! runtime's events, or a fork child has not been seen yet), from
//! `/proc/PID/maps`. Only executable mappings matter here.

use std::collections::HashMap;
use std::path::Path;

use lapse_data::{FunctionId, MappingInfo, ModuleId, ModuleInfo, Record, Timestamp};
use lapse_symbols::ElfModule;

/// One executable mapping of a module into a process.
#[derive(Clone, Copy, Debug)]
struct Mapping {
    start: u64,
    end: u64,
    module: ModuleId,
    /// absolute − bias = module-relative
    bias: u64,
}

#[derive(Clone, Default)]
struct AddressSpace {
    /// Sorted by start, non-overlapping.
    maps: Vec<Mapping>,
    /// absolute function address → id, for this process image.
    functions: HashMap<u64, FunctionId>,
}

struct ModuleEntry {
    /// The module's ELF (layout, build-id, symbols), when it could be read.
    elf: Option<ElfModule>,
}

/// A new mapping as perf or /proc reports it.
pub struct NewMapping<'a> {
    pub pid: u32,
    pub start: u64,
    pub len: u64,
    pub pgoff: u64,
    pub path: &'a str,
    pub build_id: Option<&'a [u8]>,
    pub time: Timestamp,
}

/// Modules, per-process address spaces and the function table.
#[derive(Default)]
pub struct AddressBook {
    module_ids: HashMap<String, ModuleId>,
    modules: Vec<ModuleInfo>,
    module_entries: Vec<ModuleEntry>,
    /// Keyed by (pid, image generation): an exec starts a new generation, so
    /// the old image's late events still resolve against its own mappings.
    spaces: HashMap<(u32, u32), AddressSpace>,
    latest: HashMap<u32, u32>,
    exec_times: HashMap<u32, Vec<Timestamp>>,
    function_ids: HashMap<(ModuleId, u64), FunctionId>,
    /// Indexed by FunctionId: (module, module-relative address).
    functions: Vec<(ModuleId, u64)>,
    /// Module and mapping records not yet written to the file.
    pending: Vec<Record>,
    /// Set when the processes are gone (recovery): never read /proc.
    offline: bool,
}

impl AddressBook {
    /// A book that goes on from a data file's tables (for recovering a spill
    /// file after the recorder ended): its modules, mappings and functions
    /// keep their ids and are not written again. A module whose file on disk
    /// no longer has the recorded build-id is not used for symbols. Offline:
    /// addresses outside the known mappings resolve to `[unknown]`.
    pub fn resume(
        modules: &[ModuleInfo],
        mappings: &[MappingInfo],
        functions: &[(ModuleId, u64)],
    ) -> AddressBook {
        let mut book = AddressBook {
            offline: true,
            ..AddressBook::default()
        };
        for m in modules {
            let elf = if m.path.starts_with('/') {
                ElfModule::open(Path::new(&m.path))
                    .ok()
                    .filter(|e| m.build_id.is_none() || e.build_id() == m.build_id.as_deref())
            } else {
                None
            };
            book.module_ids.insert(m.path.clone(), m.id);
            book.modules.push(m.clone());
            book.module_entries.push(ModuleEntry { elf });
        }
        let mut by_time: Vec<&MappingInfo> = mappings.iter().collect();
        by_time.sort_by_key(|m| m.time);
        for m in by_time {
            let space = book.spaces.entry((m.pid, 0)).or_default();
            space.maps.retain(|x| x.end <= m.start || x.start >= m.end);
            let at = space.maps.partition_point(|x| x.start < m.start);
            space.maps.insert(
                at,
                Mapping {
                    start: m.start,
                    end: m.end,
                    module: m.module,
                    bias: m.bias,
                },
            );
        }
        for (i, &f) in functions.iter().enumerate() {
            book.function_ids.insert(f, FunctionId(i as u32));
            book.functions.push(f);
        }
        book
    }

    /// Every function so far: (id = index, module, module-relative address).
    pub fn functions(&self) -> &[(ModuleId, u64)] {
        &self.functions
    }

    /// The parsed ELF of `module`, if it could be read.
    pub fn elf(&self, module: ModuleId) -> Option<&ElfModule> {
        self.module_entries.get(module.0 as usize)?.elf.as_ref()
    }

    /// Module and mapping records to write.
    pub fn take_pending(&mut self) -> Vec<Record> {
        std::mem::take(&mut self.pending)
    }

    fn module(&mut self, path: &str, build_id: Option<&[u8]>) -> ModuleId {
        if let Some(&id) = self.module_ids.get(path) {
            return id;
        }
        let id = ModuleId(self.modules.len() as u32);
        let elf = if path.starts_with('/') {
            ElfModule::open(Path::new(path)).ok()
        } else {
            None
        };
        let file_build_id = elf.as_ref().and_then(|e| e.build_id()).map(<[u8]>::to_vec);
        let info = ModuleInfo {
            id,
            path: path.to_owned(),
            build_id: build_id.map(<[u8]>::to_vec).or(file_build_id),
        };
        self.pending.push(Record::Module(info.clone()));
        self.modules.push(info);
        self.module_entries.push(ModuleEntry { elf });
        self.module_ids.insert(path.to_owned(), id);
        id
    }

    /// Records an executable mapping.
    pub fn add_mapping(&mut self, m: NewMapping<'_>) {
        let path = if m.path.is_empty() { "[anon]" } else { m.path };
        let module = self.module(path, m.build_id);
        let bias = match &self.module_entries[module.0 as usize].elf {
            Some(elf) => elf.bias(m.start, m.pgoff),
            None => m.start.wrapping_sub(m.pgoff),
        };
        let end = m.start.saturating_add(m.len);
        let key = (m.pid, self.latest_gen(m.pid));
        let space = self.spaces.entry(key).or_default();
        space.maps.retain(|x| x.end <= m.start || x.start >= end);
        let at = space.maps.partition_point(|x| x.start < m.start);
        space.maps.insert(
            at,
            Mapping {
                start: m.start,
                end,
                module,
                bias,
            },
        );
        space.functions.retain(|&a, _| a < m.start || a >= end);
        self.pending.push(Record::Mapping(MappingInfo {
            pid: m.pid,
            module,
            start: m.start,
            end,
            file_offset: m.pgoff,
            bias,
            time: m.time,
        }));
    }

    /// The current image generation of `pid`.
    pub fn latest_gen(&self, pid: u32) -> u32 {
        self.latest.get(&pid).copied().unwrap_or(0)
    }

    /// A fork child starts with its parent's address space (merged under
    /// whatever the child has mapped since).
    pub fn fork(&mut self, parent: u32, child: u32) {
        let from = self
            .spaces
            .get(&(parent, self.latest_gen(parent)))
            .cloned()
            .unwrap_or_default();
        let key = (child, self.latest_gen(child));
        let space = self.spaces.entry(key).or_default();
        for m in from.maps {
            if space
                .maps
                .iter()
                .all(|x| x.end <= m.start || x.start >= m.end)
            {
                let at = space.maps.partition_point(|x| x.start < m.start);
                space.maps.insert(at, m);
            }
        }
    }

    /// A new image replaced the process at `time`: later mappings belong to a
    /// new generation.
    pub fn exec(&mut self, pid: u32, time: Timestamp) {
        *self.latest.entry(pid).or_insert(0) += 1;
        self.exec_times.entry(pid).or_default().push(time);
    }

    /// The generation of `pid` that was current at `time` (a runtime's hello
    /// may be read after the process exec'd again).
    pub fn gen_at(&self, pid: u32, time: Timestamp) -> u32 {
        let execs = self.exec_times.get(&pid).map_or(&[][..], Vec::as_slice);
        execs.partition_point(|&t| t <= time) as u32
    }

    /// The function id for absolute address `addr` in image `gen` of `pid`.
    pub fn resolve(&mut self, pid: u32, gen: u32, addr: u64, now: Timestamp) -> FunctionId {
        let key = (pid, gen);
        if let Some(&id) = self.spaces.get(&key).and_then(|s| s.functions.get(&addr)) {
            return id;
        }
        let mut hit = self.lookup(key, addr);
        if hit.is_none() && gen == self.latest_gen(pid) && !self.offline {
            self.load_proc_maps(pid, now);
            hit = self.lookup(key, addr);
        }
        let (module, rel) = match hit {
            Some(m) => (m.module, addr.wrapping_sub(m.bias)),
            None => (self.module("[unknown]", None), addr),
        };
        let next = FunctionId(self.functions.len() as u32);
        let id = *self.function_ids.entry((module, rel)).or_insert(next);
        if id == next {
            self.functions.push((module, rel));
        }
        self.spaces
            .entry(key)
            .or_default()
            .functions
            .insert(addr, id);
        id
    }

    fn lookup(&self, key: (u32, u32), addr: u64) -> Option<Mapping> {
        let maps = &self.spaces.get(&key)?.maps;
        let i = maps.partition_point(|m| m.start <= addr).checked_sub(1)?;
        let m = maps[i];
        (addr < m.end).then_some(m)
    }

    /// Reads the executable mappings of a live process from /proc.
    pub fn load_proc_maps(&mut self, pid: u32, now: Timestamp) {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
            return;
        };
        for line in text.lines() {
            if let Some((start, end, pgoff, path)) = parse_maps_line(line) {
                let key = (pid, self.latest_gen(pid));
                if self
                    .lookup(key, start)
                    .is_some_and(|m| m.start == start && m.end == end)
                {
                    continue;
                }
                self.add_mapping(NewMapping {
                    pid,
                    start,
                    len: end - start,
                    pgoff,
                    path,
                    build_id: None,
                    time: now,
                });
            }
        }
    }
}

/// `start-end perms offset dev inode path` → executable mappings only.
fn parse_maps_line(line: &str) -> Option<(u64, u64, u64, &str)> {
    let mut fields = line.splitn(6, ' ');
    let range = fields.next()?;
    let perms = fields.next()?;
    let offset = fields.next()?;
    let _dev = fields.next()?;
    let _inode = fields.next()?;
    let path = fields.next().unwrap_or("").trim_start();
    if perms.as_bytes().get(2) != Some(&b'x') {
        return None;
    }
    let (a, b) = range.split_once('-')?;
    let start = u64::from_str_radix(a, 16).ok()?;
    let end = u64::from_str_radix(b, 16).ok()?;
    let pgoff = u64::from_str_radix(offset, 16).ok()?;
    (end > start).then_some((start, end, pgoff, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_keep_executable_ones() {
        let l = "5581a000-5581b000 r-xp 00001000 08:01 1234   /usr/bin/demo";
        assert_eq!(
            parse_maps_line(l),
            Some((0x5581a000, 0x5581b000, 0x1000, "/usr/bin/demo"))
        );
        assert_eq!(parse_maps_line("1000-2000 rw-p 00000000 00:00 0"), None);
    }

    #[test]
    fn same_function_in_two_processes_gets_one_id() {
        let mut book = AddressBook::default();
        for (pid, start) in [(1, 0x1000_0000u64), (2, 0x2000_0000)] {
            book.add_mapping(NewMapping {
                pid,
                start,
                len: 0x1000,
                pgoff: 0,
                path: "[test]",
                build_id: None,
                time: Timestamp::from_nanos(0),
            });
        }
        let a = book.resolve(1, 0, 0x1000_0040, Timestamp::from_nanos(0));
        let b = book.resolve(2, 0, 0x2000_0040, Timestamp::from_nanos(0));
        let c = book.resolve(2, 0, 0x2000_0080, Timestamp::from_nanos(0));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(book.functions()[a.0 as usize].1, 0x40);
    }
}
