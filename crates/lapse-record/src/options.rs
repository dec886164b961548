//! What `record` is asked to do and what it gives back: the options
//! (each settled where it is built: a [`SampleRate`] that exists is valid),
//! the progress it counts, and the outcome.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::{Method, Notices};

/// Which collection method `record` uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MethodChoice {
    /// Instrumentation when the target carries probes, sampling otherwise.
    Auto,
    Instrument,
    Sample,
}

impl MethodChoice {
    pub const ALL: [(&'static str, MethodChoice); 3] = [
        ("auto", MethodChoice::Auto),
        ("instrument", MethodChoice::Instrument),
        ("sample", MethodChoice::Sample),
    ];
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallGraph {
    Dwarf,
    FramePointer,
}

impl CallGraph {
    pub const ALL: [(&'static str, CallGraph); 2] =
        [("dwarf", CallGraph::Dwarf), ("fp", CallGraph::FramePointer)];
}

/// The OS events instrumentation records besides context switches
/// (`--os-events`; switches are always on).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OsEventSource {
    /// Context switches: when the thread was off the CPU.
    Switch,
    /// Major page faults.
    Fault,
    /// System calls (raw_syscalls tracepoints).
    Syscall,
}

impl OsEventSource {
    pub const ALL: [(&'static str, OsEventSource); 3] = [
        ("switch", OsEventSource::Switch),
        ("fault", OsEventSource::Fault),
        ("syscall", OsEventSource::Syscall),
    ];

    /// Its name on the command line and in the session header.
    pub fn name(self) -> &'static str {
        match self {
            OsEventSource::Switch => "switch",
            OsEventSource::Fault => "fault",
            OsEventSource::Syscall => "syscall",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Launch this command line.
    Command(Vec<String>),
    /// Attach to a running process (for `duration`, or until Ctrl-C).
    Pid {
        pid: u32,
        duration: Option<Duration>,
    },
}

/// Everything `lapse record` was asked to do.
#[derive(Clone, Debug)]
pub struct RecordOptions {
    pub method: MethodChoice,
    /// How often sampling samples.
    pub rate: SampleRate,
    /// Sampling event name (`cpu-clock` by default).
    pub event: Option<String>,
    pub call_graph: CallGraph,
    /// OS event kinds: `switch` (always), `fault`, `syscall`.
    pub os_events: Vec<OsEventSource>,
    /// Sampling: also capture each thread's stack when it is switched out,
    /// and the time until it runs again (`--off-cpu`).
    pub off_cpu: bool,
    pub inherit: bool,
    /// Instrumentation: calls from instrumented modules into other shared
    /// libraries are functions of their library (`--no-libcalls`: not traced).
    pub libcalls: bool,
    /// Instrumentation of a program without probes: which of its functions
    /// are patched at run time (`--patch`, `--no-patch`).
    pub patch: PatchSelection,
    /// Instrumentation: how many bytes of event buffers each process may
    /// fill while the recorder is behind before its threads wait
    /// (`--buffer-size`; `None`: the runtime's default, 16 MiB).
    pub buffer_size: Option<BufferSize>,
    /// Instrumentation: what the runtime leaves out (`--filter`,
    /// `--exclude`, `--depth`, `--min-time`).
    pub filters: crate::RecordFilters,
    /// When the recording is paused (`--start-paused`, `--delay`,
    /// `--duration`, `--signal`).
    pub control: ControlOptions,
    pub output: PathBuf,
    pub target: Target,
    /// Counts the symbol resolution done once the target has exited, for a
    /// progress display; `None` when nobody watches.
    pub symbol_progress: Option<Arc<SymbolProgress>>,
    /// Where what the recorder has to say goes (it prints nothing itself).
    pub notices: Notices,
}

/// When the recording records: the program's own `lapse_pause()` and
/// `lapse_resume()` aside, these pause it from outside.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ControlOptions {
    /// Start paused: nothing is recorded until the program resumes (or the
    /// toggle signal comes).
    pub start_paused: bool,
    /// Paused for this long from the start (`--delay`).
    pub delay: Option<Duration>,
    /// Paused from this long after the start on (`--duration`); the target
    /// runs on.
    pub duration: Option<Duration>,
    /// Each delivery of this signal to a process of the target toggles
    /// recording; the program never sees it (`--signal`).
    pub signal: Option<i32>,
}

/// How far the symbol resolution at the end of a recording has got. The
/// recorder only counts (it draws nothing): `total` addresses (functions for
/// instrumentation, frames for sampling) are announced before they are
/// resolved, `done` counts the resolved ones; both only grow.
#[derive(Debug, Default)]
pub struct SymbolProgress {
    total: AtomicU64,
    done: AtomicU64,
}

impl SymbolProgress {
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// `n` more addresses are about to be resolved.
    pub(crate) fn add_work(&self, n: u64) {
        self.total.fetch_add(n, Ordering::Relaxed);
    }

    /// One more address was resolved.
    pub(crate) fn advance(&self) {
        self.done.fetch_add(1, Ordering::Relaxed);
    }
}

/// What a finished recording produced; `lapse record` prints it in one line
/// and exits with `exit_status`.
#[derive(Clone, Debug)]
pub struct RecordOutcome {
    pub output: PathBuf,
    pub method: Method,
    pub events: u64,
    pub samples: u64,
    pub bytes: u64,
    /// The target's exit status (128 + signal if it was killed); 0 for attach.
    pub exit_status: i32,
}

/// How often sampling samples: so many times a second (a time-based event
/// then gets the fixed period that makes: 1e9 / Hz ns), or every so many
/// events. Made by [`SampleRate::frequency`] or [`SampleRate::period`],
/// which refuse 0, or [`SampleRate::DEFAULT`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleRate(Rate);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rate {
    Hz(u64),
    Every(u64),
}

/// Why a sampling rate cannot be had.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RateError {
    #[error("the sampling frequency is at least 1 Hz")]
    ZeroFrequency,
    #[error("the sampling period is at least 1")]
    ZeroPeriod,
}

impl SampleRate {
    /// The frequency when none is asked for (perf's and samply's too).
    pub const DEFAULT_HZ: u64 = 1000;
    pub const DEFAULT: SampleRate = SampleRate(Rate::Hz(Self::DEFAULT_HZ));

    pub fn frequency(hz: u64) -> Result<SampleRate, RateError> {
        match hz {
            0 => Err(RateError::ZeroFrequency),
            _ => Ok(SampleRate(Rate::Hz(hz))),
        }
    }

    /// Every `events` events of the sampling event (nanoseconds for the
    /// time-based ones).
    pub fn period(events: u64) -> Result<SampleRate, RateError> {
        match events {
            0 => Err(RateError::ZeroPeriod),
            _ => Ok(SampleRate(Rate::Every(events))),
        }
    }

    /// The frequency asked for, if it is one.
    pub fn hz(self) -> Option<u64> {
        match self.0 {
            Rate::Hz(hz) => Some(hz),
            Rate::Every(_) => None,
        }
    }

    /// The period asked for, if it is one.
    pub fn events(self) -> Option<u64> {
        match self.0 {
            Rate::Every(n) => Some(n),
            Rate::Hz(_) => None,
        }
    }
}

impl Default for SampleRate {
    fn default() -> SampleRate {
        SampleRate::DEFAULT
    }
}

/// How much event buffer memory a process's runtime may fill while the
/// recorder is behind (`--buffer-size`): whole 64 KiB buffers, from one to
/// the most the shared arena's header has slots for (64 MiB). The memory
/// is taken as it is written, lowest buffers first, so a recorder that
/// keeps up uses a few buffers per thread whatever the bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferSize {
    buffers: u32,
}

impl BufferSize {
    const BUF: u64 = lapse_rt::protocol::BUF_BYTES as u64;
    const MAX: u64 = lapse_rt::protocol::arena::MAX_BUFS as u64;

    /// `16M`, `512K`, `64MiB`, `1G`, or bytes: rounded down to whole
    /// buffers; refused below one buffer or above the most.
    pub fn parse(text: &str) -> Result<BufferSize, String> {
        let t = text.trim();
        let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (number, unit) = t.split_at(split);
        let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kb" | "kib" => 1 << 10,
            "m" | "mb" | "mib" => 1 << 20,
            "g" | "gb" | "gib" => 1 << 30,
            _ => return Err(format!("{text:?} is not a size such as 16M or 512K")),
        };
        let bytes = number
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(scale))
            .ok_or_else(|| format!("{text:?} is not a size such as 16M or 512K"))?;
        let buffers = bytes / Self::BUF;
        if !(1..=Self::MAX).contains(&buffers) {
            return Err(format!(
                "{text}: a process's buffers must be between 64K and {}M",
                (Self::MAX * Self::BUF) >> 20
            ));
        }
        Ok(BufferSize {
            buffers: buffers as u32,
        })
    }

    /// The number of 64 KiB buffers.
    pub fn buffers(self) -> u32 {
        self.buffers
    }
}

/// Which functions run-time patching patches: `--patch REGEX[@MODULE]`
/// (only these; every function when none is given) and `--no-patch REGEX`
/// (never these). A function matches by its symbol or demangled name,
/// anywhere in it (as `--function` does); MODULE matches the file name.
#[derive(Clone, Debug, Default)]
pub struct PatchSelection {
    only: Vec<(regex::Regex, Option<regex::Regex>)>,
    never: Vec<regex::Regex>,
}

impl PatchSelection {
    /// From the options' values; the error names the one that is no regex.
    pub fn new(only: &[String], never: &[String]) -> Result<PatchSelection, String> {
        let re = |flag: &str, r: &str| {
            regex::Regex::new(r).map_err(|e| format!("{flag} {r}: not a regular expression: {e}"))
        };
        let mut sel = PatchSelection::default();
        for o in only {
            let (f, m) = match o.rsplit_once('@') {
                Some((f, m)) => (f, Some(re("--patch", m)?)),
                None => (o.as_str(), None),
            };
            sel.only.push((re("--patch", f)?, m));
        }
        for n in never {
            sel.never.push(re("--no-patch", n)?);
        }
        Ok(sel)
    }

    /// Whether `--patch` names functions of `module` (all modules' when
    /// it is not given).
    pub fn any_in(&self, module: &str) -> bool {
        self.only.is_empty()
            || self
                .only
                .iter()
                .any(|(_, m)| m.as_ref().is_none_or(|m| m.is_match(module)))
    }

    /// Whether a `--patch REGEX@MODULE` names `module` (shared libraries
    /// are patched only when one does).
    pub fn names_module(&self, module: &str) -> bool {
        self.only
            .iter()
            .any(|(_, m)| m.as_ref().is_some_and(|m| m.is_match(module)))
    }

    /// The `--patch` values that name a module, as given.
    pub fn module_values(&self) -> Vec<(String, &regex::Regex)> {
        self.only
            .iter()
            .filter_map(|(f, m)| Some((format!("{f}@{}", m.as_ref()?.as_str()), m.as_ref()?)))
            .collect()
    }

    /// The `--patch` values that name modules other than `module`.
    pub fn elsewhere(&self, module: &str) -> Vec<String> {
        self.only
            .iter()
            .filter(|(_, m)| m.as_ref().is_some_and(|m| !m.is_match(module)))
            .map(|(f, m)| format!("{f}@{}", m.as_ref().map_or("", |m| m.as_str())))
            .collect()
    }

    /// Whether function `names` (symbol, demangled) of `module` is patched.
    pub fn wants(&self, module: &str, names: &[&str]) -> bool {
        let hit = |r: &regex::Regex| names.iter().any(|n| r.is_match(n));
        let selected = self.only.is_empty()
            || self
                .only
                .iter()
                .any(|(f, m)| m.as_ref().is_none_or(|m| m.is_match(module)) && hit(f));
        selected && !self.never.iter().any(hit)
    }
}

#[cfg(test)]
mod buffer_size_tests {
    use super::BufferSize;

    #[test]
    fn sizes_are_whole_64k_buffers_between_one_and_1024() {
        let n = |t: &str| BufferSize::parse(t).map(BufferSize::buffers);
        assert_eq!(n("16M"), Ok(256));
        assert_eq!(n("64MiB"), Ok(1024));
        assert_eq!(n("64k"), Ok(1));
        assert_eq!(n("100K"), Ok(1), "rounded down");
        assert_eq!(n("131072"), Ok(2));
        assert!(n("32K").is_err(), "less than a buffer");
        assert!(n("65M").is_err(), "more than the arena has slots for");
        assert!(n("1G").is_err());
        assert!(n("lots").is_err() && n("16X").is_err() && n("").is_err());
        assert!(n("99999999999999999999G").is_err(), "no overflow");
    }
}

#[cfg(test)]
mod patch_selection_tests {
    use super::PatchSelection;

    fn sel(only: &[&str], never: &[&str]) -> PatchSelection {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        PatchSelection::new(&s(only), &s(never)).expect("valid")
    }

    #[test]
    fn patch_selects_and_no_patch_excludes() {
        let all = sel(&[], &[]);
        assert!(all.wants("app", &["fib"]) && all.any_in("libz.so"));
        let some = sel(&["^fi", "tiny@app$"], &["^fib$"]);
        assert!(!some.wants("app", &["fib"]), "--no-patch wins");
        assert!(some.wants("app", &["first"]));
        assert!(some.wants("app", &["tiny"]));
        assert!(!some.wants("other", &["tiny"]), "tiny only @app");
        assert!(!some.wants("app", &["main"]));
        let lib = sel(&[".@libz.so"], &[]);
        assert!(!lib.any_in("app") && lib.any_in("libz.so.1"));
        assert_eq!(lib.elsewhere("app"), [".@libz.so"]);
        assert!(PatchSelection::new(&["(".into()], &[]).is_err());
    }
}
