//! JIT symbol maps in perf's format (`/tmp/perf-PID.map`), which Node, the
//! JVM with perf-map-agent, LuaJIT and Python 3.12's `-X perf` write: one
//! `START SIZE name` line per generated function, START and SIZE in hex
//! (with or without `0x`), START an absolute address in the process. The
//! name is the rest of the line and may hold spaces.
//!
//! Like the rest of this crate it does no file I/O: the caller reads the
//! file and hands over its text.

/// A parsed map, ready for lookups by absolute address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PerfMap {
    /// (start, size, name), sorted by start; for a start written twice
    /// (code freed and generated again) the later line.
    entries: Vec<(u64, u64, String)>,
}

impl PerfMap {
    /// Parses a map's text; lines that are not `START SIZE name` are skipped.
    pub fn parse(text: &str) -> PerfMap {
        let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
        let mut entries: Vec<(u64, u64, String)> = text
            .lines()
            .filter_map(|line| {
                let line = line.trim();
                let (start, rest) = line.split_once(char::is_whitespace)?;
                let (size, name) = rest.trim_start().split_once(char::is_whitespace)?;
                let name = name.trim();
                let (start, size) = (hex(start)?, hex(size)?);
                (size > 0 && !name.is_empty()).then(|| (start, size, name.to_owned()))
            })
            .collect();
        // Stable, then keep the last line of each start.
        entries.sort_by_key(|e| e.0);
        let mut kept: Vec<(u64, u64, String)> = Vec::with_capacity(entries.len());
        for e in entries {
            match kept.last_mut() {
                Some(last) if last.0 == e.0 => *last = e,
                _ => kept.push(e),
            }
        }
        PerfMap { entries: kept }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The function holding absolute address `addr`: (start, size, name).
    /// Entries may overlap (code regenerated over old code); the one that
    /// starts last wins.
    pub fn lookup(&self, addr: u64) -> Option<(u64, u64, &str)> {
        let after = self.entries.partition_point(|e| e.0 <= addr);
        self.entries[..after]
            .iter()
            .rev()
            .take(8)
            .find(|e| addr - e.0 < e.1)
            .map(|e| (e.0, e.1, e.2.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::PerfMap;

    #[test]
    fn lines_are_start_size_name_in_hex() {
        let map = PerfMap::parse(
            "7f0010000000 40 LazyCompile:*fib /app/fib.js:3\n\
             0x7f0010000100 0x20 py::main:/app/x.py\n\
             garbage\n\
             7f0010000200 0 empty\n\
             7f0010000000 80 Function:*fib /app/fib.js:3\n",
        );
        assert_eq!(map.len(), 2, "{map:?}");
        assert_eq!(
            map.lookup(0x7f00_1000_0010),
            Some((0x7f00_1000_0000, 0x80, "Function:*fib /app/fib.js:3"))
        );
        assert_eq!(
            map.lookup(0x7f00_1000_0050).map(|e| e.0),
            Some(0x7f00_1000_0000)
        );
        assert_eq!(
            map.lookup(0x7f00_1000_011f).map(|e| e.2),
            Some("py::main:/app/x.py")
        );
        assert_eq!(map.lookup(0x7f00_1000_0120), None);
        assert_eq!(map.lookup(0x10), None);
    }
}
