#!/usr/bin/env bash
# bench/rust/crate_cost.sh - what the `lapse` crate's probes cost (issue #12):
# the call pattern of ../shared/workloads/calls.c (fib(32) and 50,000,000
# calls of a tiny function: 57,049,155 calls) in Rust, with
# #[lapse::profile] on both functions, built twice by cargo --release:
# without the probes (`plain`) and with them (`probed`).
#   1. without lapse: the probed build's CPU time over the plain build's,
#      per probe (two per call). Target: <= 2 ns per probe.
#   2. with lapse, per call: the runtime alone (events handed to a null
#      sink, no recorder) and `lapse record` end to end, against the C build
#      with gcc -O2 -finstrument-functions under the same two conditions.
# Per-call figures are (run - plain) / calls, medians of RUNS interleaved
# rounds (default 5). CPU times are the process's own (user + system, from
# getrusage in the program: a busy machine stretches wall time, not those);
# end to end is wall time (it includes waiting for the recorder).
# usage: bench/rust/crate_cost.sh [RUNS]    (needs gcc, cargo; offline)
set -euo pipefail
. "$(dirname "$0")/../lib.sh"

RUNS=${1:-5}
bench_paths
OUT=$(mktemp -d /tmp/lapse-bench-crate.XXXXXX)
trap 'rm -rf "$OUT"' EXIT

echo "building lapse (release)..." >&2
(cd "$ROOT" && cargo build --release -q -p lapse-cli)
LAPSE=$ROOT/target/release/lapse
RT=$(ls -t "$ROOT"/target/release/build/lapse-rt-*/out/liblapse_rt.so | head -1)

cd "$OUT"
gcc -O2 -o calls_native "$WL/calls.c"
gcc -O2 -finstrument-functions -o calls_cyg "$WL/calls.c"
mkdir -p rcalls/src
cat >rcalls/Cargo.toml <<TOML
[package]
name = "rcalls"
version = "0.1.0"
edition = "2021"

[dependencies]
lapse = { path = "$ROOT/crates/lapse", optional = true }

[features]
probes = ["dep:lapse"]

[workspace]
TOML
cat >rcalls/src/main.rs <<'RS'
//! calls.c in Rust: fib(n) with both calls real, then `loops` calls of
//! tiny(); with the `probes` feature both are #[lapse::profile]. Prints the
//! checksum, and its own CPU time (ns) on stderr.
use std::hint::black_box;

#[cfg_attr(feature = "probes", lapse::profile)]
#[inline(never)]
fn fib(n: i32) -> i64 {
    if n < 2 {
        return n as i64;
    }
    let a = black_box(fib(n - 1));
    let b = black_box(fib(n - 2));
    a + b
}

#[cfg_attr(feature = "probes", lapse::profile)]
#[inline(never)]
fn tiny(x: i64) -> i64 {
    x * 3 + 1
}

#[repr(C)]
struct Timespec { sec: i64, nsec: i64 }
extern "C" { fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32; }

fn main() {
    let mut args = std::env::args().skip(1);
    let n: i32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(32);
    let loops: i64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(50_000_000);
    let mut sum = fib(black_box(n));
    for i in 0..loops {
        sum = sum.wrapping_add(tiny(black_box(i)));
    }
    println!("{sum}");
    let mut t = Timespec { sec: 0, nsec: 0 };
    // CLOCK_PROCESS_CPUTIME_ID
    unsafe { clock_gettime(2, &mut t) };
    eprintln!("cpu_ns {}", t.sec * 1_000_000_000 + t.nsec);
}
RS
(cd rcalls && cargo build --release -q --offline --target-dir plain \
    && cargo build --release -q --offline --features probes --target-dir probed)
PLAIN=rcalls/plain/release/rcalls
PROBED=rcalls/probed/release/rcalls
[ "$($PLAIN 2>/dev/null)" = "$(./calls_native)" ] || { echo "the Rust port computes something else" >&2; exit 1; }
[ "$($PROBED 2>/dev/null)" = "$(./calls_native)" ] || { echo "the probed build computes something else" >&2; exit 1; }
CALLS=57049155 # fib(32): 7,049,155 calls, tiny: 50,000,000 (main is not profiled)

cpu() { "$@" 2>&1 >/dev/null | awk '/^cpu_ns /{print $2 / 1e9}'; }

for f in plain_cpu probed_cpu plain_wall cnative rt_cyg rec_cyg rt_rust_cpu rec_rust; do : >"$f"; done
for i in $(seq "$RUNS"); do
    echo "round $i/$RUNS" >&2
    cpu "$PLAIN" >>plain_cpu
    cpu "$PROBED" >>probed_cpu
    wall "$PLAIN" >>plain_wall
    wall ./calls_native >>cnative
    wall alone ./calls_cyg >>rt_cyg
    wall "$LAPSE" record -o x.lapse -- ./calls_cyg >>rec_cyg
    cpu alone "$PROBED" >>rt_rust_cpu
    wall "$LAPSE" record -o x.lapse -- "$PROBED" >>rec_rust
done
"$LAPSE" report x.lapse --view functions --format json >rust_functions.json

per() { echo "($(med "$1") - $(med "$2")) * 1000000000 / $CALLS" | bc -l; }
NOOP=$(echo "$(per probed_cpu plain_cpu) / 2" | bc -l)
CYG=$(per rec_cyg cnative)
printf '| build | without lapse | runtime alone, per call | `lapse record` end to end, per call | ÷ C (end to end) |\n'
printf '|---|---|---|---|---|\n'
printf '| C, gcc -O2 -finstrument-functions | | %.1f ns | %.1f ns | 1.00 × |\n' "$(per rt_cyg cnative)" "$CYG"
printf '| Rust, #[lapse::profile] | %.2f ns per probe (target ≤ 2) | %.1f ns (CPU) | %.1f ns | %.2f × |\n' \
    "$NOOP" "$(per rt_rust_cpu plain_cpu)" "$(per rec_rust plain_wall)" "$(echo "$(per rec_rust plain_wall) / $CYG" | bc -l)"
printf '\nplain build %.3f s CPU, probed build without lapse %.3f s CPU; C native %.3f s wall\n' \
    "$(med plain_cpu)" "$(med probed_cpu)" "$(med cnative)"
python3 - rust_functions.json <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
print("the Rust recording (last round):", ", ".join(
    "%s %d calls" % (r["function"], r["calls"]) for r in rows if r["calls"] > 1000))
PY
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), kernel $(uname -r), $(rustc --version), load $(cut -d' ' -f1-3 /proc/loadavg)"
