#!/usr/bin/env bash
# bench/instrument/run.sh - instrumentation benchmark (SPEC section 7), side
# by side with uftrace in one run:
#   - probe cost per call on calls.c (-finstrument-functions -O2) against the
#     plain build: (instrumented - native) / calls, for
#       * the lapse runtime alone (buffers handed to a null sink),
#       * `lapse record` end to end (runtime + recorder on the same machine),
#       * `uftrace record`;
#   - the cost of two TSC reads measured in the same run (the floor);
#   - bytes per call in the data file (lapse) / data directory (uftrace);
#   - the recorder's max RSS;
#   - how long calls.c waited for the recorder, as a share of its run (the
#     hand-over time the session header reports; bench/instrument/keepup.sh
#     measures it alone, and A/B against another lapse);
#   - accuracy on mixed.c phases against its -DGROUND_TRUTH output.
# Every figure is the median of $RUNS runs (default 5).
# usage: bench/instrument/run.sh [RUNS]     (from anywhere; needs gcc, root for apt)
set -euo pipefail
. "$(dirname "$0")/../lib.sh"

RUNS=${1:-${RUNS:-5}}
bench_paths
OUT=$(mktemp -d /tmp/lapse-bench.XXXXXX)
trap 'rm -rf "$OUT"' EXIT

if ! command -v uftrace >/dev/null; then
    echo "installing uftrace..." >&2
    (apt-get update -qq && apt-get install -y -qq uftrace) >/dev/null 2>&1 || echo "uftrace unavailable; its columns stay empty" >&2
fi

echo "building lapse (release)..." >&2
(cd "$ROOT" && cargo build --release -q -p lapse-cli)
LAPSE=$ROOT/target/release/lapse
RT=$(ls -t "$ROOT"/target/release/build/lapse-rt-*/out/liblapse_rt.so | head -1)

gcc -O2 -o "$OUT/calls_native" "$WL/calls.c"
gcc -O2 -finstrument-functions -o "$OUT/calls" "$WL/calls.c"
gcc -O2 -pthread -finstrument-functions -DGROUND_TRUTH -o "$OUT/mixed" "$WL/mixed.c"
gcc -O2 -o "$OUT/tsc_pair" "$HERE/tsc_pair.c"
CALLS=57049156 # 2*fib(33)-1 + 50,000,000 tiny() + main (calls.c defaults)

cd "$OUT"
: >native; : >rt_only; : >lapse; : >uftrace; : >tsc; : >rss; : >bytes; : >ubytes; : >waited
for i in $(seq "$RUNS"); do
    echo "run $i/$RUNS" >&2
    ./tsc_pair >>tsc
    wall ./calls_native >>native
    wall env LAPSE_SOCKET=/nonexistent LAPSE_SPILL=/dev/null LD_PRELOAD="$RT" ./calls >>rt_only
    /usr/bin/time -f "%e %M" -o t.txt "$LAPSE" record -o calls.lapse -- ./calls >/dev/null 2>&1 || true
    awk '{print $1}' t.txt >>lapse
    awk '{print $2}' t.txt >>rss
    stat -c %s calls.lapse >>bytes
    "$LAPSE" report calls.lapse --format json | python3 -c 'import json,sys; s=json.load(sys.stdin)["session"]; print(100 * s["recorder_wait_ns"] / s["duration_ns"])' >>waited
    if command -v uftrace >/dev/null; then
        rm -rf uftrace.data
        wall uftrace record -d uftrace.data ./calls >>uftrace
        du -sb uftrace.data | awk '{print $1}' >>ubytes
    fi
done

per_call() { echo "($1 - $(med native)) * 1000000000 / $CALLS" | bc -l; }
TSC=$(med tsc)
RT_NS=$(per_call "$(med rt_only)")
LAPSE_NS=$(per_call "$(med lapse)")
printf '| figure | value |\n|---|---|\n'
printf '| two TSC reads (the floor) | %.1f ns |\n' "$TSC"
printf '| native calls.c | %.3f s |\n' "$(med native)"
printf '| lapse runtime alone, per call (enter+exit) | %.1f ns (%.2f x two TSC reads) |\n' "$RT_NS" "$(echo "$RT_NS / $TSC" | bc -l)"
printf '| lapse record end to end, per call | %.1f ns (%.3f s wall) |\n' "$LAPSE_NS" "$(med lapse)"
if [ -s uftrace ]; then
    U_NS=$(per_call "$(med uftrace)")
    printf '| uftrace record, per call | %.1f ns (%.3f s wall) |\n' "$U_NS" "$(med uftrace)"
    printf '| uftrace / lapse runtime | %.1f x |\n' "$(echo "$U_NS / $RT_NS" | bc -l)"
    printf '| uftrace / lapse record end to end | %.1f x |\n' "$(echo "$U_NS / $LAPSE_NS" | bc -l)"
    printf '| uftrace bytes per call | %.2f |\n' "$(echo "$(med ubytes) / $CALLS" | bc -l)"
fi
printf '| lapse bytes per call (data file) | %.3f |\n' "$(echo "$(med bytes) / $CALLS" | bc -l)"
printf '| lapse recorder max RSS | %.1f MiB |\n' "$(echo "$(med rss) / 1024" | bc -l)"
printf '| calls.c waiting for the recorder, share of its run | %.1f %% |\n' "$(med waited)"
# The call-heavy case: main() of calls.c as lapse reports it (probe cost
# compensated) against the native run's wall time. Elapsed includes the time
# the target was preempted (2 cores shared with the recorder); application
# time leaves those intervals out.
"$LAPSE" report calls.lapse --view functions --format json >calls.json
read -r MAIN_EL MAIN_APP < <(python3 -c 'import json,sys; r={x["function"]: x for x in json.load(open(sys.argv[1]))["rows"]}; m=r["main"]; print(m["elapsed_inclusive_ns"] / 1e9, m["application_inclusive_ns"] / 1e9)' calls.json)
NAT=$(med native)
printf '| calls.c main(), last run: lapse elapsed / application inclusive (compensated) vs native wall | %.3f s / %.3f s vs %.3f s (%+.0f %% / %+.0f %%) |\n' \
    "$MAIN_EL" "$MAIN_APP" "$NAT" "$(echo "100 * ($MAIN_EL - $NAT) / $NAT" | bc -l)" "$(echo "100 * ($MAIN_APP - $NAT) / $NAT" | bc -l)"

# Accuracy: each phase of mixed.c as lapse reports it vs. the program's own clock.
echo "accuracy runs..." >&2
: >acc
for i in $(seq "$RUNS"); do
    "$LAPSE" record -o mixed.lapse -- ./mixed 2>truth.txt >/dev/null || true
    "$LAPSE" report mixed.lapse --view functions --format json >mixed.json
    python3 - truth.txt mixed.json >>acc <<'PY'
import json, re, sys
truth = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\w+)\s+wall\s+([\d.]+) ms", line)
    if m:
        truth[m.group(1)] = float(m.group(2))
rows = {r["function"]: r for r in json.load(open(sys.argv[2]))["rows"]}
got = {
    "spin": rows["spin"]["max_elapsed_inclusive_ns"],  # the 300 ms call
    "sleepy": rows["sleepy"]["elapsed_inclusive_ns"],
    "io": rows["io"]["elapsed_inclusive_ns"],
    "rec": rows["rec"]["max_elapsed_inclusive_ns"],    # the outermost call
    "par": rows["par"]["elapsed_inclusive_ns"],
}
print(" ".join(f"{k}={100 * (got[k] / 1e6 - truth[k]) / truth[k]:.3f}" for k in got))
PY
done
printf '\n| mixed.c phase | median error of lapse vs. ground truth |\n|---|---|\n'
for phase in spin sleepy io rec par; do
    v=$(grep -o "$phase=[-0-9.]*" acc | cut -d= -f2 | median)
    printf '| %s | %+.2f %% |\n' "$phase" "$v"
done
echo
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), kernel $(uname -r), uftrace $(uftrace --version 2>/dev/null | head -1 | awk '{print $2}')"
