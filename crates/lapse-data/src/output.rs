//! Files lapse writes for the user: `record`, `recover`, `export` and
//! `import` all open their output here, so the rules hold for every one.
//!
//! - A regular file, or a new path, is written under a temporary name beside
//!   it (0600, `O_EXCL`, never through a symlink) and renamed over it once
//!   there is something to keep ([`OutputFile::commit`]): a write that fails
//!   leaves the previous file as it was, and no half-written file behind.
//!   A path that is a symlink to a regular file is replaced by the file,
//!   as before: nothing outside the named path changes.
//! - Anything else — `-` (standard output), a character device such as
//!   `/dev/null`, a FIFO, a terminal, `/dev/stdout` or a link to
//!   `/proc/self/fd/N` — is written in place: opened for writing as it is,
//!   never created, renamed over, truncated as a file or deleted.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// An output being written: where, and whether it still has to be put in place.
#[derive(Debug)]
pub struct OutputFile {
    /// The name the user gave (for messages).
    path: PathBuf,
    way: Way,
}

#[derive(Debug)]
enum Way {
    /// Written at `temp`, renamed over the path at commit.
    Replace { temp: PathBuf, committed: bool },
    /// Written where it is (a device, a pipe, standard output).
    InPlace,
}

impl OutputFile {
    /// Opens the output `path` (`-` is standard output); `what` names the
    /// temporary (`.<name>.<what>-<pid>-<n>`) where there is one.
    pub fn create(path: &Path, what: &str) -> io::Result<(OutputFile, File)> {
        if path == Path::new("-") {
            let file = stdout_copy()?;
            return Ok((OutputFile::in_place(path), file));
        }
        match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                "is a directory",
            )),
            Ok(m) if !m.is_file() => {
                let file = OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_CLOEXEC | libc::O_NOCTTY)
                    .open(path)?;
                Ok((OutputFile::in_place(path), file))
            }
            Ok(_) if leads_into_proc_or_dev(path) => {
                // /dev/stdout, /proc/self/fd/N or a link to them, open on a
                // regular file: written through that descriptor's file, as
                // the shell's `>` or `>>` left it.
                let file = OpenOptions::new()
                    .append(true)
                    .custom_flags(libc::O_CLOEXEC | libc::O_NOCTTY)
                    .open(path)?;
                Ok((OutputFile::in_place(path), file))
            }
            Ok(_) => OutputFile::beside(path, what),
            Err(_) => OutputFile::beside(path, what),
        }
    }

    fn in_place(path: &Path) -> OutputFile {
        OutputFile {
            path: path.to_owned(),
            way: Way::InPlace,
        }
    }

    /// Creates `.<name>.<what>-<pid>-<n>` in `path`'s directory.
    fn beside(path: &Path, what: &str) -> io::Result<(OutputFile, File)> {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
            _ => PathBuf::from("."),
        };
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "lapse".into());
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        for n in 0..100u64 {
            let temp = dir.join(format!(
                ".{name}.{what}-{}-{:x}",
                std::process::id(),
                stamp.wrapping_add(n)
            ));
            match create_private(&temp) {
                Ok(file) => {
                    let out = OutputFile {
                        path: path.to_owned(),
                        way: Way::Replace {
                            temp,
                            committed: false,
                        },
                    };
                    return Ok((out, file));
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "no free temporary name",
        ))
    }

    /// The output's name, as the user gave it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// True for an output written where it is (not a regular file): there
    /// is nothing to rename, and nothing beside it may be created.
    pub fn is_in_place(&self) -> bool {
        matches!(self.way, Way::InPlace)
    }

    /// The temporary file being written, if there is one.
    pub fn temp_path(&self) -> Option<&Path> {
        match &self.way {
            Way::Replace { temp, .. } => Some(temp),
            Way::InPlace => None,
        }
    }

    /// Puts the file in place (once): it replaces whatever had its name. An
    /// output written in place is there already.
    pub fn commit(&mut self) -> io::Result<()> {
        if let Way::Replace { temp, committed } = &mut self.way {
            if !*committed {
                std::fs::rename(&*temp, &self.path)?;
                *committed = true;
            }
        }
        Ok(())
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        if let Way::Replace {
            temp,
            committed: false,
            ..
        } = &self.way
        {
            let _ = std::fs::remove_file(temp);
        }
    }
}

/// True when `path` lies under /proc or /dev, or a symlink on the way
/// leads there: a descriptor's file (`/dev/stdout`, `/proc/self/fd/1`),
/// never a name to create files beside or rename over.
fn leads_into_proc_or_dev(path: &Path) -> bool {
    let mut p = path.to_owned();
    for _ in 0..40 {
        if p.starts_with("/proc") || p.starts_with("/dev") {
            return true;
        }
        let Ok(to) = std::fs::read_link(&p) else {
            return false;
        };
        p = match p.parent() {
            Some(dir) if to.is_relative() => dir.join(to),
            _ => to,
        };
    }
    false
}

/// A descriptor of its own for standard output (closing it leaves fd 1 open).
fn stdout_copy() -> io::Result<File> {
    use std::os::fd::{AsFd, OwnedFd};
    let fd: OwnedFd = io::stdout().as_fd().try_clone_to_owned()?;
    Ok(File::from(fd))
}

/// A new file only we can read and write (0600 whatever the umask), never
/// opened through a symlink and never an existing file.
pub fn create_private(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .write(true)
        .read(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("lapse-output-file-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("scratch dir");
        d
    }

    #[test]
    fn uncommitted_leaves_the_old_file_and_no_temporary() {
        let d = scratch("drop");
        let out = d.join("out.lapse");
        std::fs::write(&out, b"old").expect("write");
        let (p, _f) = OutputFile::create(&out, "partial").expect("create");
        assert!(p.temp_path().expect("a temporary").exists());
        drop(p);
        assert_eq!(std::fs::read(&out).expect("read"), b"old");
        assert_eq!(std::fs::read_dir(&d).expect("dir").count(), 1);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn commit_replaces_the_file_with_a_private_one() {
        let d = scratch("commit");
        let out = d.join("out.lapse");
        std::fs::write(&out, b"old").expect("write");
        let (mut p, mut f) = OutputFile::create(&out, "partial").expect("create");
        io::Write::write_all(&mut f, b"new").expect("write");
        p.commit().expect("commit");
        drop(p);
        assert_eq!(std::fs::read(&out).expect("read"), b"new");
        let mode = std::fs::metadata(&out).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_planted_symlink_is_not_followed() {
        let d = scratch("symlink");
        let victim = d.join("victim");
        std::fs::write(&victim, b"keep").expect("write");
        let link = d.join("link");
        std::os::unix::fs::symlink(&victim, &link).expect("symlink");
        assert!(create_private(&link).is_err());
        assert_eq!(std::fs::read(&victim).expect("read"), b"keep");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_fifo_is_written_in_place_and_stays_a_fifo() {
        use std::io::Read;
        use std::os::unix::fs::FileTypeExt;
        let d = scratch("fifo");
        let fifo = d.join("out.fifo");
        let c = std::ffi::CString::new(fifo.to_str().expect("utf-8")).expect("no NUL");
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // (a reader first, so that opening the writing end does not wait)
        let mut reader = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .expect("reader");
        let (mut p, mut f) = OutputFile::create(&fifo, "partial").expect("create");
        assert!(p.is_in_place() && p.temp_path().is_none());
        io::Write::write_all(&mut f, b"data").expect("write");
        p.commit().expect("commit");
        drop((p, f));
        let mut got = Vec::new();
        reader.read_to_end(&mut got).expect("read");
        assert_eq!(got, b"data");
        let kind = std::fs::symlink_metadata(&fifo).expect("meta").file_type();
        assert!(kind.is_fifo());
        assert_eq!(std::fs::read_dir(&d).expect("dir").count(), 1);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_link_to_a_descriptor_is_written_through_it_and_stays_a_link() {
        let d = scratch("fdlink");
        let behind = d.join("behind");
        std::fs::write(&behind, b"old ").expect("write");
        let open = OpenOptions::new().append(true).open(&behind).expect("open");
        let link = d.join("link");
        let fd = std::os::fd::AsRawFd::as_raw_fd(&open);
        std::os::unix::fs::symlink(format!("/proc/self/fd/{fd}"), &link).expect("symlink");
        let (mut p, mut f) = OutputFile::create(&link, "partial").expect("create");
        assert!(p.is_in_place());
        io::Write::write_all(&mut f, b"new").expect("write");
        p.commit().expect("commit");
        drop((p, f, open));
        assert!(std::fs::symlink_metadata(&link).expect("meta").is_symlink());
        assert_eq!(std::fs::read(&behind).expect("read"), b"old new");
        assert_eq!(std::fs::read_dir(&d).expect("dir").count(), 2);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_directory_is_refused() {
        let d = scratch("dir");
        assert!(OutputFile::create(&d, "partial").is_err());
        assert_eq!(std::fs::read_dir(&d).expect("dir").count(), 0);
        let _ = std::fs::remove_dir_all(&d);
    }
}
