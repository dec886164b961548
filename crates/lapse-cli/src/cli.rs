//! Every flag's name, help and type, in one place (SPEC section 4). Choices
//! parse straight into the libraries' own enums (their `ALL` tables), so
//! there is no second enum per flag to keep in step.

use std::path::PathBuf;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand};
use lapse_analysis::ApplicationRule;
use lapse_export::{Format as ExportFormat, SampleWeight};
use lapse_record::{CallGraph, MethodChoice, OsEventSource};
use lapse_report::{Format, View};

/// The data file when none is named.
pub const DEFAULT_FILE: &str = "lapse.data";

/// A number of seconds, or a percentage: finite and not negative (`nan`,
/// `inf` and `-1` would silently select everything or nothing).
fn non_negative(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        Ok(_) => Err(format!("{s} is not a finite number of at least 0")),
        Err(_) => Err(format!("{s} is not a number")),
    }
}

/// The longest time to record for: ten years, far past any recording,
/// and far from where a clock's deadline would overflow.
const MAX_DURATION_SECS: f64 = 10.0 * 365.0 * 86_400.0;

/// A time to record for: finite, above 0 and at most [`MAX_DURATION_SECS`].
fn positive_seconds(s: &str) -> Result<f64, String> {
    match non_negative(s)? {
        v if v > MAX_DURATION_SECS => Err(format!(
            "{s}: the duration is at most {MAX_DURATION_SECS} seconds (ten years)"
        )),
        v if v > 0.0 => Ok(v),
        _ => Err(format!("{s}: the duration is more than 0 seconds")),
    }
}

/// A parser for one of `choices` (a library enum's `ALL` table), each shown
/// in `--help` with `help(name)`.
fn one_of<T: Copy + Send + Sync + 'static>(
    choices: &'static [(&'static str, T)],
    help: fn(&str) -> &'static str,
) -> impl TypedValueParser<Value = T> {
    PossibleValuesParser::new(
        choices
            .iter()
            .map(|(name, _)| PossibleValue::new(*name).help(help(name))),
    )
    .map(move |s| {
        choices
            .iter()
            .find(|(name, _)| *name == s)
            .map(|(_, v)| *v)
            .unwrap_or(choices[0].1)
    })
}

fn view_help(name: &str) -> &'static str {
    match name {
        "summary" => {
            "header, hot path and the 10 functions with the most exclusive time or samples"
        }
        "functions" => "one row per function, every value column",
        "callers" => "the --function's values per direct caller",
        "callees" => "each callee's values when called directly by the --function",
        "calltree" => {
            "call paths from each thread's roots; --threshold trims, * marks the hot path"
        }
        "modules" => "one row per executable or shared library",
        "threads" => "one row per thread (pid, tid, name)",
        "processes" => "one row per process (pid, command)",
        "lines" => "one row per source line (instrumentation: each function's own line)",
        "annotate" => "one function's source lines with their samples (sampling; --function NAME)",
        "instructions" => "one row per sampled instruction address (sampling)",
        "marks" => "the program's marks (lapse_mark), in time order",
        _ => "",
    }
}

fn format_help(name: &str) -> &'static str {
    match name {
        "table" => "aligned columns in human units, fitted to the terminal",
        "csv" => "every column, integer nanoseconds, a header line",
        "json" => "the JSON report (docs/report.md)",
        _ => "",
    }
}

fn export_help(name: &str) -> &'static str {
    match name {
        "collapsed" => "folded stacks (a;b;c N) for flamegraph.pl, inferno, speedscope",
        "flamegraph" => "flame graph SVG (widths: inclusive values)",
        "speedscope" => "speedscope JSON",
        "chrome" => "Chrome Trace Event Format (Perfetto, chrome://tracing)",
        "pprof" => "pprof gzipped protobuf (go tool pprof, Pyroscope, Parca)",
        "callgrind" => "Callgrind (KCachegrind, qcachegrind, callgrind_annotate)",
        "firefox" => "Firefox Profiler processed format",
        "html" => "one self-contained HTML page",
        "perfetto" => {
            "Perfetto protobuf trace (ui.perfetto.dev, trace_processor): a compact timeline"
        }
        _ => "",
    }
}

fn weight_help(name: &str) -> &'static str {
    match name {
        "cpu" => "CPU samples",
        "off-cpu" => "time switched out (recorded with --off-cpu)",
        "both" => "time on the CPU (estimated) and off it, in ns; off-CPU under [off-cpu]",
        _ => "",
    }
}

fn method_help(name: &str) -> &'static str {
    match name {
        "auto" => "instrumentation when the program carries probes, else sampling",
        "instrument" => "record every call (the program must carry probes)",
        "sample" => "interrupt the program 1000 times a second and unwind its stack",
        _ => "",
    }
}

fn call_graph_help(name: &str) -> &'static str {
    match name {
        "dwarf" => "unwind with the DWARF call frame information (works without frame pointers)",
        "fp" => "follow frame pointers (cheaper; needs -fno-omit-frame-pointer code)",
        _ => "",
    }
}

fn rule_help(name: &str) -> &'static str {
    match name {
        "exact" => "an interval's length less the time its thread was off the CPU",
        "interval" => "nothing of an interval that had any OS event (the Visual Studio rule)",
        _ => "",
    }
}

fn os_event_help(name: &str) -> &'static str {
    match name {
        "switch" => "context switches: the thread was off the CPU (always on)",
        "fault" => "major page faults",
        "syscall" => "system calls (raw_syscalls tracepoints)",
        _ => "",
    }
}

const REPORT_HELP: &str = "\
Views (--view):
  summary       the header, the hot path and the top 10 functions (default)
  functions     one row per function
  callers       --function NAME: its values per direct caller ([root]: no caller)
  callees       --function NAME: each callee's values when called directly by it
  calltree      call paths from each thread's roots, heaviest first
  modules       one row per module; inclusive when any of its frames is on the stack
  threads       one row per thread; exclusive = time with no function on the stack
  processes     one row per process
  lines         one row per source line
  instructions  one row per sampled address (sampling only)

Instrumentation columns (times in ns in CSV/JSON, human units in tables):
  calls                    entries into the function
  elapsed_inclusive_ns     wall time while the function was on the stack (once per interval)
  elapsed_exclusive_ns     wall time while it was the innermost call
  application_inclusive_ns elapsed time minus time in OS events (switched out; syscalls
  application_exclusive_ns with --os-events syscall); see --application
  *_pct                    share of the session's elapsed (or application) time
  avg_/min_/max_*_ns       per call; a call's exclusive time is its own frame's
  probe_overhead_ns        probe cost in the function's elapsed time (removed with --compensate)
  probe_dominated          the probe cost is over a quarter of its time: trust it less
  preempted_ns             of its off-CPU time, the part spent runnable but preempted
  open_calls               calls still open when their thread ended
  dropped_calls            recorded with --min-time: calls left out as shorter than that
Sampling columns:
  inclusive_samples        samples with the function anywhere on the stack
  exclusive_samples        samples with the function executing
  inclusive_pct, exclusive_pct
  estimated_inclusive_ns, estimated_exclusive_ns   samples x period, for time-based events
  off_cpu_inclusive_ns, off_cpu_exclusive_ns       recorded with --off-cpu: time switched out
                           with the function on the stack / executing when it was switched out

Tables fit the terminal (or COLUMNS): long names are cut in the middle,
lower-priority columns drop first; --columns picks columns by name.";

#[derive(Parser, Debug)]
#[command(
    name = "lapse",
    version,
    about = "Where did the time go? A profiler for Linux programs.",
    arg_required_else_help = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Record a command (or attach to a process) into a data file.
    Record(RecordArgs),
    /// Show a view of a recording as a table, CSV or JSON.
    #[command(after_long_help = REPORT_HELP)]
    Report(ReportArgs),
    /// Show what a data file holds: header, counts, damage, lost and repaired events.
    Info {
        /// Data file.
        #[arg(default_value = DEFAULT_FILE)]
        file: PathBuf,
        /// Output format.
        #[arg(long, value_parser = one_of(&Format::ALL, format_help), default_value = "table")]
        format: Format,
    },
    /// Merge the events the runtime kept in FILE.spill after the recorder ended into FILE.
    Recover {
        /// Data file.
        #[arg(default_value = DEFAULT_FILE)]
        file: PathBuf,
    },
    /// Convert a Chrome Trace Event Format file into a lapse data file.
    Import {
        /// The trace (JSON object with "traceEvents", or a bare array).
        trace: PathBuf,
        /// The data file to write.
        #[arg(short, long, default_value = DEFAULT_FILE)]
        output: PathBuf,
    },
    /// Build a cargo project with a probe at every function, into target/lapse/.
    #[command(after_long_help = BUILD_HELP)]
    Build(BuildArgs),
    /// Record and report a bundled example program.
    Demo,
    /// Print the C/C++ header with lapse_pause(), lapse_resume() and
    /// lapse_mark() (no-ops without lapse, no link dependency).
    Header,
    /// Write a recording in another tool's format (flame graph, pprof, Chrome trace, ...).
    Export(ExportArgs),
    /// Compare two recordings of the same method, row by row.
    #[command(after_long_help = DIFF_HELP)]
    Diff(DiffArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        #[arg(value_parser = clap::value_parser!(clap_complete::Shell))]
        shell: clap_complete::Shell,
    },
    /// Print a manual page (roff) on standard output: lapse's, or one
    /// command's (`lapse man report`).
    Man {
        /// The command whose page to print (record, report, export...).
        command: Option<String>,
    },
}

const DIFF_HELP: &str = "\
Totals and shares:
  Each run's total of the compared value comes first (the `total` row: the
  session's elapsed or application time, or its samples), then every row's
  share of its own run's total in both runs and the change of that share in
  percentage points. Two runs of the same program keep their shares even when
  one ran on a busier machine and every value in it grew.

Normalization (--normalize, the default for tables; --no-normalize for raw):
  changes, --threshold and the order compare BASE with NEW x (base total /
  new total), as pprof -normalize does, so a uniformly slower run shows no
  change; the header says by what factor. JSON and CSV keep raw changes
  unless --normalize is given, and always carry the shares.

A warning says when the two totals differ by more than 10 %, more than
reruns of one program differ by: then compare shares, not values.
";

const BUILD_HELP: &str = "\
Runs `cargo build` with LLVM's sanitizer coverage at every function entry of
every crate cargo compiles (the standard library is precompiled and has no
probes), into its own target directory (target/lapse/), so ordinary builds
stay cached. Exits come from lapse's return trampoline. The binaries run
normally without lapse: their probes are an empty function then.

  lapse build --release && lapse record -- target/lapse/release/app
  lapse build --release --bin server --features fast
  lapse build -p worker --example load

C and C++ built with clang use the same probes:

  clang -O2 -fsanitize-coverage=func,trace-pc-guard -o app app.c $(lapse build --stub-object)";

/// `lapse build`: cargo build with probes.
#[derive(Args, Debug)]
pub struct BuildArgs {
    /// Write the object that programs built with clang's
    /// -fsanitize-coverage=func,trace-pc-guard link, print its path, and build nothing.
    #[arg(long)]
    pub stub_object: bool,
    /// Arguments for `cargo build` (--release, --bin, --example, -p, --features, ...).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CARGO BUILD ARGS"
    )]
    pub cargo_args: Vec<String>,
}

#[derive(Args, Debug)]
pub struct RecordArgs {
    /// Collection method.
    #[arg(long, value_parser = one_of(&MethodChoice::ALL, method_help), default_value = "auto")]
    pub method: MethodChoice,
    /// Sampling frequency in Hz [default: 1000].
    #[arg(short = 'F', long = "freq", conflicts_with = "period")]
    pub frequency: Option<u64>,
    /// Sampling period in the event's unit (ns for cpu-clock and task-clock).
    #[arg(long)]
    pub period: Option<u64>,
    /// Sampling event: cpu-clock, task-clock, page-faults, context-switches, cycles, ...
    #[arg(long)]
    pub event: Option<String>,
    /// How sampling unwinds the user stack.
    #[arg(long, value_parser = one_of(&CallGraph::ALL, call_graph_help), default_value = "dwarf")]
    pub call_graph: CallGraph,
    /// Sampling: also record where threads wait: each thread's stack when it
    /// is switched out, weighed by the time until it runs again.
    #[arg(long)]
    pub off_cpu: bool,
    /// OS events for instrumentation (comma-separated).
    #[arg(long, value_delimiter = ',', value_parser = one_of(&OsEventSource::ALL, os_event_help), default_value = "switch")]
    pub os_events: Vec<OsEventSource>,
    /// Do not follow threads and child processes.
    #[arg(long)]
    pub no_inherit: bool,
    /// Instrumentation: do not trace calls into other libraries (by default
    /// each call an instrumented module makes into a shared library, such
    /// as fsync or malloc, is a function of that library).
    #[arg(long)]
    pub no_libcalls: bool,
    /// Instrumentation of a program without probes: patch only the functions
    /// matching REGEX (symbol or demangled name; repeatable); by default
    /// every function of the program is patched at run time.
    #[arg(long = "patch", value_name = "REGEX[@MODULE]")]
    pub patch: Vec<String>,
    /// Instrumentation of a program without probes: never patch the
    /// functions matching REGEX (repeatable).
    #[arg(long = "no-patch", value_name = "REGEX")]
    pub no_patch: Vec<String>,
    /// Instrumentation: event buffer memory each process may fill while
    /// the recorder is behind, before its threads wait (64K to 64M; taken
    /// only as it is used) [default: 16M].
    #[arg(long, value_parser = lapse_record::BufferSize::parse, value_name = "SIZE")]
    pub buffer_size: Option<lapse_record::BufferSize>,
    /// Instrumentation: record only calls of the functions matching REGEX
    /// (symbol or demangled name) and everything they call.
    #[arg(long, value_name = "REGEX")]
    pub filter: Option<String>,
    /// Instrumentation: leave out calls of the functions matching REGEX
    /// (their time stays in their caller's; what they call is recorded).
    #[arg(long, value_name = "REGEX")]
    pub exclude: Option<String>,
    /// Instrumentation: record at most N levels of calls per thread, from
    /// its first recorded function (or a --filter match) down (1 to 64).
    #[arg(long, value_name = "N")]
    pub depth: Option<u32>,
    /// Instrumentation: calls shorter than DUR (e.g. 10us) are not kept as
    /// calls of their own; their time stays in their caller's, and the
    /// number left out is counted per function.
    #[arg(long, value_parser = duration, value_name = "DUR")]
    pub min_time: Option<std::time::Duration>,
    /// The data file to write (an existing one is replaced only when recording succeeds).
    #[arg(short, long, default_value = DEFAULT_FILE)]
    pub output: PathBuf,
    /// Attach to the running process PID instead of launching a command
    /// (sampling; with --method instrument, lapse loads its runtime into the
    /// process with ptrace, turns its probes on, and off again at the end).
    #[arg(long, conflicts_with = "command")]
    pub pid: Option<u32>,
    /// Stop recording after this many seconds: with --pid, detach then
    /// (else at Ctrl-C); with a command, pause then and let the program run
    /// on.
    #[arg(long, value_parser = positive_seconds, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Start paused: nothing is recorded until the program calls
    /// lapse_resume() (or the --signal signal comes).
    #[arg(long)]
    pub start_paused: bool,
    /// Each delivery of this signal (SIGUSR1, SIGUSR2,
    /// SIGRTMIN+N...) to a process of the program pauses or resumes the
    /// recording; the program never sees it.
    #[arg(long, value_name = "SIG")]
    pub signal: Option<String>,
    /// Record nothing for the first SECONDS.
    #[arg(long, value_parser = positive_seconds, value_name = "SECONDS")]
    pub delay: Option<f64>,
    /// The command to record and its arguments (`--` before it is optional).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub command: Vec<String>,
}

/// The filters `report` and `export` share, each flag defined once
/// (mapped onto `lapse_analysis::Query` by `export::query`).
#[derive(Args, Debug, Clone, Default)]
pub struct FilterArgs {
    /// Only functions whose name matches this regex (report: the rows, and
    /// in a calltree the paths to them and what they call; callers/callees:
    /// the function they are about; export: the call paths from a frame of
    /// it down, stacks and timelines cut to its subtrees).
    #[arg(long)]
    pub function: Option<String>,
    /// Only these processes (comma-separated pids).
    #[arg(long, value_delimiter = ',')]
    pub pid: Vec<u32>,
    /// Only these threads (comma-separated tids).
    #[arg(long, value_delimiter = ',')]
    pub tid: Vec<u32>,
    /// Start of the time range, seconds since the session start.
    #[arg(long, value_parser = non_negative)]
    pub from: Option<f64>,
    /// End of the time range, seconds since the session start.
    #[arg(long, value_parser = non_negative)]
    pub to: Option<f64>,
    /// Start of the time range: the first mark with this text (lapse_mark).
    #[arg(long, conflicts_with = "from", value_name = "MARK")]
    pub from_mark: Option<String>,
    /// End of the time range: the first mark with this text after the start
    /// of the range.
    #[arg(long, conflicts_with = "to", value_name = "MARK")]
    pub to_mark: Option<String>,
}

/// A duration such as `10us`, `1.5ms`, `2s` or `500ns` (a bare number is
/// nanoseconds): `--min-duration`.
pub fn duration(s: &str) -> Result<std::time::Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let scale = match unit.trim() {
        "" | "ns" => 1e0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => f64::NAN,
    };
    match number.parse::<f64>() {
        Ok(v) if v.is_finite() && scale.is_finite() && v * scale < 1e18 => {
            Ok(std::time::Duration::from_nanos((v * scale).round() as u64))
        }
        _ => Err(format!(
            "{s} is not a duration (a number with ns, us, ms or s, e.g. 10us)"
        )),
    }
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Data file.
    #[arg(default_value = DEFAULT_FILE)]
    pub file: PathBuf,
    /// What to show (see the list below).
    #[arg(long, value_parser = one_of(&View::ALL, view_help), default_value = "summary")]
    pub view: View,
    /// Output format.
    #[arg(long, value_parser = one_of(&Format::ALL, format_help), default_value = "table")]
    pub format: Format,
    /// Column to sort by (e.g. elapsed_inclusive_ns, calls, exclusive_samples).
    #[arg(long)]
    pub sort: Option<String>,
    /// Show at most N rows.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Columns to show, by name (comma-separated; identity columns included).
    #[arg(long, value_delimiter = ',')]
    pub columns: Vec<String>,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// calltree: re-root the tree at the functions matching this regex,
    /// merging all their call sites, with what they call below.
    #[arg(long, value_name = "REGEX")]
    pub focus: Option<String>,
    /// calltree table: show every frame of a run of calls that pass all
    /// their time on (`_start → __libc_start_main → main`), not `…N frames…`.
    #[arg(long)]
    pub no_collapse: bool,
    /// Only functions in modules whose path matches this regex.
    #[arg(long)]
    pub module: Option<String>,
    /// calltree: hide branches below this percentage of the session
    /// [default: 0.5 in a table, 0 (every branch) in JSON and CSV].
    #[arg(long, value_parser = non_negative)]
    pub threshold: Option<f64>,
    /// Subtract the probe cost measured at start-up from the times. Off by
    /// default: no subtraction is true for functions of a few ns (see
    /// `probe_dominated`), so times are raw, probe cost included.
    #[arg(long, overrides_with = "no_compensation")]
    pub compensate: bool,
    /// Raw times (the default; kept so that older scripts still work).
    #[arg(long, hide = true, overrides_with = "compensate")]
    pub no_compensation: bool,
    /// Which part of an interval is application time.
    #[arg(long, value_parser = one_of(&ApplicationRule::ALL, rule_help), default_value = "exact")]
    pub application: ApplicationRule,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// Data file.
    #[arg(default_value = DEFAULT_FILE)]
    pub file: PathBuf,
    /// The format of the export.
    #[arg(long, value_parser = one_of(&ExportFormat::ALL, export_help))]
    pub format: ExportFormat,
    /// Output file (`-` for standard output).
    #[arg(short, long)]
    pub output: PathBuf,
    /// Sampling: what collapsed stacks, flame graphs and speedscope weigh
    /// paths by (pprof and callgrind carry both).
    #[arg(long, value_parser = one_of(&SampleWeight::ALL, weight_help), default_value = "cpu")]
    pub weight: SampleWeight,
    /// Subtract the probe cost measured at start-up from the times. Off by
    /// default: no subtraction is true for functions of a few ns (see
    /// `probe_dominated`), so times are raw, probe cost included.
    #[arg(long, overrides_with = "no_compensation")]
    pub compensate: bool,
    /// Raw times (the default; kept so that older scripts still work).
    #[arg(long, hide = true, overrides_with = "compensate")]
    pub no_compensation: bool,
    /// Which part of an interval is application time.
    #[arg(long, value_parser = one_of(&ApplicationRule::ALL, rule_help), default_value = "exact")]
    pub application: ApplicationRule,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Timelines (chrome, perfetto, firefox, speedscope, html): calls shorter
    /// than this (10us, 1ms, ...) are not events of their own; their time
    /// stays in their caller.
    #[arg(long, value_parser = duration, value_name = "DUR")]
    pub min_duration: Option<std::time::Duration>,
    /// Write the export even when it is larger than 1 GB.
    #[arg(long)]
    pub force: bool,
}

#[derive(Args, Debug)]
pub struct DiffArgs {
    /// The baseline recording.
    pub base: PathBuf,
    /// The recording compared with it.
    pub new: PathBuf,
    /// Rows to compare: functions, modules, threads, processes, lines or instructions.
    #[arg(long, value_parser = one_of(&View::ALL, view_help), default_value = "functions")]
    pub view: View,
    /// Output format.
    #[arg(long, value_parser = one_of(&Format::ALL, format_help), default_value = "table")]
    pub format: Format,
    /// Hide rows whose relative change is below this percentage.
    #[arg(long, default_value_t = 0.0, value_parser = non_negative)]
    pub threshold: f64,
    /// The value compared and sorted by (a column name, e.g. elapsed_exclusive_ns,
    /// application_inclusive_ns, calls, exclusive_samples) [default: the exclusive value].
    #[arg(long)]
    pub metric: Option<String>,
    /// Subtract the probe cost measured at start-up from the times. Off by
    /// default: no subtraction is true for functions of a few ns (see
    /// `probe_dominated`), so times are raw, probe cost included.
    #[arg(long, overrides_with = "no_compensation")]
    pub compensate: bool,
    /// Raw times (the default; kept so that older scripts still work).
    #[arg(long, hide = true, overrides_with = "compensate")]
    pub no_compensation: bool,
    /// Which part of an interval is application time.
    #[arg(long, value_parser = one_of(&ApplicationRule::ALL, rule_help), default_value = "exact")]
    pub application: ApplicationRule,
    /// Compare BASE with NEW scaled to BASE's total [default: on for tables].
    #[arg(long, overrides_with = "no_normalize")]
    pub normalize: bool,
    /// Compare raw values [default for JSON and CSV].
    #[arg(long, overrides_with = "normalize")]
    pub no_normalize: bool,
    /// Compare the time from the first mark with this text in each recording.
    #[arg(long, value_name = "MARK")]
    pub from_mark: Option<String>,
    /// ... to the first mark with this text after it.
    #[arg(long, value_name = "MARK")]
    pub to_mark: Option<String>,
}

impl DiffArgs {
    /// `--normalize`/`--no-normalize`, the last one given winning; a table
    /// is normalized unless told otherwise, JSON and CSV are not.
    pub fn normalized(&self) -> bool {
        match (self.normalize, self.no_normalize) {
            (true, _) => true,
            (_, true) => false,
            _ => self.format == Format::Table,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn normalized(args: &[&str]) -> bool {
        let cli = Cli::try_parse_from(["lapse", "diff", "a.data", "b.data"].iter().chain(args))
            .expect("parses");
        match cli.command {
            Command::Diff(d) => d.normalized(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn min_duration_reads_ns_us_ms_and_s() {
        use std::time::Duration;
        for (text, ns) in [
            ("10us", 10_000),
            ("10µs", 10_000),
            ("1.5ms", 1_500_000),
            ("2s", 2_000_000_000),
            ("500ns", 500),
            ("500", 500),
            (" 1 ms ", 1_000_000),
        ] {
            assert_eq!(duration(text), Ok(Duration::from_nanos(ns)), "{text}");
        }
        for bad in [
            "",
            "us",
            "-1us",
            "10 parsecs",
            "1e3us",
            "nan",
            "1..2ms",
            "1e30s",
        ] {
            let e = duration(bad).unwrap_err();
            assert!(e.contains("is not a duration"), "{bad}: {e}");
        }
    }

    #[test]
    fn export_shares_report_filters() {
        let cli = Cli::try_parse_from([
            "lapse",
            "export",
            "a.data",
            "--format",
            "chrome",
            "-o",
            "x",
            "--tid",
            "3,4",
            "--from",
            "1",
            "--to",
            "2",
            "--function",
            "^f$",
            "--min-duration",
            "10us",
        ])
        .expect("parses");
        match cli.command {
            Command::Export(e) => {
                assert_eq!(e.filter.tid, [3, 4]);
                assert_eq!((e.filter.from, e.filter.to), (Some(1.0), Some(2.0)));
                assert_eq!(e.filter.function.as_deref(), Some("^f$"));
                assert_eq!(e.min_duration, Some(std::time::Duration::from_micros(10)));
                assert!(!e.force);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn diff_normalizes_tables_unless_told_and_the_last_flag_wins() {
        assert!(normalized(&[]));
        assert!(!normalized(&["--no-normalize"]));
        assert!(!normalized(&["--format", "json"]));
        assert!(!normalized(&["--format", "csv"]));
        assert!(normalized(&["--format", "json", "--normalize"]));
        assert!(!normalized(&["--normalize", "--no-normalize"]));
        assert!(normalized(&["--no-normalize", "--normalize"]));
    }

    /// Whether `lapse COMMAND ... args` subtracts the probe cost.
    fn compensated(command: &[&str], args: &[&str]) -> bool {
        let cli = Cli::try_parse_from(["lapse"].iter().chain(command).chain(args)).expect("parses");
        match cli.command {
            Command::Report(a) => a.compensate,
            Command::Export(a) => a.compensate,
            Command::Diff(a) => a.compensate,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn raw_values_unless_compensate_and_no_compensation_is_a_no_op_alias() {
        for command in [
            &["report", "a.data"][..],
            &["export", "a.data", "--format", "html", "-o", "x"],
            &["diff", "a.data", "b.data"],
        ] {
            assert!(!compensated(command, &[]), "{command:?}");
            assert!(compensated(command, &["--compensate"]), "{command:?}");
            assert!(!compensated(command, &["--no-compensation"]), "{command:?}");
            assert!(!compensated(
                command,
                &["--compensate", "--no-compensation"]
            ));
            assert!(compensated(command, &["--no-compensation", "--compensate"]));
        }
        // (kept for old scripts, not offered)
        let help = Cli::try_parse_from(["lapse", "report", "--help"])
            .unwrap_err()
            .to_string();
        assert!(
            help.contains("--compensate") && !help.contains("--no-compensation"),
            "{help}"
        );
    }
}
