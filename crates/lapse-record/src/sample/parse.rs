//! Sampling: decoding the body of a `PERF_RECORD_SAMPLE` for the sample
//! layout lapse asks for (IP, TID, TIME, optional ID, CPU, PERIOD, optional
//! CALLCHAIN, REGS_USER, STACK_USER — in the kernel's fixed field order).

use lapse_data::ThreadKey;
use lapse_unwind::UserRegs;

/// `PERF_CONTEXT_MAX` and above mark context switches inside a callchain.
const CONTEXT_MARKER_MIN: u64 = (-4095i64) as u64;
const CONTEXT_USER: u64 = (-512i64) as u64;

/// Bits of `sample_regs_user` lapse requests: just what unwinding needs.
#[cfg(target_arch = "x86_64")]
pub(crate) mod regs {
    /// BP, SP, IP in `perf_regs.h` numbering (6, 7, 8).
    pub(crate) const MASK: u64 = (1 << 6) | (1 << 7) | (1 << 8);
    pub(crate) const COUNT: usize = 3;
    /// Order in the record is by bit number: bp, sp, ip.
    pub(crate) fn decode(v: [u64; COUNT]) -> lapse_unwind::UserRegs {
        lapse_unwind::UserRegs {
            fp: v[0],
            sp: v[1],
            ip: v[2],
            lr: 0,
        }
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) mod regs {
    /// X29 (fp), LR, SP, PC in `perf_regs.h` numbering (29..=32).
    pub(crate) const MASK: u64 = (1 << 29) | (1 << 30) | (1 << 31) | (1 << 32);
    pub(crate) const COUNT: usize = 4;
    pub(crate) fn decode(v: [u64; COUNT]) -> lapse_unwind::UserRegs {
        lapse_unwind::UserRegs {
            fp: v[0],
            lr: v[1],
            sp: v[2],
            ip: v[3],
        }
    }
}

/// Which optional fields the event was opened with.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SampleLayout {
    pub(crate) callchain: bool,
    pub(crate) user_state: bool,
    /// Samples carry their event's id (`--off-cpu`: which of the two events
    /// a sample comes from).
    pub(crate) id: bool,
}

/// One decoded sample; slices borrow from the record.
#[derive(Debug)]
pub(crate) struct RawSample<'a> {
    pub(crate) thread: ThreadKey,
    pub(crate) time: u64,
    /// The event's id (0 unless the layout has `id`).
    pub(crate) id: u64,
    pub(crate) cpu: u32,
    pub(crate) period: u64,
    /// User part of the kernel's callchain (`--call-graph fp`), raw words.
    pub(crate) user_callchain: Vec<u64>,
    /// User registers; `None` when the sample hit a kernel thread.
    pub(crate) regs: Option<UserRegs>,
    /// The copied user stack, starting at `regs.sp`.
    pub(crate) stack: &'a [u8],
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn u64(&mut self) -> Option<u64> {
        let b = self.bytes(8)?;
        Some(u64::from_ne_bytes(b.try_into().ok()?))
    }
    fn u32_pair(&mut self) -> Option<(u32, u32)> {
        let b = self.bytes(8)?;
        let lo = u32::from_ne_bytes(b[..4].try_into().ok()?);
        let hi = u32::from_ne_bytes(b[4..].try_into().ok()?);
        Some((lo, hi))
    }
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let b = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(b)
    }
}

/// Decodes a sample body (after the 8-byte record header); `None` when it is
/// shorter than its own fields say.
pub(crate) fn parse(layout: SampleLayout, body: &[u8]) -> Option<RawSample<'_>> {
    let mut c = Cursor { buf: body, pos: 0 };
    // The sampled IP may be a kernel address; the user IP comes from the
    // user registers (or the callchain) instead.
    let _ip = c.u64()?;
    let (pid, tid) = c.u32_pair()?;
    let time = c.u64()?;
    let id = if layout.id { c.u64()? } else { 0 };
    let (cpu, _) = c.u32_pair()?;
    let period = c.u64()?;
    let mut user_callchain = Vec::new();
    if layout.callchain {
        let n = usize::try_from(c.u64()?).ok()?;
        let words = c.bytes(n.checked_mul(8)?)?;
        let mut in_user = false;
        for w in words.chunks_exact(8) {
            let v = u64::from_ne_bytes(w.try_into().ok()?);
            if v >= CONTEXT_MARKER_MIN {
                in_user = v == CONTEXT_USER;
            } else if in_user {
                user_callchain.push(v);
            }
        }
    }
    let mut regs = None;
    let mut stack: &[u8] = &[];
    if layout.user_state {
        let abi = c.u64()?;
        if abi != 0 {
            let mut v = [0u64; regs::COUNT];
            for slot in v.iter_mut() {
                *slot = c.u64()?;
            }
            regs = Some(regs::decode(v));
        }
        let size = usize::try_from(c.u64()?).ok()?;
        if size != 0 {
            let data = c.bytes(size)?;
            let dyn_size = usize::try_from(c.u64()?).ok()?;
            stack = &data[..dyn_size.min(size)];
        }
    }
    Some(RawSample {
        thread: ThreadKey::new(pid, tid),
        time,
        id,
        cpu,
        period,
        user_callchain,
        regs,
        stack,
    })
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    fn words(ws: &[u64]) -> Vec<u8> {
        ws.iter().flat_map(|w| w.to_ne_bytes()).collect()
    }

    #[test]
    fn decodes_regs_and_the_dynamic_part_of_the_stack() {
        let pid_tid = 7u64 | (8u64 << 32);
        let mut body = words(&[0x401000, pid_tid, 123, 1, 1_000_000]);
        body.extend(words(&[2, 0x7ff0, 0x7fe0, 0x401000])); // abi 64, bp, sp, ip
        body.extend(words(&[16, 0xaaaa, 0xbbbb, 8])); // size 16, data, dyn_size 8
        let layout = SampleLayout {
            callchain: false,
            user_state: true,
            id: false,
        };
        let s = parse(layout, &body).expect("well-formed sample");
        assert_eq!(
            (s.thread, s.time, s.cpu, s.period),
            (ThreadKey::new(7, 8), 123, 1, 1_000_000)
        );
        let r = s.regs.expect("user regs");
        assert_eq!((r.fp, r.sp, r.ip), (0x7ff0, 0x7fe0, 0x401000));
        assert_eq!(s.stack, &0xaaaau64.to_ne_bytes());
        assert!(parse(layout, &body[..body.len() - 1]).is_none());
    }

    #[test]
    fn callchain_keeps_only_the_user_part() {
        let mut body = words(&[0x10, 1 | (1 << 32), 5, 0, 1]);
        let kernel = (-128i64) as u64;
        body.extend(words(&[
            5,
            kernel,
            0xffff_8000_0000_0000,
            CONTEXT_USER,
            0x401000,
            0x401234,
        ]));
        let layout = SampleLayout {
            callchain: true,
            user_state: false,
            id: false,
        };
        let s = parse(layout, &body).expect("well-formed sample");
        assert_eq!(s.user_callchain, vec![0x401000, 0x401234]);
    }

    #[test]
    fn the_id_comes_after_the_time() {
        let mut body = words(&[0x10, 1 | (2 << 32), 5, 77, 3, 1]);
        body.extend(words(&[2, CONTEXT_USER, 0x401000]));
        let layout = SampleLayout {
            callchain: true,
            user_state: false,
            id: true,
        };
        let s = parse(layout, &body).expect("well-formed sample");
        assert_eq!((s.time, s.id, s.cpu, s.period), (5, 77, 3, 1));
        assert_eq!(s.user_callchain, vec![0x401000]);
    }
}
