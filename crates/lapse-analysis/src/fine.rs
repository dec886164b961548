//! Sub-nanosecond fixed point for accumulating compensated time.

use std::iter::Sum;
use std::ops::{Add, AddAssign, Sub, SubAssign};

/// Time in 1/256 ns. Probe-cost compensation subtracts a fractional cost
/// from every interval; summing in whole nanoseconds would lose up to half a
/// nanosecond per interval (50 ms over 10^8 intervals). u64 in 1/256 ns
/// still spans 2.2 years.
///
/// The unit is private: values come from [`Fine::from_nanos`] (or
/// [`Fine::from_nanos_f64`]) and leave through [`Fine::to_nanos`], so a
/// count of 1/256 ns is never mistaken for nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fine(u64);

impl Fine {
    const SHIFT: u32 = 8;
    pub const ZERO: Fine = Fine(0);
    /// The largest value, for "no minimum yet".
    pub const MAX: Fine = Fine(u64::MAX);

    pub const fn from_nanos(ns: u64) -> Fine {
        Fine(ns << Self::SHIFT)
    }

    /// Rounded to the nearest 1/256 ns; zero for anything not finite and positive.
    pub fn from_nanos_f64(ns: f64) -> Fine {
        if ns.is_finite() && ns > 0.0 {
            Fine((ns * f64::from(1u32 << Self::SHIFT)).round() as u64)
        } else {
            Fine(0)
        }
    }

    /// Rounded to the nearest nanosecond.
    pub const fn to_nanos(self) -> u64 {
        (self.0 + (1 << (Self::SHIFT - 1))) >> Self::SHIFT
    }

    /// Nanoseconds as a float, without rounding (for ratios and percentages).
    pub fn as_nanos_f64(self) -> f64 {
        self.0 as f64 / f64::from(1u32 << Self::SHIFT)
    }

    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }

    /// `self - other`, or zero when `other` is larger.
    pub const fn saturating_sub(self, other: Fine) -> Fine {
        Fine(self.0.saturating_sub(other.0))
    }

    /// `self` divided into `n` equal parts (`None` for `n == 0`).
    pub const fn checked_div(self, n: u64) -> Option<Fine> {
        match self.0.checked_div(n) {
            Some(v) => Some(Fine(v)),
            None => None,
        }
    }
}

impl Add for Fine {
    type Output = Fine;
    #[inline(always)]
    fn add(self, o: Fine) -> Fine {
        Fine(self.0 + o.0)
    }
}

impl AddAssign for Fine {
    #[inline(always)]
    fn add_assign(&mut self, o: Fine) {
        self.0 += o.0;
    }
}

impl Sub for Fine {
    type Output = Fine;
    #[inline(always)]
    fn sub(self, o: Fine) -> Fine {
        Fine(self.0 - o.0)
    }
}

impl SubAssign for Fine {
    #[inline(always)]
    fn sub_assign(&mut self, o: Fine) {
        self.0 -= o.0;
    }
}

impl Sum for Fine {
    fn sum<I: Iterator<Item = Fine>>(iter: I) -> Fine {
        iter.fold(Fine::ZERO, Add::add)
    }
}

impl<'a> Sum<&'a Fine> for Fine {
    fn sum<I: Iterator<Item = &'a Fine>>(iter: I) -> Fine {
        iter.copied().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_to_the_nearest_nanosecond() {
        assert_eq!(Fine::from_nanos(7).to_nanos(), 7);
        assert_eq!(Fine::from_nanos_f64(2.49).to_nanos(), 2);
        assert_eq!(Fine::from_nanos_f64(2.5).to_nanos(), 3);
        assert_eq!(Fine::from_nanos_f64(f64::NAN), Fine::ZERO);
        assert_eq!(Fine::from_nanos_f64(-3.0), Fine::ZERO);
    }

    #[test]
    fn a_fraction_adds_up_exactly() {
        // 0.25 ns a million times is 250 000 ns, not 0 (whole-ns sums would lose it all).
        let q = Fine::from_nanos_f64(0.25);
        let total: Fine = std::iter::repeat_n(q, 1_000_000).sum();
        assert_eq!(total.to_nanos(), 250_000);
        assert_eq!(
            Fine::from_nanos(3).saturating_sub(Fine::from_nanos(5)),
            Fine::ZERO
        );
    }
}
