#!/usr/bin/env bash
# bench/instrument/scale.sh - the recorder against the number of busy
# target threads (issue #27, SPEC section 7 "scaling with busy threads" and
# "recorder throughput").
#
# Builds ../shared/workloads/mt.c (T threads, each N calls of a tiny
# function plus fib(22); -O2 -finstrument-functions) and, for each thread
# count given, runs it RUNS times natively, under `lapse record` and under
# `uftrace record` (when installed), interleaved, and prints the medians:
#   native_s      the program alone
#   lapse_s       wall time of `lapse record` (the target's run and the
#                 recorder's wrap-up)
#   x1            lapse_s over lapse_s of the first thread count given
#   wait%         recorder_wait_ns over the busy threads' elapsed time with
#                 it (the time they waited for a free buffer; the main
#                 thread, which only joins them, is left out)
#   rec_cpu_s     recorder_cpu_ns (the recorder's own CPU time, its
#                 workers' included)
#   Mev/cpu_s     events over recorder CPU seconds
#   uftrace_s     wall time of `uftrace record` on the same binary
#
# usage: bench/instrument/scale.sh [T ...]        (default: 1 2 4)
#        N=5000000 RUNS=5 bench/instrument/scale.sh 1 2 4 8 16
#        LAPSE_RECORD_WORKERS=0 bench/instrument/scale.sh ...  (no workers)
#        LAPSE=/path/to/lapse bench/instrument/scale.sh ...   (that build)
#        MT=/path/to/mt bench/instrument/scale.sh ...  (a prebuilt mt: on a
#            machine without a compiler, with LAPSE a stripped release build)
set -euo pipefail
. "$(dirname "$0")/../lib.sh"

bench_paths
N=${N:-5000000}
RUNS=${RUNS:-3}
OUT=$(mktemp -d /tmp/lapse-scale.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
[ $# -gt 0 ] || set -- 1 2 4

if [ -n "${LAPSE:-}" ]; then
    L=$LAPSE
else
    log "building lapse (release)..."
    (cd "$ROOT" && cargo build --release -q -p lapse-cli)
    L=$ROOT/target/release/lapse
fi
if [ -n "${MT:-}" ]; then
    cp "$MT" "$OUT/mt"
else
    gcc -O2 -finstrument-functions -pthread -o "$OUT/mt" "$WL/mt.c"
fi
UFTRACE=$(command -v uftrace || true)

log "machine: $(nproc) cores, $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1); N=$N, $RUNS runs each; load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-8s %9s %9s %6s %7s %10s %10s %10s\n' \
    threads native_s lapse_s x1 wait% rec_cpu_s Mev/cpu_s uftrace_s
first=
for t in "$@"; do
    : >"$OUT/native" ; : >"$OUT/lapse" ; : >"$OUT/wait" ; : >"$OUT/cpu" ; : >"$OUT/rate" ; : >"$OUT/uft"
    for _ in $(seq "$RUNS"); do
        wall "$OUT/mt" "$t" "$N" >>"$OUT/native"
        wall "$L" record -o "$OUT/mt.data" -- "$OUT/mt" "$t" "$N" >>"$OUT/lapse"
        "$L" report "$OUT/mt.data" --format json --view threads >"$OUT/r.json"
        python3 - "$OUT/r.json" >>"$OUT/vals" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
s = v["session"]
wait = s.get("recorder_wait_ns") or 0
# (the busy threads' time, probes included (raw, the default), the waits
# cut out of it; the main thread only waits for them)
el = sum(r.get("elapsed_inclusive_ns") or 0 for r in v["rows"] if r.get("tid") != r.get("pid"))
cpu = s.get("recorder_cpu_ns") or 0
print(100.0 * wait / max(el + wait, 1), cpu / 1e9)
PY
        read -r w c < <(tail -1 "$OUT/vals")
        echo "$w" >>"$OUT/wait"
        echo "$c" >>"$OUT/cpu"
        ev=$("$L" info "$OUT/mt.data" | sed -n 's/^events: *\([0-9]*\).*/\1/p')
        calc "$ev / $c / 1000000" >>"$OUT/rate"
        if [ -n "$UFTRACE" ]; then
            wall timeout 300 "$UFTRACE" record -d "$OUT/uftrace.data" "$OUT/mt" "$t" "$N" >>"$OUT/uft"
            rm -rf "$OUT/uftrace.data"
        fi
    done
    l=$(med "$OUT/lapse")
    [ -n "$first" ] || first=$l
    u=-
    [ -z "$UFTRACE" ] || u=$(printf '%.3f' "$(med "$OUT/uft")")
    printf '%-8s %9.3f %9.3f %6.2f %7.1f %10.3f %10.0f %10s\n' "$t" \
        "$(med "$OUT/native")" "$l" "$(calc "$l / $first")" \
        "$(med "$OUT/wait")" "$(med "$OUT/cpu")" "$(med "$OUT/rate")" "$u"
done
