//! `lapse demo`: records the bundled instrumented example (demo/demo.c) and
//! shows its summary and functions view, so a new user sees real output from
//! the README's first command.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use lapse_record::{CallGraph, MethodChoice};
use lapse_report::{ApplicationRule, Format, View};

use crate::cli::ReportArgs;
use crate::commands;
use crate::demo_bin::DEMO_ELF;

pub fn run() -> Result<u8> {
    if DEMO_ELF.is_empty() {
        bail!("this lapse was built without a C compiler, so the demo program is not bundled (install gcc and rebuild)");
    }
    let dir = std::env::temp_dir().join(format!("lapse-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| dir.display().to_string())?;
    let prog = dir.join("lapse-demo");
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
        os_events: vec!["switch"],
        no_inherit: false,
        output: data.clone(),
        pid: None,
        duration: None,
        command: vec![prog.display().to_string()],
    };
    let status = commands::record(record);
    let _ = std::fs::remove_dir_all(&dir);
    status?;
    let report = |view: View, limit: Option<usize>| ReportArgs {
        file: data.clone(),
        view,
        format: Format::Table,
        sort: None,
        limit,
        columns: vec![],
        function: None,
        module: None,
        pid: vec![],
        tid: vec![],
        from: None,
        to: None,
        threshold: 0.0,
        no_compensation: false,
        application: ApplicationRule::Exact,
    };
    println!();
    commands::report(report(View::Summary, None))?;
    println!("\nthreads:\n");
    commands::report(report(View::Threads, None))?;
    println!(
        "\nload_config() sleeps: its elapsed time is large, its application time near zero.\n\
         crunch_numbers() computes: application ≈ elapsed. The data is in {}; try\n  \
         lapse report {} --view functions\n  lapse report {} --view calltree --threshold 1",
        data.display(),
        data.display(),
        data.display()
    );
    Ok(0)
}
