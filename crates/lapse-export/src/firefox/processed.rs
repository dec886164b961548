//! The Firefox Profiler's processed profile format, written as a stream.
//!
//! Written by hand rather than with `fxprof-processed-profile` because that
//! crate keeps every sample of every thread in memory until the end (about
//! 35 bytes per sample: 750 MB for a 20 M-event recording). Here memory
//! grows only with what the profile's small tables hold (distinct stacks,
//! frames, functions, strings, categories, one thread at a time):
//!
//! - a thread's `samples.stack` column goes straight to the output as each
//!   sample arrives (stack indexes are final as soon as they are made);
//! - its `timeDeltas`, `weight` and `threadCPUDelta` columns are spooled, as
//!   JSON text, to three unnamed temporary files and copied to the output
//!   when the thread ends, followed by its small tables;
//! - `meta` comes after `threads`, once every category is known (the
//!   profiler parses the whole document before reading it, so key order does
//!   not matter).
//!
//! The document is the one fxprof-processed-profile 0.8 writes (processed
//! version 55, `meta.version` 24, the same columns in every table), which
//! profiler.firefox.com loads as is; `tests/firefox.rs` compares the two.
//! Only labelled frames are written (lapse resolves symbols itself): no
//! libraries, resources or native symbols.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Seek, Write};

use lapse_data::{DataFile, ModuleId};

/// Colours given to module categories in turn.
const COLORS: [&str; 8] = [
    "yellow",
    "blue",
    "green",
    "orange",
    "purple",
    "lightblue",
    "brown",
    "magenta",
];

/// The marker type of the program's marks (`lapse_mark`).
const MARK_SCHEMA: &str = r#"{"name":"LapseMark","display":["marker-chart","marker-table","timeline-overview"],"chartLabel":"{marker.name}","tableLabel":"{marker.name}","description":"A mark the program made (lapse_mark)","fields":[]}"#;

/// The marker type of off-CPU periods.
const OFF_CPU_SCHEMA: &str = r#"{"name":"LapseOffCpu","display":["marker-chart","marker-table"],"chartLabel":"{marker.name}","description":"The thread was off the CPU (switched out, blocked or preempted)","fields":[]}"#;

/// Nanoseconds since the profile's reference (the session start).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ProfileNs(pub u64);

impl ProfileNs {
    /// The profile's unit: milliseconds, as a float.
    fn ms(self) -> f64 {
        self.0 as f64 / 1_000_000.0
    }
}

/// What the document's `meta` says besides the categories.
pub struct Meta {
    pub product: String,
    /// The sampling interval, in nanoseconds.
    pub interval_ns: u64,
    pub start_unix_ns: u64,
}

/// A thread as the profiler lists it.
pub struct ThreadHeader {
    pub pid: u32,
    pub tid: u32,
    pub name: String,
    pub process_name: String,
    pub process_start: ProfileNs,
    pub start: ProfileNs,
    pub end: Option<ProfileNs>,
}

impl ThreadHeader {
    fn is_main(&self) -> bool {
        self.pid == self.tid
    }
}

/// The order the profiler's own writer lists threads in: processes by start
/// and pid; within one, the main thread first, then by start, name, tid.
pub fn thread_order(a: &ThreadHeader, b: &ThreadHeader) -> std::cmp::Ordering {
    let key = |t: &ThreadHeader| (t.process_start, t.pid, !t.is_main(), t.start, t.tid);
    let (ka, kb) = (key(a), key(b));
    (ka.0, ka.1, ka.2, ka.3)
        .cmp(&(kb.0, kb.1, kb.2, kb.3))
        .then_with(|| a.name.cmp(&b.name))
        .then(ka.4.cmp(&kb.4))
}

/// Milliseconds as the profiler's own writer computes them from a duration.
fn duration_ms(ns: u64) -> f64 {
    std::time::Duration::from_nanos(ns).as_secs_f64() * 1000.0
}

/// Writes `v` as JSON (numbers and strings exactly as serde_json does).
fn json<T: serde::Serialize + ?Sized>(out: &mut impl Write, v: &T) -> io::Result<()> {
    serde_json::to_writer(out, v).map_err(io::Error::from)
}

/// A column spooled to an unnamed temporary file, as comma-separated JSON.
struct Spool {
    file: BufWriter<File>,
    empty: bool,
}

impl Spool {
    fn new() -> io::Result<Spool> {
        Ok(Spool {
            file: BufWriter::with_capacity(1 << 16, tempfile::tempfile()?),
            empty: true,
        })
    }

    fn push<T: serde::Serialize>(&mut self, v: T) -> io::Result<()> {
        if !self.empty {
            self.file.write_all(b",")?;
        }
        self.empty = false;
        json(&mut self.file, &v)
    }

    /// Writes `"key":[…]` to `out` and empties the spool for the next thread.
    fn drain(&mut self, key: &str, out: &mut impl Write) -> io::Result<()> {
        write!(out, "\"{key}\":[")?;
        self.file.flush()?;
        let file = self.file.get_mut();
        file.rewind()?;
        io::copy(file, out)?;
        file.set_len(0)?;
        file.rewind()?;
        self.empty = true;
        out.write_all(b"]")
    }
}

/// The whole document being written: `{"threads":[…],"meta":{…},…}`.
pub struct Document<'a> {
    out: BufWriter<&'a mut dyn Write>,
    /// (name, colour); index 0 is the profiler's default category.
    categories: Vec<(String, &'static str)>,
    category_of: HashMap<ModuleId, u32>,
    threads: usize,
    markers: bool,
    /// A thread has marks (`lapse_mark`): their marker type is declared.
    marks: bool,
    spools: [Spool; 3],
}

impl<'a> Document<'a> {
    pub fn new(out: &'a mut dyn Write) -> io::Result<Document<'a>> {
        let mut out = BufWriter::with_capacity(1 << 16, out);
        out.write_all(b"{\"threads\":[")?;
        Ok(Document {
            out,
            categories: vec![("Other".into(), "grey")],
            category_of: HashMap::new(),
            threads: 0,
            markers: false,
            marks: false,
            spools: [Spool::new()?, Spool::new()?, Spool::new()?],
        })
    }

    /// The category of a module: one per module, in order of first use; no
    /// module is the default category.
    fn category(&mut self, file: &DataFile, module: Option<ModuleId>) -> u32 {
        let Some(module) = module else { return 0 };
        if let Some(&c) = self.category_of.get(&module) {
            return c;
        }
        let name = file
            .module(module)
            .map_or_else(|| format!("module #{}", module.0), |m| m.name().to_owned());
        let color = COLORS[(self.categories.len() - 1) % COLORS.len()];
        let c = self.categories.len() as u32;
        self.categories.push((name, color));
        self.category_of.insert(module, c);
        c
    }

    /// Starts a thread; its samples follow, then [`ThreadWriter::finish`].
    pub fn thread(&mut self, header: ThreadHeader) -> io::Result<ThreadWriter> {
        if self.threads > 0 {
            self.out.write_all(b",")?;
        }
        self.threads += 1;
        self.out
            .write_all(b"{\"samples\":{\"weightType\":\"samples\",\"stack\":[")?;
        Ok(ThreadWriter {
            header,
            strings: Vec::new(),
            string_index: HashMap::new(),
            funcs: Vec::new(),
            func_index: HashMap::new(),
            frames: Vec::new(),
            frame_index: HashMap::new(),
            stacks: Vec::new(),
            stack_index: HashMap::new(),
            samples: 0,
            last: 0,
        })
    }

    /// Ends the document with its `meta` and the empty global tables.
    pub fn finish(mut self, meta: &Meta) -> io::Result<()> {
        let o = &mut self.out;
        o.write_all(b"],\"meta\":{\"categories\":[")?;
        for (i, (name, color)) in self.categories.iter().enumerate() {
            if i > 0 {
                o.write_all(b",")?;
            }
            o.write_all(b"{\"name\":")?;
            json(o, name)?;
            write!(o, ",\"color\":\"{color}\",\"subcategories\":[\"Other\"]}}")?;
        }
        o.write_all(b"],\"debug\":false,\"extensions\":{\"baseURL\":[],\"id\":[],\"length\":0,\"name\":[]},\"interval\":")?;
        json(o, &duration_ms(meta.interval_ns))?;
        o.write_all(b",\"preprocessedProfileVersion\":55,\"processType\":0,\"product\":")?;
        json(o, &meta.product)?;
        o.write_all(b",\"oscpu\":\"Linux\",\"sampleUnits\":{\"eventDelay\":\"ms\",\"threadCPUDelta\":\"\xc2\xb5s\",\"time\":\"ms\"},\"startTime\":")?;
        json(o, &duration_ms(meta.start_unix_ns))?;
        o.write_all(b",\"symbolicated\":true,\"pausedRanges\":[],\"version\":24,\"usesOnlyOneStackType\":true,\"sourceCodeIsNotOnSearchfox\":true,\"markerSchema\":[")?;
        if self.markers {
            o.write_all(OFF_CPU_SCHEMA.as_bytes())?;
        }
        if self.marks {
            if self.markers {
                o.write_all(b",")?;
            }
            o.write_all(MARK_SCHEMA.as_bytes())?;
        }
        o.write_all(b"]},\"libs\":[],\"pages\":[],\"profilerOverhead\":[],\"counters\":[]}")?;
        o.flush()
    }
}

/// One thread's small tables, built while its samples stream out.
pub struct ThreadWriter {
    header: ThreadHeader,
    strings: Vec<String>,
    string_index: HashMap<String, u32>,
    /// Function → its name in `strings` (functions are interned by name).
    funcs: Vec<u32>,
    func_index: HashMap<u32, u32>,
    /// Frame → (function, category).
    frames: Vec<(u32, u32)>,
    frame_index: HashMap<(u32, u32), u32>,
    /// Stack → (prefix, frame).
    stacks: Vec<(Option<u32>, u32)>,
    stack_index: HashMap<(Option<u32>, u32), u32>,
    samples: u64,
    /// Time of the last sample, for `timeDeltas`.
    last: u64,
}

impl ThreadWriter {
    /// The index of `s` in the thread's string table.
    pub fn string(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.string_index.get(s) {
            return i;
        }
        let i = self.strings.len() as u32;
        self.strings.push(s.to_owned());
        self.string_index.insert(s.to_owned(), i);
        i
    }

    /// The frame named `label` in `module`'s category.
    pub fn frame(
        &mut self,
        doc: &mut Document<'_>,
        file: &DataFile,
        label: &str,
        module: Option<ModuleId>,
    ) -> u32 {
        let name = self.string(label);
        let funcs = &mut self.funcs;
        let func = *self.func_index.entry(name).or_insert_with(|| {
            funcs.push(name);
            funcs.len() as u32 - 1
        });
        let category = doc.category(file, module);
        let frames = &mut self.frames;
        *self.frame_index.entry((func, category)).or_insert_with(|| {
            frames.push((func, category));
            frames.len() as u32 - 1
        })
    }

    /// The stack made of `prefix` with `frame` on top.
    pub fn stack(&mut self, prefix: Option<u32>, frame: u32) -> u32 {
        let stacks = &mut self.stacks;
        *self.stack_index.entry((prefix, frame)).or_insert_with(|| {
            stacks.push((prefix, frame));
            stacks.len() as u32 - 1
        })
    }

    /// Adds a sample; samples come in time order.
    pub fn sample(
        &mut self,
        doc: &mut Document<'_>,
        at: ProfileNs,
        stack: Option<u32>,
        cpu_delta_ns: u64,
        weight: i32,
    ) -> io::Result<()> {
        if self.samples > 0 {
            doc.out.write_all(b",")?;
        }
        match stack {
            Some(s) => json(&mut doc.out, &s)?,
            None => doc.out.write_all(b"null")?,
        }
        let delta = at.0.saturating_sub(self.last);
        self.last = self.last.max(at.0);
        let [time, w, cpu] = &mut doc.spools;
        time.push(ProfileNs(delta).ms())?;
        w.push(weight)?;
        cpu.push(cpu_delta_ns / 1000)?;
        self.samples += 1;
        Ok(())
    }

    /// Ends the thread: the spooled columns, then the markers (interval
    /// markers named `marker_name`, of the off-CPU type, and the program's
    /// marks as instants named by their text) and the tables.
    pub fn finish(
        mut self,
        doc: &mut Document<'_>,
        marker_name: &str,
        markers: &[(ProfileNs, ProfileNs)],
        marks: &[(ProfileNs, &str)],
    ) -> io::Result<()> {
        let name = if markers.is_empty() {
            0
        } else {
            doc.markers = true;
            self.string(marker_name)
        };
        if !marks.is_empty() {
            doc.marks = true;
        }
        let mark_names: Vec<u32> = marks.iter().map(|m| self.string(m.1)).collect();
        let n = self.samples;
        let o = &mut doc.out;
        o.write_all(b"],")?;
        let [time, w, cpu] = &mut doc.spools;
        time.drain("timeDeltas", o)?;
        o.write_all(b",")?;
        w.drain("weight", o)?;
        o.write_all(b",")?;
        cpu.drain("threadCPUDelta", o)?;
        write!(o, ",\"length\":{n}}}")?;

        let m = markers.len() + marks.len();
        write!(o, ",\"markers\":{{\"length\":{m},\"category\":")?;
        repeat(o, "0", m)?;
        o.write_all(b",\"data\":")?;
        let data = std::iter::repeat_n("{\"type\":\"LapseOffCpu\"}", markers.len())
            .chain(std::iter::repeat_n("{\"type\":\"LapseMark\"}", marks.len()));
        raw_list(o, data)?;
        o.write_all(b",\"endTime\":")?;
        list(
            o,
            markers
                .iter()
                .map(|p| Some(p.1.ms()))
                .chain(marks.iter().map(|_| None)),
        )?;
        o.write_all(b",\"name\":")?;
        list(
            o,
            std::iter::repeat_n(name, markers.len()).chain(mark_names.iter().copied()),
        )?;
        o.write_all(b",\"phase\":")?;
        list(
            o,
            std::iter::repeat_n(1u8, markers.len()).chain(std::iter::repeat_n(0u8, marks.len())),
        )?;
        o.write_all(b",\"startTime\":")?;
        list(
            o,
            markers
                .iter()
                .map(|p| p.0.ms())
                .chain(marks.iter().map(|m| m.0.ms())),
        )?;

        let f = self.frames.len();
        write!(o, "}},\"frameTable\":{{\"length\":{f},\"address\":")?;
        repeat(o, "-1", f)?;
        o.write_all(b",\"inlineDepth\":")?;
        repeat(o, "0", f)?;
        o.write_all(b",\"category\":")?;
        list(o, self.frames.iter().map(|x| x.1))?;
        o.write_all(b",\"subcategory\":")?;
        repeat(o, "0", f)?;
        o.write_all(b",\"func\":")?;
        list(o, self.frames.iter().map(|x| x.0))?;
        for (key, value) in [
            ("nativeSymbol", "null"),
            ("innerWindowID", "0"),
            ("line", "null"),
            ("column", "null"),
        ] {
            write!(o, ",\"{key}\":")?;
            repeat(o, value, f)?;
        }

        let u = self.funcs.len();
        write!(o, "}},\"funcTable\":{{\"length\":{u},\"name\":")?;
        list(o, self.funcs.iter().copied())?;
        for (key, value) in [
            ("isJS", "false"),
            ("relevantForJS", "false"),
            ("resource", "-1"),
            ("fileName", "null"),
            ("lineNumber", "null"),
            ("columnNumber", "null"),
        ] {
            write!(o, ",\"{key}\":")?;
            repeat(o, value, u)?;
        }

        let s = self.stacks.len();
        write!(o, "}},\"stackTable\":{{\"length\":{s},\"prefix\":")?;
        list(o, self.stacks.iter().map(|x| x.0))?;
        o.write_all(b",\"frame\":")?;
        list(o, self.stacks.iter().map(|x| x.1))?;
        o.write_all(b"},\"stringArray\":")?;
        list(o, self.strings.iter())?;

        let h = &self.header;
        let name = if h.is_main() {
            &h.process_name
        } else {
            &h.name
        };
        o.write_all(b",\"resourceTable\":{\"length\":0,\"lib\":[],\"name\":[],\"host\":[],\"type\":[]},\"nativeSymbols\":{\"length\":0,\"address\":[],\"functionSize\":[],\"libIndex\":[],\"name\":[]},\"name\":")?;
        json(o, name)?;
        write!(
            o,
            ",\"isMainThread\":{},\"pausedRanges\":[],\"pid\":",
            h.is_main()
        )?;
        json(o, &h.pid.to_string())?;
        o.write_all(b",\"processName\":")?;
        json(o, &h.process_name)?;
        o.write_all(b",\"processShutdownTime\":null,\"processStartupTime\":")?;
        json(o, &h.process_start.ms())?;
        o.write_all(b",\"processType\":\"default\",\"registerTime\":")?;
        json(o, &h.start.ms())?;
        o.write_all(b",\"tid\":")?;
        json(o, &h.tid.to_string())?;
        o.write_all(b",\"unregisterTime\":")?;
        json(o, &h.end.map(ProfileNs::ms))?;
        o.write_all(b",\"showMarkersInTimeline\":false}")
    }
}

/// `[v,v,…]`, `n` times the same JSON text.
/// A JSON list of items that are JSON text already.
fn raw_list<'a>(o: &mut impl Write, items: impl IntoIterator<Item = &'a str>) -> io::Result<()> {
    o.write_all(b"[")?;
    for (i, v) in items.into_iter().enumerate() {
        if i > 0 {
            o.write_all(b",")?;
        }
        o.write_all(v.as_bytes())?;
    }
    o.write_all(b"]")
}

fn repeat(o: &mut impl Write, v: &str, n: usize) -> io::Result<()> {
    o.write_all(b"[")?;
    for i in 0..n {
        if i > 0 {
            o.write_all(b",")?;
        }
        o.write_all(v.as_bytes())?;
    }
    o.write_all(b"]")
}

/// A JSON array of `items`.
fn list<T: serde::Serialize>(
    o: &mut impl Write,
    items: impl IntoIterator<Item = T>,
) -> io::Result<()> {
    o.write_all(b"[")?;
    for (i, v) in items.into_iter().enumerate() {
        if i > 0 {
            o.write_all(b",")?;
        }
        json(o, &v)?;
    }
    o.write_all(b"]")
}
