//! The session's private temporary directory: the runtime library written
//! out for LD_PRELOAD and the socket the runtime connects to. Removed when
//! the recording ends.
//!
//! The directory is made with `mkdtemp` (an unpredictable name, created, not
//! reused) and is 0700 whatever the umask, the library in it 0700, the
//! socket 0600: no other user can replace the library the target loads.
//! Directories that recorders killed before their end left behind are
//! removed when a recording starts.

use std::fs::Permissions;
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::linux::fs::{create_new_no_follow, mkdtemp};
use crate::linux::process::{process_exists, real_uid};
use crate::RecordError;

/// What a session directory holds (and all it may hold to be removed as stale).
const SOCKET_NAME: &str = "sock";
const SPILL_NAME: &str = "spill";
/// The run-time patching plans (`patch.plan.N`), and what the runtime did
/// with each (`patch.plan.N.done`).
const PLAN_NAME: &str = "patch.plan";
/// The record-time filter table.
const FILTER_NAME: &str = "filter.table";

pub struct SessionDir {
    path: PathBuf,
}

impl SessionDir {
    pub fn create() -> Result<SessionDir, RecordError> {
        let err = |path: &Path| {
            let path = path.to_owned();
            move |source| RecordError::SessionDir { path, source }
        };
        // Absolute even when TMPDIR is not: the socket's and the runtime's
        // paths go to the target, which may change directory before its
        // children connect.
        let tmp = std::env::temp_dir();
        let base = std::path::absolute(&tmp).map_err(err(&tmp))?;
        remove_stale(&base);
        let path = mkdtemp(&base.join(format!("lapse-{}-XXXXXX", std::process::id())))
            .map_err(err(&base))?;
        let dir = SessionDir { path };
        // mkdtemp asks for 0700, which the umask can only narrow: make it exact.
        std::fs::set_permissions(&dir.path, Permissions::from_mode(0o700))
            .map_err(err(&dir.path))?;
        let so = dir.runtime_path();
        write_private(&so, lapse_rt::RUNTIME_SO, 0o700).map_err(err(&so))?;
        Ok(dir)
    }

    pub fn runtime_path(&self) -> PathBuf {
        self.path.join(lapse_rt::RUNTIME_FILE_NAME)
    }

    pub fn socket_path(&self) -> PathBuf {
        self.path.join(SOCKET_NAME)
    }

    /// Where the runtime spills for an output that has no directory of its
    /// own to spill beside (a device, a pipe): removed with the directory.
    pub fn spill_path(&self) -> PathBuf {
        self.path.join(SPILL_NAME)
    }

    /// The plans' common prefix, for the runtime.
    pub fn plan_prefix(&self) -> PathBuf {
        self.path.join(PLAN_NAME)
    }

    /// Writes the record-time filter table (0600); its path, for the runtime.
    pub fn write_filter(&self, bytes: &[u8]) -> io::Result<PathBuf> {
        let path = self.path.join(FILTER_NAME);
        write_private(&path, bytes, 0o600)?;
        Ok(path)
    }

    /// Hands the directory, the runtime and the socket to user `uid` (a
    /// process of that user, attached to by root, must open them; that
    /// user may then change them, which gains them nothing: the process
    /// is theirs, and the recorder loads nothing from here).
    pub fn lend_to(&self, uid: u32, gid: u32) -> io::Result<()> {
        for p in [self.runtime_path(), self.socket_path(), self.path.clone()] {
            std::os::unix::fs::chown(&p, Some(uid), Some(gid))?;
        }
        Ok(())
    }

    /// Writes run-time patching plan number `n` (0600).
    pub fn write_plan(&self, n: usize, bytes: &[u8]) -> io::Result<()> {
        write_private(&self.path.join(format!("{PLAN_NAME}.{n}")), bytes, 0o600)
    }

    /// Where the runtime says what it did with plan `n` (`patch.c`), once
    /// a process applied it.
    pub fn plan_done_path(&self, n: usize) -> PathBuf {
        self.path.join(format!("{PLAN_NAME}.{n}.done"))
    }
}

impl Drop for SessionDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A new file with `bytes`, mode exactly `mode`, never through a symlink.
fn write_private(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let mut f = create_new_no_follow(path, mode)?;
    f.set_permissions(Permissions::from_mode(mode))?;
    f.write_all(bytes)
}

/// Removes the session directories (`lapse-<pid>-*`) of recorders that are
/// gone: ours (same owner), holding nothing but what a session puts there.
fn remove_stale(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    let uid = real_uid();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = recorder_pid(&name.to_string_lossy()) else {
            continue;
        };
        if pid == std::process::id() || process_exists(pid) {
            continue;
        }
        let path = e.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !meta.is_dir() || meta.uid() != uid || !only_session_files(&path) {
            continue;
        }
        let _ = std::fs::remove_dir_all(&path);
    }
}

/// `lapse-<pid>-<suffix>` → pid.
fn recorder_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("lapse-")?;
    let (pid, suffix) = rest.split_once('-')?;
    if suffix.is_empty() || !suffix.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

/// `patch.plan.N` or `patch.plan.N.done`.
fn is_plan_file(name: &str) -> bool {
    let Some(rest) = name
        .strip_prefix(PLAN_NAME)
        .and_then(|r| r.strip_prefix('.'))
    else {
        return false;
    };
    let n = rest.strip_suffix(".done").unwrap_or(rest);
    !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
}

fn only_session_files(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().all(|e| {
        let n = e.file_name();
        n == SOCKET_NAME
            || n == SPILL_NAME
            || is_plan_file(&n.to_string_lossy())
            || n == FILTER_NAME
            || n == lapse_rt::RUNTIME_FILE_NAME
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_directory_names_give_the_recorder_pid() {
        assert_eq!(recorder_pid("lapse-123-a1B2c3"), Some(123));
        assert_eq!(recorder_pid("lapse-123-1b6a95df9ac"), Some(123));
        assert_eq!(recorder_pid("lapse-symbols-11956-cpp"), None);
        assert_eq!(recorder_pid("lapse-test-bad-10953"), None);
        assert_eq!(recorder_pid("lapse-123-"), None);
        assert_eq!(recorder_pid("lapse-12x-abc"), None);
    }

    #[test]
    fn plan_files_are_the_sessions_own() {
        for ours in ["patch.plan.0", "patch.plan.12", "patch.plan.3.done"] {
            assert!(is_plan_file(ours), "{ours}");
        }
        for not in [
            "patch.plan",
            "patch.plan.",
            "patch.plan.x",
            "patch.plan.1.txt",
            "plan.1",
        ] {
            assert!(!is_plan_file(not), "{not}");
        }
    }
}
