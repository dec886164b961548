//! The wire protocol between the runtime and the recorder: the Rust mirror
//! of `csrc/lapse_rt.h`. Each datagram is parsed once, by [`Msg::parse`], into
//! a [`Msg`] whose fields are named for what they mean.
//!
//! Every datagram starts with a 48-byte header (native endianness: both ends
//! run on the same machine); `EVENTS` datagrams carry `count` 24-byte events
//! after it. The tests at the bottom read `lapse_rt.h` and check every
//! constant and offset this file relies on against it; the C compiler checks
//! the header's own `LAPSE_AT`/`LAPSE_SIZE` pins against the real layout.

/// `"LPS4"` read as a little-endian u32 (events of 24 bytes, a leaf call in
/// one, [`LEAF_BIT`]; 48-byte header).
pub const MAGIC: u32 = 0x3453_504c;
pub const HEADER_LEN: usize = 48;
pub const EVENT_LEN: usize = 24;
/// Bytes of a thread buffer (an arena buffer or a private one).
pub const BUF_BYTES: usize = 65536;
/// Events a thread buffer has room for, hence the largest `EVENTS` datagram.
pub const BUF_EVENTS: usize = BUF_BYTES / EVENT_LEN;
pub const MAX_DATAGRAM: usize = HEADER_LEN + BUF_EVENTS * EVENT_LEN;
/// `EVENTS`/`SHM_EVENTS` flag: calibration events, to be dropped.
pub const FLAG_DISCARD: u16 = 1;
/// The function address of a slot whose probe never wrote it (abandoned by
/// a longjmp out of a signal handler): not an event, but a lost one.
pub const HOLE_FN: u64 = 0;
/// Marker events (a `function` below [`MARK_LIMIT`]): every frame whose
/// `sp` lies below this event's `sp` is gone (longjmp, a catch).
pub const MARK_UNWIND: u64 = 1;
/// Marker: the thread stopped installing return trampolines (too deep).
pub const MARK_UNTRACED: u64 = 2;
/// Marker: a context switch (swapcontext) called with its return address at
/// `sp`: the open call whose frame is there is a barrier to the
/// stack-pointer rule until it returns (the frames after it run on
/// another stack).
pub const MARK_SWITCH: u64 = 3;
/// Marker: a sanitizer-coverage guard fired away from its function's entry
/// (code inlined into another function), at `sp` (the hook's return
/// address): not a call. Sent once per guard.
pub const MARK_NOT_ENTRY: u64 = 4;
/// Marker, `--min-time`: calls dropped as too short; `sp` holds the
/// function's address and, from bit [`DROPPED_COUNT_SHIFT`] up, how many.
pub const MARK_DROPPED: u64 = 5;
/// Where a [`MARK_DROPPED`] marker's count starts in its `sp`.
pub const DROPPED_COUNT_SHIFT: u32 = 48;
/// `function` values below this are holes or markers, not functions.
pub const MARK_LIMIT: u64 = 4096;
/// A leaf call in one slot (`LAPSE_LEAF_BIT`): a function's slot whose `sp`
/// has this bit holds its entry and, from bit [`LEAF_SHIFT`], the ticks to
/// its exit.
pub const LEAF_BIT: u64 = 1 << 63;
pub const LEAF_SHIFT: u32 = 47;
/// A function's slot without [`LEAF_BIT`] whose `sp` has this bit: an entry
/// a hand-over sealed while a leaf exit was being written into it (the exit
/// took a slot of its own); its `sp` is the rest.
pub const SEAL_BIT: u64 = 1 << 62;

/// Message kinds (`LAPSE_MSG_*`).
pub mod kind {
    pub const HELLO: u16 = 1;
    pub const EVENTS: u16 = 2;
    pub const FORK: u16 = 3;
    pub const CHILD: u16 = 4;
    pub const EXEC: u16 = 5;
    pub const ARENA: u16 = 6;
    pub const SHM_EVENTS: u16 = 7;
    /// In the spill only: the recording it is for ([`super::spill_session`]).
    pub const SESSION: u16 = 8;
    /// Pause, resume or a mark ([`super::Control`]); a mark's text follows
    /// the header ([`super::control_text`]).
    pub const CONTROL: u16 = 9;
}

/// `CONTROL` ops (`LAPSE_CONTROL_*`).
pub mod control {
    pub const PAUSE: u32 = 1;
    pub const RESUME: u32 = 2;
    pub const MARK: u32 = 3;
    pub const SIGNAL_TAKEN: u32 = 4;
    /// Longest mark text the runtime sends (longer ones are cut).
    pub const MARK_TEXT_MAX: usize = 1024;
}

/// What a `CONTROL` message asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// `lapse_pause()` (or the toggle signal): nothing is recorded from now.
    Pause,
    /// `lapse_resume()` (or the toggle signal).
    Resume,
    /// `lapse_mark(text)`: the text is the datagram's body.
    Mark,
    /// The program installed its own handler for `--signal`'s signal: the
    /// signal is the program's from then on and toggles nothing.
    SignalTaken,
}

/// Byte offsets in the header (`LAPSE_AT(lapse_msg, ...)`).
pub mod at {
    pub const MAGIC: usize = 0;
    pub const KIND: usize = 4;
    pub const FLAGS: usize = 6;
    pub const PID: usize = 8;
    pub const TID: usize = 12;
    pub const HELLO_PROBE_COST: usize = 16;
    pub const HELLO_TICKS: usize = 24;
    pub const HELLO_PPID: usize = 32;
    pub const HELLO_PROBE_SPREAD: usize = 36;
    pub const EVENTS_FIRST: usize = 16;
    pub const EVENTS_STALLED: usize = 24;
    pub const EVENTS_COUNT: usize = 32;
    pub const EVENTS_BUF: usize = 36;
    pub const FORK_TICKS: usize = 24;
    pub const EXEC_TICKS: usize = 24;
    pub const SESSION_ID: usize = 16;
    pub const CHILD_FORK_TICKS: usize = 24;
    pub const CHILD_PPID: usize = 32;
    pub const CHILD_PARENT_TID: usize = 36;
    pub const ARENA_BYTES: usize = 16;
    pub const ARENA_BUFS: usize = 32;
    pub const ARENA_BUF_EVENTS: usize = 36;
    pub const CONTROL_OP: usize = 16;
    pub const CONTROL_LEN: usize = 20;
    pub const CONTROL_TICKS: usize = 24;
    pub const CONTROL_STALLED: usize = 32;
    /// Every kind's: see [`arena_seq`](super::arena_seq).
    pub const ARENA_SEQ: usize = 40;
    /// In `struct lapse_event`.
    pub const EVENT_FN: usize = 0;
    pub const EVENT_STAMP: usize = 8;
    pub const EVENT_SP: usize = 16;
}

/// The shared arena (`struct lapse_arena` in `csrc/lapse_rt.h`): a header,
/// then as many buffers of [`BUF_EVENTS`] events as the runtime chose at
/// start-up ([`ENV_BUFFERS`], at most
/// [`MAX_BUFS`](crate::protocol::arena::MAX_BUFS)).
pub mod arena {
    pub const MAGIC: u32 = 0x4150_534c;
    /// The most buffers an arena can have (the header's slots).
    pub const MAX_BUFS: usize = 1024;
    /// The buffers an arena has unless told otherwise: 16 MiB, of which
    /// pages take memory only once written (threads claim the lowest free
    /// buffer, so the high ones are used only while the recorder is behind).
    pub const BUFS: usize = 256;
    pub const HEAD: usize = 65536;
    pub const BUF_BYTES: usize = super::BUF_BYTES;
    /// The size of an arena of `bufs` buffers.
    pub const fn bytes(bufs: usize) -> usize {
        HEAD + bufs * BUF_BYTES
    }
    /// Byte offsets in the header.
    pub const OFF_MAGIC: usize = 0;
    pub const OFF_NBUFS: usize = 4;
    /// futex word the runtime waits on for a free buffer.
    pub const OFF_GEN: usize = 8;
    pub const OFF_WAITERS: usize = 12;
    /// Buffers handed over so far (the runtime counts them).
    pub const OFF_SEQ: usize = 16;
    /// Set by the recorder while it is awake: threads then hand buffers
    /// over by their state alone ([`QUIET`]), without a datagram.
    pub const OFF_READING: usize = 24;
    /// 1 + the highest buffer index any thread has claimed: no buffer at or
    /// above it has ever held events.
    pub const OFF_HIGH: usize = 28;
    /// Datagrams the recorder has read from the process's connection: a
    /// thread whose send found no room for its whole wait sees from it
    /// whether the recorder is behind (it moved) or stuck (it did not).
    pub const OFF_RECEIVED: usize = 32;
    /// The recorder's `CLOCK_MONOTONIC` nanoseconds at its last look at an
    /// arena whose connection closed while its process lives: while it is
    /// recent, the runtime leaves handed-over buffers in the arena for the
    /// recorder to read instead of spilling them.
    pub const OFF_HEARTBEAT: usize = 40;
    /// Events the runtime could neither send, spill nor leave in the arena
    /// and that no later buffer of their thread shows as a gap.
    pub const OFF_UNDELIVERED: usize = 48;
    /// The `errno` of the last failed attempt to reconnect or open the spill.
    pub const OFF_CUT_ERRNO: usize = 56;
    pub const OFF_SLOTS: usize = 64;
    pub const SLOT_LEN: usize = 48;
    /// Offsets within a slot.
    pub const SLOT_STATE: usize = 0;
    pub const SLOT_TID: usize = 4;
    pub const SLOT_COUNT: usize = 8;
    /// `FLAG_DISCARD` when the buffer holds calibration events.
    pub const SLOT_FLAGS: usize = 12;
    pub const SLOT_FIRST: usize = 16;
    pub const SLOT_STALLED: usize = 24;
    /// The hand-over's number in the arena's order.
    pub const SLOT_SEQ: usize = 32;
    /// Ticks when the thread claimed the buffer.
    pub const SLOT_CLAIMED: usize = 40;
    pub const FREE: u32 = 0;
    pub const FILLING: u32 = 1;
    pub const QUEUED: u32 = 2;
    pub const SPILLING: u32 = 3;
    /// Handed over without a datagram (the recorder was reading).
    pub const QUIET: u32 = 4;
    /// A quiet buffer the recorder took to read.
    pub const TAKEN: u32 = 5;
}

/// Environment variables the recorder sets for the target.
pub const ENV_SOCKET: &str = "LAPSE_SOCKET";
pub const ENV_SPILL: &str = "LAPSE_SPILL";
pub const ENV_CALIBRATE: &str = "LAPSE_CALIBRATE";
/// Set (to anything) to keep the runtime from using the shared arena.
pub const ENV_NO_ARENA: &str = "LAPSE_NO_ARENA";
/// Ticks after which a thread hands its buffer over even if it is not full.
pub const ENV_FLUSH_TICKS: &str = "LAPSE_FLUSH_TICKS";
/// Set (to anything) for `--no-inherit`: the runtime removes its variables
/// and itself from the environment children get, and a fork child is not
/// recorded.
pub const ENV_NO_INHERIT: &str = "LAPSE_NO_INHERIT";
/// The spill file stops growing at this many bytes (decimal; default 2 GiB).
pub const ENV_SPILL_MAX: &str = "LAPSE_SPILL_MAX";
/// Set (to anything) for `--no-libcalls`: the runtime leaves the imports of
/// instrumented modules alone (no library calls in the profile).
pub const ENV_NO_LIBCALLS: &str = "LAPSE_NO_LIBCALLS";
/// The recording's id (decimal): the runtime writes it in the spill, and
/// `lapse recover` merges a spill only into the recording of that id.
pub const ENV_SESSION: &str = "LAPSE_SESSION";
/// The run-time patching plans: a prefix `P`, the plans being the files
/// `P.0`, `P.1`, ... ([`plan`]); the runtime applies each to the module it
/// is for, when that module is loaded.
pub const ENV_PATCH_PLAN: &str = "LAPSE_PATCH_PLAN";
/// How many 64 KiB buffers a process's arena has (1 to
/// [`arena::MAX_BUFS`]); the default is [`arena::BUFS`].
pub const ENV_BUFFERS: &str = "LAPSE_BUFFERS";
/// The record-time filter table the runtime applies to the executable it
/// is for ([`filter`]).
pub const ENV_FILTER: &str = "LAPSE_FILTER";

/// The record-time filter table (`struct lapse_filter_header` and `struct
/// lapse_filter_range` in `csrc/lapse_rt.h`): a header, then address ranges
/// sorted by start, relative to the executable's load bias.
pub mod filter {
    pub const MAGIC: u32 = 0x544c_4946;
    /// Header flag: `--filter` was given (nothing outside a match is kept).
    pub const ON: u32 = 1;
    /// Range flags.
    pub const MATCH: u32 = 1;
    pub const EXCLUDE: u32 = 2;
    /// `--depth` is at most this.
    pub const MAX_DEPTH: u32 = 64;
    pub const HEADER_LEN: usize = 40;
    pub const RANGE_LEN: usize = 24;
    pub const H_MAGIC: usize = 0;
    pub const H_RANGES: usize = 4;
    pub const H_DEV: usize = 8;
    pub const H_INO: usize = 16;
    pub const H_FLAGS: usize = 24;
    pub const H_DEPTH: usize = 28;
    pub const H_MIN_TICKS: usize = 32;
    pub const R_START: usize = 0;
    pub const R_END: usize = 8;
    pub const R_FLAGS: usize = 16;
}
/// Set: the first process starts paused (`--start-paused`, `--delay`).
pub const ENV_PAUSED: &str = "LAPSE_PAUSED";
/// `CLOCK_MONOTONIC` nanoseconds at which a paused start resumes (`--delay`).
pub const ENV_RESUME_NS: &str = "LAPSE_RESUME_NS";
/// A signal number: each delivery toggles recording (`--signal`).
pub const ENV_SIGNAL: &str = "LAPSE_SIGNAL";
/// Set: the runtime records no events, it only says when the program
/// pauses, resumes and marks (a recording by sampling).
pub const ENV_CONTROL_ONLY: &str = "LAPSE_CONTROL_ONLY";

/// The plan file for run-time patching (`struct lapse_plan_header` and
/// `struct lapse_plan_site` in `csrc/lapse_rt.h`): a header, the stub
/// region's bytes, then one record per patch site. Addresses are relative
/// to the executable's load bias.
pub mod plan {
    pub const MAGIC: u32 = 0x4e4c_5050;
    /// Bytes of the `jmp rel32` written at a site.
    pub const JMP: usize = 5;
    /// The most bytes a site displaces.
    pub const ORIG: usize = 19;
    /// A fixup word's bit for an `int64` field (else `int32`).
    pub const FIXUP64: u32 = 0x8000_0000;
    /// Plan files `P.0` ... at most.
    pub const MAX: usize = 64;
    pub const HEADER_LEN: usize = 56;
    pub const SITE_LEN: usize = 32;
    pub const H_MAGIC: usize = 0;
    pub const H_SITES: usize = 4;
    pub const H_DEV: usize = 8;
    pub const H_INO: usize = 16;
    pub const H_REGION: usize = 24;
    pub const H_REGION_BYTES: usize = 32;
    pub const H_ENTRY_SLOT: usize = 40;
    pub const H_FIXUPS: usize = 48;
    pub const S_AT: usize = 0;
    pub const S_STUB: usize = 8;
    pub const S_LEN: usize = 12;
    pub const S_ORIG: usize = 13;
}

/// The recording a spilled datagram says the spill is for, if it is a
/// `SESSION` datagram (each process spills one before anything else).
pub fn spill_session(d: &[u8]) -> Option<u64> {
    (d.len() == HEADER_LEN && u32_at(d, at::MAGIC) == MAGIC && u16_at(d, at::KIND) == kind::SESSION)
        .then(|| u64_at(d, at::SESSION_ID))
}

/// The thread that sent a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sender {
    pub pid: u32,
    pub tid: u32,
}

/// A reading of the runtime's tick counter (the TSC on x86-64), or a count
/// of ticks between two readings. Not a time until the recorder's clock
/// converts it, so it does not mix with nanoseconds by accident.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ticks(u64);

impl Ticks {
    pub const ZERO: Ticks = Ticks(0);

    pub const fn new(raw: u64) -> Ticks {
        Ticks(raw)
    }

    /// The counter value (or count) as the runtime wrote it.
    pub const fn raw(self) -> u64 {
        self.0
    }

    /// Ticks from `earlier` to `self`, 0 when `earlier` is later.
    pub const fn saturating_sub(self, earlier: Ticks) -> Ticks {
        Ticks(self.0.saturating_sub(earlier.0))
    }
}

/// A run of one thread's events (`EVENTS` or `SHM_EVENTS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batch {
    /// Index of the first event in the thread's stream (per process image).
    pub first_index: u64,
    /// Ticks the thread had spent handing buffers over before these events
    /// (cumulative; the recorder cuts the increase out of the timeline).
    pub stalled_ticks: Ticks,
    pub count: u32,
    /// Calibration events, measured at start-up and not part of the profile.
    pub discard: bool,
}

/// One runtime message, parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Msg {
    /// A process image starts.
    Hello {
        from: Sender,
        /// Cost of one probe in ticks × 1024 (0 when not measured).
        probe_cost_x1024: u64,
        /// The calibration's spread: 90th over 10th percentile of its
        /// trials, in percent (0 when not measured).
        probe_spread_pct: u32,
        ticks: Ticks,
        ppid: u32,
    },
    /// A thread's events, in the datagram after the header ([`events`]).
    Events { from: Sender, batch: Batch },
    /// A thread's events, in buffer `buf` of its process's arena.
    ShmEvents {
        from: Sender,
        batch: Batch,
        buf: u32,
    },
    /// The sending thread is about to fork.
    Fork { from: Sender, ticks: Ticks },
    /// First message of a fork child: the parent `ppid`'s thread
    /// `parent_tid` forked at `fork_ticks` (as in its `Fork`).
    Child {
        from: Sender,
        fork_ticks: Ticks,
        ppid: u32,
        parent_tid: u32,
    },
    /// The process is about to exec.
    Exec { from: Sender, ticks: Ticks },
    /// The process image's shared arena; its memfd comes with the datagram
    /// (SCM_RIGHTS): `bytes` long, `bufs` buffers of `buf_events` events.
    Arena {
        from: Sender,
        bytes: u64,
        bufs: u32,
        buf_events: u32,
    },
    /// Pause, resume or a mark, at `ticks`, when the thread had spent
    /// `stalled_ticks` handing buffers over (as [`Batch::stalled_ticks`]).
    Control {
        from: Sender,
        op: Control,
        ticks: Ticks,
        stalled_ticks: Ticks,
    },
}

impl Msg {
    pub fn from(&self) -> Sender {
        match *self {
            Msg::Hello { from, .. }
            | Msg::Events { from, .. }
            | Msg::ShmEvents { from, .. }
            | Msg::Fork { from, .. }
            | Msg::Child { from, .. }
            | Msg::Exec { from, .. }
            | Msg::Arena { from, .. }
            | Msg::Control { from, .. } => from,
        }
    }

    /// The same message with every process id passed through `pid` and
    /// every thread id through `tid` (given its process's new id): for
    /// runtimes in another PID namespace, whose ids are their own.
    pub fn map_ids(self, pid: impl Fn(u32) -> u32, mut tid: impl FnMut(u32, u32) -> u32) -> Msg {
        let mut sender = |s: Sender| {
            let p = pid(s.pid);
            Sender {
                pid: p,
                tid: tid(p, s.tid),
            }
        };
        match self {
            Msg::Hello {
                from,
                probe_cost_x1024,
                probe_spread_pct,
                ticks,
                ppid,
            } => Msg::Hello {
                from: sender(from),
                probe_cost_x1024,
                probe_spread_pct,
                ticks,
                ppid: pid(ppid),
            },
            Msg::Events { from, batch } => Msg::Events {
                from: sender(from),
                batch,
            },
            Msg::ShmEvents { from, batch, buf } => Msg::ShmEvents {
                from: sender(from),
                batch,
                buf,
            },
            Msg::Fork { from, ticks } => Msg::Fork {
                from: sender(from),
                ticks,
            },
            Msg::Child {
                from,
                fork_ticks,
                ppid,
                parent_tid,
            } => {
                let parent = sender(Sender {
                    pid: ppid,
                    tid: parent_tid,
                });
                Msg::Child {
                    from: sender(from),
                    fork_ticks,
                    ppid: parent.pid,
                    parent_tid: parent.tid,
                }
            }
            Msg::Exec { from, ticks } => Msg::Exec {
                from: sender(from),
                ticks,
            },
            Msg::Arena {
                from,
                bytes,
                bufs,
                buf_events,
            } => Msg::Arena {
                from: sender(from),
                bytes,
                bufs,
                buf_events,
            },
            Msg::Control {
                from,
                op,
                ticks,
                stalled_ticks,
            } => Msg::Control {
                from: sender(from),
                op,
                ticks,
                stalled_ticks,
            },
        }
    }

    /// Parses a datagram; for `Events`, checks that the body holds `count`
    /// events, for `ShmEvents` that buffer and count are in the arena's bounds.
    pub fn parse(datagram: &[u8]) -> Result<Msg, ParseError> {
        let d = datagram;
        if d.len() < HEADER_LEN {
            return Err(ParseError::Short);
        }
        if u32_at(d, at::MAGIC) != MAGIC {
            return Err(ParseError::BadMagic);
        }
        let from = Sender {
            pid: u32_at(d, at::PID),
            tid: u32_at(d, at::TID),
        };
        let batch = || Batch {
            first_index: u64_at(d, at::EVENTS_FIRST),
            stalled_ticks: Ticks(u64_at(d, at::EVENTS_STALLED)),
            count: u32_at(d, at::EVENTS_COUNT),
            discard: u16_at(d, at::FLAGS) & FLAG_DISCARD != 0,
        };
        Ok(match u16_at(d, at::KIND) {
            kind::HELLO => Msg::Hello {
                from,
                probe_cost_x1024: u64_at(d, at::HELLO_PROBE_COST),
                probe_spread_pct: u32_at(d, at::HELLO_PROBE_SPREAD),
                ticks: Ticks(u64_at(d, at::HELLO_TICKS)),
                ppid: u32_at(d, at::HELLO_PPID),
            },
            kind::EVENTS => {
                let batch = batch();
                if d.len() != HEADER_LEN + batch.count as usize * EVENT_LEN {
                    return Err(ParseError::BadCount);
                }
                Msg::Events { from, batch }
            }
            kind::SHM_EVENTS => {
                let (batch, buf) = (batch(), u32_at(d, at::EVENTS_BUF));
                if batch.count as usize > BUF_EVENTS || buf as usize >= arena::MAX_BUFS {
                    return Err(ParseError::BadCount);
                }
                Msg::ShmEvents { from, batch, buf }
            }
            kind::FORK => Msg::Fork {
                from,
                ticks: Ticks(u64_at(d, at::FORK_TICKS)),
            },
            kind::CHILD => Msg::Child {
                from,
                fork_ticks: Ticks(u64_at(d, at::CHILD_FORK_TICKS)),
                ppid: u32_at(d, at::CHILD_PPID),
                parent_tid: u32_at(d, at::CHILD_PARENT_TID),
            },
            kind::EXEC => Msg::Exec {
                from,
                ticks: Ticks(u64_at(d, at::EXEC_TICKS)),
            },
            kind::ARENA => Msg::Arena {
                from,
                bytes: u64_at(d, at::ARENA_BYTES),
                bufs: u32_at(d, at::ARENA_BUFS),
                buf_events: u32_at(d, at::ARENA_BUF_EVENTS),
            },
            kind::CONTROL => {
                let op = match u32_at(d, at::CONTROL_OP) {
                    control::PAUSE => Control::Pause,
                    control::RESUME => Control::Resume,
                    control::MARK => Control::Mark,
                    control::SIGNAL_TAKEN => Control::SignalTaken,
                    _ => return Err(ParseError::BadCount),
                };
                let len = u32_at(d, at::CONTROL_LEN) as usize;
                if len > control::MARK_TEXT_MAX || d.len() != HEADER_LEN + len {
                    return Err(ParseError::BadCount);
                }
                Msg::Control {
                    from,
                    op,
                    ticks: Ticks(u64_at(d, at::CONTROL_TICKS)),
                    stalled_ticks: Ticks(u64_at(d, at::CONTROL_STALLED)),
                }
            }
            other => return Err(ParseError::UnknownKind(other)),
        })
    }
}

/// One probe firing as the runtime stored it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawEvent {
    /// Absolute address of the function in the target (or, below
    /// [`MARK_LIMIT`], a hole or a marker).
    pub function: u64,
    /// Tick counter value.
    pub ticks: Ticks,
    pub is_exit: bool,
    /// Where the frame is on its thread's stack (`csrc/lapse_rt.h`): a frame
    /// whose `sp` lies at or below a later entry's is gone.
    pub sp: u64,
    /// An entry whose call's exit is in the same slot (a leaf call,
    /// [`LEAF_BIT`]): the ticks from the entry to the exit; 0 for others.
    pub leaf: u16,
}

impl RawEvent {
    /// An event from its three stored words (`fn`, `ticks << 1 | is_exit`,
    /// `sp`, with a leaf call's exit in its top bits).
    #[inline]
    pub fn from_words(function: u64, stamp: u64, sp: u64) -> RawEvent {
        let call = function >= MARK_LIMIT;
        let leaf = call && sp & LEAF_BIT != 0 && stamp & 1 == 0;
        RawEvent {
            function,
            ticks: Ticks(stamp >> 1),
            is_exit: stamp & 1 == 1,
            sp: if leaf {
                sp & ((1 << LEAF_SHIFT) - 1)
            } else if call {
                sp & !SEAL_BIT
            } else {
                sp
            },
            leaf: if leaf { (sp >> LEAF_SHIFT) as u16 } else { 0 },
        }
    }

    /// When its call ended, for a leaf call in one slot (else its own ticks).
    #[inline]
    pub fn leaf_exit(&self) -> Ticks {
        Ticks(self.ticks.0.wrapping_add(u64::from(self.leaf)))
    }

    /// How many events its slot holds: two for a leaf call, else one (the
    /// runtime numbers events, not slots).
    #[inline]
    pub fn events(&self) -> u64 {
        1 + u64::from(self.leaf != 0)
    }

    /// A leaf call's exit as an event of its own (for a slot whose entry the
    /// recorder had already); any other event as it is.
    pub fn exit_of_leaf(&self) -> RawEvent {
        if self.leaf == 0 {
            return *self;
        }
        RawEvent {
            ticks: self.leaf_exit(),
            is_exit: true,
            leaf: 0,
            ..*self
        }
    }
}

/// How many buffers of the sender's arena had been handed over when the
/// datagram was sent: the buffers handed over quietly ([`arena::QUIET`])
/// whose number is below this came before it, the others after. 0 for a
/// datagram too short to say (which [`Msg::parse`] rejects anyway).
pub fn arena_seq(datagram: &[u8]) -> u64 {
    if datagram.len() < HEADER_LEN {
        return 0;
    }
    u64_at(datagram, at::ARENA_SEQ)
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
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
    /// `count` (or the arena buffer) does not fit the datagram or the arena.
    BadCount,
}

/// The text of a `Control` mark (whose header [`Msg::parse`] accepted),
/// as the program gave it (not necessarily UTF-8).
pub fn control_text(datagram: &[u8]) -> &[u8] {
    datagram.get(HEADER_LEN..).unwrap_or(&[])
}

/// The events of an `Events` datagram (whose header [`Msg::parse`] accepted).
pub fn events(datagram: &[u8]) -> impl Iterator<Item = RawEvent> + Clone + '_ {
    datagram
        .get(HEADER_LEN..)
        .unwrap_or(&[])
        .chunks_exact(EVENT_LEN)
        .map(|e| {
            RawEvent::from_words(
                u64_at(e, at::EVENT_FN),
                u64_at(e, at::EVENT_STAMP),
                u64_at(e, at::EVENT_SP),
            )
        })
}

#[cfg(test)]
mod tests;
