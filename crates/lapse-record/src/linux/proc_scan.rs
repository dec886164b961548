//! Sampling, attach: what a running process already has (threads and
//! executable mappings) read from `/proc`, since the kernel reports only
//! what happens after the events are opened.

/// An executable file mapping from `/proc/PID/maps`.
pub(crate) struct ProcMapping {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) offset: u64,
    pub(crate) path: String,
}

/// The threads of `pid` with their names; `None` when the process does not exist.
pub(crate) fn threads(pid: u32) -> Option<Vec<(u32, String)>> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut out: Vec<(u32, String)> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .map(|tid| {
            let name =
                std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).unwrap_or_default();
            (tid, name.trim_end().to_owned())
        })
        .collect();
    out.sort();
    // The main thread first: its events own the rings.
    if let Some(i) = out.iter().position(|(tid, _)| *tid == pid) {
        out.swap(0, i);
    }
    (!out.is_empty()).then_some(out)
}

/// Executable mappings of `pid` (file-backed and `[vdso]`).
pub(crate) fn executable_mappings(pid: u32) -> Vec<ProcMapping> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    text.lines().filter_map(parse_maps_line).collect()
}

fn parse_maps_line(line: &str) -> Option<ProcMapping> {
    let mut fields = line.splitn(6, ' ');
    let range = fields.next()?;
    let perms = fields.next()?;
    let offset = fields.next()?;
    let _dev = fields.next()?;
    let _inode = fields.next()?;
    let path = fields.next().unwrap_or("").trim_start();
    if !perms.contains('x') || !(path.starts_with('/') || path == "[vdso]") {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    Some(ProcMapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        offset: u64::from_str_radix(offset, 16).ok()?,
        path: path.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::parse_maps_line;

    #[test]
    fn maps_lines() {
        let m = parse_maps_line(
            "7f1c2a000000-7f1c2a1b0000 r-xp 00028000 08:01 1234   /usr/lib/x86_64-linux-gnu/libc.so.6",
        )
        .expect("executable file mapping");
        assert_eq!(
            (m.start, m.end, m.offset),
            (0x7f1c2a000000, 0x7f1c2a1b0000, 0x28000)
        );
        assert_eq!(m.path, "/usr/lib/x86_64-linux-gnu/libc.so.6");
        assert!(parse_maps_line("7f00-7f10 rw-p 00000000 00:00 0 ").is_none());
        assert!(parse_maps_line("7fff-8000 r-xp 00000000 00:00 0 [vdso]").is_some());
        assert!(parse_maps_line("garbage").is_none());
    }

    #[test]
    fn own_process_is_visible() {
        let me = std::process::id();
        assert!(super::threads(me).is_some_and(|t| t[0].0 == me));
        assert!(!super::executable_mappings(me).is_empty());
    }
}
