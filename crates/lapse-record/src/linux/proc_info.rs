//! What a recording says about the machine and its processes, read from
//! `/proc`: the host name and a process's command line.

/// The machine's host name ("" when unreadable).
pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default()
}

/// The command line of a live process, from `/proc/PID/cmdline` (`None`
/// when it is gone or has none, as a kernel thread).
pub(crate) fn read_cmdline(pid: u32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    (!args.is_empty()).then_some(args)
}

#[cfg(test)]
mod tests {
    #[test]
    fn own_command_line_and_host() {
        let me = super::read_cmdline(std::process::id()).expect("our own cmdline");
        assert_eq!(me[0], std::env::args().next().unwrap());
        assert_eq!(super::read_cmdline(0), None);
        assert!(!super::hostname().contains('\n'));
    }
}
