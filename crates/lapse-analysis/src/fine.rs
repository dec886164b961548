//! Sub-nanosecond fixed point for accumulating compensated time.

/// Time in 1/256 ns. Probe-cost compensation subtracts a fractional cost
/// from every interval; summing in whole nanoseconds would lose up to half a
/// nanosecond per interval (50 ms over 10^8 intervals). u64 in 1/256 ns
/// still spans 2.2 years.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Fine(pub u64);

impl Fine {
    pub const SHIFT: u32 = 8;

    pub const fn from_nanos(ns: u64) -> Fine {
        Fine(ns << Self::SHIFT)
    }

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
}
