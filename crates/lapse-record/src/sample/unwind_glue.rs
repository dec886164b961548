//! Sampling: every traced process' address space, kept current from mmap,
//! fork and exec records, and the unwinding of its samples.
//!
//! Modules are opened once (by path) with `lapse-symbols`; the same parsed
//! module serves unwinding during recording (its `.eh_frame`) and
//! symbolization at the end. Only executable mappings are tracked: those are
//! the only ones code addresses can fall in.
//!
//! Anonymous executable memory (JIT code) is one module per process,
//! `[anon:PID]`, whose addresses are absolute (bias 0): that is how a JIT's
//! perf map (`/tmp/perf-PID.map`) names them, read at the end of the
//! recording ([`ModuleTable::load_perf_maps`]). Unwinding goes through such
//! code by frame pointers (the unwinder's rule for code in no module).

use std::collections::HashMap;
use std::path::Path;

use lapse_data::{MappingInfo, ModuleId, ModuleInfo, Timestamp};
use lapse_symbols::{ElfModule, PerfMap};
use lapse_unwind::{ProcessUnwinder, StackCopy, StackEnd, UserRegs};

use crate::linux::mapped::{self, open_mapped_elf};
use crate::linux::records::FileInode;

/// Largest perf map read (Node's can reach tens of MB).
const PERF_MAP_MAX_BYTES: u64 = 256 << 20;

pub(crate) struct LoadedModule {
    /// `None` when the file could not be read (deleted, anonymous, foreign).
    pub(crate) elf: Option<ElfModule>,
    /// Anonymous executable memory of one process: its perf map, if any.
    pub(crate) jit: Option<Jit>,
    /// A pseudo module whose every frame is this one function
    /// (`[truncated]`).
    pub(crate) marker: Option<&'static str>,
}

/// The anonymous executable memory of process `pid`.
pub(crate) struct Jit {
    pid: u32,
    /// The process' owner, whose perf map file is trusted.
    uid: Option<u32>,
    /// Read at the end of the recording.
    pub(crate) map: Option<PerfMap>,
}

/// A mapping with no ELF file behind it: anonymous memory and its kin
/// (named anonymous memory, memfd, shared zero pages).
fn is_anonymous(path: &str) -> bool {
    path.is_empty()
        || path == "//anon"
        || [
            "[anon",
            "[heap]",
            "[stack",
            "/memfd:",
            "/dev/zero",
            "/anon_hugepage",
        ]
        .iter()
        .any(|p| path.starts_with(p))
}

/// Every module seen in the session, by path; ids are dense in order of appearance.
#[derive(Default)]
pub(crate) struct ModuleTable {
    by_path: HashMap<String, ModuleId>,
    modules: Vec<LoadedModule>,
}

impl ModuleTable {
    /// The id for `path`, and the module's record when it is new (to be written).
    pub(crate) fn intern(
        &mut self,
        path: &str,
        mapped: Option<mapped::Mapped>,
    ) -> (ModuleId, Option<ModuleInfo>) {
        if let Some(&id) = self.by_path.get(path) {
            return (id, None);
        }
        let id = ModuleId(self.modules.len() as u32);
        let elf = open_module(path, mapped);
        let info = ModuleInfo {
            id,
            path: path.to_owned(),
            build_id: elf.as_ref().and_then(|e| e.build_id()).map(<[u8]>::to_vec),
        };
        self.by_path.insert(path.to_owned(), id);
        self.modules.push(LoadedModule {
            elf,
            jit: None,
            marker: None,
        });
        (id, Some(info))
    }

    /// A pseudo module named `name` whose frames are all the function
    /// `name` (`[truncated]`, at the root of stacks cut short).
    pub(crate) fn intern_marker(&mut self, name: &'static str) -> (ModuleId, Option<ModuleInfo>) {
        if let Some(&id) = self.by_path.get(name) {
            return (id, None);
        }
        let id = ModuleId(self.modules.len() as u32);
        self.by_path.insert(name.to_owned(), id);
        self.modules.push(LoadedModule {
            elf: None,
            jit: None,
            marker: Some(name),
        });
        let info = ModuleInfo {
            id,
            path: name.to_owned(),
            build_id: None,
        };
        (id, Some(info))
    }

    /// The module of `pid`'s anonymous executable memory (`[anon:PID]`).
    pub(crate) fn intern_anonymous(&mut self, pid: u32) -> (ModuleId, Option<ModuleInfo>) {
        let path = format!("[anon:{pid}]");
        if let Some(&id) = self.by_path.get(&path) {
            return (id, None);
        }
        let id = ModuleId(self.modules.len() as u32);
        let uid = {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(format!("/proc/{pid}"))
                .ok()
                .map(|m| m.uid())
        };
        self.by_path.insert(path.clone(), id);
        self.modules.push(LoadedModule {
            elf: None,
            jit: Some(Jit {
                pid,
                uid,
                map: None,
            }),
            marker: None,
        });
        let info = ModuleInfo {
            id,
            path,
            build_id: None,
        };
        (id, Some(info))
    }

    /// Reads the perf map of every process with anonymous executable
    /// memory; returns the module records to write again, renamed after the
    /// map file, for those that have one.
    pub(crate) fn load_perf_maps(&mut self) -> Vec<ModuleInfo> {
        let mut renamed = Vec::new();
        for (i, m) in self.modules.iter_mut().enumerate() {
            let Some(jit) = &mut m.jit else { continue };
            let path = format!("/tmp/perf-{}.map", jit.pid);
            let Some(text) = read_perf_map(Path::new(&path), jit.uid) else {
                continue;
            };
            let map = PerfMap::parse(&text);
            if map.is_empty() {
                continue;
            }
            jit.map = Some(map);
            renamed.push(ModuleInfo {
                id: ModuleId(i as u32),
                path,
                build_id: None,
            });
        }
        renamed
    }

    pub(crate) fn get(&self, id: ModuleId) -> Option<&LoadedModule> {
        self.modules.get(id.0 as usize)
    }

    pub(crate) fn get_mut(&mut self, id: ModuleId) -> Option<&mut LoadedModule> {
        self.modules.get_mut(id.0 as usize)
    }
}

/// A perf map's text, if it is a regular file (not through a symlink) of
/// reasonable size owned by root, by lapse's user or by the process' owner
/// (perf trusts the first two).
fn read_perf_map(path: &Path, owner: Option<u32>) -> Option<String> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let file = crate::linux::fs::open_no_follow_nonblocking(path).ok()?;
    let meta = file.metadata().ok()?;
    let me = crate::linux::process::effective_uid();
    let trusted = meta.uid() == 0 || meta.uid() == me || Some(meta.uid()) == owner;
    if !meta.is_file() || !trusted || meta.len() > PERF_MAP_MAX_BYTES {
        return None;
    }
    let mut text = String::new();
    file.take(PERF_MAP_MAX_BYTES)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// Opens the ELF behind a mapping (the file that was mapped, see
/// [`open_mapped_elf`]); `[vdso]` is read from lapse's own process, whose
/// vdso is the same image the kernel gives every process.
fn open_module(path: &str, mapped: Option<mapped::Mapped>) -> Option<ElfModule> {
    if path == "[vdso]" {
        return own_vdso().and_then(|b| ElfModule::from_bytes(Path::new(path), b).ok());
    }
    open_mapped_elf(path, mapped)
}

fn own_vdso() -> Option<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let line = maps.lines().find(|l| l.ends_with("[vdso]"))?;
    let (start, end) = line.split_whitespace().next()?.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    let mut mem = std::fs::File::open("/proc/self/mem").ok()?;
    mem.seek(SeekFrom::Start(start)).ok()?;
    let mut bytes = vec![0u8; usize::try_from(end.checked_sub(start)?).ok()?];
    mem.read_exact(&mut bytes).ok()?;
    Some(bytes)
}

#[derive(Clone, Copy, Debug)]
struct Mapped {
    start: u64,
    end: u64,
    module: ModuleId,
    bias: u64,
}

/// One process' executable mappings and its unwinder.
#[derive(Clone, Default)]
struct ProcessSpace {
    /// Sorted by start, non-overlapping.
    mappings: Vec<Mapped>,
    unwinder: ProcessUnwinder,
}

impl ProcessSpace {
    fn find(&self, addr: u64) -> Option<&Mapped> {
        let i = self.mappings.partition_point(|m| m.start <= addr);
        self.mappings[..i].last().filter(|m| addr < m.end)
    }
}

/// What a new mapping produced for the data file.
pub(crate) struct NewMapping {
    pub(crate) module: Option<ModuleInfo>,
    pub(crate) mapping: MappingInfo,
}

/// An executable mapping of `pid`: where, of which file (its path, and its
/// device and inode when the kernel said), and when.
pub(crate) struct MapRequest<'a> {
    pub(crate) pid: u32,
    pub(crate) start: u64,
    pub(crate) len: u64,
    pub(crate) file_offset: u64,
    pub(crate) path: &'a str,
    pub(crate) inode: Option<FileInode>,
    pub(crate) time: Timestamp,
}

#[derive(Default)]
pub(crate) struct AddressSpaces {
    pub(crate) modules: ModuleTable,
    processes: HashMap<u32, ProcessSpace>,
}

impl AddressSpaces {
    /// An executable mapping appeared (mmap2 record or /proc/PID/maps).
    pub(crate) fn map(&mut self, m: MapRequest<'_>) -> NewMapping {
        let MapRequest {
            pid,
            start,
            len,
            file_offset,
            path,
            inode,
            time,
        } = m;
        let end = start.saturating_add(len);
        let anonymous = is_anonymous(path);
        let (module, new_module) = if anonymous {
            self.modules.intern_anonymous(pid)
        } else {
            let mapped = mapped::Mapped {
                pid,
                start,
                end,
                inode,
            };
            self.modules.intern(path, Some(mapped))
        };
        let loaded = self.modules.get(module);
        let elf = loaded.and_then(|m| m.elf.as_ref());
        let bias = match elf {
            Some(e) => e.bias(start, file_offset),
            // Anonymous memory: module-relative is absolute (as perf maps say).
            None if anonymous => 0,
            None => start.wrapping_sub(file_offset),
        };
        let space = self.processes.entry(pid).or_default();
        // A mapping over old ones replaces them (mmap MAP_FIXED, dlclose + dlopen).
        let overlapping: Vec<u64> = space
            .mappings
            .iter()
            .filter(|m| m.start < end && start < m.end)
            .map(|m| m.start)
            .collect();
        for old in overlapping {
            space.unwinder.remove_module(old);
        }
        space.mappings.retain(|m| !(m.start < end && start < m.end));
        let at = space.mappings.partition_point(|m| m.start < start);
        space.mappings.insert(
            at,
            Mapped {
                start,
                end,
                module,
                bias,
            },
        );
        if let Some(e) = elf {
            space
                .unwinder
                .add_module(path, start..end, bias, e.unwind_sections());
        }
        NewMapping {
            module: new_module,
            mapping: MappingInfo {
                pid,
                module,
                start,
                end,
                file_offset,
                bias,
                time,
            },
        }
    }

    /// `child` was forked from `parent`: it starts with the parent's mappings.
    pub(crate) fn fork(&mut self, parent: u32, child: u32) {
        if parent == child || self.processes.contains_key(&child) {
            return;
        }
        if let Some(space) = self.processes.get(&parent) {
            let copy = space.clone();
            self.processes.insert(child, copy);
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.processes.len()
    }

    /// `pid` ended: its mappings and unwinder go (a process's unwinder
    /// keeps a cache of about 16 KiB).
    pub(crate) fn forget(&mut self, pid: u32) {
        self.processes.remove(&pid);
        if self.processes.capacity() > 4 * self.processes.len().max(64) {
            self.processes.shrink_to_fit();
        }
    }

    /// `pid` called exec: the old image is gone, the new one's mmaps follow.
    pub(crate) fn exec(&mut self, pid: u32) {
        self.processes.insert(pid, ProcessSpace::default());
    }

    /// Module and module-relative address of absolute `addr` in `pid`.
    pub(crate) fn resolve(&self, pid: u32, addr: u64) -> Option<(ModuleId, u64)> {
        let m = self.processes.get(&pid)?.find(addr)?;
        Some((m.module, addr.wrapping_sub(m.bias)))
    }

    /// Unwinds one sample of `pid` into absolute lookup addresses,
    /// innermost first; says why it stopped.
    pub(crate) fn unwind(
        &mut self,
        pid: u32,
        regs: &UserRegs,
        stack: &StackCopy<'_>,
        out: &mut Vec<u64>,
    ) -> StackEnd {
        match self.processes.get_mut(&pid) {
            Some(space) => space.unwinder.unwind(regs, stack, out),
            None => {
                out.clear();
                if regs.ip != 0 {
                    out.push(regs.ip);
                }
                StackEnd::Root
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mappings_follow_mmap_fork_and_exec() {
        let exe = std::env::current_exe().expect("test binary path");
        let exe = exe.to_str().expect("utf-8 path");
        let t = Timestamp::from_nanos(1);
        let mut spaces = AddressSpaces::default();
        let first = spaces.map(MapRequest {
            pid: 1,
            start: 0x5000_0000,
            len: 0x1000,
            file_offset: 0,
            path: exe,
            inode: None,
            time: t,
        });
        assert!(first.module.is_some(), "a new module is reported once");
        let again = spaces.map(MapRequest {
            pid: 1,
            start: 0x6000_0000,
            len: 0x1000,
            file_offset: 0,
            path: exe,
            inode: None,
            time: t,
        });
        assert!(again.module.is_none());
        assert_eq!(again.mapping.module, first.mapping.module);

        let (module, rel) = spaces.resolve(1, 0x5000_0010).expect("inside the mapping");
        assert_eq!(module, first.mapping.module);
        assert_eq!(rel, 0x5000_0010 - first.mapping.bias);
        assert!(spaces.resolve(1, 0x5000_1000).is_none(), "end is exclusive");

        spaces.fork(1, 2);
        assert!(
            spaces.resolve(2, 0x5000_0010).is_some(),
            "the child inherits"
        );
        spaces.exec(2);
        assert!(
            spaces.resolve(2, 0x5000_0010).is_none(),
            "exec drops the old image"
        );
        assert!(
            spaces.resolve(1, 0x5000_0010).is_some(),
            "the parent keeps it"
        );

        // A new mapping over an old one replaces it.
        let other = spaces.map(MapRequest {
            pid: 1,
            start: 0x5000_0000,
            len: 0x2000,
            file_offset: 0,
            path: "/nonexistent/lib.so",
            inode: None,
            time: t,
        });
        assert_ne!(other.mapping.module, first.mapping.module);
        assert_eq!(
            spaces.resolve(1, 0x5000_1800).map(|r| r.0),
            Some(other.mapping.module)
        );
    }

    #[test]
    fn anonymous_code_is_one_module_per_process_named_by_its_perf_map() {
        let t = Timestamp::from_nanos(1);
        // A pid no process has: its perf map is this test's alone.
        let pid = u32::MAX - 7;
        let mut spaces = AddressSpaces::default();
        let a = spaces.map(MapRequest {
            pid,
            start: 0x7000_0000,
            len: 0x1000,
            file_offset: 0x7000_0000,
            path: "//anon",
            inode: None,
            time: t,
        });
        let b = spaces.map(MapRequest {
            pid,
            start: 0x7100_0000,
            len: 0x1000,
            file_offset: 0x7100_0000,
            path: "[anon:jit]",
            inode: None,
            time: t,
        });
        assert_eq!(
            a.module.as_ref().map(|m| m.path.as_str()),
            Some(&*format!("[anon:{pid}]"))
        );
        assert!(b.module.is_none(), "one module per process");
        assert_eq!(a.mapping.bias, 0);
        assert_eq!(
            spaces.resolve(pid, 0x7100_0010),
            Some((a.mapping.module, 0x7100_0010)),
            "addresses stay absolute"
        );
        let other = spaces.map(MapRequest {
            pid: pid - 1,
            start: 0x7000_0000,
            len: 0x1000,
            file_offset: 0,
            path: "//anon",
            inode: None,
            time: t,
        });
        assert_ne!(other.mapping.module, a.mapping.module);

        let path = format!("/tmp/perf-{pid}.map");
        std::fs::write(&path, "71000000 e hot_loop\n").expect("write the map");
        let renamed = spaces.modules.load_perf_maps();
        let _ = std::fs::remove_file(&path);
        assert_eq!(renamed.len(), 1);
        assert_eq!(
            (renamed[0].id, renamed[0].path.as_str()),
            (a.mapping.module, &*path)
        );
        let map = spaces
            .modules
            .get(a.mapping.module)
            .and_then(|m| m.jit.as_ref())
            .and_then(|j| j.map.as_ref())
            .expect("the map was read");
        assert_eq!(map.lookup(0x7100_000d).map(|e| e.2), Some("hot_loop"));
    }
}
