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
}
