//! From absolute addresses in a process to (module, module-relative address),
//! and from there to the session's dense function ids.
//!
//! Mappings come from perf MMAP2 records as they are processed and, when an
//! address falls outside every known mapping (the perf records lag behind the
//! runtime's events, or a fork child has not been seen yet), from
//! `/proc/PID/maps`. Only executable mappings matter here.
//!
//! Mappings have lifetimes: a library closed with `dlclose` and another one
//! mapped at the same address later does not rename the first one's
//! functions. A mapping replaced by a newer one is kept (retired, with the
//! time it ended), and an address is resolved against the mapping that was
//! live at the event's time. Events are resolved after the mappings of
//! their time are known (the recorder drains the kernel's records before
//! each message), so the newer mapping is often already there when the
//! older one's events arrive.
//!
//! One kind of address is not code: the `lapse` crate's probes name their
//! site record, a static in the module's `lapse_sites` section (read-only
//! data, not mapped executable). Every segment of a module shares the code
//! mapping's bias, so an address no code mapping holds is looked for in the
//! `lapse_sites` sections of the modules whose code is mapped.

use std::collections::HashMap;
use std::path::Path;

use lapse_data::{FunctionId, MappingInfo, ModuleId, ModuleInfo, Record, Timestamp};
use lapse_symbols::ElfModule;

use crate::linux::proc_scan::{parse_maps_line, ProcMapping};

/// One executable mapping of a module into a process.
#[derive(Clone, Copy, Debug)]
struct Mapping {
    start: u64,
    end: u64,
    module: ModuleId,
    /// absolute − bias = module-relative
    bias: u64,
    /// When it was mapped (as far as lapse knows: a mapping read from
    /// /proc is dated when it was read). It lasts until a newer mapping
    /// over the same addresses.
    from: Timestamp,
    /// The absolute addresses of the module's `lapse_sites` section, as
    /// this mapping's bias places it (empty when it has none).
    sites: (u64, u64),
}

impl Mapping {
    fn overlaps(&self, start: u64, end: u64) -> bool {
        self.start < end && start < self.end
    }

    fn holds(&self, addr: u64) -> bool {
        self.start <= addr && addr < self.end
    }

    fn holds_site(&self, addr: u64) -> bool {
        self.sites.0 <= addr && addr < self.sites.1
    }

    /// Whether `self` and `other` turn an address into the same function.
    fn same_code(&self, other: &Mapping) -> bool {
        (self.module, self.bias) == (other.module, other.bias)
    }
}

/// Older mappings kept beyond this many are dropped once they are this
/// much older than the newest mapping (no event comes that late).
const SHADOWED_KEEP: usize = 1024;
const SHADOWED_AGE_NS: u64 = 10_000_000_000;

#[derive(Clone, Default)]
struct AddressSpace {
    /// The newest mapping of each address range: sorted by start,
    /// non-overlapping.
    maps: Vec<Mapping>,
    /// Every other mapping: older ones a newer one replaced (a library
    /// closed, another mapped at its address), and the same mapping
    /// reported twice. Kept with their times, in no order.
    shadowed: Vec<Mapping>,
    /// Bumped whenever a mapping is added or shadowed (caches of resolved
    /// addresses may be stale: an address resolved before its mapping was
    /// known is `[unknown]`, for good unless the cache is emptied).
    version: u64,
    /// absolute function address → id, for addresses only one mapping
    /// ever held (valid at any time).
    functions: HashMap<u64, FunctionId>,
}

impl AddressSpace {
    /// Adds `m`, in whatever order the mappings are reported (the kernel's
    /// per-CPU rings are read one after the other): the newest mapping of
    /// each range stays in front, the others are shadowed.
    fn insert(&mut self, m: Mapping) {
        let newer_exists = self
            .maps
            .iter()
            .any(|x| x.overlaps(m.start, m.end) && x.from > m.from);
        if newer_exists {
            self.shadow(m);
        } else {
            let mut i = 0;
            while i < self.maps.len() {
                if self.maps[i].overlaps(m.start, m.end) {
                    let old = self.maps.remove(i);
                    self.shadow(old);
                } else {
                    i += 1;
                }
            }
            let at = self.maps.partition_point(|x| x.start < m.start);
            self.maps.insert(at, m);
        }
        self.functions
            .retain(|&a, _| !m.holds(a) && !m.holds_site(a));
        // (a cache outside the book may hold an address of this range as
        // unknown, resolved before the mapping was reported)
        self.version += 1;
    }

    fn shadow(&mut self, m: Mapping) {
        // (its sites may mean another module's now)
        self.functions.retain(|&a, _| !m.holds_site(a));
        self.shadowed.push(m);
        self.version += 1;
        if self.shadowed.len() > SHADOWED_KEEP {
            let newest = self.maps.iter().map(|x| x.from).max().unwrap_or_default();
            self.shadowed
                .retain(|x| newest.as_nanos().saturating_sub(x.from.as_nanos()) < SHADOWED_AGE_NS);
        }
    }

    /// The mapping that held `addr` at `time`: of those that ever held it,
    /// the newest mapped by then (or, for an event dated before all of
    /// them, the oldest). Also whether every mapping that held it means the
    /// same code, so the answer holds at any time and may be cached.
    ///
    /// An address no code mapping holds may be a site record of the
    /// `lapse` crate: the same, among the mappings whose module's
    /// `lapse_sites` section holds it.
    fn lookup(&self, addr: u64, time: Timestamp) -> Option<(Mapping, bool)> {
        let i = self
            .maps
            .partition_point(|m| m.start <= addr)
            .checked_sub(1);
        let front = i.map(|i| self.maps[i]).filter(|m| m.holds(addr));
        let code = front
            .into_iter()
            .chain(self.shadowed.iter().copied().filter(|m| m.holds(addr)));
        pick(code, time).or_else(|| {
            let sites = self.maps.iter().chain(&self.shadowed);
            pick(sites.copied().filter(|m| m.holds_site(addr)), time)
        })
    }
}

/// Of the mappings that held an address, the one live at `time` (see
/// [`AddressSpace::lookup`]), and whether they all mean the same code.
fn pick(mut held: impl Iterator<Item = Mapping>, time: Timestamp) -> Option<(Mapping, bool)> {
    let first = held.next()?;
    let (mut at_time, mut oldest, mut always) = (None::<Mapping>, first, true);
    for m in std::iter::once(first).chain(held) {
        always &= m.same_code(&first);
        if m.from <= time && at_time.is_none_or(|a| m.from > a.from) {
            at_time = Some(m);
        }
        if m.from < oldest.from {
            oldest = m;
        }
    }
    Some((at_time.unwrap_or(oldest), always))
}

/// Where `elf`'s `lapse_sites` section lies in a mapping with `bias`.
fn sites_at(elf: Option<&ElfModule>, bias: u64) -> (u64, u64) {
    elf.and_then(ElfModule::sites_range).map_or((0, 0), |r| {
        (bias.wrapping_add(r.start), bias.wrapping_add(r.end))
    })
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
            let sites = sites_at(book.elf(m.module), m.bias);
            book.spaces.entry((m.pid, 0)).or_default().insert(Mapping {
                start: m.start,
                end: m.end,
                module: m.module,
                bias: m.bias,
                from: m.time,
                sites,
            });
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

    /// Every function name the session's modules import (what their calls
    /// into other libraries call them).
    pub fn imported_names(&self) -> std::collections::HashSet<&str> {
        self.module_entries
            .iter()
            .filter_map(|m| m.elf.as_ref())
            .flat_map(|e| e.imports())
            .map(String::as_str)
            .collect()
    }

    /// The path of `module` as it was mapped.
    pub fn module_path(&self, module: ModuleId) -> Option<&str> {
        Some(self.modules.get(module.0 as usize)?.path.as_str())
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
        let elf = self.module_entries[module.0 as usize].elf.as_ref();
        let bias = match elf {
            Some(elf) => elf.bias(m.start, m.pgoff),
            None => m.start.wrapping_sub(m.pgoff),
        };
        let sites = sites_at(elf, bias);
        let end = m.start.saturating_add(m.len);
        let key = (m.pid, self.latest_gen(m.pid));
        self.spaces.entry(key).or_default().insert(Mapping {
            start: m.start,
            end,
            module,
            bias,
            from: m.time,
            sites,
        });
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
    /// whatever the child has mapped since): the image each ran at `time`,
    /// the fork's, not the latest one (the kernel's record of a child's
    /// exec can be read before its fork is applied, and the child's calls
    /// before that exec resolve in the image it inherited).
    pub fn fork(&mut self, parent: u32, child: u32, time: Timestamp) {
        let from = self
            .spaces
            .get(&(parent, self.gen_at(parent, time)))
            .cloned()
            .unwrap_or_default();
        let key = (child, self.gen_at(child, time));
        let space = self.spaces.entry(key).or_default();
        for m in from.maps {
            if !space.maps.iter().any(|x| x.overlaps(m.start, m.end)) {
                let at = space.maps.partition_point(|x| x.start < m.start);
                space.maps.insert(at, m);
            }
        }
    }

    /// Process `pid` ended and all it sent has been read: its address spaces
    /// go (a process's mappings take about a kilobyte; a run of tens of
    /// thousands of short processes kept them all). A later process with
    /// the same id starts afresh, not on top of the old one's mappings.
    pub fn forget(&mut self, pid: u32) {
        for gen in 0..=self.latest_gen(pid) {
            self.spaces.remove(&(pid, gen));
        }
        self.latest.remove(&pid);
        self.exec_times.remove(&pid);
        if self.spaces.capacity() > 4 * self.spaces.len().max(64) {
            self.spaces.shrink_to_fit();
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

    /// Changes whenever a mapping of image `gen` of `pid` is replaced:
    /// addresses resolved (and cached) before may now mean something else.
    pub fn version(&self, pid: u32, gen: u32) -> u64 {
        self.spaces.get(&(pid, gen)).map_or(0, |s| s.version)
    }

    /// The function at absolute address `addr` in image `gen` of `pid` at
    /// `time` (a time on the kernel's clock, as the mappings have), and
    /// whether the answer holds at any time until [`Self::version`]
    /// changes (so a caller may cache it by address).
    pub fn resolve(
        &mut self,
        pid: u32,
        gen: u32,
        addr: u64,
        time: Timestamp,
    ) -> (FunctionId, bool) {
        let key = (pid, gen);
        if let Some(&id) = self.spaces.get(&key).and_then(|s| s.functions.get(&addr)) {
            return (id, true);
        }
        let mut hit = self.lookup(key, addr, time);
        if hit.is_none() && gen == self.latest_gen(pid) && !self.offline {
            // (dated when read: it says what is mapped now)
            self.load_proc_maps(pid, crate::linux::clock::monotonic_now());
            hit = self.lookup(key, addr, time);
        }
        let (module, rel, always) = match hit {
            Some((m, always)) => (m.module, addr.wrapping_sub(m.bias), always),
            None => (self.module("[unknown]", None), addr, true),
        };
        let next = FunctionId(self.functions.len() as u32);
        let id = *self.function_ids.entry((module, rel)).or_insert(next);
        if id == next {
            self.functions.push((module, rel));
        }
        if always {
            self.spaces
                .entry(key)
                .or_default()
                .functions
                .insert(addr, id);
        }
        (id, always)
    }

    fn lookup(&self, key: (u32, u32), addr: u64, time: Timestamp) -> Option<(Mapping, bool)> {
        self.spaces.get(&key)?.lookup(addr, time)
    }

    /// Reads the executable mappings of a live process from /proc.
    pub fn load_proc_maps(&mut self, pid: u32, now: Timestamp) {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
            return;
        };
        for line in text.lines() {
            if let Some(ProcMapping {
                start,
                end,
                offset: pgoff,
                path,
            }) = parse_maps_line(line)
            {
                let key = (pid, self.latest_gen(pid));
                if self.lookup(key, start, now).is_some_and(|(m, _)| {
                    m.start == start
                        && m.end == end
                        && self.modules[m.module.0 as usize].path == *path
                }) {
                    continue;
                }
                self.add_mapping(NewMapping {
                    pid,
                    start,
                    len: end - start,
                    pgoff,
                    path: &path,
                    build_id: None,
                    time: now,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(book: &mut AddressBook, path: &str, start: u64, time: u64) {
        book.add_mapping(NewMapping {
            pid: 1,
            start,
            len: 0x1000,
            pgoff: 0,
            path,
            build_id: None,
            time: Timestamp::from_nanos(time),
        });
    }

    fn module_at(book: &mut AddressBook, addr: u64, time: u64) -> (String, bool) {
        let (f, always) = book.resolve(1, 0, addr, Timestamp::from_nanos(time));
        let module = book.functions()[f.0 as usize].0;
        (book.modules[module.0 as usize].path.clone(), always)
    }

    #[test]
    fn an_address_means_the_mapping_live_at_the_event() {
        // Offline: never read this process's /proc.
        let mut book = AddressBook::resume(&[], &[], &[]);
        map(&mut book, "[a]", 0x1000_0000, 100);
        assert_eq!(module_at(&mut book, 0x1000_0040, 150), ("[a]".into(), true));
        let v = book.version(1, 0);
        // [b] replaces [a] at 200; [a] again at 300.
        map(&mut book, "[b]", 0x1000_0000, 200);
        map(&mut book, "[a]", 0x1000_0000, 300);
        assert_ne!(book.version(1, 0), v, "cached answers are stale");
        for (t, m) in [(150, "[a]"), (250, "[b]"), (350, "[a]"), (50, "[a]")] {
            assert_eq!(
                module_at(&mut book, 0x1000_0040, t),
                (m.into(), false),
                "at {t}"
            );
        }
        // An address no mapping ever replaced may still be cached.
        map(&mut book, "[c]", 0x2000_0000, 100);
        assert_eq!(module_at(&mut book, 0x2000_0040, 50), ("[c]".into(), true));
    }

    #[test]
    fn an_address_resolved_before_its_mapping_is_not_unknown_after_it() {
        // Offline (no /proc to fall back on, as for a process that is gone):
        // the first answer is [unknown]; the mapping reported afterwards
        // must change the version, or the recorder's per-process caches
        // keep [unknown] for the address for the rest of the process.
        let mut book = AddressBook::resume(&[], &[], &[]);
        assert_eq!(module_at(&mut book, 0x1000_0040, 150).0, "[unknown]");
        let v = book.version(1, 0);
        map(&mut book, "[a]", 0x1000_0000, 100);
        assert_ne!(book.version(1, 0), v, "cached answers are stale");
        assert_eq!(module_at(&mut book, 0x1000_0040, 150), ("[a]".into(), true));
    }

    #[test]
    fn mappings_reported_late_or_twice_keep_their_times() {
        let mut book = AddressBook::resume(&[], &[], &[]);
        // Seen in /proc at 500, reported by perf as mapped at 100: the same
        // code either way, so the answer may still be cached.
        map(&mut book, "[a]", 0x1000_0000, 500);
        map(&mut book, "[a]", 0x1000_0000, 100);
        assert_eq!(module_at(&mut book, 0x1000_0040, 200), ("[a]".into(), true));
        // An older mapping reported after a newer one: it lasts until that.
        map(&mut book, "[z]", 0x1000_0000, 50);
        assert_eq!(module_at(&mut book, 0x1000_0040, 70), ("[z]".into(), false));
        assert_eq!(
            module_at(&mut book, 0x1000_0040, 200),
            ("[a]".into(), false)
        );
    }

    #[test]
    fn mappings_from_two_cpus_read_out_of_order() {
        // [a]@100, [b]@200, [a]@300, [b]@400 at one address, read as the
        // rings come: [b]@200, [b]@400 (one CPU), then [a]@100, [a]@300.
        let mut book = AddressBook::resume(&[], &[], &[]);
        for (m, t) in [("[b]", 200), ("[b]", 400), ("[a]", 100), ("[a]", 300)] {
            map(&mut book, m, 0x1000_0000, t);
        }
        for (t, m) in [(150, "[a]"), (250, "[b]"), (350, "[a]"), (450, "[b]")] {
            assert_eq!(module_at(&mut book, 0x1000_0040, t).0, m, "at {t}");
        }
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
        let a = book.resolve(1, 0, 0x1000_0040, Timestamp::from_nanos(0)).0;
        let b = book.resolve(2, 0, 0x2000_0040, Timestamp::from_nanos(0)).0;
        let c = book.resolve(2, 0, 0x2000_0080, Timestamp::from_nanos(0)).0;
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(book.functions()[a.0 as usize].1, 0x40);
    }

    #[test]
    fn an_ended_process_leaves_no_mappings_behind() {
        // Tens of thousands of short processes, each forked with its
        // parent's mappings: the book keeps only those alive.
        let mut book = AddressBook::resume(&[], &[], &[]);
        map(&mut book, "[a]", 0x1000_0000, 100);
        for child in 2..10_002 {
            book.fork(1, child, Timestamp::from_nanos(50));
            book.forget(child);
        }
        assert_eq!(book.spaces.len(), 1);
        // A later process with a used id has its own parent's mappings only.
        book.add_mapping(NewMapping {
            pid: 7,
            start: 0x2000_0000,
            len: 0x1000,
            pgoff: 0,
            path: "[b]",
            build_id: None,
            time: Timestamp::from_nanos(200),
        });
        book.fork(1, 7, Timestamp::from_nanos(250));
        book.forget(7);
        book.fork(1, 7, Timestamp::from_nanos(250));
        let (f, _) = book.resolve(7, 0, 0x2000_0040, Timestamp::from_nanos(300));
        let module = book.functions()[f.0 as usize].0;
        assert_ne!(book.modules[module.0 as usize].path, "[b]");
        assert_eq!(book.spaces.len(), 2);
    }

    #[test]
    fn a_fork_child_that_execs_keeps_the_image_it_inherited_for_its_calls_before() {
        // The kernel's exec record of child 7 (at 300) is read before its
        // fork (at 200) is applied: the parent's mappings are the child's
        // first image, not its new one (#31 item 19).
        let mut book = AddressBook::resume(&[], &[], &[]);
        map(&mut book, "[libc]", 0x1000_0000, 100);
        book.exec(7, Timestamp::from_nanos(300));
        book.add_mapping(NewMapping {
            pid: 7,
            start: 0x3000_0000,
            len: 0x1000,
            pgoff: 0,
            path: "[new]",
            build_id: None,
            time: Timestamp::from_nanos(310),
        });
        book.fork(1, 7, Timestamp::from_nanos(200));
        let path = |book: &mut AddressBook, gen, addr| {
            let (f, _) = book.resolve(7, gen, addr, Timestamp::from_nanos(250));
            let module = book.functions()[f.0 as usize].0;
            book.modules[module.0 as usize].path.clone()
        };
        assert_eq!(book.gen_at(7, Timestamp::from_nanos(200)), 0);
        assert_eq!(path(&mut book, 0, 0x1000_0040), "[libc]");
        assert_eq!(path(&mut book, 1, 0x3000_0040), "[new]");
        assert_eq!(path(&mut book, 1, 0x1000_0080), "[unknown]");
    }
}
