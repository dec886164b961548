//! Builds `liblapse_rt.so` from the C sources in `csrc/` into OUT_DIR, so the
//! crate can hand the library's bytes to the recorder (which embeds it in the
//! `lapse` binary and writes it out for `LD_PRELOAD`).

use std::env;
use std::path::PathBuf;
use std::process::Command;

const SOURCES: [&str; 21] = [
    "csrc/probe.c",
    "csrc/calibrate.c",
    "csrc/trampoline.c",
    "csrc/unwind.c",
    "csrc/libcalls.c",
    "csrc/threads.c",
    "csrc/buffers.c",
    "csrc/slots.c",
    "csrc/arena.c",
    "csrc/transport.c",
    "csrc/lifecycle.c",
    "csrc/env.c",
    "csrc/exec.c",
    "csrc/rawfork.c",
    "csrc/context.c",
    "csrc/sancov.c",
    "csrc/scope.c",
    "csrc/patch.c",
    "csrc/filter.c",
    "csrc/control.c",
    "csrc/attach.c",
];

/// The object `lapse build` links into the programs it builds (sanitizer
/// coverage's two functions, empty unless the runtime is loaded).
const STUB: &str = "csrc/sancov_stub.c";

fn main() {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let so = out_dir.join("liblapse_rt.so");
    // The trampoline's entry points are x86-64 assembly; elsewhere the
    // runtime has the -finstrument-functions probes only.
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let asm: &[&str] = if arch == "x86_64" {
        &["csrc/x86_64.S"]
    } else {
        &[]
    };
    for src in SOURCES
        .iter()
        .chain(asm)
        .chain(["csrc/lapse_rt.h", "csrc/rt.h", "csrc/stubs.h", STUB].iter())
    {
        println!("cargo:rerun-if-changed={src}");
    }
    // cc knows the right compiler for the target; it builds static archives
    // only, so we run its compiler ourselves with -shared.
    let compiler = cc::Build::new()
        .opt_level(2)
        .pic(true)
        .cargo_metadata(false)
        .get_compiler();
    let mut cmd: Command = compiler.to_command();
    cmd.args([
        "-shared",
        "-fPIC",
        "-O2",
        "-g",
        "-std=gnu11",
        "-Wall",
        "-Wextra",
        "-fvisibility=hidden",
        "-fno-omit-frame-pointer",
        "-Wl,-z,defs", // an undefined symbol fails here, not in the target
        "-Icsrc",
        "-o",
    ])
    .arg(&so)
    .args(SOURCES)
    .args(asm)
    .args(["-ldl", "-pthread"]);
    let status = cmd
        .status()
        .expect("running the C compiler for liblapse_rt.so");
    assert!(status.success(), "building liblapse_rt.so failed: {cmd:?}");

    // The stub: one object, position independent (it is linked into
    // executables and shared libraries alike).
    let stub = out_dir.join("lapse_sancov_stub.o");
    let mut cmd: Command = compiler.to_command();
    cmd.args(["-c", "-fPIC", "-O2", "-std=gnu11", "-Wall", "-Wextra", "-o"])
        .arg(&stub)
        .arg(STUB);
    let status = cmd.status().expect("running the C compiler for the stub");
    assert!(status.success(), "building the sancov stub failed: {cmd:?}");
}
