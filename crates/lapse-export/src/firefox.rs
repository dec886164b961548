//! The Firefox Profiler's processed profile format (profiler.firefox.com,
//! "Load a profile from file"), built with `fxprof-processed-profile`, the
//! crate samply writes it with.
//!
//! - Sampling: every kept sample in time order on its thread, with its stack
//!   (inline frames expanded), weight 1, and the period as CPU delta when the
//!   event counts time.
//! - Instrumentation: the Firefox Profiler reads samples, not calls, so
//!   every interval of SPEC 2.1 becomes one sample at the interval's start,
//!   holding the interval's stack and weighing its length in microseconds
//!   (the profile's interval is 1 µs, so the call tree's running times are
//!   real times). Lengths are rounded with a carried remainder, so a thread's
//!   weights add up to its elapsed time. A sample's CPU delta is the
//!   application time of the interval before it (zero when the thread was
//!   off the CPU), which the profiler draws as the CPU usage graph.
//!
//! Every module gets a category of its own, so the flame graph is coloured by
//! library; instrumentation's off-CPU periods are interval markers named
//! `off-CPU` in the marker chart.

use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

use fxprof_processed_profile::{
    CategoryColor, CategoryHandle, CategoryPairHandle, CpuDelta, Frame, FrameFlags, FrameInfo,
    MarkerTiming, Profile, ReferenceTimestamp, SamplingInterval, StackHandle, StaticSchemaMarker,
    StaticSchemaMarkerField, StringHandle, ThreadHandle, Timestamp as FxTimestamp, WeightType,
};
use lapse_data::{DataFile, FunctionId, Method, ModuleId, Timestamp};
use lapse_report::Analysis;

use crate::paths::{label, module_of, sample_keys, FrameKey};
use crate::timeline::{self, Step};
use crate::{ExportError, Format};

const COLORS: [CategoryColor; 8] = [
    CategoryColor::Yellow,
    CategoryColor::Blue,
    CategoryColor::Green,
    CategoryColor::Orange,
    CategoryColor::Purple,
    CategoryColor::LightBlue,
    CategoryColor::Brown,
    CategoryColor::Magenta,
];

/// A period the thread spent off the CPU (an OS event), shown as an
/// interval in the marker chart.
struct OffCpu {
    name: StringHandle,
}

impl StaticSchemaMarker for OffCpu {
    const UNIQUE_MARKER_TYPE_NAME: &'static str = "LapseOffCpu";
    const DESCRIPTION: Option<&'static str> =
        Some("The thread was off the CPU (switched out, blocked or preempted)");
    const CHART_LABEL: Option<&'static str> = Some("{marker.name}");
    const FIELDS: &'static [StaticSchemaMarkerField] = &[];

    fn name(&self, _profile: &mut Profile) -> StringHandle {
        self.name
    }

    fn category(&self, _profile: &mut Profile) -> CategoryHandle {
        CategoryHandle::OTHER
    }

    // The schema has no fields, so the profiler never asks for their values.
    fn string_field_value(&self, _field_index: u32) -> StringHandle {
        self.name
    }

    fn number_field_value(&self, _field_index: u32) -> f64 {
        0.0
    }
}

struct Builder<'a> {
    file: &'a DataFile,
    profile: Profile,
    origin: Timestamp,
    categories: HashMap<Option<ModuleId>, CategoryPairHandle>,
    /// Per thread: frame key → interned frame.
    frames: HashMap<(ThreadHandle, FrameKey), fxprof_processed_profile::FrameHandle>,
}

impl<'a> Builder<'a> {
    fn new(file: &'a DataFile, interval: SamplingInterval) -> Builder<'a> {
        let reference = ReferenceTimestamp::from_duration_since_unix_epoch(Duration::from_nanos(
            file.session.start_unix_ns,
        ));
        let product = file.session.command.join(" ");
        let mut profile = Profile::new(&product, reference, interval);
        profile.set_product(&format!(
            "lapse ({}): {product}",
            file.session.method.name()
        ));
        profile.set_os_name("Linux");
        profile.set_symbolicated(true);
        Builder {
            file,
            profile,
            origin: file.session.start,
            categories: HashMap::new(),
            frames: HashMap::new(),
        }
    }

    /// Timestamps are relative to the session start (the reference).
    fn at(&self, ts: Timestamp) -> FxTimestamp {
        FxTimestamp::from_nanos_since_reference(ts.since(self.origin))
    }

    fn category(&mut self, module: Option<ModuleId>) -> CategoryPairHandle {
        if let Some(&c) = self.categories.get(&module) {
            return c;
        }
        let name = module
            .and_then(|m| self.file.module(m))
            .map_or("Other".to_owned(), |m| m.name().to_owned());
        let color = COLORS[self.categories.len() % COLORS.len()];
        let c: CategoryPairHandle = self.profile.add_category(&name, color).into();
        self.categories.insert(module, c);
        c
    }

    /// Adds `threads` (and their processes) to the profile.
    fn threads(
        &mut self,
        threads: Vec<lapse_data::ThreadInfo>,
    ) -> Vec<(lapse_data::ThreadInfo, ThreadHandle)> {
        let mut processes = HashMap::new();
        let mut out = Vec::new();
        for t in threads {
            let start = self.at(t.start.unwrap_or(self.origin));
            let process = *processes.entry(t.pid).or_insert_with(|| {
                let name = self
                    .file
                    .processes
                    .iter()
                    .find(|p| p.pid == t.pid)
                    .map(|p| p.command.join(" "))
                    .filter(|c| !c.is_empty())
                    .unwrap_or_else(|| format!("pid {}", t.pid));
                self.profile.add_process(&name, t.pid, start)
            });
            let handle = self
                .profile
                .add_thread(process, t.tid, start, t.tid == t.pid);
            let name = if t.name.is_empty() {
                format!("thread {}", t.tid)
            } else {
                t.name.clone()
            };
            self.profile.set_thread_name(handle, &name);
            if let Some(end) = t.end {
                let end = self.at(end);
                self.profile.set_thread_end_time(handle, end);
            }
            out.push((t, handle));
        }
        out
    }

    fn stack(
        &mut self,
        thread: ThreadHandle,
        parent: Option<StackHandle>,
        key: FrameKey,
    ) -> StackHandle {
        let frame = match self.frames.get(&(thread, key)) {
            Some(&f) => f,
            None => {
                let category_pair = self.category(module_of(self.file, key));
                let name = self.profile.intern_string(&label(self.file, key));
                let f = self.profile.intern_frame(
                    thread,
                    FrameInfo {
                        frame: Frame::Label(name),
                        category_pair,
                        flags: FrameFlags::empty(),
                    },
                );
                self.frames.insert((thread, key), f);
                f
            }
        };
        self.profile.intern_stack(thread, parent, frame)
    }
}

fn instrumentation(b: &mut Builder<'_>) {
    let file = b.file;
    for (t, thread) in b.threads(timeline::threads(file)) {
        b.profile
            .set_thread_samples_weight_type(thread, WeightType::Samples);
        let off = timeline::off_cpu(file, t.pid, t.tid);
        let name = b.profile.intern_string("off-CPU");
        for &(from, to) in &off {
            let timing = MarkerTiming::Interval(b.at(from), b.at(to));
            b.profile.add_marker(thread, timing, OffCpu { name });
        }
        let mut next_off = 0;
        let mut stack: Vec<(FunctionId, StackHandle)> = Vec::new();
        let mut last: Option<Timestamp> = t.start;
        let mut carried_ns = 0u64;
        let mut cpu_before = 0u64;
        // Closes the interval ending at `ts` with the stack it had.
        let mut interval = |b: &mut Builder<'_>, stack: &[(FunctionId, StackHandle)], ts| {
            let Some(from) = last else {
                last = Some(ts);
                return;
            };
            let len = ts.since(from);
            last = Some(ts.max(from));
            if len == 0 {
                return;
            }
            while off.get(next_off).is_some_and(|p| p.1 <= from) {
                next_off += 1;
            }
            let has_os_event = off.get(next_off).is_some_and(|p| p.0 < ts);
            let before = carried_ns / 1000;
            carried_ns += len;
            let weight = i32::try_from(carried_ns / 1000 - before).unwrap_or(i32::MAX);
            let top = stack.last().map(|s| s.1);
            let at = b.at(from);
            b.profile
                .add_sample(thread, at, top, CpuDelta::from_nanos(cpu_before), weight);
            cpu_before = if has_os_event { 0 } else { len };
        };
        let _ = timeline::walk(file, &t, true, |ts, step| -> Result<(), ()> {
            interval(b, &stack, ts);
            match step {
                Step::Open(f) => {
                    let parent = stack.last().map(|s| s.1);
                    let handle = b.stack(thread, parent, FrameKey::Function(f));
                    stack.push((f, handle));
                }
                Step::Close(_) => {
                    stack.pop();
                }
            }
            Ok(())
        });
        if let Some(end) = t.end {
            interval(b, &stack, end);
        }
    }
}

fn sampling(b: &mut Builder<'_>) {
    let file = b.file;
    let samples = timeline::samples(file);
    // Threads with a record, and any that only appear in samples.
    let mut threads = timeline::threads(file);
    for (pid, tid, _) in timeline::samples_by_thread(&samples) {
        if !threads.iter().any(|t| t.pid == pid && t.tid == tid) {
            threads.push(lapse_data::ThreadInfo {
                pid,
                tid,
                name: String::new(),
                start: None,
                end: None,
            });
        }
    }
    let handles: HashMap<(u32, u32), ThreadHandle> = b
        .threads(threads)
        .into_iter()
        .map(|(t, h)| ((t.pid, t.tid), h))
        .collect();
    let cpu = match (
        file.session.sample_period_is_time,
        file.session.sample_period,
    ) {
        (true, Some(p)) => p,
        _ => 0,
    };
    let mut stacks: HashMap<(ThreadHandle, Option<lapse_data::StackId>), StackHandle> =
        HashMap::new();
    for s in &samples {
        let thread = match handles.get(&(s.pid, s.tid)) {
            Some(&h) => h,
            None => continue,
        };
        let stack = match stacks.get(&(thread, s.stack)) {
            Some(&h) => h,
            None => {
                let mut parent = None;
                for key in sample_keys(file, s.stack) {
                    parent = Some(b.stack(thread, parent, key));
                }
                let Some(h) = parent else { continue };
                stacks.insert((thread, s.stack), h);
                h
            }
        };
        let at = b.at(s.ts);
        b.profile
            .add_sample(thread, at, Some(stack), CpuDelta::from_nanos(cpu), 1);
    }
}

pub fn write(
    file: &DataFile,
    _analysis: &Analysis,
    out: &mut dyn Write,
) -> Result<(), ExportError> {
    let interval = match file.session.method {
        Method::Instrumentation => SamplingInterval::from_nanos(1000),
        Method::Sampling => match (
            file.session.sample_period_is_time,
            file.session.sample_period,
        ) {
            (true, Some(p)) if p > 0 => SamplingInterval::from_nanos(p),
            _ => SamplingInterval::from_millis(1),
        },
    };
    let mut b = Builder::new(file, interval);
    match file.session.method {
        Method::Instrumentation => instrumentation(&mut b),
        Method::Sampling => sampling(&mut b),
    }
    serde_json::to_writer(&mut *out, &b.profile)
        .map_err(|e| ExportError::write(Format::Firefox)(e.into()))
}
