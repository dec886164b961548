//! LEB128 unsigned varints: the building block of the event codec.

/// Appends `v` as an unsigned LEB128 varint.
#[inline(always)]
pub fn put(out: &mut Vec<u8>, v: u64) {
    if v < 0x80 {
        // (most event words and deltas: one byte, one capacity check)
        out.push(v as u8);
        return;
    }
    put_long(out, v);
}

#[inline]
fn put_long(out: &mut Vec<u8>, v: u64) {
    out.reserve(10);
    let len = out.len();
    let n = write_uninit(out.spare_capacity_mut(), 0, v);
    // SAFETY: write_uninit initialised the first n (<= 10) spare bytes.
    unsafe { out.set_len(len + n) };
}

/// Writes `v` into `buf` at `at` and returns the position after it, for a
/// caller that appends several varints at once into a vector's spare
/// capacity. Panics if `buf` has not room for the ten bytes a varint can take.
#[inline(always)]
pub fn write_uninit(buf: &mut [std::mem::MaybeUninit<u8>], at: usize, mut v: u64) -> usize {
    let buf = &mut buf[at..at + 10];
    let mut n = 0;
    while v >= 0x80 && n < 9 {
        buf[n].write((v as u8) | 0x80);
        v >>= 7;
        n += 1;
    }
    buf[n].write(v as u8);
    at + n + 1
}

/// Reads one varint at `*pos`, advancing it. `None` if the input ends inside
/// the varint or the varint is longer than ten bytes.
#[inline(always)]
pub fn get(buf: &[u8], pos: &mut usize) -> Option<u64> {
    // Fast path: most event fields (function ids, small deltas) fit one byte.
    if let Some(&b) = buf.get(*pos) {
        if b < 0x80 {
            *pos += 1;
            return Some(u64::from(b));
        }
        // Two bytes: deltas of 128 ns to 16 µs.
        if let Some(&c) = buf.get(*pos + 1) {
            if c < 0x80 {
                *pos += 2;
                return Some(u64::from(b & 0x7f) | u64::from(c) << 7);
            }
        }
    }
    get_slow(buf, pos)
}

#[inline(never)]
fn get_slow(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut result = 0u64;
    let mut shift = 0u32;
    loop {
        let b = *buf.get(*pos)?;
        *pos += 1;
        if shift == 63 && b > 1 {
            return None;
        }
        result |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(result);
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_edge_values() {
        for v in [0, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut b = Vec::new();
            put(&mut b, v);
            let mut p = 0;
            assert_eq!(get(&b, &mut p), Some(v));
            assert_eq!(p, b.len());
        }
    }

    #[test]
    fn rejects_truncated_and_overlong() {
        let mut p = 0;
        assert_eq!(get(&[0x80], &mut p), None);
        let mut p = 0;
        assert_eq!(get(&[0xff; 11], &mut p), None);
    }
}
