//! Files lapse writes for the user: created beside their final name as a
//! temporary file (0600, `O_EXCL`, never through a symlink) and renamed over
//! it once there is something to keep, so that a failed `record` or
//! `recover` leaves an existing file as it was.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A file being written under a temporary name beside `final_path`.
pub(crate) struct PendingFile {
    final_path: PathBuf,
    temp_path: PathBuf,
    committed: bool,
}

impl PendingFile {
    /// Creates `.<name>.<what>-<pid>-<n>` in `final_path`'s directory.
    pub(crate) fn create(final_path: &Path, what: &str) -> io::Result<(PendingFile, File)> {
        let dir = match final_path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
            _ => PathBuf::from("."),
        };
        let name = final_path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "lapse".into());
        let stamp = crate::linux::clock::monotonic_now().as_nanos();
        for n in 0..100u64 {
            let temp_path = dir.join(format!(
                ".{name}.{what}-{}-{:x}",
                std::process::id(),
                stamp.wrapping_add(n)
            ));
            match create_private(&temp_path) {
                Ok(file) => {
                    let pending = PendingFile {
                        final_path: final_path.to_owned(),
                        temp_path,
                        committed: false,
                    };
                    return Ok((pending, file));
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

    pub(crate) fn temp_path(&self) -> &Path {
        &self.temp_path
    }

    pub(crate) fn final_path(&self) -> &Path {
        &self.final_path
    }

    /// Puts the file in place (once): it replaces whatever had the final name.
    pub(crate) fn commit(&mut self) -> io::Result<()> {
        if !self.committed {
            std::fs::rename(&self.temp_path, &self.final_path)?;
            self.committed = true;
        }
        Ok(())
    }
}

impl Drop for PendingFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.temp_path);
        }
    }
}

/// A new file only we can read and write (0600 whatever the umask), never
/// opened through a symlink and never an existing file.
pub(crate) fn create_private(path: &Path) -> io::Result<File> {
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
        let (p, _f) = PendingFile::create(&out, "partial").expect("create");
        assert!(p.temp_path().exists());
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
        let (mut p, mut f) = PendingFile::create(&out, "partial").expect("create");
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
}
