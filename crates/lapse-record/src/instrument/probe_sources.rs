//! Which probe source each module's events came from, for the session's
//! `probe_sources` (module file name -> source name). The names are the
//! ones docs/report.md lists:
//!
//! - `finstrument-functions`: gcc/clang `-finstrument-functions`;
//! - `pg`: `-pg` (`mcount`); `fentry`: `-pg -mfentry` (`__fentry__`);
//! - `sancov`: LLVM's sanitizer-coverage entry hook (`lapse build`);
//! - `lapse-crate`: the `lapse` Rust crate's probes (or its runtime linked in);
//! - `patched`: function entries patched at run time; `patched-nop-sled`:
//!   the same, at the NOP sleds the compiler left there;
//! - `libcalls`: none of its own: its functions were seen through the
//!   calling modules' library-call probes.
//!
//! What a module's file says is read once per module, at the end.

use std::collections::BTreeMap;

use object::{Object, ObjectSection, ObjectSymbol};

/// The compiled-in probe source of the ELF file `data` (imported hooks and
/// probe sections; a library that *defines* `mcount`, like libc, has none).
pub fn compiled_in(data: &[u8]) -> Option<&'static str> {
    let file = object::File::parse(data).ok()?;
    let mut found = None;
    for sym in file.symbols().chain(file.dynamic_symbols()) {
        if !sym.is_undefined() {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        match name.split('@').next().unwrap_or(name) {
            "__cyg_profile_func_enter" | "__cyg_profile_func_exit" => {
                return Some("finstrument-functions")
            }
            "__fentry__" => found = Some("fentry"),
            "mcount" | "_mcount" if found.is_none() => found = Some("pg"),
            "__sanitizer_cov_trace_pc_guard" => found = Some("sancov"),
            _ => {}
        }
    }
    if found.is_some() {
        return found;
    }
    if file.section_by_name("__sancov_guards").is_some() {
        return Some("sancov");
    }
    let sites = file
        .section_by_name(lapse_symbols::SITES_SECTION)
        .is_some_and(|s| s.size() > 0);
    let runtime = file
        .symbols()
        .any(|s| !s.is_undefined() && s.name().is_ok_and(|n| n.starts_with("lapse_rt_")));
    (sites || runtime).then_some("lapse-crate")
}

/// The sources of the modules at `paths` (those with recorded functions);
/// `patched` names the modules patched at run time, with their source.
pub fn of_modules<'a>(
    paths: impl Iterator<Item = &'a str>,
    patched: &BTreeMap<String, &'static str>,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for path in paths {
        let name = path.rsplit('/').next().unwrap_or(path).to_owned();
        if out.contains_key(&name) {
            continue;
        }
        let source = match patched.get(&name) {
            Some(s) => s,
            // (mapped, not read: the C library's 2 MB for its symbol tables)
            None => lapse_symbols::map_file(std::path::Path::new(path))
                .ok()
                .and_then(|d| compiled_in(&d))
                .unwrap_or("libcalls"),
        };
        out.insert(name, source.to_owned());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_libraries_define_mcount_and_are_libcalls() {
        let patched = BTreeMap::from([("app".to_owned(), "patched")]);
        let libc = ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib64/libc.so.6"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists());
        let mut paths = vec!["/nowhere/app"];
        paths.extend(libc);
        let got = of_modules(paths.into_iter(), &patched);
        assert_eq!(got["app"], "patched");
        if libc.is_some() {
            assert_eq!(got["libc.so.6"], "libcalls");
        }
    }

    /// A site of the `lapse` crate gives this test's executable probes.
    #[lapse::profile]
    fn profiled() -> u32 {
        3
    }

    #[test]
    fn the_lapse_crates_probes_are_named() {
        assert_eq!(profiled(), 3);
        let exe = std::fs::read(std::env::current_exe().expect("exe")).expect("readable");
        assert_eq!(compiled_in(&exe), Some("lapse-crate"));
        assert_eq!(compiled_in(b"not an ELF file"), None);
    }
}
