//! The wire protocol between the runtime and the recorder: the Rust mirror
//! of `struct lapse_msg` and `struct lapse_event` in `csrc/lapse_rt.h`.
//!
//! Every datagram starts with a 40-byte [`MsgHeader`] (native endianness: both
//! ends run on the same machine); `EVENTS` datagrams carry `count` 16-byte
//! events after it.

/// `"LPS1"` read as a little-endian u32.
pub const MAGIC: u32 = 0x3153_504c;
pub const HEADER_LEN: usize = 40;
pub const EVENT_LEN: usize = 16;
/// Events per thread buffer, hence the largest `EVENTS` datagram.
pub const BUF_EVENTS: usize = 4096;
pub const MAX_DATAGRAM: usize = HEADER_LEN + BUF_EVENTS * EVENT_LEN;
/// `EVENTS` flag: calibration events, to be dropped.
pub const FLAG_DISCARD: u16 = 1;

/// The shared arena (`struct lapse_arena` in `csrc/lapse_rt.h`): a header
/// page, then [`BUFS`](crate::protocol::arena::BUFS) buffers of [`BUF_EVENTS`] events.
pub mod arena {
    pub const MAGIC: u32 = 0x4150_534c;
    pub const BUFS: usize = 128;
    pub const HEAD: usize = 8192;
    pub const BUF_BYTES: usize = super::BUF_EVENTS * super::EVENT_LEN;
    pub const BYTES: usize = HEAD + BUFS * BUF_BYTES;
    /// Byte offsets in the header.
    pub const OFF_MAGIC: usize = 0;
    pub const OFF_NBUFS: usize = 4;
    /// futex word the runtime waits on for a free buffer.
    pub const OFF_GEN: usize = 8;
    pub const OFF_WAITERS: usize = 12;
    pub const OFF_SLOTS: usize = 64;
    pub const SLOT_LEN: usize = 48;
    /// Offsets within a slot.
    pub const SLOT_STATE: usize = 0;
    pub const SLOT_TID: usize = 4;
    pub const SLOT_FIRST: usize = 16;
    /// Ticks when the thread claimed the buffer.
    pub const SLOT_CLAIMED: usize = 40;
    pub const FREE: u32 = 0;
    pub const FILLING: u32 = 1;
}

/// Environment variables the recorder sets for the target.
pub const ENV_SOCKET: &str = "LAPSE_SOCKET";
pub const ENV_SPILL: &str = "LAPSE_SPILL";
pub const ENV_CALIBRATE: &str = "LAPSE_CALIBRATE";
/// Set (to anything) to keep the runtime from using the shared arena.
pub const ENV_NO_ARENA: &str = "LAPSE_NO_ARENA";
/// Ticks after which a thread hands its buffer over even if it is not full.
pub const ENV_FLUSH_TICKS: &str = "LAPSE_FLUSH_TICKS";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MsgKind {
    /// A process image starts: `a` = probe cost (ticks × 1024), `b` = ticks now, `c` = ppid.
    Hello,
    /// A thread's events: `a` = index of the first, `c` = count, `b` = ticks the
    /// thread had spent handing buffers over before these events (cumulative).
    Events,
    /// The sending thread is about to fork: `b` = ticks.
    Fork,
    /// First message of a fork child: `b` = the parent's fork ticks, `c` = ppid, `d` = parent tid.
    Child,
    /// The process is about to exec: `b` = ticks.
    Exec,
    /// The process image's shared arena; its memfd comes with the datagram
    /// (SCM_RIGHTS). `a` = bytes, `c` = buffers, `d` = events per buffer.
    Arena,
    /// As `Events`, but the `c` events are in arena buffer `d` (no body).
    ShmEvents,
}

impl MsgKind {
    fn from_u16(v: u16) -> Option<Self> {
        Some(match v {
            1 => MsgKind::Hello,
            2 => MsgKind::Events,
            3 => MsgKind::Fork,
            4 => MsgKind::Child,
            5 => MsgKind::Exec,
            6 => MsgKind::Arena,
            7 => MsgKind::ShmEvents,
            _ => return None,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MsgHeader {
    pub kind: MsgKind,
    pub flags: u16,
    pub pid: u32,
    pub tid: u32,
    pub a: u64,
    pub b: u64,
    pub c: u32,
    pub d: u32,
}

/// One probe firing as the runtime stored it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawEvent {
    /// Absolute address of the function in the target.
    pub function: u64,
    /// Tick counter value.
    pub ticks: u64,
    pub is_exit: bool,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_ne_bytes(w)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_ne_bytes(w)
}

/// Why a datagram was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParseError {
    Short,
    BadMagic,
    UnknownKind(u16),
    /// `count` does not match the datagram's length.
    BadCount,
}

impl MsgHeader {
    /// Parses a datagram's header; for `Events`, checks that the body holds `c` events.
    pub fn parse(datagram: &[u8]) -> Result<MsgHeader, ParseError> {
        if datagram.len() < HEADER_LEN {
            return Err(ParseError::Short);
        }
        if u32_at(datagram, 0) != MAGIC {
            return Err(ParseError::BadMagic);
        }
        let kind_raw = u16::from_ne_bytes([datagram[4], datagram[5]]);
        let kind = MsgKind::from_u16(kind_raw).ok_or(ParseError::UnknownKind(kind_raw))?;
        let h = MsgHeader {
            kind,
            flags: u16::from_ne_bytes([datagram[6], datagram[7]]),
            pid: u32_at(datagram, 8),
            tid: u32_at(datagram, 12),
            a: u64_at(datagram, 16),
            b: u64_at(datagram, 24),
            c: u32_at(datagram, 32),
            d: u32_at(datagram, 36),
        };
        if kind == MsgKind::Events && datagram.len() != HEADER_LEN + h.c as usize * EVENT_LEN {
            return Err(ParseError::BadCount);
        }
        if kind == MsgKind::ShmEvents && (h.c as usize > BUF_EVENTS || h.d as usize >= arena::BUFS)
        {
            return Err(ParseError::BadCount);
        }
        Ok(h)
    }
}

/// The events of an `Events` datagram (whose header [`MsgHeader::parse`] accepted).
pub fn events(datagram: &[u8]) -> impl Iterator<Item = RawEvent> + '_ {
    datagram
        .get(HEADER_LEN..)
        .unwrap_or(&[])
        .chunks_exact(EVENT_LEN)
        .map(|e| {
            let stamp = u64_at(e, 8);
            RawEvent {
                function: u64_at(e, 0),
                ticks: stamp >> 1,
                is_exit: stamp & 1 == 1,
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(kind: u16, c: u32) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&MAGIC.to_ne_bytes());
        b.extend_from_slice(&kind.to_ne_bytes());
        b.extend_from_slice(&0u16.to_ne_bytes());
        b.extend_from_slice(&7u32.to_ne_bytes());
        b.extend_from_slice(&8u32.to_ne_bytes());
        b.extend_from_slice(&1u64.to_ne_bytes());
        b.extend_from_slice(&2u64.to_ne_bytes());
        b.extend_from_slice(&c.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        b
    }

    #[test]
    fn events_datagram_round_trips() {
        let mut d = header(2, 1);
        d.extend_from_slice(&0x1234u64.to_ne_bytes());
        d.extend_from_slice(&((99u64 << 1) | 1).to_ne_bytes());
        let h = MsgHeader::parse(&d).expect("valid");
        assert_eq!((h.kind, h.pid, h.tid, h.c), (MsgKind::Events, 7, 8, 1));
        let e: Vec<_> = events(&d).collect();
        assert_eq!(
            e,
            vec![RawEvent {
                function: 0x1234,
                ticks: 99,
                is_exit: true
            }]
        );
    }

    #[test]
    fn bad_datagrams_are_rejected() {
        assert_eq!(MsgHeader::parse(&[0; 10]), Err(ParseError::Short));
        assert_eq!(MsgHeader::parse(&header(2, 3)), Err(ParseError::BadCount));
        assert_eq!(
            MsgHeader::parse(&header(9, 0)),
            Err(ParseError::UnknownKind(9))
        );
        let mut d = header(1, 0);
        d[0] = 0;
        assert_eq!(MsgHeader::parse(&d), Err(ParseError::BadMagic));
    }
}
