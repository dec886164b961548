//! The runtime's ticks (the raw counter it stamps events with) converted
//! to CLOCK_MONOTONIC, the file's clock. The clocks themselves are read in
//! [`crate::linux::clock`].

use lapse_data::{Timestamp, TscCalibration};
use lapse_rt::protocol::Ticks;

use crate::linux::clock::tick_anchor as anchor;
use crate::linux::perf::KernelTscScale;

/// Ticks → CLOCK_MONOTONIC: `ns = ref_ns + (ticks - ref_ticks) * mult >> shift`
/// in integer arithmetic, so the conversion is exact and cheap per event.
#[derive(Clone, Copy, Debug)]
pub struct TickClock {
    ref_ticks: u64,
    ref_ns: u64,
    mult: u64,
    shift: u32,
}

impl TickClock {
    /// Anchors the counter to CLOCK_MONOTONIC: the pair read closest together
    /// out of a few tries. The rate comes from the kernel when it publishes
    /// one, else from a 10 ms measurement.
    pub fn calibrate(kernel: Option<KernelTscScale>) -> TickClock {
        let (ref_ticks, ref_ns) = anchor();
        let (mult, shift) = match kernel {
            Some(k) => (u64::from(k.mult), u32::from(k.shift)),
            None => {
                std::thread::sleep(std::time::Duration::from_millis(10));
                let (t1, n1) = anchor();
                let ticks = t1.saturating_sub(ref_ticks).max(1);
                let ns = n1.saturating_sub(ref_ns);
                // ns per tick as a 32.32 fixed-point number
                (((u128::from(ns) << 32) / u128::from(ticks)) as u64, 32)
            }
        };
        TickClock {
            ref_ticks,
            ref_ns,
            mult,
            shift,
        }
    }

    /// The conversion a recording used, from its header (to convert ticks
    /// that arrive later, e.g. from a spill file). Exact to ~1 ns per second
    /// from the reference point.
    pub fn from_calibration(c: &TscCalibration) -> TickClock {
        let shift = 32;
        let mult = (1e9 * (1u64 << shift) as f64 / c.ticks_per_sec.max(1.0)).round() as u64;
        TickClock {
            ref_ticks: c.ref_ticks,
            ref_ns: c.ref_ns,
            mult: mult.max(1),
            shift,
        }
    }

    /// A rough rate (ticks per second) from a `ms`-millisecond measurement,
    /// for settings that need no precision.
    pub fn rough_ticks_per_sec(ms: u64) -> f64 {
        let (t0, n0) = anchor();
        std::thread::sleep(std::time::Duration::from_millis(ms));
        let (t1, n1) = anchor();
        t1.saturating_sub(t0) as f64 * 1e9 / n1.saturating_sub(n0).max(1) as f64
    }

    #[inline]
    pub fn to_timestamp(self, ticks: Ticks) -> Timestamp {
        let ticks = ticks.raw();
        if let Some(d) = ticks.checked_sub(self.ref_ticks) {
            // the common case, one 64x64->128 multiply
            let ns = ((u128::from(d) * u128::from(self.mult)) >> self.shift) as u64;
            return Timestamp::from_nanos(self.ref_ns.saturating_add(ns));
        }
        let delta = ticks.wrapping_sub(self.ref_ticks) as i64;
        let scaled = ((i128::from(delta) * i128::from(self.mult)) >> self.shift) as i64;
        Timestamp::from_nanos(self.ref_ns.saturating_add_signed(scaled))
    }

    /// A converter for tick values close after `ticks` (one datagram's worth):
    /// 64-bit arithmetic from a local base, exact to a nanosecond.
    pub fn segment(&self, ticks: Ticks) -> TickSegment {
        TickSegment {
            base_ticks: ticks.raw(),
            base_ns: self.to_timestamp(ticks).as_nanos(),
            mult: self.mult,
            shift: self.shift,
            limit: u64::MAX / self.mult.max(1),
            clock: *self,
            earlier_ns: 0,
        }
    }

    /// Converts a tick count (a duration) to nanoseconds.
    pub fn ticks_to_ns(&self, ticks: f64) -> f64 {
        ticks * self.mult as f64 / (1u64 << self.shift) as f64
    }

    pub fn calibration(&self) -> TscCalibration {
        TscCalibration {
            ticks_per_sec: 1e9 * (1u64 << self.shift) as f64 / self.mult as f64,
            ref_ticks: self.ref_ticks,
            ref_ns: self.ref_ns,
        }
    }
}

/// See [`TickClock::segment`].
#[derive(Clone, Copy, Debug)]
pub struct TickSegment {
    base_ticks: u64,
    base_ns: u64,
    mult: u64,
    shift: u32,
    limit: u64,
    clock: TickClock,
    /// Subtracted (saturating at 0) from every time it gives.
    earlier_ns: u64,
}

impl TickSegment {
    /// The same conversion with every time moved `ns` earlier, saturating
    /// at 0 (a thread's timeline, with the cuts so far taken out): still one
    /// multiply, a shift and an add per tick value.
    pub fn earlier_by(&self, ns: u64) -> TickSegment {
        let mut seg = *self;
        seg.earlier_ns = self.earlier_ns.saturating_add(ns);
        match self.base_ns.checked_sub(ns) {
            Some(base) => seg.base_ns = base,
            None => seg.limit = 0, // (every time by the saturating path)
        }
        seg
    }

    #[inline]
    pub fn to_timestamp(self, ticks: Ticks) -> Timestamp {
        let d = ticks.raw().wrapping_sub(self.base_ticks);
        if d < self.limit {
            Timestamp::from_nanos(self.base_ns + ((d * self.mult) >> self.shift))
        } else {
            // before the base, or far after it
            let real = self.clock.to_timestamp(ticks).as_nanos();
            Timestamp::from_nanos(real.saturating_sub(self.earlier_ns))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linux::clock::{monotonic_now, ticks_now};

    #[test]
    fn conversion_follows_the_scale() {
        let c = TickClock {
            ref_ticks: 1000,
            ref_ns: 5_000,
            mult: 1 << 31,
            shift: 32,
        };
        assert_eq!(c.to_timestamp(Ticks::new(3000)).as_nanos(), 6_000);
        assert_eq!(c.to_timestamp(Ticks::new(0)).as_nanos(), 4_500);
        assert!((c.calibration().ticks_per_sec - 2e9).abs() < 1.0);
    }

    #[test]
    fn a_clock_rebuilt_from_its_calibration_converts_alike() {
        let c = TickClock {
            ref_ticks: 1000,
            ref_ns: 5_000,
            mult: 3 << 30,
            shift: 31,
        };
        let again = TickClock::from_calibration(&c.calibration());
        for t in [0u64, 1000, 3_000_000_000, 30_000_000_000] {
            let (a, b) = (
                c.to_timestamp(Ticks::new(t)).as_nanos(),
                again.to_timestamp(Ticks::new(t)).as_nanos(),
            );
            assert!(a.abs_diff(b) <= 1 + a / 1_000_000_000, "{t}: {a} vs {b}");
        }
    }

    #[test]
    fn segments_agree_with_the_clock() {
        let c = TickClock {
            ref_ticks: 1000,
            ref_ns: 5_000,
            mult: 3 << 30,
            shift: 31,
        };
        let seg = c.segment(Ticks::new(10_000));
        for t in [500u64, 10_000, 10_001, 1 << 40, u64::MAX / 4] {
            let a = seg.to_timestamp(Ticks::new(t)).as_nanos() as i64;
            let b = c.to_timestamp(Ticks::new(t)).as_nanos() as i64;
            assert!((a - b).abs() <= 1, "{t}: {a} vs {b}");
        }
    }

    #[test]
    fn a_segment_moved_earlier_subtracts_and_stops_at_zero() {
        let c = TickClock {
            ref_ticks: 1000,
            ref_ns: 5_000,
            mult: 3 << 30,
            shift: 31,
        };
        let seg = c.segment(Ticks::new(10_000));
        for t in [500u64, 10_000, 10_001, 1 << 40] {
            let real = seg.to_timestamp(Ticks::new(t)).as_nanos();
            let moved = seg
                .earlier_by(100)
                .earlier_by(20)
                .to_timestamp(Ticks::new(t));
            assert_eq!(moved.as_nanos(), real.saturating_sub(120), "{t}");
            assert_eq!(
                seg.earlier_by(u64::MAX)
                    .to_timestamp(Ticks::new(t))
                    .as_nanos(),
                0
            );
        }
    }

    #[test]
    fn calibrated_clock_tracks_monotonic() {
        let c = TickClock::calibrate(None);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let now = monotonic_now().as_nanos() as i64;
        let conv = c.to_timestamp(Ticks::new(ticks_now())).as_nanos() as i64;
        assert!((now - conv).abs() < 200_000, "off by {} ns", now - conv);
    }
}
