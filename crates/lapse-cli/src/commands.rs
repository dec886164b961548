//! One function per subcommand; each returns the process exit code.

use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use lapse_analysis::{analyze, Query};
use lapse_data::DataFile;
use lapse_record::{RecordOptions, SampleRate, Target};
use lapse_report::{render, Format, RenderOptions, View, ViewSpec};
use regex::Regex;

use crate::cli::{RecordArgs, ReportArgs};

/// The C/C++ header `lapse header` prints: lapse_pause, lapse_resume, lapse_mark.
pub const HEADER: &str = include_str!("header/lapse.h");

pub fn open(path: &Path) -> Result<DataFile> {
    let file = DataFile::open(path)?;
    if let Some(d) = &file.damage {
        eprintln!(
            "lapse: warning: {}: damaged at byte {} ({}); reporting the intact part before it",
            path.display(),
            d.offset,
            d.what
        );
    } else if file.footer.is_none() {
        eprintln!("lapse: warning: {}: the recording did not finish (no footer); reporting what was written", path.display());
    }
    if let Some(line) = spill_hint(path) {
        eprintln!("lapse: warning: {line}");
    }
    Ok(file)
}

/// `--pid`/`--tid` values the file has no process or thread of are an
/// error, not an empty report.
pub(crate) fn check_selected_exist(
    file: &lapse_data::DataFile,
    pids: &[u32],
    tids: &[u32],
) -> Result<()> {
    let name = file.path().display();
    let list = |mut ids: Vec<u32>| {
        ids.sort_unstable();
        ids.dedup();
        let shown: Vec<String> = ids.iter().take(10).map(u32::to_string).collect();
        let more = if ids.len() > 10 { ", ..." } else { "" };
        format!("{}{more}", shown.join(", "))
    };
    if let Some(pid) = pids
        .iter()
        .find(|&&p| !file.processes.iter().any(|q| q.pid == p))
    {
        bail!(
            "--pid {pid}: {name} holds no process {pid} (its processes: {})",
            list(file.processes.iter().map(|p| p.pid).collect())
        );
    }
    if let Some(tid) = tids
        .iter()
        .find(|&&t| !file.threads.iter().any(|q| q.tid == t))
    {
        bail!(
            "--tid {tid}: {name} holds no thread {tid} (its threads: {})",
            list(file.threads.iter().map(|t| t.tid).collect())
        );
    }
    Ok(())
}

/// A sampling run with too few samples to say much: why, and what to do.
fn few_samples_hint(samples: u64) -> Option<String> {
    match samples {
        0 => Some("no sample was taken: the target ended before it had run one sampling period on the CPU; record a longer run, or raise -F".into()),
        1..100 => Some(format!("only {samples} samples: too few to say where the time went; record a longer run, or raise -F")),
        _ => None,
    }
}

/// One line when events wait in `<path>.spill` (the recorder ended before
/// the target); an empty spill holds nothing to recover.
fn spill_hint(path: &Path) -> Option<String> {
    let spill = lapse_record::spill_path(path);
    let len = std::fs::metadata(&spill).ok()?.len();
    if len == 0 {
        return None;
    }
    Some(format!(
        "{} holds {len} bytes of events that arrived after the recorder ended; `lapse recover {}` merges them",
        spill.display(),
        path.display()
    ))
}

pub fn recover(path: &Path) -> Result<u8> {
    let r = lapse_record::recover(path)?;
    eprintln!(
        "lapse: recovered {} events of {} threads from {} into {}{}",
        r.events,
        r.threads,
        r.spill.display(),
        r.output.display(),
        if r.lost_events > 0 {
            format!(
                " (about {} events were lost when the recorder ended)",
                r.lost_events
            )
        } else {
            String::new()
        }
    );
    Ok(0)
}

pub fn record(a: RecordArgs) -> Result<u8> {
    let attached = a.pid;
    let target = match (a.pid, a.command.is_empty()) {
        (Some(pid), _) => Target::Pid {
            pid,
            duration: a.duration.map(Duration::from_secs_f64),
        },
        (None, false) => Target::Command(a.command),
        (None, true) => bail!("nothing to record: give a command after `--` (lapse record -- ./prog args) or --pid PID"),
    };
    // The rate is settled here, once; its errors are put in flag terms.
    let rate = match (a.frequency, a.period) {
        (_, Some(n)) => SampleRate::period(n).map_err(|e| anyhow::anyhow!("--period {n}: {e}"))?,
        (Some(hz), None) => {
            SampleRate::frequency(hz).map_err(|e| anyhow::anyhow!("-F {hz}: {e}"))?
        }
        (None, None) => SampleRate::DEFAULT,
    };
    let control = lapse_record::ControlOptions {
        start_paused: a.start_paused,
        delay: a.delay.map(Duration::from_secs_f64),
        // (with --pid, --duration is how long to stay attached)
        duration: a
            .duration
            .filter(|_| a.pid.is_none())
            .map(Duration::from_secs_f64),
        signal: a
            .signal
            .as_deref()
            .map(lapse_record::linux::signals::toggle_signal)
            .transpose()
            .map_err(|e| anyhow::anyhow!("--signal {e}"))?,
    };
    if a.pid.is_some()
        && (control.start_paused || control.delay.is_some() || control.signal.is_some())
    {
        bail!("--start-paused, --signal and --delay are for a command lapse starts, not --pid");
    }
    let opts = RecordOptions {
        control,
        method: a.method,
        rate,
        event: a.event,
        call_graph: a.call_graph,
        os_events: a.os_events,
        off_cpu: a.off_cpu,
        inherit: !a.no_inherit,
        libcalls: !a.no_libcalls,
        patch: lapse_record::PatchSelection::new(&a.patch, &a.no_patch)
            .map_err(anyhow::Error::msg)?,
        buffer_size: a.buffer_size,
        filters: lapse_record::RecordFilters::new(
            a.filter.as_deref(),
            a.exclude.as_deref(),
            a.depth,
            a.min_time,
        )
        .map_err(anyhow::Error::msg)?,
        output: a.output,
        target,
        symbol_progress: None,
        // What the recorder says goes out at once, one line each.
        notices: lapse_record::Notices::to(|n| eprintln!("lapse: {n}")),
    };
    let outcome = match crate::progress::record_with_progress(opts) {
        Ok(outcome) => outcome,
        // A full disk stopped the recording, not the supervision: the
        // target's exit status is passed on all the same.
        Err(lapse_record::RecordError::RateAboveLimit { hz, max }) => bail!(
            "-F {hz}: the kernel samples at most {max} times a second (kernel.perf_event_max_sample_rate); give -F {max} or less, or raise that limit"
        ),
        Err(e @ lapse_record::RecordError::Stopped { exit_status, .. }) => {
            eprintln!("lapse: error: {e}");
            return Ok(u8::try_from(exit_status.clamp(0, 255)).unwrap_or(1));
        }
        // The target ran: its status is passed on, with why nothing came of
        // it (a non-zero status of its own says failure; 0 would hide that
        // the recording failed, so that becomes 1).
        Err(e @ lapse_record::RecordError::NothingRecorded { status, .. }) => {
            eprintln!("lapse: error: {e}");
            return Ok(u8::try_from(status.clamp(1, 255)).unwrap_or(1));
        }
        Err(e) => return Err(e.into()),
    };
    let plural = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let what = match outcome.method {
        lapse_data::Method::Instrumentation => plural(outcome.events, "event", "events"),
        lapse_data::Method::Sampling => plural(outcome.samples, "sample", "samples"),
    };
    // An attached process is not ours to wait for: whether it still runs is
    // all there is to say (its exit status goes to its own parent).
    let target = match attached {
        Some(pid) if std::path::Path::new(&format!("/proc/{pid}")).exists() => {
            format!("process {pid} runs on")
        }
        Some(pid) => format!("process {pid} has ended"),
        None => format!("target exited with status {}", outcome.exit_status),
    };
    eprintln!(
        "lapse: {} recorded {} ({} bytes) to {}; {target}",
        outcome.method.name(),
        what,
        outcome.bytes,
        outcome.output.display(),
    );
    if let Some(line) = spill_hint(&outcome.output) {
        eprintln!("lapse: note: {line}");
    }
    if outcome.method == lapse_data::Method::Sampling {
        if let Some(line) = few_samples_hint(outcome.samples) {
            eprintln!("lapse: note: {line}");
        }
    }
    Ok(u8::try_from(outcome.exit_status.clamp(0, 255)).unwrap_or(1))
}

pub(crate) fn regex(flag: &str, pattern: &Option<String>) -> Result<Option<Regex>> {
    pattern
        .as_deref()
        .map(|p| {
            Regex::new(p).with_context(|| format!("--{flag}: invalid regular expression {p:?}"))
        })
        .transpose()
}

pub fn report(mut a: ReportArgs) -> Result<u8> {
    // (--threshold, --from and --to are finite and >= 0: cli.rs)
    if let (Some(from), Some(to)) = (a.filter.from, a.filter.to) {
        if from > to {
            bail!("--from {from} is after --to {to}: nothing lies between them");
        }
    }
    let file = open(&a.file)?;
    if a.filter.from_mark.is_some() || a.filter.to_mark.is_some() {
        let (from, to) = lapse_analysis::run::mark_window(
            &file,
            a.filter.from_mark.as_deref(),
            a.filter.to_mark.as_deref(),
        )?;
        a.filter.from = from.or(a.filter.from);
        a.filter.to = to.or(a.filter.to);
    }
    check_selected_exist(&file, &a.filter.pid, &a.filter.tid)?;
    let view = a.view;
    let function = regex("function", &a.filter.function)?;
    let query = Query {
        pids: a.filter.pid,
        tids: a.filter.tid,
        // callers/callees take --function as the focus, not a row filter.
        function: if matches!(view, View::Callers | View::Callees) {
            None
        } else {
            function
        },
        module: regex("module", &a.module)?,
        from_s: a.filter.from,
        to_s: a.filter.to,
        compensate: a.compensate,
        application: a.application,
        call_tree: view.needs_call_tree(),
        progress: None,
    };
    let (analysis, query) = crate::progress::analyze_with_progress(&file, query)?;
    let bad_chunks = analysis.bad_chunks();
    if bad_chunks > 0 {
        eprintln!(
            "lapse: warning: {}: {bad_chunks} chunks do not decode (damaged); their events are left out",
            a.file.display()
        );
    }
    let spec = ViewSpec {
        view,
        format: a.format,
        function: a.filter.function,
        focus: a.focus,
        no_collapse: a.no_collapse,
        threshold_pct: a.threshold,
        sort: a.sort,
        limit: a.limit,
        columns: a.columns,
    };
    let out = lapse_report::build(&file, &analysis, &query, &spec)?;
    let stdout = io::stdout();
    let color =
        a.format == Format::Table && stdout.is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let opts = RenderOptions {
        format: a.format,
        color,
        width: table_width(stdout.is_terminal()),
    };
    let mut w = BufWriter::new(stdout.lock());
    render(&mut w, &file, &analysis, &out, &opts)?;
    w.flush()?;
    Ok(0)
}

/// The width tables fit: `COLUMNS` when set, else the terminal's; no
/// limit when writing to a file or a pipe.
fn table_width(is_terminal: bool) -> Option<usize> {
    if let Some(n) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
    {
        return Some(n);
    }
    if !is_terminal {
        return None;
    }
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ fills the winsize struct we pass; fd 1 is stdout.
    let r = unsafe { libc::ioctl(1, libc::TIOCGWINSZ, &mut ws) };
    (r == 0 && ws.ws_col > 0).then_some(usize::from(ws.ws_col))
}

pub fn info(path: &Path, format: Format) -> Result<u8> {
    let file = DataFile::open(path)?;
    let analysis = match file.session.method {
        lapse_data::Method::Instrumentation => Some(analyze(&file, &Query::default())?),
        lapse_data::Method::Sampling => None,
    };
    let info = lapse_report::Info::of(&file, analysis.as_ref(), spill_hint(path));
    let mut o = BufWriter::new(io::stdout().lock());
    info.render(&mut o, format)?;
    o.flush()?;
    Ok(0)
}

pub fn import(trace: &Path, output: &Path) -> Result<u8> {
    // A FIFO or a device is refused, not waited on.
    let reader = lapse_data::open_regular(trace)?;
    let len = reader.metadata().map_or(0, |m| m.len());
    let name = trace.display().to_string();
    let reader = crate::progress::reading(reader, len, "importing");
    let imported = lapse_import::import_reader(io::BufReader::new(reader), &name)?;
    // Written beside a regular file and put in place when complete (a
    // failure keeps the previous file); a device or a pipe in place.
    let (mut pending, out) = lapse_data::OutputFile::create(output, "import")
        .with_context(|| format!("{}: cannot create", output.display()))?;
    let events = imported
        .write(BufWriter::new(out))
        .and_then(|n| pending.commit().map(|()| n))
        .with_context(|| output.display().to_string())?;
    let mut line = format!(
        "lapse: imported {events} events from {} into {}",
        trace.display(),
        output.display()
    );
    if imported.unmatched_ends > 0 {
        line.push_str(&format!(
            " ({} end events without a begin ignored)",
            imported.unmatched_ends
        ));
    }
    eprintln!("{line}");
    Ok(0)
}
