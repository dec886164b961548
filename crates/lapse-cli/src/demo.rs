//! `lapse demo`: records the bundled instrumented example (demo/demo.c) and
//! shows its summary and functions view, so a new user sees real output from
//! the README's first command.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use lapse_analysis::ApplicationRule;
use lapse_record::{CallGraph, MethodChoice, OsEventSource};
use lapse_report::{Format, View};

use crate::cli::{FilterArgs, ReportArgs};
use crate::commands;
use crate::demo_bin::DEMO_ELF;

pub fn run() -> Result<u8> {
    if DEMO_ELF.is_empty() {
        bail!("this lapse was built without a C compiler, so the demo program is not bundled (install gcc and rebuild)");
    }
    // A private directory of its own (0700, a new unpredictable name, never
    // an existing one or a planted link), removed when the demo ends.
    let tmp = std::env::temp_dir();
    let dir = tempfile::Builder::new()
        .prefix("lapse-demo-")
        .tempdir_in(&tmp)
        .with_context(|| tmp.display().to_string())?;
    let prog = dir.path().join("lapse-demo");
    std::fs::write(&prog, DEMO_ELF).with_context(|| prog.display().to_string())?;
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755))
        .with_context(|| prog.display().to_string())?;
    let data = PathBuf::from("lapse-demo.data");
    println!(
        "lapse demo: recording {} (built with -finstrument-functions) ...\n",
        prog.display()
    );
    let record = crate::cli::RecordArgs {
        method: MethodChoice::Instrument,
        frequency: None,
        period: None,
        event: None,
        call_graph: CallGraph::Dwarf,
        off_cpu: false,
        os_events: vec![OsEventSource::Switch],
        no_inherit: false,
        no_libcalls: false,
        patch: Vec::new(),
        no_patch: Vec::new(),
        buffer_size: None,
        filter: None,
        exclude: None,
        depth: None,
        min_time: None,
        output: data.clone(),
        pid: None,
        duration: None,
        start_paused: false,
        signal: None,
        delay: None,
        command: vec![prog.display().to_string()],
    };
    let status = commands::record(record);
    drop(dir);
    status?;
    let report = |view: View, limit: Option<usize>| ReportArgs {
        file: data.clone(),
        view,
        format: Format::Table,
        sort: None,
        limit,
        columns: vec![],
        filter: FilterArgs::default(),
        focus: None,
        no_collapse: false,
        module: None,
        threshold: None,
        compensate: false,
        no_compensation: false,
        application: ApplicationRule::Exact,
    };
    println!();
    commands::report(report(View::Summary, None))?;
    println!("\nthreads:\n");
    commands::report(report(View::Threads, None))?;
    let story = "^(load_config|crunch_numbers|checksum_block|walk_tree|spin_ms)$";
    println!("\nthe functions this story is about:\n");
    commands::report(ReportArgs {
        filter: FilterArgs {
            function: Some(story.into()),
            ..FilterArgs::default()
        },
        ..report(View::Functions, None)
    })?;
    println!();
    for line in explain(&data)? {
        println!("{line}");
    }
    println!(
        "\nThe data is in {}; try\n  lapse report {} --view functions\n  lapse report {} --view calltree --threshold 1",
        data.display(),
        data.display(),
        data.display()
    );
    Ok(0)
}

/// What the recording says about the demo's story, computed from it (not
/// told in advance): each line names a function of the table above.
fn explain(data: &std::path::Path) -> Result<Vec<String>> {
    use lapse_analysis::values::{FunctionStats, TimeValue};
    let file = lapse_data::DataFile::open(data)?;
    let lapse_analysis::Analysis::Instr(r) =
        lapse_analysis::analyze(&file, &lapse_analysis::Query::default())?
    else {
        return Ok(Vec::new());
    };
    let row = |name: &str| -> Option<FunctionStats> {
        let f = file.functions.iter().find(|f| f.name == name)?;
        r.acc
            .functions
            .get(f.id.0 as usize)
            .copied()
            .filter(|s| s.calls > 0)
    };
    let ms = |s: &FunctionStats, k: TimeValue| s.time[k].as_nanos_f64() / 1e6;
    let mut out = Vec::new();
    if let Some(s) = row("load_config") {
        let (el, app) = (
            ms(&s, TimeValue::ElapsedInclusive),
            ms(&s, TimeValue::ApplicationInclusive),
        );
        out.push(format!(
            "load_config() took {el:.1} ms but ran on the CPU for {app:.2} ms: {:.0} % of it was waiting \
             (it sleeps, as a program waits for a disk or a lock).",
            100.0 * (1.0 - app / el.max(1e-9))
        ));
    }
    if let Some(s) = row("crunch_numbers") {
        let (el, app) = (
            ms(&s, TimeValue::ElapsedInclusive),
            ms(&s, TimeValue::ApplicationInclusive),
        );
        let calls = row("checksum_block").map_or(0, |c| c.calls);
        let waited = if app < 0.9 * el {
            format!(
                "; the other {:.1} ms it was runnable but off the CPU (this machine is busy)",
                el - app
            )
        } else {
            String::new()
        };
        out.push(format!(
            "crunch_numbers() computed: {app:.1} ms on the CPU of {el:.1} ms elapsed, \
             in {calls} calls of checksum_block(){waited}."
        ));
    }
    if let Some(s) = row("walk_tree") {
        out.push(format!(
            "walk_tree() recursed: {} calls, yet its inclusive time ({:.2} ms) counts each moment once.",
            s.calls,
            ms(&s, TimeValue::ElapsedInclusive)
        ));
    }
    if let Some(s) = row("spin_ms") {
        out.push(format!(
            "spin_ms() ran on the background thread: {:.1} ms on the CPU, alongside the main thread.",
            ms(&s, TimeValue::ApplicationInclusive)
        ));
    }
    Ok(out)
}
