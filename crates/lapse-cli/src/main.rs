//! The `lapse` command: a thin layer mapping flags onto the library crates.
//! `main` prints one error line and returns an exit code; a closed stdout
//! pipe (`lapse report | head`) is success.

mod cargo_build;
mod cli;
mod commands;
mod demo;
mod demo_bin;
mod export;
mod progress;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};

/// Notes the signal dispositions and mask lapse inherited before Rust's
/// runtime ignores SIGPIPE (it does so before `main`, after `.init_array`):
/// the target gets what lapse got, so `lapse record -- prog | head` ends
/// `prog` by SIGPIPE as it would end without lapse.
#[used]
#[unsafe(link_section = ".init_array")]
static NOTE_INHERITED_SIGNALS: extern "C" fn() = note_inherited_signals;

extern "C" fn note_inherited_signals() {
    lapse_record::linux::launch::note_inherited_signals();
}

fn main() -> ExitCode {
    on_own_stack(lapse_main)
}

/// `lapse` itself: parses the flags and runs the command.
fn lapse_main() -> ExitCode {
    let args = match cli::Cli::try_parse() {
        Ok(a) => a,
        Err(e) => {
            if !e.use_stderr() {
                // --help, --version
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                // `lapse` alone: the help as it is meant to be read.
                let _ = e.print();
                return ExitCode::from(2);
            }
            // Bad flags: one line, keeping clap's hint (e.g. the possible values).
            let text = e.render().to_string();
            let parts: Vec<&str> = text
                .lines()
                .map(str::trim)
                .filter(|l| {
                    !l.is_empty()
                        && !l.starts_with("Usage:")
                        && !l.starts_with("For more information")
                })
                .collect();
            eprintln!("lapse: {} (see lapse --help)", parts.join(" "));
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
            }
            eprintln!("lapse: error: {}", one_line(&e));
            ExitCode::from(1)
        }
    }
}

/// Runs the command the flags name; its exit code.
fn run(cli: Cli) -> anyhow::Result<u8> {
    match cli.command {
        Command::Record(a) => commands::record(a),
        Command::Report(a) => commands::report(a),
        Command::Info { file, format } => commands::info(&file, format),
        Command::Recover { file } => commands::recover(&file),
        Command::Import { trace, output } => commands::import(&trace, &output),
        Command::Build(a) => crate::cargo_build::run(a),
        Command::Demo => crate::demo::run(),
        Command::Header => {
            use std::io::Write;
            // (a closed pipe is success, as for every output of lapse)
            let _ = std::io::stdout().write_all(commands::HEADER.as_bytes());
            Ok(0)
        }
        Command::Export(a) => crate::export::export(a),
        Command::Diff(a) => crate::export::diff(a),
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "lapse", &mut std::io::stdout());
            Ok(0)
        }
        Command::Man { command } => {
            let cmd = <Cli as clap::CommandFactory>::command();
            let page = match command {
                // (`lapse help` is clap's: no page of its own to name)
                None => cmd.disable_help_subcommand(true),
                Some(name) => {
                    let Some(sub) = cmd.find_subcommand(&name) else {
                        let names: Vec<&str> = cmd
                            .get_subcommands()
                            .map(|s| s.get_name())
                            .filter(|n| *n != "help")
                            .collect();
                        anyhow::bail!("man: no command {name} (commands: {})", names.join(", "));
                    };
                    // Named as its page is, lapse-report(1) (a name once per
                    // process: leaked).
                    let title: &'static str = format!("lapse-{name}").leak();
                    sub.clone().name(title)
                }
            };
            clap_mangen::Man::new(page).render(&mut std::io::stdout())?;
            Ok(0)
        }
    }
}

/// The stack lapse's work runs on, whatever `ulimit -s` gave the main
/// thread: deep recursions in a recording (a call tree millions deep) and
/// a 64 KiB limit (which the target is meant to inherit, not lapse) must
/// not abort lapse. Untouched pages cost nothing.
const STACK_BYTES: usize = 256 << 20;

/// Runs `work` on a thread with a stack of [`STACK_BYTES`] (on this one
/// if no such thread can be had). The main thread then blocks every
/// signal, so that Ctrl-C and the like reach the thread doing the work, as
/// they did when it was the main thread.
fn on_own_stack(work: fn() -> ExitCode) -> ExitCode {
    let worker = std::thread::Builder::new()
        .name("lapse".into())
        .stack_size(STACK_BYTES)
        .spawn(work);
    match worker {
        Ok(handle) => {
            block_all_signals();
            handle
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        }
        Err(_) => work(),
    }
}

fn block_all_signals() {
    // SAFETY: a full set built in place, applied to this thread only.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
    }
}

/// The error and its causes on one line, each said once: library errors
/// often show their cause in their own message (`"{path}: {source}"`) and
/// also return it as their source, so a cause whose text is already on the
/// line is not added again.
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line.replace('\n', " ")
}
