//! Every flag's name, help and type, in one place (SPEC section 4).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(
    name = "lapse",
    version,
    about = "Where did the time go? A profiler for Linux programs."
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
    Report(ReportArgs),
    /// Show what a data file holds: header, counts, damage, lost and repaired events.
    Info {
        /// Data file [default: lapse.data]
        file: Option<PathBuf>,
    },
    /// Merge the events the runtime kept in FILE.spill after the recorder ended into FILE.
    Recover {
        /// Data file [default: lapse.data]
        file: Option<PathBuf>,
    },
    /// Convert a Chrome Trace Event Format file into a lapse data file.
    Import {
        /// The trace (JSON object with "traceEvents", or a bare array).
        trace: PathBuf,
        #[arg(short, long, default_value = "lapse.data")]
        output: PathBuf,
    },
    /// Record and report a bundled example program.
    Demo,
    /// Write a recording in another tool's format (flame graph, pprof, Chrome trace, ...).
    Export(ExportArgs),
    /// Compare two recordings of the same method, row by row.
    Diff(DiffArgs),
}

#[derive(Copy, Clone, Debug, ValueEnum)]
pub enum MethodArg {
    Auto,
    Instrument,
    Sample,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
pub enum CallGraphArg {
    Dwarf,
    Fp,
}

#[derive(Args, Debug)]
pub struct RecordArgs {
    /// Collection method: instrumentation when the target carries probes, else sampling.
    #[arg(long, value_enum, default_value = "auto")]
    pub method: MethodArg,
    /// Sampling frequency in Hz [default: 1000].
    #[arg(short = 'F', long = "freq", conflicts_with = "period")]
    pub frequency: Option<u64>,
    /// Sampling period in the event's unit.
    #[arg(long)]
    pub period: Option<u64>,
    /// Sampling event: cpu-clock, task-clock, page-faults, context-switches, cycles, ...
    #[arg(long)]
    pub event: Option<String>,
    #[arg(long, value_enum, default_value = "dwarf")]
    pub call_graph: CallGraphArg,
    /// OS events for instrumentation: `switch[,fault,syscall]`.
    #[arg(long, value_delimiter = ',', default_value = "switch")]
    pub os_events: Vec<String>,
    /// Do not follow threads and child processes.
    #[arg(long)]
    pub no_inherit: bool,
    #[arg(short, long, default_value = "lapse.data")]
    pub output: PathBuf,
    /// Attach to a running process instead of launching a command.
    #[arg(long, conflicts_with = "command")]
    pub pid: Option<u32>,
    /// With --pid: stop after this many seconds.
    #[arg(long, requires = "pid")]
    pub duration: Option<f64>,
    /// The command to record, after `--`.
    #[arg(last = true)]
    pub command: Vec<String>,
}

#[derive(Copy, Clone, Debug, ValueEnum, PartialEq, Eq)]
pub enum FormatArg {
    Table,
    Csv,
    Json,
}

#[derive(Copy, Clone, Debug, ValueEnum, PartialEq, Eq)]
pub enum ViewArg {
    Summary,
    Functions,
    Callers,
    Callees,
    Calltree,
    Modules,
    Threads,
    Processes,
    Lines,
    Instructions,
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Data file [default: lapse.data]
    pub file: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "summary")]
    pub view: ViewArg,
    #[arg(long, value_enum, default_value = "table")]
    pub format: FormatArg,
    /// Column to sort by (e.g. elapsed_inclusive_ns, calls, exclusive_samples).
    #[arg(long)]
    pub sort: Option<String>,
    /// Show at most N rows.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Only functions whose name matches (callers/callees: the function to focus on).
    #[arg(long)]
    pub function: Option<String>,
    /// Only functions in modules whose path matches.
    #[arg(long)]
    pub module: Option<String>,
    #[arg(long, value_delimiter = ',')]
    pub pid: Vec<u32>,
    #[arg(long, value_delimiter = ',')]
    pub tid: Vec<u32>,
    /// Start of the time range, seconds since the session start.
    #[arg(long)]
    pub from: Option<f64>,
    /// End of the time range, seconds since the session start.
    #[arg(long)]
    pub to: Option<f64>,
    /// calltree: hide branches below this percentage of the session.
    #[arg(long, default_value_t = 0.0)]
    pub threshold: f64,
    /// Show raw times, without subtracting the measured probe cost.
    #[arg(long)]
    pub no_compensation: bool,
}

#[derive(Copy, Clone, Debug, ValueEnum, PartialEq, Eq)]
pub enum ExportFormatArg {
    /// Folded stacks (`a;b;c N`) for flamegraph.pl, inferno, speedscope.
    Collapsed,
    /// Flame graph SVG.
    Flamegraph,
    /// speedscope JSON.
    Speedscope,
    /// Chrome Trace Event Format (Perfetto, chrome://tracing).
    Chrome,
    /// pprof gzipped protobuf (go tool pprof, Pyroscope, Parca).
    Pprof,
    /// Callgrind (KCachegrind, qcachegrind).
    Callgrind,
    /// Firefox Profiler processed format.
    Firefox,
    /// One self-contained HTML page.
    Html,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// Data file [default: lapse.data]
    pub file: Option<PathBuf>,
    #[arg(long, value_enum)]
    pub format: ExportFormatArg,
    /// Output file (`-` for standard output).
    #[arg(short, long)]
    pub output: PathBuf,
}

#[derive(Args, Debug)]
pub struct DiffArgs {
    /// The baseline recording.
    pub base: PathBuf,
    /// The recording compared with it.
    pub new: PathBuf,
    /// functions, modules, threads, processes or lines.
    #[arg(long, value_enum, default_value = "functions")]
    pub view: ViewArg,
    #[arg(long, value_enum, default_value = "table")]
    pub format: FormatArg,
    /// Hide rows whose relative change is below this percentage.
    #[arg(long, default_value_t = 0.0)]
    pub threshold: f64,
}
