#!/usr/bin/env bash
# bench/rust/cost.sh - what `lapse build` costs a Rust program (issue #12):
#   1. per call: the call pattern of ../shared/workloads/calls.c (fib(32) and
#      50,000,000 calls of a tiny function; 57,049,156 calls in C) written in
#      Rust, built by `lapse build --release` and recorded, against calls.c
#      built with gcc -finstrument-functions and recorded (target: <= 1.5 x),
#      and clang's -fsanitize-coverage=func,trace-pc-guard for reference.
#      Per call = (recorded wall - native wall) / calls, medians of RUNS
#      interleaved rounds (default 5); "runtime alone" hands the events to a
#      null sink (no recorder), as bench/instrument/sources.sh does.
#   2. with --build-cost: binary size and build time of `lapse build --release`
#      against `cargo build --release` on a real crate (lapse itself, the
#      lapse-cli package and its ~100 dependencies), each from a cold target
#      directory, one build each.
# usage: bench/rust/cost.sh [RUNS] [--build-cost]
set -euo pipefail
. "$(dirname "$0")/../lib.sh"

RUNS=5
BUILD_COST=
for a in "$@"; do
    case $a in
        --build-cost) BUILD_COST=1 ;;
        *) RUNS=$a ;;
    esac
done
bench_paths
OUT=$(mktemp -d /tmp/lapse-bench-rust.XXXXXX)
trap 'rm -rf "$OUT"' EXIT

echo "building lapse (release)..." >&2
(cd "$ROOT" && cargo build --release -q -p lapse-cli)
LAPSE=$ROOT/target/release/lapse
RT=$(ls -t "$ROOT"/target/release/build/lapse-rt-*/out/liblapse_rt.so | head -1)

cd "$OUT"
gcc -O2 -o calls_native "$WL/calls.c"
gcc -O2 -finstrument-functions -o calls_cyg "$WL/calls.c"
# (clang ignores gcc's noipa: noinline keeps its calls real)
clang -O2 -Dnoipa=noinline -o calls_clang "$WL/calls.c"
clang -O2 -Dnoipa=noinline -fsanitize-coverage=func,trace-pc-guard -o calls_sancov "$WL/calls.c" "$("$LAPSE" build --stub-object)"
mkdir -p rcalls/src
cat >rcalls/Cargo.toml <<'TOML'
[package]
name = "rcalls"
version = "0.1.0"
edition = "2021"

[workspace]
TOML
cat >rcalls/src/main.rs <<'RS'
//! calls.c in Rust: fib(n) with both calls real, then `loops` calls of tiny().
use std::hint::black_box;

#[inline(never)]
fn fib(n: i32) -> i64 {
    if n < 2 {
        return n as i64;
    }
    let a = black_box(fib(n - 1));
    let b = black_box(fib(n - 2));
    a + b
}

#[inline(never)]
fn tiny(x: i64) -> i64 {
    x * 3 + 1
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: i32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(32);
    let loops: i64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(50_000_000);
    let mut sum = fib(black_box(n));
    for i in 0..loops {
        sum = sum.wrapping_add(tiny(black_box(i)));
    }
    println!("{sum}");
}
RS
(cd rcalls && cargo build --release -q --offline && "$LAPSE" build --release --offline >/dev/null 2>&1)
RNATIVE=rcalls/target/release/rcalls
RLAPSE=rcalls/target/lapse/release/rcalls
[ "$($RNATIVE)" = "$(./calls_native)" ] || { echo "the Rust port computes something else" >&2; exit 1; }
CALLS=57049156

for f in cnative clnative rnative rnolapse rt_cyg rec_cyg rt_sancov rec_sancov rt_rust rec_rust; do : >"$f"; done
for i in $(seq "$RUNS"); do
    echo "round $i/$RUNS" >&2
    wall ./calls_native >>cnative
    wall ./calls_clang >>clnative
    wall "$RNATIVE" >>rnative
    wall "$RLAPSE" >>rnolapse
    wall alone ./calls_cyg >>rt_cyg
    wall "$LAPSE" record -o x.lapse -- ./calls_cyg >>rec_cyg
    wall alone ./calls_sancov >>rt_sancov
    wall "$LAPSE" record -o x.lapse -- ./calls_sancov >>rec_sancov
    wall alone "$RLAPSE" >>rt_rust
    wall "$LAPSE" record -o x.lapse -- "$RLAPSE" >>rec_rust
done
"$LAPSE" report x.lapse --view functions --format json >rust_functions.json

per() { echo "($(med "$1") - $(med "$2")) * 1000000000 / $CALLS" | bc -l; }
CYG=$(per rec_cyg cnative)
printf '| build | runtime alone, per call | `lapse record` end to end, per call | ÷ C -finstrument-functions (end to end) |\n'
printf '|---|---|---|---|\n'
printf '| C, gcc -O2 -finstrument-functions | %.1f ns | %.1f ns | 1.00 × |\n' "$(per rt_cyg cnative)" "$CYG"
printf '| C, clang -O2 -fsanitize-coverage=func,trace-pc-guard | %.1f ns | %.1f ns | %.2f × |\n' "$(per rt_sancov clnative)" "$(per rec_sancov clnative)" "$(echo "$(per rec_sancov clnative) / $CYG" | bc -l)"
printf '| Rust, lapse build --release | %.1f ns | %.1f ns | %.2f × |\n' "$(per rt_rust rnative)" "$(per rec_rust rnative)" "$(echo "$(per rec_rust rnative) / $CYG" | bc -l)"
printf '\nwithout lapse: the lapse build runs in %.3f s, cargo build --release in %.3f s (%.2f ns per call for the empty probe); C native %.3f s\n' \
    "$(med rnolapse)" "$(med rnative)" "$(per rnolapse rnative)" "$(med cnative)"
python3 - rust_functions.json <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
print("the Rust recording (last round):", ", ".join(
    "%s %d calls" % (r["function"], r["calls"]) for r in rows if r["calls"] > 1000))
PY

if [ -n "$BUILD_COST" ]; then
    echo "building lapse-cli twice from cold target directories (several minutes)..." >&2
    t0=$(now)
    (cd "$ROOT" && cargo build --release -q -p lapse-cli --target-dir "$OUT/plain")
    t1=$(now)
    (cd "$ROOT" && "$LAPSE" build --release -q -p lapse-cli --target-dir "$OUT/probed" >/dev/null)
    t2=$(now)
    ps=$(stat -c %s "$OUT/plain/release/lapse")
    ls=$(stat -c %s "$OUT/probed/release/lapse")
    pt=$(echo "$t1 - $t0" | bc -l)
    lt=$(echo "$t2 - $t1" | bc -l)
    printf '\n| lapse-cli (release) | cargo build | lapse build | increase |\n|---|---|---|---|\n'
    printf '| binary size | %.1f MiB | %.1f MiB | %+.1f %% |\n' "$(echo "$ps/1048576" | bc -l)" "$(echo "$ls/1048576" | bc -l)" "$(echo "($ls-$ps)*100/$ps" | bc -l)"
    printf '| build time (cold) | %.0f s | %.0f s | %+.1f %% |\n' "$pt" "$lt" "$(echo "($lt-$pt)*100/$pt" | bc -l)"
fi
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), kernel $(uname -r), $(rustc --version), $(clang --version | head -1), load $(cut -d' ' -f1-3 /proc/loadavg)"
