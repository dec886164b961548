//! The model every stage speaks: what a recording holds.
//!
//! Times are [`Timestamp`]s on CLOCK_MONOTONIC in nanoseconds; durations are
//! plain `u64` fields whose names end in `_ns`. Addresses in [`FunctionInfo`]
//! and [`FrameInfo`] are module-relative (file offset based virtual address as
//! in the ELF, i.e. the address `addr2line` would take); absolute addresses
//! appear only in [`MappingInfo`].

use serde::{Deserialize, Serialize};

/// A point on CLOCK_MONOTONIC, in nanoseconds.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Timestamp(u64);

impl Timestamp {
    pub const fn from_nanos(ns: u64) -> Self {
        Timestamp(ns)
    }
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    /// Nanoseconds from `earlier` to `self`, zero if `earlier` is later.
    pub const fn since(self, earlier: Timestamp) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

/// Dense index into the session's function table.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct FunctionId(pub u32);

/// Dense index into the session's module table.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct ModuleId(pub u32);

/// Dense index into the session's frame table (sampling: one unwound address).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct FrameId(pub u32);

/// Dense index into the session's stack table (sampling: a prefix tree of frames).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct StackId(pub u32);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Method {
    Instrumentation,
    Sampling,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Instrumentation => "instrumentation",
            Method::Sampling => "sampling",
        }
    }
}

/// The first record of every file: what was recorded, how and where.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionHeader {
    /// The profiled command line (or `["import", FILE]`, `["--pid", N]`).
    pub command: Vec<String>,
    /// Wall-clock time of the start, nanoseconds since the Unix epoch.
    pub start_unix_ns: u64,
    /// CLOCK_MONOTONIC at the start; every [`Timestamp`] is on this clock.
    pub start: Timestamp,
    /// Name of the clock all timestamps are on (`"monotonic"`).
    pub clock: String,
    pub host: String,
    pub method: Method,
    /// Measured cost of one probe (instrumentation), subtracted per interval.
    pub probe_cost_ns: f64,
    /// Kinds of OS events recorded: `switch`, `fault`, `syscall`.
    pub os_events: Vec<String>,
    /// Sampling event name (`cpu-clock`, ...), `None` for instrumentation.
    pub sample_event: Option<String>,
    /// Sampling period in the event's unit (ns for cpu-clock/task-clock).
    pub sample_period: Option<u64>,
    /// True when `sample_period` is in nanoseconds, so `estimated_inclusive_ns` makes sense.
    pub sample_period_is_time: bool,
    pub lapse_version: String,
    /// Free-form remarks shown by `info` and reports (e.g. "ptrace fallback sampler").
    pub notes: Vec<String>,
    /// How the runtime's raw tick counter maps to CLOCK_MONOTONIC (instrumentation).
    pub tsc: Option<TscCalibration>,
}

impl SessionHeader {
    /// A session header for tests and examples (feature `fixtures`): `method`, the command
    /// `./app` started at 0 on the monotonic clock, host `h`, version `t`,
    /// nothing else said (sampling: `cpu-clock` every 1 ms). A case sets
    /// what it needs with struct update syntax.
    #[cfg(any(test, feature = "fixtures"))]
    pub fn example(method: Method) -> SessionHeader {
        let sampling = method == Method::Sampling;
        SessionHeader {
            command: vec!["./app".into()],
            start_unix_ns: 0,
            start: Timestamp::from_nanos(0),
            clock: "monotonic".into(),
            host: "h".into(),
            method,
            probe_cost_ns: 0.0,
            os_events: vec![],
            sample_event: sampling.then(|| "cpu-clock".into()),
            sample_period: sampling.then_some(1_000_000),
            sample_period_is_time: sampling,
            lapse_version: "t".into(),
            notes: vec![],
            tsc: None,
        }
    }

    /// The note that says how many sanitizer-coverage guards fired away
    /// from their function's entry (see [`Self::non_entry_guards`]).
    pub fn non_entry_guards_note(n: u64) -> String {
        format!("{n}{NON_ENTRY_GUARDS}")
    }

    /// Sanitizer-coverage guards that fired away from their function's
    /// entry (code inlined into another function): the recorder did not
    /// count them as calls, and said how many in a note (0: none said).
    pub fn non_entry_guards(&self) -> u64 {
        self.notes
            .iter()
            .find_map(|n| n.strip_suffix(NON_ENTRY_GUARDS)?.parse().ok())
            .unwrap_or(0)
    }
}

impl SessionHeader {
    /// The note that says how much CPU time the recorder itself used (user
    /// and system, all its threads) while recording `events` events.
    pub fn recorder_cpu_note(cpu_ns: u64, events: u64) -> String {
        let per_second = if cpu_ns > 0 {
            let m = events as f64 / cpu_ns as f64 * 1e3;
            // (a short recording's rate still says something: 0.19, not 0)
            let digits = if m < 10.0 { 2 } else { 0 };
            format!(" ({m:.digits$} M events per recorder CPU-second)")
        } else {
            String::new()
        };
        format!("{RECORDER_CPU}{:.3} ms{per_second}", cpu_ns as f64 / 1e6)
    }

    /// The CPU time the recorder itself used while recording (user and
    /// system, all its threads), when the recorder said it in a note.
    pub fn recorder_cpu_ns(&self) -> Option<u64> {
        self.notes.iter().find_map(|n| {
            let ms = n.strip_prefix(RECORDER_CPU)?.split(' ').next()?;
            ms.parse::<f64>().ok().map(|ms| (ms * 1e6).round() as u64)
        })
    }
}

impl SessionHeader {
    /// The start of the note that says what run-time patching did: `patched`
    /// functions of `module` patched at entry, `left_alone` not; the
    /// recorder adds the reasons after it.
    pub fn patching_note(module: &str, patched: u64, left_alone: u64) -> String {
        format!(
            "{PATCHING}{patched} function(s) of {module} patched at entry, {left_alone} left alone"
        )
    }

    /// Functions patched at run time and functions left alone, when the
    /// recorder patched the program (its notes, one a module, see
    /// [`Self::patching_note`]), summed over the modules.
    pub fn patching(&self) -> Option<(u64, u64)> {
        self.notes
            .iter()
            .filter_map(|n| {
                let rest = n.strip_prefix(PATCHING)?;
                let head = &rest[..rest.find(" left alone")?];
                let patched: u64 = head.split(' ').next()?.parse().ok()?;
                let left_alone: u64 = head.rsplit(' ').next()?.parse().ok()?;
                Some((patched, left_alone))
            })
            .reduce(|a, b| (a.0 + b.0, a.1 + b.1))
    }
}

impl SessionHeader {
    /// The note that says which probe source each module's events came
    /// from (module file name -> source, e.g. `app` -> `patched`); files
    /// written before it have none ([`Self::probe_sources`] is then empty).
    pub fn probe_sources_note(sources: &std::collections::BTreeMap<String, String>) -> String {
        let each: Vec<String> = sources.iter().map(|(m, s)| format!("{m}={s}")).collect();
        format!("{PROBE_SOURCES}{}", each.join(", "))
    }

    /// Whether `note` is the one [`Self::probe_sources_note`] makes.
    pub fn is_probe_sources_note(note: &str) -> bool {
        note.starts_with(PROBE_SOURCES)
    }

    /// Module file name -> probe source, as the recorder noted it.
    pub fn probe_sources(&self) -> std::collections::BTreeMap<String, String> {
        let Some(list) = self
            .notes
            .iter()
            .find_map(|n| n.strip_prefix(PROBE_SOURCES))
        else {
            return Default::default();
        };
        // (a source's name holds no '=' or ','; a module's may)
        list.split(", ")
            .filter_map(|e| e.rsplit_once('='))
            .map(|(m, s)| (m.to_owned(), s.to_owned()))
            .collect()
    }
}

/// (the start of the header's note on probe sources)
const PROBE_SOURCES: &str = "probe sources: ";

/// (the start of the header's note on run-time patching)
const PATCHING: &str = "run-time patching: ";

/// (the text before the time, in the header's note)
const RECORDER_CPU: &str = "recorder CPU time: ";

/// (the text after the count, in the header's note)
const NON_ENTRY_GUARDS: &str = " sanitizer-coverage guard(s) fired away from their function's entry (code inlined into another function): not counted as calls";

/// `ns = ref_ns + (ticks - ref_ticks) * 1e9 / ticks_per_sec`: the conversion
/// the recorder applied to the runtime's raw timestamps, kept for the record.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct TscCalibration {
    pub ticks_per_sec: f64,
    pub ref_ticks: u64,
    pub ref_ns: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProcessInfo {
    pub pid: u32,
    pub ppid: Option<u32>,
    pub command: Vec<String>,
    pub start: Option<Timestamp>,
    pub end: Option<Timestamp>,
    /// Exit status as `record` reports it (128 + signal when killed).
    pub exit_status: Option<i32>,
}

impl ProcessInfo {
    /// Takes in what a later (or better-informed) report of the same
    /// process knows: its known fields win, its unknown ones (`None`, an
    /// empty command) keep what was known. The one census rule: the reader
    /// applies it to repeated records, the recorder to its sources.
    pub fn merge(&mut self, later: ProcessInfo) {
        if !later.command.is_empty() {
            self.command = later.command;
        }
        merge_opt(&mut self.ppid, later.ppid);
        merge_opt(&mut self.start, later.start);
        merge_opt(&mut self.end, later.end);
        merge_opt(&mut self.exit_status, later.exit_status);
    }
}

impl ThreadInfo {
    /// Takes in a later report of the same thread: its name wins when
    /// known, and the thread spans from the earliest known start to the
    /// latest known end. (A later thread under the same id, the kernel
    /// having reused it, has a [`ThreadKey::serial`] of its own and is not
    /// merged; a file whose writer did not tell them apart has both under
    /// one key, recorded as one thread that covers both.)
    pub fn merge(&mut self, later: ThreadInfo) {
        if !later.name.is_empty() {
            self.name = later.name;
        }
        self.start = match (self.start, later.start) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.end = self.end.max(later.end);
    }
}

fn merge_opt<T>(into: &mut Option<T>, later: Option<T>) {
    if later.is_some() {
        *into = later;
    }
}

/// One thread of a recording: its process and its thread id, as the kernel
/// numbers them, and which use of that id it is. Ordered by process, then
/// thread id, then serial (the reports' order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ThreadKey {
    pub pid: u32,
    pub tid: u32,
    /// How many threads with this thread id the recording let go before
    /// this one began: 0 for the id's first thread. The kernel hands thread
    /// ids out again (after pid_max of them), and two threads that had one
    /// id at different times are two threads, not one.
    pub serial: u16,
}

impl ThreadKey {
    /// The first thread with this id (serial 0).
    pub const fn new(pid: u32, tid: u32) -> ThreadKey {
        ThreadKey::reused(pid, tid, 0)
    }

    /// Thread id `tid` of `pid` as the thread that had it after `serial`
    /// others.
    pub const fn reused(pid: u32, tid: u32, serial: u16) -> ThreadKey {
        ThreadKey { pid, tid, serial }
    }
}

impl std::fmt::Display for ThreadKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.pid, self.tid)?;
        if self.serial > 0 {
            write!(f, " (serial {})", self.serial)?;
        }
        Ok(())
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThreadInfo {
    pub pid: u32,
    pub tid: u32,
    /// Which thread with this id it is ([`ThreadKey::serial`]). Not part of
    /// the record's own encoding: a serial above 0 travels in a
    /// [`Record::ThreadAgain`] around the record, so files without one read
    /// as before, and a reader older than serials takes the record as one
    /// of the id's first thread.
    #[serde(skip)]
    pub serial: u16,
    pub name: String,
    /// When the thread began; bounds its first (empty-stack) interval.
    pub start: Option<Timestamp>,
    /// When the thread ended; bounds its last interval and closes open calls.
    pub end: Option<Timestamp>,
}

/// `key()` for the records that belong to one thread.
macro_rules! thread_keyed {
    ($($t:ty),*) => {$(
        impl $t {
            /// The thread this belongs to.
            pub fn key(&self) -> ThreadKey {
                ThreadKey::reused(self.pid, self.tid, self.serial)
            }
        }
    )*};
}

thread_keyed!(
    ThreadInfo,
    OsEventBlock,
    InheritedFrames,
    Sample,
    OffCpuPeriod
);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleInfo {
    pub id: ModuleId,
    /// Full path as mapped (or a pseudo name such as `[vdso]`, or a trace's category).
    pub path: String,
    pub build_id: Option<Vec<u8>>,
}

impl ModuleInfo {
    /// The file name part of the path, as reports show it.
    pub fn name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }
}

/// One mapping of a module into a process' address space.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MappingInfo {
    pub pid: u32,
    pub module: ModuleId,
    pub start: u64,
    pub end: u64,
    pub file_offset: u64,
    /// Subtract from an absolute address in this mapping to get the
    /// module-relative address (`start - file_offset` adjusted by the ELF
    /// segment's vaddr; computed by the recorder).
    pub bias: u64,
    pub time: Timestamp,
}

/// A function: identity is (module, name).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionInfo {
    pub id: FunctionId,
    pub module: ModuleId,
    /// Module-relative start address (0 when unknown, e.g. imported traces).
    pub address: u64,
    /// Demangled name; `0x1234` style when no symbol was found.
    pub name: String,
    pub source_file: Option<String>,
    pub line: Option<u32>,
}

/// Instrumentation: one probe firing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    pub ts: Timestamp,
    pub kind: EventKind,
    pub function: FunctionId,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Enter,
    Exit,
    /// The innermost open call of the function is gone without returning:
    /// the recorder found its frame below the stack pointer (a longjmp, an
    /// exception through code without exit probes). It closes there.
    Unwind,
}

/// Why the thread was off the CPU (or otherwise not running its own code).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OsEventKind {
    /// Switched out voluntarily (blocked: sleep, I/O, lock, futex).
    Switch,
    /// Switched out while runnable (preempted).
    Preempt,
    /// A major page fault.
    Fault,
    /// A system call.
    Syscall,
}

/// A period in which the thread was off the CPU: from switch-out to switch-in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsEvent {
    pub from: Timestamp,
    pub to: Timestamp,
    pub kind: OsEventKind,
}

/// A batch of a thread's OS events, in time order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsEventBlock {
    pub pid: u32,
    pub tid: u32,
    /// ([`ThreadInfo::serial`]: carried the same way)
    #[serde(skip)]
    pub serial: u16,
    pub events: Vec<OsEvent>,
}

/// Sampling: one unwound address.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameInfo {
    pub id: FrameId,
    pub module: ModuleId,
    /// Module-relative address of the instruction (for caller frames: the
    /// return address minus one, i.e. inside the call instruction).
    pub address: u64,
    /// Symbolization result, outermost first: the last entry is the function
    /// whose code the address is in; earlier ones are the functions it was
    /// inlined into. Empty until symbols are resolved.
    pub functions: Vec<FrameFunction>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameFunction {
    pub function: FunctionId,
    /// Source location of this frame's current position (for inlined callers: the call site).
    pub source_file: Option<String>,
    pub line: Option<u32>,
}

/// Sampling: one node of the stack prefix tree (outermost frame at the root).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackNode {
    pub id: StackId,
    pub parent: Option<StackId>,
    pub frame: FrameId,
}

/// Sampling: one kept sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    pub pid: u32,
    pub tid: u32,
    /// Which thread with this id ([`ThreadKey::serial`]). Not part of the
    /// sample's encoding: it travels in the sample chunk's header (a chunk
    /// holds the samples of threads of one serial), so files without one
    /// read as before.
    #[serde(skip)]
    pub serial: u16,
    pub ts: Timestamp,
    pub cpu: u32,
    /// The innermost node of the sample's stack; `None` when nothing unwound.
    pub stack: Option<StackId>,
    /// Event count this sample stands for (the period).
    pub weight: u64,
}

/// Sampling with `--off-cpu`: a period a thread spent switched out, with
/// its user stack at the moment it was switched out. The period's length is
/// that stack's off-CPU time (SPEC 2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffCpuPeriod {
    pub pid: u32,
    pub tid: u32,
    /// Which thread with this id ([`ThreadKey::serial`]). Not part of the
    /// period's own encoding: periods of threads with a serial above 0
    /// travel in a [`Record::ThreadAgain`] (one for each serial).
    #[serde(skip)]
    pub serial: u16,
    /// Switched out (the stack is the one it had then) ...
    pub from: Timestamp,
    /// ... and switched back in.
    pub to: Timestamp,
    /// The innermost node of the stack; `None` when nothing unwound.
    pub stack: Option<StackId>,
    /// Switched out while still runnable (preempted), not blocked.
    pub preempted: bool,
}

impl OffCpuPeriod {
    /// Nanoseconds off the CPU.
    pub fn len_ns(&self) -> u64 {
        self.to.since(self.from)
    }
}

/// Counters the recorder knows only at the end; absent when the recording
/// did not finish (the file is then reported as incomplete).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Footer {
    pub end: Timestamp,
    /// Events or samples the kernel or the runtime reported lost.
    pub lost_events: u64,
    pub discarded_samples: u64,
    pub target_exit_status: Option<i32>,
    pub events: u64,
    pub samples: u64,
}

/// Every kind of record a data file holds. Event and sample streams are
/// written through dedicated compact codecs, everything else with postcard.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Record {
    Session(SessionHeader),
    Process(ProcessInfo),
    Thread(ThreadInfo),
    Module(ModuleInfo),
    Mapping(MappingInfo),
    Functions(Vec<FunctionInfo>),
    OsEvents(OsEventBlock),
    Frames(Vec<FrameInfo>),
    Stacks(Vec<StackNode>),
    Footer(Footer),
    /// Sampling, `--off-cpu`: periods off the CPU with their stacks, in the
    /// order they ended. (Last, so that files written before it existed
    /// read as they did; older readers skip it as an unknown record.)
    OffCpu(Vec<OffCpuPeriod>),
    /// A thread whose first events enter calls it inherited (a fork child
    /// starts inside the calls its parent thread had open): those enters
    /// are frames, not calls. (Added after the first format; older files
    /// have none.)
    Inherited(InheritedFrames),
    /// A record of a thread whose id an earlier thread of the recording
    /// had, with the thread's serial (at least 1), which the record's own
    /// encoding leaves out. (Added after the first format; older readers
    /// skip it, and older files have none.)
    ThreadAgain {
        serial: u16,
        record: ThreadRecord,
    },
    /// Instrumentation with `--min-time`: calls too short to be kept as
    /// calls of their own, per function (their time is their caller's).
    /// (Added after the first format; older readers skip it.)
    Dropped(Vec<DroppedCalls>),
    /// The program paused or resumed the recording, or made a mark
    /// (`lapse_pause`, `lapse_resume`, `lapse_mark`, the toggle signal,
    /// `--start-paused`...). (Added after the first format; older readers
    /// skip it, and older files have none.)
    Control(ControlEvent),
}

/// Calls of `function` that `--min-time` left out as too short.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DroppedCalls {
    pub function: FunctionId,
    pub calls: u64,
}

/// What [`Record::Control`] holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ControlEvent {
    /// Nothing is recorded from `at` on, on any thread, until a resume.
    Pause(Toggle),
    /// Recording goes on from `at`.
    Resume(Toggle),
    Mark(Mark),
}

/// Who paused or resumed, and when (pid and tid 0: the recorder itself,
/// for `--start-paused`, `--delay` and `--duration`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Toggle {
    pub pid: u32,
    pub tid: u32,
    pub at: Timestamp,
}

/// A mark the program made: an instant of one thread, with its text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    pub pid: u32,
    pub tid: u32,
    pub at: Timestamp,
    pub text: String,
}

/// A stretch of the session during which the recording was paused:
/// from `from` (included) to `to` (excluded; `Timestamp` max when the
/// session ended paused).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Paused {
    pub from: Timestamp,
    pub to: Timestamp,
}

/// Whether `ts` lies in one of `stretches` (in time order).
pub fn is_paused(stretches: &[Paused], ts: Timestamp) -> bool {
    let i = stretches.partition_point(|p| p.to <= ts);
    stretches.get(i).is_some_and(|p| p.from <= ts)
}

/// The parts of `from..to` outside `stretches` (in time order).
pub fn unpaused_parts(
    stretches: &[Paused],
    from: Timestamp,
    to: Timestamp,
) -> Vec<(Timestamp, Timestamp)> {
    let mut out = Vec::new();
    let mut at = from;
    for p in stretches.iter().skip_while(|p| p.to <= from) {
        if p.from >= to {
            break;
        }
        if p.from > at {
            out.push((at, p.from));
        }
        at = at.max(p.to);
    }
    if at < to {
        out.push((at, to));
    }
    out
}

/// The paused stretches that pauses and resumes in any order make: the
/// first pause while recording starts one, the first resume while paused
/// ends it (a second pause or resume changes nothing), in time order.
pub fn paused_stretches(toggles: &[(Timestamp, bool)]) -> Vec<Paused> {
    let mut sorted = toggles.to_vec();
    // (a resume and a pause at one instant: the resume first, so that
    // nothing is left paused by a tie)
    sorted.sort_by_key(|&(at, pause)| (at, pause));
    let mut out = Vec::new();
    let mut since: Option<Timestamp> = None;
    for (at, pause) in sorted {
        match (since, pause) {
            (None, true) => since = Some(at),
            (Some(from), false) => {
                if at > from {
                    out.push(Paused { from, to: at });
                }
                since = None;
            }
            _ => {}
        }
    }
    if let Some(from) = since {
        out.push(Paused {
            from,
            to: Timestamp::from_nanos(u64::MAX),
        });
    }
    out
}

/// The first `frames` enters of thread (`pid`, `tid`) are inherited frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InheritedFrames {
    pub pid: u32,
    pub tid: u32,
    /// ([`ThreadInfo::serial`]: carried the same way)
    #[serde(skip)]
    pub serial: u16,
    pub frames: u32,
}

/// The records of one thread that [`Record::ThreadAgain`] carries.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ThreadRecord {
    Thread(ThreadInfo),
    OsEvents(OsEventBlock),
    Inherited(InheritedFrames),
    /// Off-CPU periods of threads that all have the serial (sampling).
    /// (Added after the other kinds; a reader older than it skips the
    /// record.)
    OffCpu(Vec<OffCpuPeriod>),
}

impl Record {
    /// How the file holds this record: a record of a thread with a serial
    /// above 0 inside a [`Record::ThreadAgain`], any other as it is. Off-CPU
    /// periods go by their first one's serial: the writer parts periods of
    /// several serials into one record for each
    /// ([`DataWriter::write_record`](crate::DataWriter::write_record)).
    pub fn as_written(&self) -> std::borrow::Cow<'_, Record> {
        use std::borrow::Cow;
        let serial = match self {
            Record::Thread(t) => t.serial,
            Record::OsEvents(b) => b.serial,
            Record::Inherited(i) => i.serial,
            Record::OffCpu(v) => v.first().map_or(0, |p| p.serial),
            _ => 0,
        };
        if serial == 0 {
            return Cow::Borrowed(self);
        }
        let record = match self {
            Record::Thread(t) => ThreadRecord::Thread(t.clone()),
            Record::OsEvents(b) => ThreadRecord::OsEvents(b.clone()),
            Record::Inherited(i) => ThreadRecord::Inherited(*i),
            Record::OffCpu(v) => ThreadRecord::OffCpu(v.clone()),
            _ => return Cow::Borrowed(self),
        };
        Cow::Owned(Record::ThreadAgain { serial, record })
    }
}

impl ThreadRecord {
    /// The record it stands for, its thread's serial set.
    pub fn with_serial(self, serial: u16) -> Record {
        match self {
            ThreadRecord::Thread(mut t) => {
                t.serial = serial;
                Record::Thread(t)
            }
            ThreadRecord::OsEvents(mut b) => {
                b.serial = serial;
                Record::OsEvents(b)
            }
            ThreadRecord::Inherited(mut i) => {
                i.serial = serial;
                Record::Inherited(i)
            }
            ThreadRecord::OffCpu(mut v) => {
                for p in &mut v {
                    p.serial = serial;
                }
                Record::OffCpu(v)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread(name: &str, start: Option<u64>, end: Option<u64>) -> ThreadInfo {
        ThreadInfo {
            pid: 1,
            tid: 7,
            serial: 0,
            name: name.to_owned(),
            start: start.map(Timestamp::from_nanos),
            end: end.map(Timestamp::from_nanos),
        }
    }

    #[test]
    fn records_of_one_key_span_all_it_covers() {
        // Announced while running, then completed when it ended.
        let mut t = thread("", Some(100), None);
        t.merge(thread("worker", Some(100), Some(300)));
        assert_eq!(t, thread("worker", Some(100), Some(300)));
        // A later thread under the same key (a writer that did not tell
        // two uses of the id apart).
        t.merge(thread("other", Some(900), None));
        t.merge(thread("", Some(900), Some(1200)));
        assert_eq!(t, thread("other", Some(100), Some(1200)));
        // What is not known does not erase what is.
        t.merge(thread("", None, None));
        assert_eq!(t, thread("other", Some(100), Some(1200)));
    }

    #[test]
    fn the_recorder_cpu_note_gives_a_short_recordings_rate_too() {
        let note = SessionHeader::recorder_cpu_note;
        assert_eq!(
            note(314_504_000, 60_514),
            "recorder CPU time: 314.504 ms (0.19 M events per recorder CPU-second)"
        );
        assert_eq!(
            note(1_000_000_000, 57_000_000),
            "recorder CPU time: 1000.000 ms (57 M events per recorder CPU-second)"
        );
        assert_eq!(note(0, 5), "recorder CPU time: 0.000 ms");
    }

    #[test]
    fn the_probe_sources_note_gives_its_map_back() {
        let mut s = SessionHeader::example(Method::Instrumentation);
        assert!(s.probe_sources().is_empty(), "older files: none");
        let map: std::collections::BTreeMap<String, String> = [
            ("app", "patched"),
            ("libc.so.6", "libcalls"),
            ("lib=odd.so", "pg"),
        ]
        .map(|(m, s)| (m.to_owned(), s.to_owned()))
        .into();
        let note = SessionHeader::probe_sources_note(&map);
        assert!(SessionHeader::is_probe_sources_note(&note));
        s.notes.push(note);
        assert_eq!(s.probe_sources(), map);
    }

    #[test]
    fn pauses_and_resumes_make_stretches_in_time_order() {
        let t = Timestamp::from_nanos;
        let stretch = |from, to| Paused {
            from: t(from),
            to: t(to),
        };
        // out of order, a second pause and a second resume change nothing,
        // and a pause left open runs to the end
        let toggles = [
            (t(50), false),
            (t(10), true),
            (t(20), true),
            (t(60), false),
            (t(70), true),
        ];
        assert_eq!(
            paused_stretches(&toggles),
            vec![stretch(10, 50), stretch(70, u64::MAX)]
        );
        assert_eq!(paused_stretches(&[(t(5), false)]), vec![]);
        let s = paused_stretches(&toggles);
        assert!(!is_paused(&s, t(9)) && is_paused(&s, t(10)) && is_paused(&s, t(49)));
        assert!(!is_paused(&s, t(50)) && is_paused(&s, t(1000)));
        // 0..100 less [10, 50) and [70, ...): 0..10 and 50..70
        assert_eq!(
            unpaused_parts(&s, t(0), t(100)),
            vec![(t(0), t(10)), (t(50), t(70))]
        );
        assert_eq!(unpaused_parts(&s, t(20), t(30)), vec![]);
        assert_eq!(unpaused_parts(&[], t(20), t(30)), vec![(t(20), t(30))]);
    }

    #[test]
    fn the_patching_note_gives_its_counts_back() {
        let mut s = SessionHeader::example(Method::Instrumentation);
        assert_eq!(s.patching(), None);
        let note = SessionHeader::patching_note("my app", 12, 3);
        s.notes
            .push(format!("{note}; 3 shorter than the 5-byte jump: a, b, c"));
        assert_eq!(s.patching(), Some((12, 3)));
        s.notes
            .push(SessionHeader::patching_note("libz.so.1", 100, 7));
        assert_eq!(s.patching(), Some((112, 10)), "summed over the modules");
    }
}
