#!/usr/bin/env bash
# Report throughput side by side: the same instrumented program
# (../shared/workloads/calls.c) recorded by lapse and by uftrace, then
# `lapse report --view functions` vs `uftrace report`, median of RUNS each.
# Also runs the synthetic engine benchmark (100 M events).
#
# usage: bench/report/run.sh            (FIB=30 LOOPS=20000000 RUNS=5)
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
workloads=${WORKLOADS:-$root/../shared/workloads}
FIB=${FIB:-30} LOOPS=${LOOPS:-20000000} RUNS=${RUNS:-5}
command -v uftrace >/dev/null || { apt-get update -qq && apt-get install -y -qq uftrace >/dev/null; }
cargo build --release -q -p lapse-cli --manifest-path "$root/Cargo.toml"
cargo build --release -q -p lapse-analysis --example engine_bench --manifest-path "$root/Cargo.toml"
lapse=$root/target/release/lapse
tmp=$(mktemp -d /tmp/lapse-bench-report.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
gcc -O2 -finstrument-functions -o calls "$workloads/calls.c"
"$lapse" record -o calls.data -- ./calls "$FIB" "$LOOPS" >/dev/null 2>&1
uftrace record -d uftrace.data ./calls "$FIB" "$LOOPS" >/dev/null 2>&1
events=$("$lapse" info calls.data | awk '/^events:/ {print $2}')

timeit() { local s e; s=$(date +%s.%N); "$@" >/dev/null 2>&1; e=$(date +%s.%N); echo "$e - $s" | bc -l; }
lt=(); ut=()
for _ in $(seq "$RUNS"); do
  lt+=("$(timeit "$lapse" report calls.data --view functions --format csv)")
  ut+=("$(timeit uftrace report -d uftrace.data)")
done
l=$(printf '%s\n' "${lt[@]}" | median_low)
u=$(printf '%s\n' "${ut[@]}" | median_low)
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "workload: calls $FIB $LOOPS -> $events events (enter+exit) recorded by each tool"
printf 'lapse report --view functions: median %.3f s = %.1f M events/s\n' "$l" "$(echo "$events / $l / 1000000" | bc -l)"
printf 'uftrace report:                median %.3f s = %.1f M records/s\n' "$u" "$(echo "$events / $u / 1000000" | bc -l)"
printf 'ratio: lapse is %.1fx faster\n' "$(echo "$u / $l" | bc -l)"
echo
"$root/target/release/examples/engine_bench" 100000000 4 5
"$root/target/release/examples/engine_bench" 100000000 1 3
