//! Which modules get a plan, and the plan files in the session directory:
//! the executable (unless `--patch` names only other modules), and every
//! shared library a `--patch REGEX@MODULE` names that lapse can find
//! before the run. Those are the libraries the program needs (`DT_NEEDED`,
//! as the dynamic loader resolves them) and, for `dlopen`, the shared
//! objects in the directories it would look in: the program's own, its
//! RUNPATH, `LD_LIBRARY_PATH`, the current directory and the system's.
//! The runtime applies a library's plan when that library is loaded (at
//! start-up, or after the `dlopen` that loaded it: `patch.c`), matching it
//! by device and inode, so a plan for a library never loaded costs
//! nothing. No message goes to the recorder and back: a program that
//! loads a library is never made to wait for a plan.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use lapse_rt::protocol::{self, plan as wire};

use super::{Patching, Plan};
use crate::instrument::session_dir::SessionDir;
use crate::{Notice, RecordOptions};

/// Libraries never patched: lapse's runtime runs on them, inside its hooks.
const NEVER: &[&str] = &[
    "libc.so",
    "ld-linux",
    "libpthread.so",
    "libdl.so",
    "liblapse",
];

/// At most this many libraries of the system's directories that the
/// program does not need are planned for one `--patch` value.
const MAX_SYSTEM: usize = 4;

/// The plans for `program`'s run, written to `dir` and named in `env`.
pub fn plan_patching(
    dir: &SessionDir,
    program: &Path,
    env: &mut Vec<(String, String)>,
    opts: &RecordOptions,
) -> Vec<Patching> {
    let notices = &opts.notices;
    let mut modules: Vec<(PathBuf, bool)> = Vec::new();
    if opts.patch.any_in(&file_name(program)) {
        modules.push((program.to_owned(), false));
    }
    let libraries = libraries(program);
    for (value, module) in opts.patch.module_values() {
        let matching = |system: bool| {
            let mut named: Vec<&PathBuf> = libraries
                .iter()
                .filter(|l| l.system == system && module.is_match(&file_name(&l.found)))
                .map(|l| &l.real)
                .collect();
            // (one library under several names, or in /lib and /usr/lib)
            named.sort();
            named.dedup();
            named
        };
        let mut named = matching(false);
        let system = matching(true);
        // (planning every library of the system a loose regex names takes
        // seconds, for libraries the program most likely never loads)
        if system.len() > MAX_SYSTEM {
            notices.say(Notice::Warning(format!(
                "--patch {value}: {} libraries of the system's directories that the program does not need match; none of them is patched when loaded by dlopen (name one, e.g. '^libz\\.so')",
                system.len()
            )));
        } else {
            named.extend(system);
        }
        if named.is_empty() && !module.is_match(&file_name(program)) {
            notices.say(Notice::Warning(format!(
                "--patch {value}: no shared library lapse can find before the run has a matching name (it looks beside the program, in its RUNPATH, LD_LIBRARY_PATH, the current directory and the system's library directories)"
            )));
        }
        for l in named {
            let name = file_name(l);
            if NEVER.iter().any(|n| name.starts_with(n)) {
                notices.say(Notice::Warning(format!(
                    "--patch {value}: {name} is not patched: lapse's runtime runs on it"
                )));
            } else if !modules.iter().any(|(m, _)| m == l) {
                // (a real path: the name its mapping has in the report)
                modules.push((l.clone(), true));
            }
        }
    }
    if modules.len() > wire::MAX {
        notices.say(Notice::Warning(format!(
            "--patch names {} modules; only the first {} are patched",
            modules.len(),
            wire::MAX
        )));
        modules.truncate(wire::MAX);
    }
    let mut out = Vec::new();
    let mut written = 0;
    for (path, library) in modules {
        let module = file_name(&path);
        let (Ok(data), Ok(meta)) = (std::fs::read(&path), std::fs::metadata(&path)) else {
            continue;
        };
        let wanted = |name: &str| {
            let demangled = lapse_symbols::demangle(name);
            // (an excluded function is not patched, in a library too)
            opts.patch.wants(&module, &[name, &demangled])
                && opts.filters.patches(&[name, &demangled])
        };
        let Some(plan) = Plan::for_module(&data, wanted) else {
            continue;
        };
        let mut done = PathBuf::new();
        if !plan.sites.is_empty() && written < wire::MAX {
            match dir.write_plan(written, &plan.to_bytes(meta.dev(), meta.ino())) {
                Ok(()) => {
                    done = dir.plan_done_path(written);
                    written += 1;
                }
                Err(e) => {
                    notices.say(Notice::Warning(format!(
                        "cannot write the run-time patching plan: {e}; {} is not patched",
                        path.display()
                    )));
                    continue;
                }
            }
        }
        out.push(Patching {
            plan,
            module,
            library,
            done,
        });
    }
    if written > 0 {
        env.push((
            protocol::ENV_PATCH_PLAN.to_owned(),
            dir.plan_prefix().display().to_string(),
        ));
    }
    out
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// A shared library the program may load.
struct Library {
    /// Its path as found (the name `--patch` matches).
    found: PathBuf,
    /// Links followed: one plan per real file.
    real: PathBuf,
    /// Only a candidate for `dlopen`, found in a system directory.
    system: bool,
}

/// The system's library directories.
const SYSTEM_DIRS: [&str; 5] = [
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/usr/local/lib",
];

/// The shared libraries the program may load: those it needs (and they
/// need), then the shared objects of the directories `dlopen` looks in.
fn libraries(program: &Path) -> Vec<Library> {
    let mut seen: BTreeSet<PathBuf> = BTreeSet::new();
    let mut needed = Vec::new();
    let mut todo = vec![program.to_owned()];
    while let Some(object) = todo.pop() {
        let Ok(data) = std::fs::read(&object) else {
            continue;
        };
        for lib in crate::method::needed(&data, &object) {
            if seen.len() < 512 && seen.insert(lib.clone()) {
                needed.push(lib.clone());
                todo.push(lib);
            }
        }
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(d) = program.parent() {
        dirs.push(if d.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            d.to_owned()
        });
    }
    dirs.push(PathBuf::from("."));
    if let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") {
        dirs.extend(std::env::split_paths(&paths));
    }
    dirs.extend(needed.iter().filter_map(|l| l.parent().map(Path::to_owned)));
    dirs.extend(SYSTEM_DIRS.map(PathBuf::from));
    let system: BTreeSet<PathBuf> = SYSTEM_DIRS
        .iter()
        .filter_map(|d| std::fs::canonicalize(d).ok())
        .collect();
    let mut out: Vec<(PathBuf, bool)> = needed.into_iter().map(|l| (l, false)).collect();
    let mut listed: BTreeSet<PathBuf> = BTreeSet::new();
    for d in dirs {
        let Ok(d) = std::fs::canonicalize(&d) else {
            continue;
        };
        if !listed.insert(d.clone()) {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        let in_system = system.contains(&d);
        for e in entries.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            let path = e.path();
            if name.contains(".so")
                && path.is_file()
                && seen.len() < 100_000
                && seen.insert(path.clone())
            {
                out.push((path, in_system));
            }
        }
    }
    out.into_iter()
        .filter_map(|(found, system)| {
            let real = std::fs::canonicalize(&found).ok()?;
            Some(Library {
                found,
                real,
                system,
            })
        })
        .collect()
}
