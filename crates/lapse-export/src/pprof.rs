//! pprof: a gzipped `profile.proto` message, for `go tool pprof`, Pyroscope,
//! Parca and the like.
//!
//! pprof sums sample values up the stack itself: a function's *flat* value is
//! the sum over samples it is the leaf of, its *cum* value the sum over
//! samples it appears in (counted once however often it recurses). So each
//! call path carries its own exclusive values, and pprof's flat/cum columns
//! are exactly SPEC 2.1's exclusive/inclusive values:
//! - instrumentation: sample types `calls/count`, `elapsed/nanoseconds`,
//!   `application/nanoseconds`; one sample per call path; flat and cum of the
//!   two times are the four times of the report. One location per function.
//! - sampling: `samples/count` (and `cpu/nanoseconds` when the period is a
//!   time, and `off_cpu/nanoseconds` with off-CPU periods, `cpu` staying the
//!   default type); one sample per distinct stack and thread, labelled with
//!   pid, tid and thread name; one location per unwound address, inline
//!   frames as several lines of one location.
//!
//! Addresses: each module gets one mapping, from the recording's mappings
//! when it has them (absolute address = module-relative + bias), otherwise a
//! made-up range of its own. Symbols are already resolved, so the mappings
//! say `has_functions`.

use std::collections::HashMap;
use std::io::Write;

use flate2::write::GzEncoder;
use flate2::Compression;
use lapse_analysis::sample::frames_of;
use lapse_analysis::Analysis;
use lapse_data::{DataFile, FrameId, FunctionId, ModuleId};
use prost::Message;

use crate::pprof_proto::*;
use crate::select::Selection;
use crate::{ExportError, Format, Tree};
use lapse_analysis::tree::FrameKey;
use lapse_analysis::values::TimeValue;

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum LocKey {
    Function(FunctionId),
    Frame(FrameId),
    Unknown,
    /// The frames cut out of a very deep stack.
    Cut,
}

struct Builder<'a> {
    file: &'a DataFile,
    p: Profile,
    strings: HashMap<String, i64>,
    /// Module → (mapping id, bias).
    mappings: HashMap<ModuleId, (u64, u64)>,
    functions: HashMap<FunctionId, u64>,
    locations: HashMap<LocKey, u64>,
    /// The file of each function seen at a sampled position (inline frames included).
    inline_files: HashMap<FunctionId, &'a str>,
}

impl<'a> Builder<'a> {
    fn new(file: &'a DataFile) -> Builder<'a> {
        let mut b = Builder {
            file,
            p: Profile::default(),
            strings: HashMap::new(),
            mappings: HashMap::new(),
            functions: HashMap::new(),
            locations: HashMap::new(),
            inline_files: HashMap::new(),
        };
        for ff in file.frames.iter().flat_map(|fr| &fr.functions) {
            if let Some(src) = ff.source_file.as_deref() {
                b.inline_files.entry(ff.function).or_insert(src);
            }
        }
        b.string("");
        b
    }

    fn string(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.p.string_table.len() as i64;
        self.p.string_table.push(s.to_owned());
        self.strings.insert(s.to_owned(), i);
        i
    }

    fn value_type(&mut self, ty: &str, unit: &str) -> ValueType {
        ValueType {
            r#type: self.string(ty),
            unit: self.string(unit),
        }
    }

    fn mapping(&mut self, module: ModuleId) -> (u64, u64) {
        if let Some(&m) = self.mappings.get(&module) {
            return m;
        }
        let id = self.p.mapping.len() as u64 + 1;
        let mut maps: Vec<_> = self
            .file
            .mappings
            .iter()
            .filter(|m| m.module == module)
            .collect();
        maps.sort_by_key(|m| (m.pid, m.start));
        let (start, limit, offset, bias) = match maps.first() {
            Some(first) => {
                let same_pid = maps.iter().filter(|m| m.pid == first.pid);
                let limit = same_pid.map(|m| m.end).max().unwrap_or(first.end);
                (first.start, limit, first.file_offset, first.bias)
            }
            // No mapping recorded (imported traces): a range of its own.
            None => {
                let start = (u64::from(module.0) + 1) << 40;
                (start, start + (1 << 40), 0, start)
            }
        };
        let info = self.file.module(module);
        let filename = self.string(info.map_or("", |m| m.path.as_str()));
        let build_id = info
            .and_then(|m| m.build_id.as_ref())
            .map(|b| b.iter().map(|x| format!("{x:02x}")).collect::<String>())
            .unwrap_or_default();
        let build_id = self.string(&build_id);
        self.p.mapping.push(Mapping {
            id,
            memory_start: start,
            memory_limit: limit,
            file_offset: offset,
            filename,
            build_id,
            has_functions: true,
            has_filenames: true,
            has_line_numbers: true,
            has_inline_frames: true,
        });
        self.mappings.insert(module, (id, bias));
        (id, bias)
    }

    fn function(&mut self, f: FunctionId) -> u64 {
        if let Some(&id) = self.functions.get(&f) {
            return id;
        }
        let id = self.p.function.len() as u64 + 1;
        let info = self.file.functions.get(f.0 as usize);
        let name = self.string(info.map_or("[unknown]", |i| i.name.as_str()));
        // A function known only as inlined code has no file of its own in
        // the table: a sampled position inside it names its file.
        let source = info
            .and_then(|i| i.source_file.as_deref())
            .or_else(|| self.inline_files.get(&f).copied());
        let filename = self.string(source.unwrap_or(""));
        self.p.function.push(Function {
            id,
            name,
            system_name: name,
            filename,
            start_line: info.and_then(|i| i.line).map_or(0, i64::from),
        });
        self.functions.insert(f, id);
        id
    }

    /// A sample's locations from `path` (outermost first): innermost first,
    /// as pprof lists them, a very deep path keeping its ends (see
    /// `collapsed::cut_middle`).
    fn stack(&mut self, path: &[u64]) -> Vec<u64> {
        let mut ids = if path.len() > crate::collapsed::MAX_PATH {
            let cut = self.location(LocKey::Cut);
            crate::collapsed::cut_middle(path, cut)
        } else {
            path.to_vec()
        };
        ids.reverse();
        ids
    }

    fn location(&mut self, key: LocKey) -> u64 {
        if let Some(&id) = self.locations.get(&key) {
            return id;
        }
        let id = self.p.location.len() as u64 + 1;
        let file = self.file;
        let (mapping_id, address, line) = match key {
            LocKey::Function(f) => {
                let info = file.functions.get(f.0 as usize);
                let (mapping, bias) = info.map_or((0, 0), |i| self.mapping(i.module));
                let address = info.map_or(0, |i| i.address.wrapping_add(bias));
                let line = vec![Line {
                    function_id: self.function(f),
                    line: info.and_then(|i| i.line).map_or(0, i64::from),
                    column: 0,
                }];
                (mapping, address, line)
            }
            LocKey::Frame(fid) => match file.frames.get(fid.0 as usize) {
                Some(frame) => {
                    let (mapping, bias) = self.mapping(frame.module);
                    // pprof lists inline frames innermost first.
                    let line = frame
                        .functions
                        .iter()
                        .rev()
                        .map(|ff| Line {
                            function_id: self.function(ff.function),
                            line: ff.line.map_or(0, i64::from),
                            column: 0,
                        })
                        .collect();
                    (mapping, frame.address.wrapping_add(bias), line)
                }
                None => (0, 0, Vec::new()),
            },
            LocKey::Unknown | LocKey::Cut => {
                let name = self.string(if key == LocKey::Cut {
                    crate::collapsed::CUT
                } else {
                    "[unknown]"
                });
                let fid = self.p.function.len() as u64 + 1;
                self.p.function.push(Function {
                    id: fid,
                    name,
                    system_name: name,
                    ..Function::default()
                });
                (
                    0,
                    0,
                    vec![Line {
                        function_id: fid,
                        ..Line::default()
                    }],
                )
            }
        };
        self.p.location.push(Location {
            id,
            mapping_id,
            address,
            line,
            is_folded: false,
        });
        self.locations.insert(key, id);
        id
    }
}

fn instrumentation(
    b: &mut Builder<'_>,
    analysis: &Analysis,
    sel: &Selection,
) -> Result<(), ExportError> {
    let Tree::Time(tree) = Tree::of(b.file, analysis, sel, Format::Pprof)? else {
        return Ok(());
    };
    b.p.sample_type = vec![
        b.value_type("calls", "count"),
        b.value_type("elapsed", "nanoseconds"),
        b.value_type("application", "nanoseconds"),
    ];
    b.p.default_sample_type = b.string("elapsed");
    b.p.period_type = Some(b.value_type("elapsed", "nanoseconds"));
    b.p.period = 1;
    // The locations of the path to the current node, innermost last.
    let mut path: Vec<u64> = Vec::new();
    for (node, depth) in tree.pre_order() {
        path.truncate(depth);
        path.push(match tree.key(node) {
            Some(FrameKey::Function(f)) => b.location(LocKey::Function(f)),
            _ => b.location(LocKey::Unknown),
        });
        let s = tree.weight(node);
        let elapsed = s.time[TimeValue::ElapsedExclusive].to_nanos();
        let application = s.time[TimeValue::ApplicationExclusive].to_nanos();
        if s.calls == 0 && elapsed == 0 && application == 0 {
            continue;
        }
        let location_id = b.stack(&path);
        b.p.sample.push(Sample {
            location_id,
            value: vec![s.calls as i64, elapsed as i64, application as i64],
            label: Vec::new(),
        });
    }
    Ok(())
}

fn sampling(b: &mut Builder<'_>, analysis: &Analysis, sel: &Selection) {
    let file = b.file;
    let Analysis::Sample(r) = analysis else {
        return;
    };
    let period = file.session.sample_period.unwrap_or(0) as i64;
    let timed = file.session.sample_period_is_time && period > 0;
    let off_cpu = !file.off_cpu.is_empty();
    b.p.sample_type = vec![b.value_type("samples", "count")];
    if timed {
        let cpu = b.value_type("cpu", "nanoseconds");
        b.p.sample_type.push(cpu);
    }
    if off_cpu {
        let off = b.value_type("off_cpu", "nanoseconds");
        b.p.sample_type.push(off);
        // (pprof shows the last type unless told otherwise)
        b.p.default_sample_type = b.string(if timed { "cpu" } else { "samples" });
    }
    let event = file.session.sample_event.as_deref().unwrap_or("samples");
    let unit = if timed { "nanoseconds" } else { "count" };
    b.p.period_type = Some(b.value_type(event, unit));
    b.p.period = period;
    let values = |n: u64, off: u64| {
        let mut v = vec![n as i64];
        if timed {
            v.push(n as i64 * period);
        }
        if off_cpu {
            v.push(off as i64);
        }
        v
    };
    let labels = |b: &mut Builder<'_>, thread: lapse_data::ThreadKey| {
        // (sampling, whose threads are all their ids' first)
        let lapse_data::ThreadKey { pid, tid, .. } = thread;
        let name = file
            .threads
            .iter()
            .find(|t| t.key() == thread)
            .map_or("", |t| t.name.as_str());
        vec![
            Label {
                key: b.string("pid"),
                num: i64::from(pid),
                ..Label::default()
            },
            Label {
                key: b.string("tid"),
                num: i64::from(tid),
                ..Label::default()
            },
            Label {
                key: b.string("thread"),
                str: b.string(name),
                ..Label::default()
            },
        ]
    };
    // Samples and off-CPU time per (stack, thread).
    let mut stacks: std::collections::BTreeMap<_, (u64, u64)> = std::collections::BTreeMap::new();
    for (&k, &n) in &r.analysis.per_stack {
        stacks.entry(k).or_default().0 += n;
    }
    for (&k, &ns) in &r.analysis.off_cpu_per_stack {
        stacks.entry(k).or_default().1 += ns;
    }
    let mut per_thread: HashMap<lapse_data::ThreadKey, (u64, u64)> = HashMap::new();
    for (&(stack, thread), &(n, off)) in &stacks {
        let t = per_thread.entry(thread).or_default();
        t.0 += n;
        t.1 += off;
        let frames = frames_of(&file.stacks, stack);
        let mut kept: Vec<FrameId> = frames
            .iter()
            .filter(|f| (f.0 as usize) < file.frames.len())
            .copied()
            .collect();
        if sel.has_function() {
            // (--function: the path from its outermost frame on, or nothing)
            let Some(at) = kept.iter().position(|&f| sel.frame_matches(file, f)) else {
                continue;
            };
            kept.drain(..at);
        }
        let ids: Vec<u64> = kept.iter().map(|&f| b.location(LocKey::Frame(f))).collect();
        let mut location_id = b.stack(&ids);
        if location_id.is_empty() {
            location_id.push(b.location(LocKey::Unknown));
        }
        let label = labels(b, thread);
        b.p.sample.push(Sample {
            location_id,
            value: values(n, off),
            label,
        });
    }
    // Samples that unwound nothing: the thread's samples not in any stack
    // (no --function frame among them).
    if sel.has_function() {
        return;
    }
    let mut threads: Vec<_> = r.analysis.threads.iter().collect();
    threads.sort_by_key(|(k, _)| **k);
    for (&thread, c) in threads {
        let (n, off) = per_thread.get(&thread).copied().unwrap_or((0, 0));
        let rest = c.inclusive.saturating_sub(n);
        let off_rest = c.off_cpu.inclusive.saturating_sub(off);
        if rest > 0 || off_rest > 0 {
            let location_id = vec![b.location(LocKey::Unknown)];
            let label = labels(b, thread);
            b.p.sample.push(Sample {
                location_id,
                value: values(rest, off_rest),
                label,
            });
        }
    }
}

/// The module of the profiled program (the command's first word), which
/// pprof shows as the profile's "File:" when it is the first mapping.
fn program_module(file: &DataFile) -> Option<ModuleId> {
    let command = file.session.command.first()?;
    let name = command.rsplit('/').next().unwrap_or(command);
    file.modules.iter().find(|m| m.name() == name).map(|m| m.id)
}

/// The profile message, before compression.
pub fn profile(
    file: &DataFile,
    analysis: &Analysis,
    sel: &Selection,
) -> Result<Profile, ExportError> {
    let mut b = Builder::new(file);
    if let Some(m) = program_module(file) {
        b.mapping(m);
    }
    match analysis {
        Analysis::Instr(_) => instrumentation(&mut b, analysis, sel)?,
        Analysis::Sample(_) => sampling(&mut b, analysis, sel),
    }
    b.p.time_nanos = i64::try_from(file.session.start_unix_ns).unwrap_or(0);
    let end = file.end();
    b.p.duration_nanos = end.map_or(0, |e| e.since(file.session.start) as i64);
    let rule = analysis.application_rule().map_or(String::new(), |r| {
        format!(" (application rule: {})", r.name())
    });
    let comment = format!(
        "lapse {}{rule}: {}",
        file.session.method.name(),
        file.session.command.join(" ")
    );
    b.p.comment = vec![b.string(&comment)];
    Ok(b.p)
}

pub fn write(
    file: &DataFile,
    analysis: &Analysis,
    sel: &Selection,
    out: &mut dyn Write,
) -> Result<(), ExportError> {
    let p = profile(file, analysis, sel)?;
    let w = ExportError::write(Format::Pprof);
    let mut gz = GzEncoder::new(out, Compression::default());
    gz.write_all(&p.encode_to_vec()).map_err(w)?;
    gz.finish().map_err(w)?;
    Ok(())
}
