//! Human units for the terminal table.

/// `12.3 ms` style: three significant digits, unit chosen by magnitude.
pub fn duration(ns: u64) -> String {
    let v = ns as f64;
    let (x, unit) = if ns < 1_000 {
        return format!("{ns} ns");
    } else if ns < 1_000_000 {
        (v / 1e3, "µs")
    } else if ns < 1_000_000_000 {
        (v / 1e6, "ms")
    } else {
        (v / 1e9, "s")
    };
    if x >= 100.0 {
        format!("{x:.0} {unit}")
    } else if x >= 10.0 {
        format!("{x:.1} {unit}")
    } else {
        format!("{x:.2} {unit}")
    }
}

pub fn percent(p: f64) -> String {
    format!("{p:.2}%")
}

/// `s` safe to print to a terminal: control characters (ESC, BEL, newlines,
/// C1 controls) and the bidirectional overrides that reorder what follows
/// are written as escapes (`\x1b`, `\u{202e}`), so a name in a recording
/// cannot move the cursor, retitle the window or hide what it is. JSON and
/// CSV keep the exact text; only the table uses this.
pub fn terminal_text(s: &str) -> std::borrow::Cow<'_, str> {
    fn unsafe_char(c: char) -> bool {
        c.is_control()
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{061c}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    }
    if !s.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            c if (c as u32) < 0x80 && unsafe_char(c) => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if unsafe_char(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_unit_by_magnitude() {
        assert_eq!(duration(999), "999 ns");
        assert_eq!(duration(12_300_000), "12.3 ms");
        assert_eq!(duration(1_234), "1.23 µs");
        assert_eq!(duration(250_000_000), "250 ms");
        assert_eq!(duration(2_500_000_000), "2.50 s");
    }

    #[test]
    fn terminal_text_escapes_controls_and_bidi_overrides_only() {
        assert_eq!(terminal_text("main"), "main");
        assert_eq!(terminal_text("ns::f<é>"), "ns::f<é>");
        assert_eq!(terminal_text("a\x1b]0;pwned\x07b"), "a\\x1b]0;pwned\\x07b");
        assert_eq!(terminal_text("two\nlines"), "two\\x0alines");
        assert_eq!(terminal_text("x\u{202e}fdp"), "x\\u{202e}fdp");
        assert_eq!(terminal_text("c1\u{9b}"), "c1\\u{9b}");
    }
}
