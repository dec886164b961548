//! Files opened or made the careful way: never through a symlink at the
//! name, and (for what the target will load) with an exact mode in a fresh
//! directory whose name nobody could guess.

use std::ffi::{CString, OsString};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Makes a new directory (0700, less the umask) from `template`, whose
/// name ends in `XXXXXX` (replaced by `mkdtemp`); its path.
pub fn mkdtemp(template: &Path) -> io::Result<PathBuf> {
    let c = CString::new(template.as_os_str().as_bytes())
        .map_err(|_| io::Error::other("temporary directory name holds a NUL byte"))?;
    let mut bytes = c.into_bytes_with_nul();
    // SAFETY: a NUL-terminated template that mkdtemp rewrites in place.
    let p = unsafe { libc::mkdtemp(bytes.as_mut_ptr().cast()) };
    if p.is_null() {
        return Err(io::Error::last_os_error());
    }
    bytes.pop(); // the NUL
    Ok(PathBuf::from(OsString::from_vec(bytes)))
}

/// A new file (not one that was there) for writing, created with `mode`,
/// never through a symlink.
pub fn create_new_no_follow(path: &Path, mode: u32) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Opens a file for reading, refusing a symlink at that name.
pub fn open_no_follow(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// As [`open_no_follow`], and without waiting on a FIFO at that name (the
/// file is read only if it turns out to be a regular one).
pub fn open_no_follow_nonblocking(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
}
