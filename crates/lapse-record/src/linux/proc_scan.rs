//! What `/proc` says about the machine and running processes: the host
//! name, a process's command line, its threads and executable mappings (a
//! process recorded from the middle of its life already has them; the
//! kernel reports only what happens after the events are opened).

/// The machine's host name ("" when unreadable).
pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default()
}

/// The fields of a `/proc/.../stat` line after the command name (which
/// may hold spaces and parentheses): state ppid pgrp session tty_nr tpgid
/// flags minflt cminflt majflt cmajflt utime stime ...
pub(crate) fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().collect())
}

/// The session a live process belongs to (`None` once it is gone).
pub(crate) fn session_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields = stat_fields(&stat)?;
    if *fields.first()? == "Z" {
        return None;
    }
    fields.get(3)?.parse().ok()
}

/// The threads of process `pid` (an id of lapse's namespace) as pairs
/// (its id in the innermost PID namespace, its id here), from the `NSpid`
/// lines of /proc; empty once the process is gone.
pub(crate) fn namespace_tids(pid: u32) -> Vec<(u32, u32)> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| nspid_ends(&e.path().join("status")))
        .collect()
}

/// Thread `tid` of `pid`'s id in its innermost PID namespace, while it lives.
pub(crate) fn namespace_tid(pid: u32, tid: u32) -> Option<u32> {
    let path = format!("/proc/{pid}/task/{tid}/status");
    nspid_ends(std::path::Path::new(&path)).map(|(inner, _)| inner)
}

/// The first and last ids of a status file's `NSpid` line, as (innermost, here).
fn nspid_ends(status: &std::path::Path) -> Option<(u32, u32)> {
    let status = std::fs::read_to_string(status).ok()?;
    let line = status.lines().find(|l| l.starts_with("NSpid:"))?;
    let ids: Vec<u32> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|w| w.parse().ok())
        .collect();
    Some((*ids.last()?, *ids.first()?))
}

/// lapse's own session (the one a target started from a terminal or a
/// script shares until it calls `setsid`).
pub(crate) fn own_session() -> Option<u32> {
    session_of(std::process::id())
}

pub(crate) fn read_cmdline(pid: u32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    (!args.is_empty()).then_some(args)
}

/// An executable mapping from `/proc/PID/maps`.
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

/// Thread `tid` of `pid`: its state letter (`R` running, `S` asleep, `D`
/// waiting in the kernel, `t` stopped by its tracer...) and the CPU time it
/// has used (user and system, in clock ticks), from
/// `/proc/PID/task/TID/stat`; `None` once it is gone.
pub(crate) fn thread_state(pid: u32, tid: u32) -> Option<(char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    parse_thread_state(&stat)
}

/// [`thread_state`] from a stat line.
fn parse_thread_state(stat: &str) -> Option<(char, u64)> {
    let f = stat_fields(stat)?;
    let state = f.first()?.chars().next()?;
    let (utime, stime): (u64, u64) = (f.get(11)?.parse().ok()?, f.get(12)?.parse().ok()?);
    Some((state, utime + stime))
}

/// Executable mappings of `pid` (file-backed and `[vdso]`).
pub(crate) fn executable_mappings(pid: u32) -> Vec<ProcMapping> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    text.lines()
        .filter_map(parse_maps_line)
        .filter(|m| m.path.starts_with('/') || m.path == "[vdso]")
        .collect()
}

/// `start-end perms offset dev inode path`: an executable mapping (of any
/// path, anonymous ones with an empty one), or `None`.
pub(crate) fn parse_maps_line(line: &str) -> Option<ProcMapping> {
    let mut fields = line.splitn(6, ' ');
    let range = fields.next()?;
    let perms = fields.next()?;
    let offset = fields.next()?;
    let _dev = fields.next()?;
    let _inode = fields.next()?;
    let path = fields.next().unwrap_or("").trim_start();
    if perms.as_bytes().get(2) != Some(&b'x') {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    let m = ProcMapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        offset: u64::from_str_radix(offset, 16).ok()?,
        path: path.to_owned(),
    };
    (m.end > m.start).then_some(m)
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
        assert!(parse_maps_line("7f10-7f00 r-xp 00000000 00:00 0 /x").is_none());
        let anon = parse_maps_line("7f00-7f10 r-xp 00000000 00:00 0 ").expect("JIT code");
        assert_eq!(anon.path, "");
        assert!(parse_maps_line("7fff-8000 r-xp 00000000 00:00 0 [vdso]").is_some());
        assert!(parse_maps_line("garbage").is_none());
    }

    #[test]
    fn a_threads_state_and_cpu_time() {
        let line = "42 (a) b) D 1 42 42 0 -1 4194560 95 0 0 0 7 3 0 0 20 0 2 0 7198344";
        assert_eq!(super::parse_thread_state(line), Some(('D', 10)));
        assert_eq!(super::parse_thread_state("42 (x) R 1"), None);
        assert_eq!(super::parse_thread_state("garbage"), None);
        let me = std::process::id();
        let (state, _) = super::thread_state(me, me).expect("our main thread");
        assert!("RSD".contains(state), "{state}");
    }

    #[test]
    fn own_process_is_visible() {
        let me = std::process::id();
        assert!(super::threads(me).is_some_and(|t| t[0].0 == me));
        assert!(!super::executable_mappings(me).is_empty());
    }

    #[test]
    fn own_command_line_and_host() {
        let me = super::read_cmdline(std::process::id()).expect("our own cmdline");
        assert_eq!(me[0], std::env::args().next().unwrap());
        assert_eq!(super::read_cmdline(0), None);
        assert!(!super::hostname().contains('\n'));
    }
}
