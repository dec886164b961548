//! Builds the demo workload (`demo/demo.c`) with `-finstrument-functions`
//! into OUT_DIR so that `src/demo_bin.rs` can embed it: `lapse demo` must
//! work from the single `lapse` executable. Without a C compiler the demo is
//! left empty (and `lapse demo` says so) rather than failing the build.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=demo/demo.c");
    let out =
        PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("lapse-demo");
    let compiler = cc::Build::new().cargo_metadata(false).get_compiler();
    let mut cmd = compiler.to_command();
    cmd.args([
        "-O1",
        "-g",
        "-finstrument-functions",
        "-fno-omit-frame-pointer",
        "-pthread",
        "-o",
    ])
    .arg(&out)
    .arg("demo/demo.c");
    let built = cmd.status().map(|s| s.success()).unwrap_or(false);
    if !built {
        println!("cargo:warning=could not build the demo program (no C compiler?); `lapse demo` will be unavailable");
        let _ = std::fs::write(&out, b"");
    }
}
