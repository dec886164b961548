//! Compact encodings of the two high-volume streams.
//!
//! Events: each event is two varints, its word `function << 1 | is_exit`
//! and its delta `ts - previous ts`. A chunk in the column layout
//! ([`EventLayout::Columns`], what this writer makes) holds `varint base_ts
//! | varint words_len`, then every event's word, then every event's delta;
//! files written before it interleave them (`varint base_ts`, then word and
//! delta per event). A call of a small function costs about four bytes
//! before compression (two events of one-byte id and delta). Apart, the
//! words repeat in long runs and the deltas are a few small values: zstd
//! takes the columns about 1.5 times as fast as the interleaved bytes and
//! to three quarters of their size (calls.c at level -3: 0.32 instead of
//! 0.41 bytes an event). Rarer kinds ([`EventKind::Unwind`]) are escaped: the word is
//! [`EXTENDED`] + `(function << 2 | kind)`, a value no enter or exit word
//! reaches (function ids are `u32`), so files written before they existed
//! read as before.
//!
//! Samples: per sample `varint pid, varint tid, varint zigzag(ts delta),
//! varint cpu, varint(stack + 1 or 0), varint weight`.

use crate::model::{Event, EventKind, FunctionId, Sample, StackId, Timestamp};
use crate::varint;

/// Event words from here on are rare kinds (see the module doc).
pub const EXTENDED: u64 = 1 << 34;
/// The rare kinds' numbers in an extended word.
const EXT_UNWIND: u64 = 0;

/// The first varint of an event.
#[inline(always)]
fn event_word(kind: EventKind, function: FunctionId) -> u64 {
    let f = u64::from(function.0);
    match kind {
        EventKind::Enter => f << 1,
        EventKind::Exit => (f << 1) | 1,
        EventKind::Unwind => EXTENDED + ((f << 2) | EXT_UNWIND),
    }
}

/// What an event's first varint says; `None` for a word no writer makes.
#[inline(always)]
fn word_event(word: u64) -> Option<(EventKind, FunctionId)> {
    if word < EXTENDED {
        let function = u32::try_from(word >> 1).ok()?;
        let kind = if word & 1 == 1 {
            EventKind::Exit
        } else {
            EventKind::Enter
        };
        return Some((kind, FunctionId(function)));
    }
    let ext = word - EXTENDED;
    let function = FunctionId(u32::try_from(ext >> 2).ok()?);
    match ext & 3 {
        EXT_UNWIND => Some((EventKind::Unwind, function)),
        _ => None,
    }
}

/// How an event chunk's bytes are laid out (the chunk header says:
/// [`crate::format::FLAG_COLUMNS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventLayout {
    /// `varint base_ts`, then each event's word and delta (older files).
    Interleaved,
    /// `varint base_ts | varint words_len`, every word, then every delta.
    Columns,
}

/// Appends the encoding of `events` (which must be in time order) to `out`,
/// in the column layout.
pub fn encode_events(events: &[Event], out: &mut Vec<u8>) {
    let mut enc = EventEncoder::with_capacity(events.len());
    let mut appender = enc.appender();
    for e in events {
        appender.push(e.ts, e.kind, e.function);
    }
    drop(appender);
    enc.write_to(out);
}

/// Events encoded as they come, for a producer that would otherwise store
/// them only to encode them later (the recorder's per-thread batches): the
/// bytes [`encode_events`] makes of the same events, once [`write_to`]
/// puts the two columns together.
///
/// [`write_to`]: EventEncoder::write_to
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventEncoder {
    words: Vec<u8>,
    deltas: Vec<u8>,
    count: usize,
    base: u64,
    prev: u64,
}

impl EventEncoder {
    /// Room for about `events` events without reallocating.
    pub fn with_capacity(events: usize) -> EventEncoder {
        // (most words and deltas take one byte, some two)
        let room = events.saturating_add(events / 2).saturating_add(10);
        EventEncoder {
            words: Vec::with_capacity(room),
            deltas: Vec::with_capacity(room),
            count: 0,
            base: 0,
            prev: 0,
        }
    }

    /// Appends one event (not earlier than the previous one). For many in a
    /// row, [`EventEncoder::appender`] does the same for less.
    pub fn push(&mut self, ts: Timestamp, kind: EventKind, function: FunctionId) {
        self.appender().push(ts, kind, function);
    }

    /// The encoder opened for a burst of pushes (the recorder's hot loop):
    /// see [`EventAppender`].
    pub fn appender(&mut self) -> EventAppender<'_> {
        let words = self.words.as_mut_ptr();
        let deltas = self.deltas.as_mut_ptr();
        EventAppender {
            words,
            words_len: self.words.len(),
            words_cap: self.words.capacity(),
            deltas,
            deltas_len: self.deltas.len(),
            deltas_cap: self.deltas.capacity(),
            count: self.count,
            base: self.base,
            prev: self.prev,
            enc: self,
        }
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Appends the chunk's bytes (what an event chunk holds before
    /// compression, in the column layout) to `out`.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        out.reserve(20 + self.words.len() + self.deltas.len());
        varint::put(out, self.base);
        varint::put(out, self.words.len() as u64);
        out.extend_from_slice(&self.words);
        out.extend_from_slice(&self.deltas);
    }

    /// The events back (for tools and tests).
    pub fn events(&self) -> Vec<Event> {
        let mut out = Vec::new();
        if self.count > 0 {
            let mut raw = Vec::new();
            self.write_to(&mut raw);
            // (our own encoding: it decodes)
            let _ = decode_events(&raw, EventLayout::Columns, self.count, &mut out);
        }
        out
    }
}

/// An [`EventEncoder`] open for appending: the ends of its two columns are
/// held here, in what the compiler can keep in registers, and written back
/// when it is dropped. Pushing through the encoder itself reloaded and
/// stored each column's length around every byte (a byte stored through the
/// vector's pointer may, for all the compiler knows, have been its length):
/// a quarter of the recorder's hot loop (perf annotate, `mt 2`).
pub struct EventAppender<'a> {
    enc: &'a mut EventEncoder,
    words: *mut u8,
    words_len: usize,
    words_cap: usize,
    deltas: *mut u8,
    deltas_len: usize,
    deltas_cap: usize,
    count: usize,
    base: u64,
    prev: u64,
}

/// The longest word (an extended one: 35 bits) and delta varints.
const WORD_MAX: usize = 5;
const DELTA_MAX: usize = 10;

impl EventAppender<'_> {
    /// Appends one event (not earlier than the previous one): its word to
    /// the words, its time since the previous one to the deltas.
    #[inline(always)]
    pub fn push(&mut self, ts: Timestamp, kind: EventKind, function: FunctionId) {
        let ts = ts.as_nanos();
        if self.count == 0 {
            self.base = ts;
            self.prev = ts;
        }
        if self.words_len + WORD_MAX > self.words_cap
            || self.deltas_len + DELTA_MAX > self.deltas_cap
        {
            self.grow();
        }
        // SAFETY: room for the longest varint of each was made just above
        // (capacity, not yet length: the bytes are initialised here and the
        // lengths set when the appender is dropped).
        unsafe {
            self.words_len = put_raw(self.words, self.words_len, event_word(kind, function));
            self.deltas_len = put_raw(self.deltas, self.deltas_len, ts.wrapping_sub(self.prev));
        }
        self.prev = ts;
        self.count += 1;
    }

    /// Appends a call without calls inside it: its entry at `ts` (not
    /// earlier than the previous event) and its exit at `exit` (not earlier
    /// than `ts`). The same bytes as two pushes; when the word and both
    /// deltas take one byte each (a small function's id, called and
    /// returning within 127 ns), two two-byte stores.
    #[inline(always)]
    pub fn push_leaf(&mut self, ts: Timestamp, exit: Timestamp, function: FunctionId) {
        let (ts, exit) = (ts.as_nanos(), exit.as_nanos());
        if self.count == 0 {
            self.base = ts;
            self.prev = ts;
        }
        if self.words_len + 2 * WORD_MAX > self.words_cap
            || self.deltas_len + 2 * DELTA_MAX > self.deltas_cap
        {
            self.grow();
        }
        let word = event_word(EventKind::Enter, function);
        let (into, within) = (ts.wrapping_sub(self.prev), exit.wrapping_sub(ts));
        // SAFETY: room for the longest varints of two events was made above.
        unsafe {
            if (word | into | within) < 0x80 {
                let words = (word | (word | 1) << 8) as u16;
                let deltas = (into | within << 8) as u16;
                self.words
                    .add(self.words_len)
                    .cast::<u16>()
                    .write_unaligned(words.to_le());
                self.deltas
                    .add(self.deltas_len)
                    .cast::<u16>()
                    .write_unaligned(deltas.to_le());
                self.words_len += 2;
                self.deltas_len += 2;
            } else {
                self.words_len = put_raw(self.words, self.words_len, word);
                self.words_len = put_raw(self.words, self.words_len, word | 1);
                self.deltas_len = put_raw(self.deltas, self.deltas_len, into);
                self.deltas_len = put_raw(self.deltas, self.deltas_len, within);
            }
        }
        self.prev = exit;
        self.count += 2;
    }

    /// Events in the encoder, with those appended so far.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        self.sync();
        let more = self.enc.words.len().max(1024);
        self.enc.words.reserve(more);
        self.enc.deltas.reserve(more.max(DELTA_MAX));
        self.words = self.enc.words.as_mut_ptr();
        self.words_cap = self.enc.words.capacity();
        self.deltas = self.enc.deltas.as_mut_ptr();
        self.deltas_cap = self.enc.deltas.capacity();
    }

    /// The encoder as the pushes so far left it.
    fn sync(&mut self) {
        // SAFETY: the bytes up to these lengths were written by put_raw,
        // within the capacity the vectors had when their pointers were taken.
        unsafe {
            self.enc.words.set_len(self.words_len);
            self.enc.deltas.set_len(self.deltas_len);
        }
        self.enc.count = self.count;
        self.enc.base = self.base;
        self.enc.prev = self.prev;
    }
}

impl Drop for EventAppender<'_> {
    fn drop(&mut self) {
        self.sync();
    }
}

/// Writes `v` as a varint at `buf + at` and returns the position after it.
///
/// # Safety
/// `buf + at` must have room for the varint (ten bytes at most).
#[inline(always)]
unsafe fn put_raw(buf: *mut u8, at: usize, mut v: u64) -> usize {
    let mut at = at;
    while v >= 0x80 {
        // SAFETY: the caller made room
        unsafe { *buf.add(at) = (v as u8) | 0x80 };
        v >>= 7;
        at += 1;
    }
    // SAFETY: as above
    unsafe { *buf.add(at) = v as u8 };
    at + 1
}

/// Decodes `count` events from `raw` into `out` (cleared first). `None` when
/// the bytes do not hold that many well-formed events.
pub fn decode_events(
    raw: &[u8],
    layout: EventLayout,
    count: usize,
    out: &mut Vec<Event>,
) -> Option<()> {
    out.clear();
    // Every event takes at least two bytes: never reserve more than the input allows.
    out.reserve(count.min(raw.len() / 2));
    let mut d = EventDecoder::new(raw, layout, count)?;
    out.extend(d.by_ref());
    d.finish()
}

/// Decodes an event chunk one event at a time (an iterator), so a consumer
/// can analyse events as they are decoded instead of storing the chunk.
pub struct EventDecoder<'a> {
    /// The words, and the deltas (the same bytes when interleaved).
    words: &'a [u8],
    deltas: &'a [u8],
    word_pos: usize,
    delta_pos: usize,
    interleaved: bool,
    ts: u64,
    remaining: usize,
}

impl<'a> EventDecoder<'a> {
    /// `None` when `raw` does not hold its head (the base timestamp, and in
    /// columns the length of the words), or not as many varints as `count`
    /// events take in `layout`. The count is checked before any event is
    /// decoded: bytes read in the wrong layout (a chunk whose flags were
    /// damaged; the flags are not under the checksum) would otherwise decode
    /// as plausible events, millions of enters without an exit among them,
    /// before the chunk was found bad.
    pub fn new(raw: &'a [u8], layout: EventLayout, count: usize) -> Option<EventDecoder<'a>> {
        let mut pos = 0;
        let ts = varint::get(raw, &mut pos)?;
        let (words, deltas) = match layout {
            EventLayout::Interleaved => {
                let rest = &raw[pos..];
                if varints_in(rest) != Some(count.checked_mul(2)?) {
                    return None;
                }
                (rest, rest)
            }
            EventLayout::Columns => {
                let len = usize::try_from(varint::get(raw, &mut pos)?).ok()?;
                let rest = &raw[pos..];
                if len > rest.len() {
                    return None;
                }
                let (words, deltas) = rest.split_at(len);
                if varints_in(words) != Some(count) || varints_in(deltas) != Some(count) {
                    return None;
                }
                (words, deltas)
            }
        };
        Some(EventDecoder {
            words,
            deltas,
            word_pos: 0,
            delta_pos: 0,
            interleaved: layout == EventLayout::Interleaved,
            ts,
            remaining: count,
        })
    }

    /// `Some` when every announced event was decoded and no byte is left over.
    pub fn finish(&self) -> Option<()> {
        (self.remaining == 0
            && self.word_pos == self.words.len()
            && self.delta_pos == self.deltas.len())
        .then_some(())
    }
}

/// How many varints `bytes` holds (the bytes that end one: below 0x80);
/// `None` when its last byte does not end one. One pass that the compiler
/// vectorises: about a tenth of what decoding the events costs.
fn varints_in(bytes: &[u8]) -> Option<usize> {
    if bytes.last().is_some_and(|&b| b >= 0x80) {
        return None;
    }
    Some(bytes.iter().filter(|&&b| b < 0x80).count())
}

/// The events one at a time; iteration ends early at malformed bytes (then
/// [`EventDecoder::finish`] says `None`).
impl Iterator for EventDecoder<'_> {
    type Item = Event;

    #[inline(always)]
    fn next(&mut self) -> Option<Event> {
        if self.remaining == 0 {
            return None;
        }
        let mut word_pos = self.word_pos;
        let word = varint::get(self.words, &mut word_pos)?;
        let mut delta_pos = if self.interleaved {
            word_pos
        } else {
            self.delta_pos
        };
        let delta = varint::get(self.deltas, &mut delta_pos)?;
        let (kind, function) = word_event(word)?;
        if self.interleaved {
            word_pos = delta_pos;
        }
        self.word_pos = word_pos;
        self.delta_pos = delta_pos;
        self.ts = self.ts.wrapping_add(delta);
        self.remaining -= 1;
        Some(Event {
            ts: Timestamp::from_nanos(self.ts),
            kind,
            function,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.remaining))
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

pub fn encode_samples(samples: &[Sample], out: &mut Vec<u8>) {
    varint::put(out, samples.len() as u64);
    let mut prev = 0u64;
    for s in samples {
        varint::put(out, u64::from(s.pid));
        varint::put(out, u64::from(s.tid));
        let ts = s.ts.as_nanos();
        varint::put(out, zigzag(ts.wrapping_sub(prev) as i64));
        prev = ts;
        varint::put(out, u64::from(s.cpu));
        varint::put(out, s.stack.map_or(0, |id| u64::from(id.0) + 1));
        varint::put(out, s.weight);
    }
}

pub fn decode_samples(raw: &[u8], out: &mut Vec<Sample>) -> Option<()> {
    out.clear();
    let mut pos = 0;
    let count = varint::get(raw, &mut pos)?;
    if count > u64::from(crate::format::MAX_CHUNK_SAMPLES) {
        return None;
    }
    // Each sample takes at least six bytes.
    out.reserve((count as usize).min(raw.len() / crate::format::MIN_SAMPLE_BYTES as usize));
    let mut ts = 0u64;
    for _ in 0..count {
        let pid = u32::try_from(varint::get(raw, &mut pos)?).ok()?;
        let tid = u32::try_from(varint::get(raw, &mut pos)?).ok()?;
        ts = ts.wrapping_add(unzigzag(varint::get(raw, &mut pos)?) as u64);
        let cpu = u32::try_from(varint::get(raw, &mut pos)?).ok()?;
        let stack = match varint::get(raw, &mut pos)? {
            0 => None,
            n => Some(StackId(u32::try_from(n - 1).ok()?)),
        };
        let weight = varint::get(raw, &mut pos)?;
        out.push(Sample {
            pid,
            tid,
            serial: 0,
            ts: Timestamp::from_nanos(ts),
            cpu,
            stack,
            weight,
        });
    }
    (pos == raw.len()).then_some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(ts: u64, kind: EventKind, f: u32) -> Event {
        Event {
            ts: Timestamp::from_nanos(ts),
            kind,
            function: FunctionId(f),
        }
    }

    #[test]
    fn an_appender_makes_the_bytes_the_encoder_makes() {
        // From an empty encoder (it must grow, many times), across one-byte
        // and ten-byte varints and an extended word, in two bursts.
        let kinds = [EventKind::Enter, EventKind::Exit, EventKind::Unwind];
        let events: Vec<Event> = (0..5000u64)
            .map(|i| {
                let ts = i * 3 + if i == 4000 { 1 << 60 } else { 0 };
                let ts = if i > 4000 { ts + (1 << 60) } else { ts };
                ev(ts, kinds[(i % 3) as usize], (i * 7919 % 100_000) as u32)
            })
            .collect();
        let mut plain = EventEncoder::default();
        for e in &events {
            plain.push(e.ts, e.kind, e.function);
        }
        let (mut appended, mut done) = (EventEncoder::default(), 0);
        for part in events.chunks(3000) {
            let mut a = appended.appender();
            for e in part {
                a.push(e.ts, e.kind, e.function);
            }
            done += part.len();
            assert_eq!(a.len(), done);
        }
        assert_eq!(appended, plain);
        assert_eq!(appended.events(), events);
    }

    #[test]
    fn a_leaf_push_makes_the_bytes_of_its_entry_and_exit_pushed_apart() {
        // one-byte words and deltas (the two-store path), then each of the
        // three too large for one byte, then a first leaf of a new encoder;
        // from empty encoders, so both grow
        let leaves: Vec<(u64, u64, u32)> = (0..3000u64)
            .map(|i| match i % 4 {
                0 => (i * 1000, i * 1000 + 127, 63), // the largest one-byte values
                1 => (i * 1000 + 10, i * 1000 + 138, 5), // exit 128 ns after
                2 => (i * 1000 + 300, i * 1000 + 310, 64), // a two-byte word
                _ => (i * 1000 + 500, i * 1000 + 500, 1), // entry 190 ns after
            })
            .collect();
        let (mut apart, mut leafed) = (EventEncoder::default(), EventEncoder::default());
        let mut a = leafed.appender();
        for &(ts, exit, f) in &leaves {
            let (ts, exit, f) = (
                Timestamp::from_nanos(ts),
                Timestamp::from_nanos(exit),
                FunctionId(f),
            );
            apart.push(ts, EventKind::Enter, f);
            apart.push(exit, EventKind::Exit, f);
            a.push_leaf(ts, exit, f);
        }
        assert_eq!(a.len(), 6000);
        drop(a);
        assert_eq!(leafed, apart);
        let mut first = EventEncoder::default();
        first.appender().push_leaf(
            Timestamp::from_nanos(7),
            Timestamp::from_nanos(9),
            FunctionId(2),
        );
        assert_eq!(
            first.events(),
            [ev(7, EventKind::Enter, 2), ev(9, EventKind::Exit, 2)]
        );
    }

    #[test]
    fn events_round_trip_and_are_compact() {
        let events: Vec<Event> = (0..1000u64)
            .map(|i| {
                ev(
                    1_000_000 + i * 30,
                    if i % 2 == 0 {
                        EventKind::Enter
                    } else {
                        EventKind::Exit
                    },
                    7,
                )
            })
            .collect();
        let mut raw = Vec::new();
        encode_events(&events, &mut raw);
        // two bytes per event plus the base timestamp and the words' length
        assert!(raw.len() <= 2 * events.len() + 8, "{} bytes", raw.len());
        let mut back = Vec::new();
        decode_events(&raw, EventLayout::Columns, events.len(), &mut back).unwrap();
        assert_eq!(back, events);
    }

    #[test]
    fn encoder_makes_the_same_bytes_as_encode_events() {
        let events = vec![
            ev(1_000_000_000_000, EventKind::Enter, 3),
            ev(1_000_000_000_200, EventKind::Enter, 70_000),
            ev(1_000_000_900_000, EventKind::Exit, 70_000),
            ev(1_000_000_900_000, EventKind::Exit, 3),
        ];
        let mut raw = Vec::new();
        encode_events(&events, &mut raw);
        let mut enc = EventEncoder::with_capacity(2);
        for e in &events {
            enc.push(e.ts, e.kind, e.function);
        }
        let mut written = Vec::new();
        enc.write_to(&mut written);
        assert_eq!(written, raw);
        assert_eq!(enc.len(), 4);
        assert_eq!(enc.events(), events);
    }

    #[test]
    fn unwind_events_round_trip_and_plain_words_are_unchanged() {
        let events = vec![
            ev(100, EventKind::Enter, 1),
            ev(150, EventKind::Enter, 2),
            ev(200, EventKind::Unwind, 2),
            ev(200, EventKind::Enter, 3),
            ev(300, EventKind::Exit, 3),
            ev(400, EventKind::Unwind, u32::MAX),
        ];
        let mut raw = Vec::new();
        encode_events(&events, &mut raw);
        let mut back = Vec::new();
        decode_events(&raw, EventLayout::Columns, events.len(), &mut back).unwrap();
        assert_eq!(back, events);
        // enter and exit words are what they always were (old files read as before)
        assert_eq!(event_word(EventKind::Enter, FunctionId(5)), 10);
        assert_eq!(event_word(EventKind::Exit, FunctionId(5)), 11);
        assert_eq!(
            word_event(u64::from(u32::MAX) << 1 | 1),
            Some((EventKind::Exit, FunctionId(u32::MAX)))
        );
        // between the two ranges, and unknown rare kinds: malformed
        assert_eq!(word_event(1 << 33), None);
        assert_eq!(word_event(EXTENDED + 1), None);
    }

    #[test]
    fn events_reject_wrong_count() {
        let mut raw = Vec::new();
        encode_events(&[ev(5, EventKind::Enter, 1)], &mut raw);
        let mut back = Vec::new();
        assert!(decode_events(&raw, EventLayout::Columns, 2, &mut back).is_none());
        assert!(decode_events(&raw, EventLayout::Columns, 0, &mut back).is_none());
    }

    /// The layout of files written before the columns: word and delta
    /// side by side.
    fn encode_interleaved(events: &[Event]) -> Vec<u8> {
        let mut raw = Vec::new();
        let mut prev = events.first().map_or(0, |e| e.ts.as_nanos());
        varint::put(&mut raw, prev);
        for e in events {
            varint::put(&mut raw, event_word(e.kind, e.function));
            varint::put(&mut raw, e.ts.as_nanos() - prev);
            prev = e.ts.as_nanos();
        }
        raw
    }

    #[test]
    fn interleaved_chunks_of_older_files_still_decode() {
        let events = vec![
            ev(1_000, EventKind::Enter, 1),
            ev(1_010, EventKind::Enter, 300),
            ev(90_000, EventKind::Unwind, 300),
            ev(90_020, EventKind::Exit, 1),
        ];
        let old = encode_interleaved(&events);
        let mut back = Vec::new();
        decode_events(&old, EventLayout::Interleaved, 4, &mut back).unwrap();
        assert_eq!(back, events);
        // in columns: the same varints in another order, and the words' length
        let mut raw = Vec::new();
        encode_events(&events, &mut raw);
        assert_ne!(raw, old);
        assert_eq!(raw.len(), old.len() + 1, "one more byte: the words' length");
        decode_events(&raw, EventLayout::Columns, 4, &mut back).unwrap();
        assert_eq!(back, events);
    }

    #[test]
    fn columns_that_do_not_add_up_are_refused() {
        let events: Vec<Event> = (0..4u64)
            .map(|i| ev(100 + i * 10, EventKind::Enter, 2))
            .collect();
        let mut raw = Vec::new();
        encode_events(&events, &mut raw);
        // base 100 (one byte), then the words' length: 4 one-byte words
        assert_eq!(raw[..2], [100, 4]);
        let mut back = Vec::new();
        // words said longer than the chunk
        raw[1] = 40;
        assert!(EventDecoder::new(&raw, EventLayout::Columns, 4).is_none());
        // one word short: a delta is read as the last word, a delta is missing
        raw[1] = 3;
        assert!(decode_events(&raw, EventLayout::Columns, 4, &mut back).is_none());
        // one word long: a word is left unread
        raw[1] = 5;
        assert!(decode_events(&raw, EventLayout::Columns, 4, &mut back).is_none());
        raw[1] = 4;
        decode_events(&raw, EventLayout::Columns, 4, &mut back).unwrap();
        assert_eq!(back, events);
    }

    #[test]
    fn a_chunk_read_in_the_wrong_layout_yields_no_event() {
        // calls as calls.c makes them: the deltas, read as words, would be
        // enters of even ids, one after another
        let events: Vec<Event> = (0..2000u64)
            .map(|i| {
                let kind = if i % 2 == 0 {
                    EventKind::Enter
                } else {
                    EventKind::Exit
                };
                ev(1_000 + i * 10, kind, 3)
            })
            .collect();
        let mut columns = Vec::new();
        encode_events(&events, &mut columns);
        let interleaved = encode_interleaved(&events);
        for (raw, wrong) in [
            (&columns, EventLayout::Interleaved),
            (&interleaved, EventLayout::Columns),
        ] {
            assert!(
                EventDecoder::new(raw, wrong, events.len()).is_none(),
                "{wrong:?}"
            );
        }
        let mut back = Vec::new();
        decode_events(&columns, EventLayout::Columns, events.len(), &mut back).unwrap();
        assert_eq!(back, events);
    }

    #[test]
    fn decoder_iterates_and_stops_at_malformed_bytes() {
        let events: Vec<Event> = (0..10u64)
            .map(|i| ev(100 + i * 300, EventKind::Enter, i as u32))
            .collect();
        let mut raw = Vec::new();
        encode_events(&events, &mut raw);
        let mut d = EventDecoder::new(&raw, EventLayout::Columns, events.len()).unwrap();
        assert_eq!(d.by_ref().collect::<Vec<_>>(), events);
        assert!(d.finish().is_some());
        // a continuation bit on the last byte, or more events announced than
        // held: refused before any event
        let last = raw.len() - 1;
        raw[last] |= 0x80;
        assert!(EventDecoder::new(&raw, EventLayout::Columns, events.len()).is_none());
        raw[last] &= 0x7f;
        assert!(EventDecoder::new(&raw, EventLayout::Columns, events.len() + 1).is_none());
        // a word no writer makes (an unknown rare kind) in the third event:
        // two events, then the end, and the chunk is not whole
        let mut words = vec![2, 4];
        varint::put(&mut words, EXTENDED + 1);
        words.push(6);
        let mut raw = vec![100, words.len() as u8];
        raw.extend(&words);
        raw.extend([1, 1, 1, 1]);
        let mut d = EventDecoder::new(&raw, EventLayout::Columns, 4).unwrap();
        assert_eq!(d.by_ref().count(), 2);
        assert!(d.finish().is_none());
    }

    #[test]
    fn samples_round_trip_out_of_order() {
        let samples = vec![
            Sample {
                pid: 1,
                tid: 2,
                serial: 0,
                ts: Timestamp::from_nanos(500),
                cpu: 1,
                stack: Some(StackId(0)),
                weight: 1_000_000,
            },
            Sample {
                pid: 1,
                tid: 3,
                serial: 0,
                ts: Timestamp::from_nanos(400),
                cpu: 0,
                stack: None,
                weight: 1_000_000,
            },
        ];
        let mut raw = Vec::new();
        encode_samples(&samples, &mut raw);
        let mut back = Vec::new();
        decode_samples(&raw, &mut back).unwrap();
        assert_eq!(back, samples);
    }
}
