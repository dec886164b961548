//! Signal names for `record --signal`: which signals may toggle recording,
//! by name or number, and how to name one back.

/// The signals `--signal` may take: those a program does not need lapse to
/// leave alone. Ctrl-C and the termination signals reach the target
/// through lapse, the fatal ones are the runtime's to flush on, and
/// SIGKILL/SIGSTOP cannot be caught.
const TOGGLES: [(&str, i32); 5] = [
    ("USR1", libc::SIGUSR1),
    ("USR2", libc::SIGUSR2),
    ("WINCH", libc::SIGWINCH),
    ("URG", libc::SIGURG),
    ("PROF", libc::SIGPROF),
];

/// The signal `text` names (`SIGUSR2`, `USR2`, `12`, `RTMIN+3`), if it
/// is one `--signal` may take; otherwise why not.
pub fn toggle_signal(text: &str) -> Result<i32, String> {
    let t = text.trim();
    let bare = t.strip_prefix("SIG").unwrap_or(t);
    let rt = |n: i32| (libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&n);
    let number = if let Ok(n) = bare.parse::<i32>() {
        Some(n)
    } else if let Some(k) = bare.strip_prefix("RTMIN") {
        let off = if k.is_empty() {
            Some(0)
        } else {
            k.strip_prefix('+').and_then(|k| k.parse().ok())
        };
        off.map(|o: i32| libc::SIGRTMIN() + o)
    } else {
        TOGGLES
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(bare))
            .map(|&(_, n)| n)
    };
    match number {
        Some(n) if TOGGLES.iter().any(|&(_, s)| s == n) || rt(n) => Ok(n),
        _ => Err(format!(
            "{text}: not a signal lapse can toggle recording with (use SIGUSR1, SIGUSR2, SIGWINCH, SIGURG, SIGPROF or SIGRTMIN+N)"
        )),
    }
}

/// `SIGUSR2`, `SIGRTMIN+3`, or the number.
pub fn signal_name(n: i32) -> String {
    if let Some((name, _)) = TOGGLES.iter().find(|&&(_, s)| s == n) {
        return format!("SIG{name}");
    }
    if (libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&n) {
        return format!("SIGRTMIN+{}", n - libc::SIGRTMIN());
    }
    n.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_numbers_and_refusals() {
        assert_eq!(toggle_signal("SIGUSR2"), Ok(libc::SIGUSR2));
        assert_eq!(toggle_signal("usr1"), Ok(libc::SIGUSR1));
        assert_eq!(toggle_signal("12"), Ok(12));
        assert_eq!(toggle_signal("SIGRTMIN+2"), Ok(libc::SIGRTMIN() + 2));
        assert_eq!(signal_name(libc::SIGUSR2), "SIGUSR2");
        for bad in ["SIGINT", "9", "SIGSEGV", "nope", "RTMIN+x"] {
            assert!(toggle_signal(bad).is_err(), "{bad}");
        }
    }
}
