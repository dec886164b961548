//! Perfetto's protobuf trace format (`perfetto/trace/trace.proto`), which
//! the Perfetto UI and `trace_processor` read natively: a `Trace` is a
//! stream of length-delimited `TracePacket`s, so it is written packet by
//! packet and memory does not grow with the recording. It is several times
//! smaller than the Chrome JSON of the same timeline (names are interned
//! once, timestamps are varints).
//!
//! - One track per process and one per thread (`TrackDescriptor`), and per
//!   thread with OS events an "off-CPU" child track holding a slice per
//!   period.
//! - Instrumentation: a `TrackEvent` slice begin/end per call, on the
//!   timeline the analysis counts (probe cost removed, see [`timeline`]);
//!   calls still open at a thread's end are ended there.
//! - Sampling: an instant per sample on its thread, named by its leaf frame.
//! - The program's marks (`lapse_mark`): an instant on its thread, named by
//!   its text, category `lapse:mark`.
//!
//! Names and categories (modules) are interned (`InternedData`) the first
//! time a packet uses them, on one packet sequence. Timestamps are
//! nanoseconds from the recording's origin, on Perfetto's default clock.

use std::collections::HashMap;
use std::io::{self, Write};

use lapse_analysis::Analysis;
use lapse_data::{DataFile, Method, ThreadKey};

use crate::select::Selection;
use crate::timeline::{self, Step, Timing};
use crate::{ExportError, Format};

/// The one packet sequence lapse writes.
const SEQUENCE: u64 = 1;
const SEQ_INCREMENTAL_STATE_CLEARED: u64 = 1;
const SEQ_NEEDS_INCREMENTAL_STATE: u64 = 2;
const TYPE_SLICE_BEGIN: u64 = 1;
const TYPE_SLICE_END: u64 = 2;
const TYPE_INSTANT: u64 = 3;

/// Protobuf wire encoding of one message, field by field.
#[derive(Default)]
struct Msg(Vec<u8>);

impl Msg {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn uint(&mut self, field: u32, v: u64) -> &mut Self {
        self.varint(u64::from(field) << 3);
        self.varint(v);
        self
    }

    fn bytes(&mut self, field: u32, b: &[u8]) -> &mut Self {
        self.varint((u64::from(field) << 3) | 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
        self
    }

    fn string(&mut self, field: u32, s: &str) -> &mut Self {
        self.bytes(field, s.as_bytes())
    }

    fn msg(&mut self, field: u32, m: &Msg) -> &mut Self {
        self.bytes(field, &m.0)
    }
}

/// Writes `TracePacket`s as the repeated field 1 of a `Trace`.
struct Writer<'a> {
    out: &'a mut dyn Write,
    names: HashMap<String, u64>,
    categories: HashMap<String, u64>,
    first: bool,
}

impl Writer<'_> {
    fn packet(&mut self, mut p: Msg) -> io::Result<()> {
        p.uint(10, SEQUENCE); // trusted_packet_sequence_id
        p.uint(
            13, // sequence_flags
            if std::mem::take(&mut self.first) {
                SEQ_INCREMENTAL_STATE_CLEARED
            } else {
                SEQ_NEEDS_INCREMENTAL_STATE
            },
        );
        let mut framed = Msg::default();
        framed.msg(1, &p);
        self.out.write_all(&framed.0)
    }

    /// The interned id of `s` in `table`; a new one is added to `interned`
    /// (field `field` of `InternedData`) for the packet that uses it.
    fn intern(table: &mut HashMap<String, u64>, interned: &mut Msg, field: u32, s: &str) -> u64 {
        if let Some(&iid) = table.get(s) {
            return iid;
        }
        let iid = table.len() as u64 + 1;
        table.insert(s.to_owned(), iid);
        let mut entry = Msg::default();
        entry.uint(1, iid).string(2, s);
        interned.msg(field, &entry);
        iid
    }

    fn track(
        &mut self,
        uuid: u64,
        parent: Option<u64>,
        desc: (u32, Msg),
        name: Option<&str>,
    ) -> io::Result<()> {
        let mut t = Msg::default();
        t.uint(1, uuid);
        if let Some(n) = name {
            t.string(2, n);
        }
        if let Some(p) = parent {
            t.uint(5, p);
        }
        if !desc.1 .0.is_empty() {
            t.msg(desc.0, &desc.1);
        }
        let mut p = Msg::default();
        p.msg(60, &t); // track_descriptor
        self.packet(p)
    }

    /// A track event at `ts` on `track`: a slice begin (with its name and
    /// category), a slice end, or an instant.
    fn event(
        &mut self,
        ts: u64,
        track: u64,
        kind: u64,
        name: Option<(&str, &str)>,
    ) -> io::Result<()> {
        let mut interned = Msg::default();
        let mut e = Msg::default();
        e.uint(9, kind).uint(11, track); // type, track_uuid
        if let Some((name, category)) = name {
            let n = Self::intern(&mut self.names, &mut interned, 2, name); // event_names
            let c = Self::intern(&mut self.categories, &mut interned, 1, category); // event_categories
            e.uint(3, c).uint(10, n); // category_iids, name_iid
        }
        let mut p = Msg::default();
        p.uint(8, ts).msg(11, &e); // timestamp, track_event
        if !interned.0.is_empty() {
            p.msg(12, &interned); // interned_data
        }
        self.packet(p)
    }
}

/// Track ids, never 0: processes by pid, threads by their (pid, tid)
/// order, each thread's off-CPU track beside it.
struct Tracks(HashMap<ThreadKey, u64>);

impl Tracks {
    fn new(file: &DataFile) -> Tracks {
        let threads = timeline::threads(file);
        Tracks(
            threads
                .iter()
                .enumerate()
                .map(|(i, t)| (t.key(), 2 * i as u64 + 2))
                .collect(),
        )
    }

    fn process(pid: u32) -> u64 {
        (1 << 40) | u64::from(pid)
    }

    fn thread(&self, key: ThreadKey) -> u64 {
        // (a sampled thread with no record gets one from its ids)
        self.0
            .get(&key)
            .copied()
            .unwrap_or((2 << 40) | (u64::from(key.pid) << 24) | u64::from(key.tid))
    }

    fn off_cpu(&self, key: ThreadKey) -> u64 {
        self.thread(key) + 1
    }
}

fn descriptors(
    w: &mut Writer<'_>,
    file: &DataFile,
    tracks: &Tracks,
    sel: &Selection,
) -> io::Result<()> {
    let mut pids: Vec<u32> = sel.threads(file).iter().map(|t| t.pid).collect();
    pids.sort_unstable();
    pids.dedup();
    for pid in pids {
        let mut d = Msg::default();
        d.uint(1, u64::from(pid));
        if let Some(p) = file
            .processes
            .iter()
            .find(|p| p.pid == pid && !p.command.is_empty())
        {
            d.string(6, &p.command.join(" "));
        }
        w.track(Tracks::process(pid), None, (3, d), None)?;
    }
    for t in sel.threads(file) {
        let mut d = Msg::default();
        d.uint(1, u64::from(t.pid))
            .uint(2, timeline::shown_tid(t.key()));
        let name = timeline::shown_name(&t.name, t.key());
        if !name.is_empty() {
            d.string(5, &name);
        }
        let track = tracks.thread(t.key());
        w.track(track, Some(Tracks::process(t.pid)), (4, d), None)?;
        if file.os_events.get(&t.key()).is_some_and(|o| !o.is_empty()) {
            w.track(
                tracks.off_cpu(t.key()),
                Some(track),
                (0, Msg::default()),
                Some(&format!("off-CPU {}", t.tid)),
            )?;
        }
    }
    Ok(())
}

fn instrumentation(
    w: &mut Writer<'_>,
    file: &DataFile,
    tracks: &Tracks,
    timing: Timing,
    sel: &Selection,
) -> io::Result<()> {
    let origin = timeline::origin(file);
    let names: Vec<(&str, &str)> = file
        .functions
        .iter()
        .map(|f| {
            (
                f.name.as_str(),
                file.module(f.module).map_or("", |m| m.name()),
            )
        })
        .collect();
    let mut nesting = timeline::Nesting::default();
    for t in sel.threads(file) {
        let track = tracks.thread(t.key());
        let walked = timeline::walk(
            file,
            &t,
            &mut nesting,
            true,
            timing,
            sel,
            |at, step| -> io::Result<()> {
                let ts = at.at.since(origin);
                match step {
                    Step::Open(f) => w.event(
                        ts,
                        track,
                        TYPE_SLICE_BEGIN,
                        names.get(f.0 as usize).copied(),
                    ),
                    Step::Close(_) => w.event(ts, track, TYPE_SLICE_END, None),
                    Step::End => Ok(()),
                }
            },
        )?;
        let off = tracks.off_cpu(t.key());
        for (from, to) in walked.off_cpu {
            w.event(
                from.since(origin),
                off,
                TYPE_SLICE_BEGIN,
                Some(("off-CPU", "lapse")),
            )?;
            w.event(to.since(origin), off, TYPE_SLICE_END, None)?;
        }
    }
    Ok(())
}

fn sampling(
    w: &mut Writer<'_>,
    file: &DataFile,
    tracks: &Tracks,
    sel: &Selection,
) -> io::Result<()> {
    let origin = timeline::origin(file);
    let mut leaf: HashMap<Option<lapse_data::StackId>, (String, String)> = HashMap::new();
    timeline::for_each_thread(file, sel, |thread, run| -> io::Result<()> {
        for s in run {
            let (name, module) = leaf.entry(s.stack).or_insert_with(|| {
                let key = sel
                    .sample_keys(file, s.stack)
                    .and_then(|mut k| k.pop())
                    .unwrap_or(lapse_analysis::FrameKey::Unknown);
                let module = key
                    .module(file)
                    .and_then(|m| file.module(m))
                    .map_or(String::new(), |m| m.name().to_owned());
                (key.label(file), module)
            });
            w.event(
                s.ts.since(origin),
                tracks.thread(thread),
                TYPE_INSTANT,
                Some((name.as_str(), module.as_str())),
            )?;
        }
        Ok(())
    })
}

pub fn write(
    file: &DataFile,
    analysis: &Analysis,
    sel: &Selection,
    out: &mut dyn Write,
) -> Result<(), ExportError> {
    let mut w = Writer {
        out,
        names: HashMap::new(),
        categories: HashMap::new(),
        first: true,
    };
    let write = ExportError::write(Format::Perfetto);
    let tracks = Tracks::new(file);
    descriptors(&mut w, file, &tracks, sel).map_err(write)?;
    match file.session.method {
        Method::Instrumentation => {
            instrumentation(&mut w, file, &tracks, Timing::of(file, analysis), sel).map_err(write)
        }
        Method::Sampling => sampling(&mut w, file, &tracks, sel).map_err(write),
    }?;
    marks(&mut w, file, &tracks, sel).map_err(write)
}

/// The program's marks: instants on their thread's track, named by their
/// text, category `lapse:mark` (at their recorded time).
fn marks(w: &mut Writer<'_>, file: &DataFile, tracks: &Tracks, sel: &Selection) -> io::Result<()> {
    let origin = timeline::origin(file);
    for m in sel.marks(file) {
        let track = tracks.thread(ThreadKey::new(m.pid, m.tid));
        w.event(
            m.at.since(origin),
            track,
            TYPE_INSTANT,
            Some((&m.text, "lapse:mark")),
        )?;
    }
    Ok(())
}
