//! The protocol against `csrc/lapse_rt.h`: every constant and layout pin the
//! header declares must be mirrored here with the same value (and the C
//! compiler holds the header's pins to the real struct layout), plus the
//! parser on hand-made datagrams.

use std::collections::BTreeMap;

use super::*;

const HEADER: &str = include_str!("../../csrc/lapse_rt.h");

/// `#define LAPSE_NAME value` (object-like macros only), value as written.
fn defines() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in HEADER.lines() {
        let Some(rest) = line.trim().strip_prefix("#define LAPSE_") else {
            continue;
        };
        let name_len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let (name, value) = rest.split_at(name_len);
        if value.starts_with('(') {
            continue; // LAPSE_AT / LAPSE_SIZE themselves
        }
        let value = value.split("/*").next().unwrap_or("").trim();
        if value.is_empty() {
            continue; // the include guard
        }
        out.insert(name.to_owned(), value.to_owned());
    }
    out
}

/// `LAPSE_AT(type, field, offset);` and `LAPSE_SIZE(type, size);` lines.
fn pins(macro_name: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    let open = format!("{macro_name}(");
    for line in HEADER.lines() {
        let Some(args) = line.trim().strip_prefix(open.as_str()) else {
            continue;
        };
        let Some(args) = args.strip_suffix(");") else {
            continue;
        };
        let parts: Vec<&str> = args.split(',').map(str::trim).collect();
        let (key, n) = match parts.as_slice() {
            [ty, field, off] => (format!("{ty}.{field}"), *off),
            [ty, size] => ((*ty).to_owned(), *size),
            _ => panic!("unreadable pin: {line}"),
        };
        let n: usize = n
            .parse()
            .unwrap_or_else(|_| panic!("not a number in {line}"));
        assert!(out.insert(key, n).is_none(), "pinned twice: {line}");
    }
    out
}

fn number(v: &str) -> u64 {
    let v = v.trim_end_matches(['u', 'U', 'l', 'L']);
    match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    }
    .unwrap_or_else(|_| panic!("not a number: {v}"))
}

#[test]
fn every_header_constant_matches() {
    let numbers: &[(&str, u64)] = &[
        ("MAGIC", u64::from(MAGIC)),
        ("BUF_EVENTS", BUF_EVENTS as u64),
        ("BUF_BYTES", BUF_BYTES as u64),
        ("MARK_UNWIND", MARK_UNWIND),
        ("MARK_UNTRACED", MARK_UNTRACED),
        ("MARK_SWITCH", MARK_SWITCH),
        ("MARK_NOT_ENTRY", MARK_NOT_ENTRY),
        ("MARK_DROPPED", MARK_DROPPED),
        ("MARK_LIMIT", MARK_LIMIT),
        ("LEAF_BIT", LEAF_BIT),
        ("LEAF_SHIFT", u64::from(LEAF_SHIFT)),
        ("SEAL_BIT", SEAL_BIT),
        ("LEAF_MAX_TICKS", u64::from(u16::MAX)),
        ("FLAG_DISCARD", u64::from(FLAG_DISCARD)),
        ("FILTER_MAGIC", u64::from(filter::MAGIC)),
        ("FILTER_ON", u64::from(filter::ON)),
        ("FILTER_MATCH", u64::from(filter::MATCH)),
        ("FILTER_EXCLUDE", u64::from(filter::EXCLUDE)),
        ("FILTER_MAX_DEPTH", u64::from(filter::MAX_DEPTH)),
        ("HOLE_FN", HOLE_FN),
        ("MSG_HELLO", u64::from(kind::HELLO)),
        ("MSG_EVENTS", u64::from(kind::EVENTS)),
        ("MSG_FORK", u64::from(kind::FORK)),
        ("MSG_CHILD", u64::from(kind::CHILD)),
        ("MSG_EXEC", u64::from(kind::EXEC)),
        ("MSG_ARENA", u64::from(kind::ARENA)),
        ("MSG_SHM_EVENTS", u64::from(kind::SHM_EVENTS)),
        ("MSG_SESSION", u64::from(kind::SESSION)),
        ("MSG_CONTROL", u64::from(kind::CONTROL)),
        ("CONTROL_PAUSE", u64::from(control::PAUSE)),
        ("CONTROL_RESUME", u64::from(control::RESUME)),
        ("CONTROL_MARK", u64::from(control::MARK)),
        ("CONTROL_SIGNAL_TAKEN", u64::from(control::SIGNAL_TAKEN)),
        ("MARK_TEXT_MAX", control::MARK_TEXT_MAX as u64),
        ("ARENA_MAGIC", u64::from(arena::MAGIC)),
        ("ARENA_BUFS", arena::BUFS as u64),
        ("ARENA_MAX_BUFS", arena::MAX_BUFS as u64),
        ("ARENA_HEAD", arena::HEAD as u64),
        ("SLOT_FREE", u64::from(arena::FREE)),
        ("SLOT_FILLING", u64::from(arena::FILLING)),
        ("SLOT_QUEUED", u64::from(arena::QUEUED)),
        ("SLOT_SPILLING", u64::from(arena::SPILLING)),
        ("SLOT_QUIET", u64::from(arena::QUIET)),
        ("SLOT_TAKEN", u64::from(arena::TAKEN)),
        ("PLAN_MAGIC", u64::from(plan::MAGIC)),
        ("PLAN_JMP", plan::JMP as u64),
        ("PLAN_ORIG", plan::ORIG as u64),
        ("PLAN_FIXUP64", u64::from(plan::FIXUP64)),
        ("PLAN_MAX", plan::MAX as u64),
    ];
    let strings: &[(&str, &str)] = &[
        ("ENV_SOCKET", ENV_SOCKET),
        ("ENV_SPILL", ENV_SPILL),
        ("ENV_FILTER", ENV_FILTER),
        ("ENV_CALIBRATE", ENV_CALIBRATE),
        ("ENV_NO_ARENA", ENV_NO_ARENA),
        ("ENV_FLUSH_TICKS", ENV_FLUSH_TICKS),
        ("ENV_NO_INHERIT", ENV_NO_INHERIT),
        ("ENV_SPILL_MAX", ENV_SPILL_MAX),
        ("ENV_NO_LIBCALLS", ENV_NO_LIBCALLS),
        ("ENV_SESSION", ENV_SESSION),
        ("ENV_PATCH_PLAN", ENV_PATCH_PLAN),
        ("ENV_BUFFERS", ENV_BUFFERS),
        ("ENV_PAUSED", ENV_PAUSED),
        ("ENV_RESUME_NS", ENV_RESUME_NS),
        ("ENV_SIGNAL", ENV_SIGNAL),
        ("ENV_CONTROL_ONLY", ENV_CONTROL_ONLY),
    ];
    let mut header = defines();
    for (name, want) in numbers {
        let got = header
            .remove(*name)
            .unwrap_or_else(|| panic!("LAPSE_{name} not in lapse_rt.h"));
        assert_eq!(number(&got), *want, "LAPSE_{name}");
    }
    for (name, want) in strings {
        let got = header
            .remove(*name)
            .unwrap_or_else(|| panic!("LAPSE_{name} not in lapse_rt.h"));
        assert_eq!(got, format!("{want:?}"), "LAPSE_{name}");
    }
    assert!(
        header.is_empty(),
        "lapse_rt.h defines what protocol.rs does not mirror: {header:?}"
    );
}

#[test]
fn every_header_offset_matches() {
    let offsets: &[(&str, usize)] = &[
        ("lapse_msg.magic", at::MAGIC),
        ("lapse_msg.kind", at::KIND),
        ("lapse_msg.flags", at::FLAGS),
        ("lapse_msg.pid", at::PID),
        ("lapse_msg.tid", at::TID),
        ("lapse_msg.u.hello.probe_cost", at::HELLO_PROBE_COST),
        ("lapse_msg.u.hello.ticks", at::HELLO_TICKS),
        ("lapse_msg.u.hello.ppid", at::HELLO_PPID),
        ("lapse_msg.u.hello.probe_spread", at::HELLO_PROBE_SPREAD),
        ("lapse_msg.u.events.first", at::EVENTS_FIRST),
        ("lapse_msg.u.events.stalled", at::EVENTS_STALLED),
        ("lapse_msg.u.events.count", at::EVENTS_COUNT),
        ("lapse_msg.u.events.buf", at::EVENTS_BUF),
        ("lapse_msg.u.fork.ticks", at::FORK_TICKS),
        ("lapse_msg.u.exec.ticks", at::EXEC_TICKS),
        ("lapse_msg.u.child.fork_ticks", at::CHILD_FORK_TICKS),
        ("lapse_msg.u.child.ppid", at::CHILD_PPID),
        ("lapse_msg.u.child.parent_tid", at::CHILD_PARENT_TID),
        ("lapse_msg.u.arena.bytes", at::ARENA_BYTES),
        ("lapse_msg.u.session.id", at::SESSION_ID),
        ("lapse_msg.u.arena.bufs", at::ARENA_BUFS),
        ("lapse_msg.u.arena.buf_events", at::ARENA_BUF_EVENTS),
        ("lapse_msg.u.control.op", at::CONTROL_OP),
        ("lapse_msg.u.control.len", at::CONTROL_LEN),
        ("lapse_msg.u.control.ticks", at::CONTROL_TICKS),
        ("lapse_msg.u.control.stalled", at::CONTROL_STALLED),
        ("lapse_msg.arena_seq", at::ARENA_SEQ),
        ("lapse_filter_header.magic", filter::H_MAGIC),
        ("lapse_filter_header.ranges", filter::H_RANGES),
        ("lapse_filter_header.dev", filter::H_DEV),
        ("lapse_filter_header.ino", filter::H_INO),
        ("lapse_filter_header.flags", filter::H_FLAGS),
        ("lapse_filter_header.depth", filter::H_DEPTH),
        ("lapse_filter_header.min_ticks", filter::H_MIN_TICKS),
        ("lapse_filter_range.start", filter::R_START),
        ("lapse_filter_range.end", filter::R_END),
        ("lapse_filter_range.flags", filter::R_FLAGS),
        ("lapse_event.fn", at::EVENT_FN),
        ("lapse_event.stamp", at::EVENT_STAMP),
        ("lapse_event.sp", at::EVENT_SP),
        ("lapse_slot.state", arena::SLOT_STATE),
        ("lapse_slot.tid", arena::SLOT_TID),
        ("lapse_slot.count", arena::SLOT_COUNT),
        ("lapse_slot.flags", arena::SLOT_FLAGS),
        ("lapse_slot.first", arena::SLOT_FIRST),
        ("lapse_slot.stalled", arena::SLOT_STALLED),
        ("lapse_slot.seq", arena::SLOT_SEQ),
        ("lapse_slot.claimed", arena::SLOT_CLAIMED),
        ("lapse_arena.magic", arena::OFF_MAGIC),
        ("lapse_arena.nbufs", arena::OFF_NBUFS),
        ("lapse_arena.gen", arena::OFF_GEN),
        ("lapse_arena.waiters", arena::OFF_WAITERS),
        ("lapse_arena.seq", arena::OFF_SEQ),
        ("lapse_arena.reading", arena::OFF_READING),
        ("lapse_arena.high", arena::OFF_HIGH),
        ("lapse_arena.received", arena::OFF_RECEIVED),
        ("lapse_arena.heartbeat", arena::OFF_HEARTBEAT),
        ("lapse_arena.undelivered", arena::OFF_UNDELIVERED),
        ("lapse_arena.cut_errno", arena::OFF_CUT_ERRNO),
        ("lapse_arena.slot", arena::OFF_SLOTS),
        ("lapse_plan_header.magic", plan::H_MAGIC),
        ("lapse_plan_header.sites", plan::H_SITES),
        ("lapse_plan_header.dev", plan::H_DEV),
        ("lapse_plan_header.ino", plan::H_INO),
        ("lapse_plan_header.region", plan::H_REGION),
        ("lapse_plan_header.region_bytes", plan::H_REGION_BYTES),
        ("lapse_plan_header.entry_slot", plan::H_ENTRY_SLOT),
        ("lapse_plan_header.fixups", plan::H_FIXUPS),
        ("lapse_plan_site.at", plan::S_AT),
        ("lapse_plan_site.stub", plan::S_STUB),
        ("lapse_plan_site.len", plan::S_LEN),
        ("lapse_plan_site.orig", plan::S_ORIG),
    ];
    let sizes: &[(&str, usize)] = &[
        ("lapse_msg", HEADER_LEN),
        ("lapse_event", EVENT_LEN),
        ("lapse_filter_header", filter::HEADER_LEN),
        ("lapse_filter_range", filter::RANGE_LEN),
        ("lapse_slot", arena::SLOT_LEN),
        ("lapse_plan_header", plan::HEADER_LEN),
        ("lapse_plan_site", plan::SITE_LEN),
    ];
    for (table, macro_name) in [(offsets, "LAPSE_AT"), (sizes, "LAPSE_SIZE")] {
        let mut header = pins(macro_name);
        for (key, want) in table {
            let got = header
                .remove(*key)
                .unwrap_or_else(|| panic!("lapse_rt.h does not pin {key} ({macro_name})"));
            assert_eq!(got, *want, "{key}");
        }
        assert!(
            header.is_empty(),
            "lapse_rt.h pins what protocol.rs does not read: {header:?}"
        );
    }
}

fn header(kind: u16, count: u32) -> Vec<u8> {
    let mut b = vec![0u8; HEADER_LEN];
    b[at::MAGIC..at::MAGIC + 4].copy_from_slice(&MAGIC.to_ne_bytes());
    b[at::KIND..at::KIND + 2].copy_from_slice(&kind.to_ne_bytes());
    b[at::PID..at::PID + 4].copy_from_slice(&7u32.to_ne_bytes());
    b[at::TID..at::TID + 4].copy_from_slice(&8u32.to_ne_bytes());
    b[16..24].copy_from_slice(&1u64.to_ne_bytes());
    b[24..32].copy_from_slice(&2u64.to_ne_bytes());
    b[32..36].copy_from_slice(&count.to_ne_bytes());
    b
}

#[test]
fn events_datagram_round_trips() {
    let mut d = header(kind::EVENTS, 1);
    d.extend_from_slice(&0x1234u64.to_ne_bytes());
    d.extend_from_slice(&((99u64 << 1) | 1).to_ne_bytes());
    d.extend_from_slice(&0x7ffd_0000_1000u64.to_ne_bytes());
    let want = Msg::Events {
        from: Sender { pid: 7, tid: 8 },
        batch: Batch {
            first_index: 1,
            stalled_ticks: Ticks::new(2),
            count: 1,
            discard: false,
        },
    };
    assert_eq!(Msg::parse(&d), Ok(want));
    assert_eq!(arena_seq(&d), 0);
    d[at::ARENA_SEQ..at::ARENA_SEQ + 8].copy_from_slice(&5u64.to_ne_bytes());
    assert_eq!(arena_seq(&d), 5);
    assert_eq!(arena_seq(&d[..HEADER_LEN - 1]), 0);
    let e: Vec<_> = events(&d).collect();
    assert_eq!(
        e,
        vec![RawEvent {
            function: 0x1234,
            ticks: Ticks::new(99),
            is_exit: true,
            sp: 0x7ffd_0000_1000,
            leaf: 0,
        }]
    );
}

#[test]
fn fields_are_named_by_kind() {
    let d = header(kind::CHILD, 3);
    assert_eq!(
        Msg::parse(&d),
        Ok(Msg::Child {
            from: Sender { pid: 7, tid: 8 },
            fork_ticks: Ticks::new(2),
            ppid: 3,
            parent_tid: 0
        })
    );
    let d = header(kind::HELLO, 5);
    assert_eq!(
        Msg::parse(&d),
        Ok(Msg::Hello {
            from: Sender { pid: 7, tid: 8 },
            probe_cost_x1024: 1,
            probe_spread_pct: 0,
            ticks: Ticks::new(2),
            ppid: 5
        })
    );
}

#[test]
fn bad_datagrams_are_rejected() {
    assert_eq!(Msg::parse(&[0; 10]), Err(ParseError::Short));
    assert_eq!(
        Msg::parse(&header(kind::EVENTS, 3)),
        Err(ParseError::BadCount)
    );
    assert_eq!(
        Msg::parse(&header(kind::SHM_EVENTS, BUF_EVENTS as u32 + 1)),
        Err(ParseError::BadCount)
    );
    assert_eq!(Msg::parse(&header(10, 0)), Err(ParseError::UnknownKind(10)));
    let mut d = header(kind::HELLO, 0);
    d[0] = 0;
    assert_eq!(Msg::parse(&d), Err(ParseError::BadMagic));
}

#[test]
fn a_control_mark_carries_its_text_and_its_time() {
    let mut d = header(kind::CONTROL, 0);
    d[at::CONTROL_OP..at::CONTROL_OP + 4].copy_from_slice(&control::MARK.to_ne_bytes());
    d[at::CONTROL_LEN..at::CONTROL_LEN + 4].copy_from_slice(&5u32.to_ne_bytes());
    d[at::CONTROL_TICKS..at::CONTROL_TICKS + 8].copy_from_slice(&77u64.to_ne_bytes());
    d[at::CONTROL_STALLED..at::CONTROL_STALLED + 8].copy_from_slice(&0u64.to_ne_bytes());
    d.extend_from_slice(b"hello");
    assert_eq!(
        Msg::parse(&d),
        Ok(Msg::Control {
            from: Sender { pid: 7, tid: 8 },
            op: Control::Mark,
            ticks: Ticks(77),
            stalled_ticks: Ticks(0),
        })
    );
    assert_eq!(control_text(&d), b"hello");
    // a length the body does not have, or an op nobody defined
    d.push(b'!');
    assert_eq!(Msg::parse(&d), Err(ParseError::BadCount));
    d.pop();
    d[at::CONTROL_OP..at::CONTROL_OP + 4].copy_from_slice(&99u32.to_ne_bytes());
    assert_eq!(Msg::parse(&d), Err(ParseError::BadCount));
}

#[test]
fn a_leaf_slot_reads_as_its_entry_with_the_ticks_to_its_exit() {
    let sp = 0x7ffc_0000_f000u64;
    let e = RawEvent::from_words(0x40_1000, 500 << 1, sp | LEAF_BIT | (123 << LEAF_SHIFT));
    assert_eq!((e.is_exit, e.sp, e.leaf), (false, sp, 123));
    assert_eq!(e.leaf_exit(), Ticks::new(623));
    // a plain entry and exit
    let e = RawEvent::from_words(0x40_1000, (500 << 1) | 1, sp);
    assert_eq!((e.is_exit, e.sp, e.leaf), (true, sp, 0));
    assert_eq!(e.leaf_exit(), Ticks::new(500));
    // a sealed entry (its exit went to a slot of its own)
    let e = RawEvent::from_words(0x40_1000, 500 << 1, sp | SEAL_BIT);
    assert_eq!((e.is_exit, e.sp, e.leaf), (false, sp, 0));
    // a marker's sp is its own (a dropped-calls count in its top bits)
    let dropped = 0x40_1000 | (5u64 << DROPPED_COUNT_SHIFT) | LEAF_BIT;
    let m = RawEvent::from_words(MARK_DROPPED, 500 << 1, dropped);
    assert_eq!((m.sp, m.leaf), (dropped, 0));
}
