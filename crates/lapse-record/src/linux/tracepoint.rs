//! Kernel tracepoint ids, which `perf_event_open` wants as the `config` of a
//! `PERF_TYPE_TRACEPOINT` event. The kernel publishes them only in tracefs
//! (`events/<subsystem>/<name>/id`); when tracefs is mounted nowhere the
//! usual places and we may mount it, it is mounted on a private temporary
//! directory just long enough to read the ids, so the system is left as it was.

use std::io;
use std::path::{Path, PathBuf};

/// Where tracefs usually is: its own mount point, then inside debugfs.
const TRACEFS_DIRS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// Why a tracepoint id could not be found; the message says how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum TracepointError {
    #[error("cannot read {path} ({source}); run as root or make tracefs readable")]
    Unreadable { path: PathBuf, source: io::Error },
    #[error("tracefs is not mounted and cannot be mounted here ({0}); mount it with `mount -t tracefs nodev /sys/kernel/tracing`")]
    NoTracefs(io::Error),
    #[error("the kernel has no tracepoint {0} (CONFIG_FTRACE_SYSCALLS off?)")]
    Missing(String),
}

/// The ids of `subsystem:name` for each name, in order.
pub fn ids(subsystem: &str, names: &[&str]) -> Result<Vec<u64>, TracepointError> {
    let mut last_err = None;
    for dir in TRACEFS_DIRS {
        let events = Path::new(dir).join("events");
        if events.is_dir() {
            match read_ids(&events, subsystem, names) {
                Ok(ids) => return Ok(ids),
                Err(e) => last_err = Some(e),
            }
        }
    }
    if let Some(e) = last_err {
        return Err(e);
    }
    let mount = PrivateMount::new().map_err(TracepointError::NoTracefs)?;
    read_ids(&mount.dir.join("events"), subsystem, names)
}

fn read_ids(events: &Path, subsystem: &str, names: &[&str]) -> Result<Vec<u64>, TracepointError> {
    names
        .iter()
        .map(|name| {
            let path = events.join(subsystem).join(name).join("id");
            match std::fs::read_to_string(&path) {
                Ok(text) => text
                    .trim()
                    .parse()
                    .map_err(|_| TracepointError::Missing(format!("{subsystem}:{name}"))),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    Err(TracepointError::Missing(format!("{subsystem}:{name}")))
                }
                Err(source) => Err(TracepointError::Unreadable { path, source }),
            }
        })
        .collect()
}

/// tracefs mounted on a fresh temporary directory; unmounted and removed on drop.
struct PrivateMount {
    dir: PathBuf,
}

impl PrivateMount {
    fn new() -> io::Result<PrivateMount> {
        let dir = std::env::temp_dir().join(format!("lapse-tracefs-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let target = cstring(&dir)?;
        // SAFETY: valid NUL-terminated strings; a failed mount changes nothing.
        let rc = unsafe {
            libc::mount(
                c"nodev".as_ptr(),
                target.as_ptr(),
                c"tracefs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            )
        };
        if rc != 0 {
            let e = io::Error::last_os_error();
            let _ = std::fs::remove_dir(&dir);
            return Err(e);
        }
        Ok(PrivateMount { dir })
    }
}

impl Drop for PrivateMount {
    fn drop(&mut self) {
        if let Ok(target) = cstring(&self.dir) {
            // SAFETY: unmounts what `new` mounted there.
            unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn cstring(path: &Path) -> io::Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_read_from_an_events_tree() {
        let root = std::env::temp_dir().join(format!("lapse-tp-test-{}", std::process::id()));
        let d = root.join("raw_syscalls/sys_enter");
        std::fs::create_dir_all(&d).expect("mkdir");
        std::fs::write(d.join("id"), "17\n").expect("write");
        assert_eq!(
            read_ids(&root, "raw_syscalls", &["sys_enter"]).ok(),
            Some(vec![17])
        );
        assert!(matches!(
            read_ids(&root, "raw_syscalls", &["sys_exit"]),
            Err(TracepointError::Missing(_))
        ));
        let _ = std::fs::remove_dir_all(&root);
    }
}
