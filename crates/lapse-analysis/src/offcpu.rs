//! A thread's OS-event periods as the interval engine reads them: sorted,
//! with overlapping or touching periods merged (a switch during a system
//! call is one period, not two), walked forward with a cursor as the
//! thread's intervals go by.
//!
//! Merging keeps both rules of SPEC 2.1 exact: an interval overlaps a merged
//! period exactly when it overlaps one of the originals (interval rule), and
//! the time inside the interval covered by the merged periods is the time
//! during which the thread was in an OS event (exact rule). An instant event
//! (a major fault: `from == to`) covers no time.

use lapse_data::{OsEvent, Timestamp};

/// The sorted, merged periods of `events` as (from, to).
pub fn merged(events: &[OsEvent]) -> Vec<(Timestamp, Timestamp)> {
    let mut periods: Vec<(Timestamp, Timestamp)> =
        events.iter().map(|o| (o.from, o.to.max(o.from))).collect();
    periods.sort_unstable();
    let mut out: Vec<(Timestamp, Timestamp)> = Vec::with_capacity(periods.len());
    for (from, to) in periods {
        match out.last_mut() {
            Some(last) if from <= last.1 => last.1 = last.1.max(to),
            _ => out.push((from, to)),
        }
    }
    out
}

/// A forward-only cursor over merged periods.
#[derive(Clone, Debug)]
pub struct OffCpu {
    periods: Vec<(Timestamp, Timestamp)>,
    next: usize,
    /// The period at `next` (or two maximal times past the end), kept in
    /// the cursor so the common check is two compares.
    from: Timestamp,
    to: Timestamp,
}

const NEVER: (Timestamp, Timestamp) = (
    Timestamp::from_nanos(u64::MAX),
    Timestamp::from_nanos(u64::MAX),
);

impl OffCpu {
    pub fn new(events: &[OsEvent]) -> OffCpu {
        let periods = merged(events);
        let (from, to) = periods.first().copied().unwrap_or(NEVER);
        OffCpu {
            periods,
            next: 0,
            from,
            to,
        }
    }

    /// The merged periods.
    pub fn periods(&self) -> &[(Timestamp, Timestamp)] {
        &self.periods
    }

    #[inline(always)]
    fn advance(&mut self) {
        self.next += 1;
        (self.from, self.to) = self.periods.get(self.next).copied().unwrap_or(NEVER);
    }

    /// True when a period overlaps the open interval (`from`, `to`); moves
    /// past periods that end at or before `from`. Calls must come with
    /// non-decreasing `from`.
    #[inline(always)]
    pub fn touches(&mut self, from: Timestamp, to: Timestamp) -> bool {
        // (past the last period both are MAX; the length check stops the
        // loop even for a damaged file's timestamp of MAX)
        while self.to <= from && self.next < self.periods.len() {
            self.advance();
        }
        self.from < to
    }

    /// Nanoseconds of [`from`, `to`] covered by periods. Calls must come
    /// with non-decreasing `from`; periods that end by `to` are passed.
    #[inline(always)]
    pub fn covered(&mut self, from: Timestamp, to: Timestamp) -> u64 {
        let mut ns = 0;
        loop {
            while self.to <= from && self.next < self.periods.len() {
                self.advance();
            }
            if self.from >= to {
                return ns;
            }
            ns += self.to.min(to).since(self.from.max(from));
            if self.to > to || self.next >= self.periods.len() {
                return ns;
            }
            self.advance();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lapse_data::OsEventKind;

    fn t(ns: u64) -> Timestamp {
        Timestamp::from_nanos(ns)
    }

    fn p(from: u64, to: u64) -> OsEvent {
        OsEvent {
            from: t(from),
            to: t(to),
            kind: OsEventKind::Switch,
        }
    }

    #[test]
    fn overlapping_and_touching_periods_merge() {
        let m = merged(&[p(30, 40), p(10, 20), p(15, 25), p(25, 28)]);
        assert_eq!(m, [(t(10), t(28)), (t(30), t(40))]);
    }

    #[test]
    fn covered_time_is_clipped_to_the_interval_and_spans_intervals() {
        let mut c = OffCpu::new(&[p(10, 20), p(25, 40)]);
        assert_eq!(c.covered(t(0), t(15)), 5); // 10..15
        assert_eq!(c.covered(t(15), t(30)), 5 + 5); // 15..20, 25..30
        assert_eq!(c.covered(t(30), t(50)), 10); // 30..40
        assert_eq!(c.covered(t(50), t(60)), 0);
    }

    #[test]
    fn an_instant_covers_nothing_but_touches_the_interval_around_it() {
        let mut c = OffCpu::new(&[p(10, 10)]);
        assert!(c.touches(t(5), t(15)));
        let mut c = OffCpu::new(&[p(10, 10)]);
        assert_eq!(c.covered(t(5), t(15)), 0);
        // a period touching an interval's end does not mark it
        let mut c = OffCpu::new(&[p(20, 30)]);
        assert!(!c.touches(t(10), t(20)));
        assert!(!c.touches(t(30), t(40)));
    }
}
