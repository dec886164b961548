//! Where the separate debug file of a stripped module lives.
//!
//! Only the two conventional places are tried, both cheap: the build-id tree
//! `/usr/lib/debug/.build-id/ab/cdef….debug` and the `.gnu_debuglink` name
//! next to the module, in its `.debug/` folder, or under `/usr/lib/debug`.
//! No network (debuginfod) lookups: recording must not wait on a server.

use std::path::{Path, PathBuf};

const DEBUG_ROOT: &str = "/usr/lib/debug";

/// Candidate debug files for a module, most specific first; only existing
/// files are returned.
pub(crate) fn candidates(
    module: &Path,
    build_id: Option<&[u8]>,
    debuglink: Option<&str>,
) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(id) = build_id.filter(|id| id.len() >= 2) {
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        out.push(
            Path::new(DEBUG_ROOT)
                .join(".build-id")
                .join(&hex[..2])
                .join(format!("{}.debug", &hex[2..])),
        );
    }
    if let Some(link) = debuglink.filter(|l| !l.is_empty() && !l.contains('/')) {
        let dir = module.parent().unwrap_or(Path::new("/"));
        out.push(dir.join(link));
        out.push(dir.join(".debug").join(link));
        let relative = dir.strip_prefix("/").unwrap_or(dir);
        out.push(Path::new(DEBUG_ROOT).join(relative).join(link));
    }
    out.retain(|p| p != module && p.is_file());
    out
}

#[cfg(test)]
mod tests {
    use super::candidates;
    use std::path::Path;

    #[test]
    fn missing_files_are_not_candidates() {
        let found = candidates(
            Path::new("/nonexistent/dir/libx.so"),
            Some(&[0xab, 0xcd, 0xef]),
            Some("libx.so.debug"),
        );
        assert!(found.is_empty());
    }
}
