//! The file behind a mapping, as it was when the target mapped it. A binary
//! rebuilt or replaced on disk during a recording (a new file renamed over
//! the path), deleted, or held only in memory (`memfd`) must be symbolized
//! from what ran, not from what the path names by the time lapse reads it.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use lapse_symbols::ElfModule;

use super::records::FileInode;

/// Where a mapping was and which file the kernel said it was of.
#[derive(Clone, Copy, Debug)]
pub struct Mapped {
    pub pid: u32,
    pub start: u64,
    pub end: u64,
    /// `None` when the kernel did not say (a mapping read from /proc).
    pub inode: Option<FileInode>,
}

/// Opens the ELF that `mapped` is of, named `path`: the file at `path`
/// while it is still that file (same device and inode); otherwise the
/// mapped file itself, through `/proc/PID/map_files` while the process
/// lives; otherwise nothing (its functions are then named by address,
/// never by another file's symbols).
pub fn open_mapped_elf(path: &str, mapped: Option<Mapped>) -> Option<ElfModule> {
    let deleted = path.ends_with(" (deleted)") || path.starts_with("/memfd:");
    let real = path.strip_suffix(" (deleted)").unwrap_or(path);
    let on_disk = || {
        if !real.starts_with('/') {
            return None;
        }
        let want = mapped.and_then(|m| m.inode);
        if deleted && want.is_none() {
            // (the path may name another file by now, and nothing says
            // whether it is the one that was mapped)
            return None;
        }
        if let Some(want) = want {
            let meta = std::fs::metadata(real).ok()?;
            let dev = meta.dev();
            let same = meta.ino() == want.ino
                && libc::major(dev) == want.major
                && libc::minor(dev) == want.minor;
            if !same {
                return None;
            }
        }
        ElfModule::open(Path::new(real)).ok()
    };
    let through_proc = || {
        let m = mapped?;
        let link = format!("/proc/{}/map_files/{:x}-{:x}", m.pid, m.start, m.end);
        ElfModule::open(Path::new(&link)).ok()
    };
    if deleted {
        through_proc().or_else(on_disk)
    } else {
        on_disk().or_else(through_proc)
    }
}
