//! The session's private temporary directory: the runtime library written
//! out for LD_PRELOAD and the socket the runtime connects to. Removed when
//! the recording ends.

use std::path::PathBuf;

use crate::RecordError;

pub struct SessionDir {
    path: PathBuf,
}

impl SessionDir {
    pub fn create() -> Result<SessionDir, RecordError> {
        let base = std::env::temp_dir();
        let stamp = crate::linux::clock::monotonic_now().as_nanos();
        let path = base.join(format!("lapse-{}-{stamp:x}", std::process::id()));
        let err = |source| RecordError::SessionDir {
            path: path.clone(),
            source,
        };
        std::fs::create_dir(&path).map_err(err)?;
        let dir = SessionDir { path };
        let so = dir.runtime_path();
        std::fs::write(&so, lapse_rt::RUNTIME_SO).map_err(|source| RecordError::SessionDir {
            path: so.clone(),
            source,
        })?;
        Ok(dir)
    }

    pub fn runtime_path(&self) -> PathBuf {
        self.path.join(lapse_rt::RUNTIME_FILE_NAME)
    }

    pub fn socket_path(&self) -> PathBuf {
        self.path.join("sock")
    }
}

impl Drop for SessionDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
