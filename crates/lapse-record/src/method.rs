//! `--method auto`: does the target carry probes? The executable, or any
//! shared library it needs (`DT_NEEDED`, recursively): a program whose only
//! instrumented code is in a library it loads is instrumented too.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use object::elf::{DT_NEEDED, DT_RPATH, DT_RUNPATH};
use object::read::elf::{Dyn, ElfFile64, ProgramHeader};
use object::{Object, ObjectSymbol};

/// The probe hooks a binary can reference, as `auto` looks for them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probes {
    /// `-finstrument-functions`: `__cyg_profile_func_enter`/`_exit`.
    CygProfile,
    /// `-pg` (`mcount`, `_mcount`) or `-pg -mfentry` (`__fentry__`).
    Mcount,
    /// LLVM's sanitizer coverage (`lapse build`, clang's
    /// `-fsanitize-coverage=func,trace-pc-guard`): a `__sancov_guards`
    /// section, or the `__sanitizer_cov_trace_pc_guard` hook.
    Sancov,
    /// Linked with the lapse runtime itself.
    LapseRuntime,
    /// The `lapse` crate's probes (`#[lapse::profile]`, `lapse::scope!`):
    /// a `lapse_sites` section of site records.
    LapseSites,
    None,
}

/// What `auto` found: the probes and the module that carries them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub probes: Probes,
    /// The executable or the needed library the probes are in.
    pub module: PathBuf,
}

/// Which probes the ELF file at `path` references (imports or defines).
/// Unreadable or non-ELF files have none.
pub fn detect_probes(path: &Path) -> Probes {
    let Ok(data) = std::fs::read(path) else {
        return Probes::None;
    };
    probes_in(&data, false)
}

/// The probes of `data`; with `imports_only`, only symbols it imports count
/// (a system library *defines* `mcount` for gprof, and is not instrumented).
fn probes_in(data: &[u8], imports_only: bool) -> Probes {
    let Ok(file) = object::File::parse(data) else {
        return Probes::None;
    };
    let mut found = Probes::None;
    if file.section_by_name("__sancov_guards").is_some() {
        found = Probes::Sancov;
    }
    for sym in file.symbols().chain(file.dynamic_symbols()) {
        if imports_only && !sym.is_undefined() {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        let name = name.split('@').next().unwrap_or(name);
        match name {
            "__cyg_profile_func_enter" | "__cyg_profile_func_exit" => return Probes::CygProfile,
            "mcount" | "_mcount" | "__fentry__" => found = Probes::Mcount,
            "__sanitizer_cov_trace_pc_guard" => found = Probes::Sancov,
            n if n.starts_with("lapse_rt_") => found = Probes::LapseRuntime,
            _ => {}
        }
    }
    // (a section, not a symbol: it counts in a needed library too)
    if found == Probes::None && has_lapse_sites(&file) {
        found = Probes::LapseSites;
    }
    found
}

/// Whether the file has a `lapse_sites` section with records in it.
fn has_lapse_sites(file: &object::File<'_>) -> bool {
    use object::ObjectSection;
    file.section_by_name(lapse_symbols::SITES_SECTION)
        .is_some_and(|s| s.size() > 0)
}

/// The probes of `program`, else of the first library it needs (breadth
/// first through `DT_NEEDED`) that imports probe hooks.
pub fn detect(program: &Path) -> Option<Found> {
    let own = detect_probes(program);
    if own != Probes::None {
        return Some(Found {
            probes: own,
            module: program.to_owned(),
        });
    }
    let mut seen: HashSet<PathBuf> = HashSet::new();
    let mut todo = vec![program.to_owned()];
    while !todo.is_empty() {
        let mut next = Vec::new();
        for object in todo {
            let Ok(data) = std::fs::read(&object) else {
                continue;
            };
            for lib in needed(&data, &object) {
                if !seen.insert(lib.clone()) {
                    continue;
                }
                let Ok(lib_data) = std::fs::read(&lib) else {
                    continue;
                };
                let probes = probes_in(&lib_data, true);
                if probes != Probes::None {
                    return Some(Found {
                        probes,
                        module: lib,
                    });
                }
                next.push(lib);
            }
        }
        // (a bound, for a damaged or hostile dependency graph)
        if seen.len() > 512 {
            break;
        }
        todo = next;
    }
    None
}

/// The libraries `data` (the file at `path`) needs, resolved as the dynamic
/// loader would: its RPATH/RUNPATH (with `$ORIGIN`), `LD_LIBRARY_PATH`,
/// then the system directories. Libraries not found are left out.
pub(crate) fn needed(data: &[u8], path: &Path) -> Vec<PathBuf> {
    let Ok(elf) = ElfFile64::<object::Endianness>::parse(data) else {
        return Vec::new();
    };
    let endian = elf.endian();
    let Ok(Some((dynamic, index))) = elf.elf_section_table().dynamic(endian, data) else {
        return Vec::new();
    };
    let Ok(strings) = elf.elf_section_table().strings(endian, data, index) else {
        return Vec::new();
    };
    let origin = path.parent().unwrap_or(Path::new("."));
    let mut names = Vec::new();
    let mut dirs: Vec<PathBuf> = Vec::new();
    for d in dynamic {
        let tag = d.tag(endian);
        if ![DT_NEEDED, DT_RPATH, DT_RUNPATH].contains(&tag) {
            continue;
        }
        let Ok(value) = d.string(endian, strings) else {
            continue;
        };
        let value = String::from_utf8_lossy(value).into_owned();
        match tag {
            DT_NEEDED => names.push(value),
            _ => dirs.extend(
                value
                    .split(':')
                    .map(|d| PathBuf::from(d.replace("$ORIGIN", &origin.to_string_lossy()))),
            ),
        }
    }
    if let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") {
        dirs.extend(std::env::split_paths(&paths));
    }
    dirs.extend(
        [
            "/lib/x86_64-linux-gnu",
            "/usr/lib/x86_64-linux-gnu",
            "/lib/aarch64-linux-gnu",
            "/usr/lib/aarch64-linux-gnu",
            "/lib64",
            "/usr/lib64",
            "/lib",
            "/usr/lib",
            "/usr/local/lib",
        ]
        .map(PathBuf::from),
    );
    names
        .iter()
        .filter_map(|n| {
            if n.contains('/') {
                return Some(PathBuf::from(n));
            }
            dirs.iter().map(|d| d.join(n)).find(|p| p.is_file())
        })
        .collect()
}

/// True when the ELF file at `path` is linked statically (no program
/// interpreter): nothing can be preloaded into it, so the lapse runtime
/// cannot be either. Unreadable or non-ELF files are not.
pub fn is_static(path: &Path) -> bool {
    let Ok(data) = std::fs::read(path) else {
        return false;
    };
    let Ok(elf) = ElfFile64::<object::Endianness>::parse(&*data) else {
        return false;
    };
    let endian = elf.endian();
    !elf.elf_program_headers()
        .iter()
        .any(|ph| ph.p_type(endian) == object::elf::PT_INTERP)
}

/// True when exec'ing `path` runs it as another user or with more
/// privileges (set-user-ID or set-group-ID to ids other than ours, or file
/// capabilities): the dynamic linker then ignores `LD_PRELOAD`, so lapse's
/// runtime is not loaded into it.
pub fn runs_privileged(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::metadata(path) else {
        return false;
    };
    // SAFETY: geteuid and getegid cannot fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let setuid = m.mode() & libc::S_ISUID != 0 && m.uid() != uid;
    let setgid = m.mode() & libc::S_ISGID != 0 && m.gid() != gid;
    setuid || setgid || has_file_capabilities(path)
}

fn has_file_capabilities(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: NUL-terminated strings; a zero-sized query writes nothing.
    let n = unsafe {
        libc::getxattr(
            c.as_ptr(),
            c"security.capability".as_ptr(),
            std::ptr::null_mut(),
            0,
        )
    };
    n > 0
}

/// True for commands that run another program (`sh -c`, `env`, `taskset`,
/// ...): when such a command has no probes, its child may.
pub fn is_wrapper(program: &Path) -> bool {
    let name = program.file_name().and_then(|n| n.to_str()).unwrap_or("");
    matches!(
        name,
        "sh" | "bash"
            | "dash"
            | "zsh"
            | "env"
            | "taskset"
            | "nice"
            | "ionice"
            | "chrt"
            | "numactl"
            | "timeout"
            | "stdbuf"
            | "setsid"
            | "xargs"
            | "make"
            | "cargo"
            | "python3"
            | "python"
            | "perl"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_elf_has_no_probes() {
        assert_eq!(detect_probes(Path::new("/nonexistent")), Probes::None);
        assert_eq!(detect_probes(Path::new("/etc/hostname")), Probes::None);
        assert_eq!(detect(Path::new("/etc/hostname")), None);
    }

    #[test]
    fn dynamic_programs_are_not_static() {
        assert!(!is_static(Path::new("/bin/true")));
        assert!(!is_static(Path::new("/etc/hostname")));
    }

    /// A site of the `lapse` crate, so that this test's executable has a
    /// `lapse_sites` section.
    #[lapse::profile]
    fn profiled() -> u32 {
        7
    }

    #[test]
    fn a_program_using_the_lapse_crate_carries_probes() {
        assert_eq!(profiled(), 7);
        let exe = std::env::current_exe().expect("this test's executable");
        assert_eq!(detect_probes(&exe), Probes::LapseSites);
        let found = detect(&exe).expect("probes");
        assert_eq!((found.probes, found.module), (Probes::LapseSites, exe));
        // a program whose only probes are in a library it needs
        let mut data = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(
            probes_in(&data, true),
            Probes::LapseSites,
            "a section counts in a library"
        );
        // the same bytes with the section renamed carry none
        let at: Vec<usize> = (0..data.len().saturating_sub(12))
            .filter(|&i| &data[i..i + 12] == b"lapse_sites\0")
            .collect();
        assert!(!at.is_empty(), "the section's name");
        for i in at {
            data[i] = b'X';
        }
        assert_eq!(probes_in(&data, false), Probes::None);
    }

    #[test]
    fn system_programs_and_their_libraries_carry_no_probes() {
        // libc defines mcount (for gprof); only imports count in libraries.
        for p in ["/bin/true", "/bin/ls"] {
            if Path::new(p).exists() {
                assert_eq!(detect(Path::new(p)), None, "{p}");
            }
        }
    }
}
