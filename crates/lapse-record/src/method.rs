//! `--method auto`: does the target carry probes?

use std::path::Path;

use object::{Object, ObjectSymbol};

/// The probe hooks a binary can reference, as `auto` looks for them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probes {
    /// `-finstrument-functions`: `__cyg_profile_func_enter`/`_exit`.
    CygProfile,
    /// `-pg` (`mcount`, `_mcount`) or `-pg -mfentry` (`__fentry__`).
    Mcount,
    /// Linked with the lapse runtime itself.
    LapseRuntime,
    None,
}

/// Which probes the ELF file at `path` references (imports or defines).
/// Unreadable or non-ELF files have none.
pub fn detect_probes(path: &Path) -> Probes {
    let Ok(data) = std::fs::read(path) else {
        return Probes::None;
    };
    let Ok(file) = object::File::parse(&*data) else {
        return Probes::None;
    };
    let mut found = Probes::None;
    for sym in file.symbols().chain(file.dynamic_symbols()) {
        let Ok(name) = sym.name() else { continue };
        let name = name.split('@').next().unwrap_or(name);
        match name {
            "__cyg_profile_func_enter" | "__cyg_profile_func_exit" => return Probes::CygProfile,
            "mcount" | "_mcount" | "__fentry__" => found = Probes::Mcount,
            n if n.starts_with("lapse_rt_") => found = Probes::LapseRuntime,
            _ => {}
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_elf_has_no_probes() {
        assert_eq!(detect_probes(Path::new("/nonexistent")), Probes::None);
        assert_eq!(detect_probes(Path::new("/etc/hostname")), Probes::None);
    }
}
