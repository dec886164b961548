#!/usr/bin/env bash
# bench/instrument/filter.sh - what record-time filters save, on calls.c
# (-finstrument-functions -O2; 7,049,155 calls of fib, 50,000,000 of tiny,
# main):
#   - `lapse record` with no filter against `lapse record --filter '^fib$'`
#     (tiny's 50 M calls left out): wall and CPU seconds, and the ratio;
#   - the cost of a probe a filter leaves out, per call, with the runtime
#     alone (no recorder: its buffers go to a null sink) so that only the
#     probe path is measured: calls.c with every call but main's left out
#     (a) by --exclude (the stateless lookup), (b) by --filter '^main$'
#     --depth 1 (the per-thread stack), against the plain build, divided by
#     the 57,049,155 calls left out; beside it the cost of a kept probe pair
#     (the runtime alone, no filter);
#   - uftrace's own filter on the same binary for comparison
#     (`uftrace record` against `uftrace record -F fib`), when installed.
# Every figure is the median of $RUNS runs (default 5).
# usage: bench/instrument/filter.sh [RUNS]     (from anywhere; needs gcc, python3, nm)
set -euo pipefail
. "$(dirname "$0")/../lib.sh"

RUNS=${1:-${RUNS:-5}}
bench_paths
OUT=$(mktemp -d /tmp/lapse-bench.XXXXXX)
trap 'rm -rf "$OUT"' EXIT

log "building lapse (release)..."
(cd "$ROOT" && cargo build --release -q -p lapse-cli)
LAPSE=$ROOT/target/release/lapse
RT=$(ls -t "$ROOT"/target/release/build/lapse-rt-*/out/liblapse_rt.so | head -1)

gcc -O2 -o "$OUT/calls_native" "$WL/calls.c"
gcc -O2 -finstrument-functions -o "$OUT/calls" "$WL/calls.c"
LEFT_OUT=57049155 # every call but main's: 2*fib(33)-1 + 50,000,000 tiny()

# A filter table (csrc/lapse_rt.h, struct lapse_filter_header) for the
# runtime alone, as the recorder would write it: $1 = flags, $2 = depth,
# then "name:rangeflags" for the functions to put in it.
table() {
    local flags=$1 depth=$2
    shift 2
    python3 - "$OUT/calls" "$flags" "$depth" "$@" <<'PY'
import os, struct, subprocess, sys
exe, flags, depth, *want = sys.argv[1:]
syms = {}
for line in subprocess.run(["nm", "-S", exe], capture_output=True, text=True).stdout.splitlines():
    p = line.split()
    if len(p) == 4 and p[2] in "tT":
        syms[p[3]] = (int(p[0], 16), int(p[1], 16))
ranges = sorted((syms[n][0], syms[n][0] + syms[n][1], int(f)) for n, f in (w.split(":") for w in want))
st = os.stat(exe)
out = struct.pack("<IIQQIIQ", 0x544C4946, len(ranges), st.st_dev, st.st_ino, int(flags), int(depth), 0)
for a, b, f in ranges:
    out += struct.pack("<QQII", a, b, f, 0)
sys.stdout.buffer.write(out)
PY
}
table 0 0 fib:2 tiny:2 >"$OUT/exclude.table"   # --exclude '^(fib|tiny)$'
table 1 1 main:1 >"$OUT/depth.table"           # --filter '^main$' --depth 1

# Wall and CPU (user + system) seconds of "$@", its output dropped.
timed() { /usr/bin/time -f "%e %U %S" -o "$OUT/t" "$@" >/dev/null 2>&1 || true; awk '{print $1, $2 + $3}' "$OUT/t"; }

cd "$OUT"
: >native; : >stubs; : >alone; : >alone_excl; : >alone_depth; : >all; : >fib; : >uall; : >ufib
for i in $(seq "$RUNS"); do
    log "run $i/$RUNS"
    timed ./calls_native >>native
    timed ./calls >>stubs # (the probes call glibc's empty __cyg_profile_func_*)
    # (the runtime with no recorder: lib.sh's alone(), spelled out for time)
    timed env LAPSE_SOCKET=/nonexistent LAPSE_SPILL=/dev/null LD_PRELOAD="$RT" ./calls >>alone
    timed env LAPSE_FILTER="$OUT/exclude.table" LAPSE_SOCKET=/nonexistent LAPSE_SPILL=/dev/null LD_PRELOAD="$RT" ./calls >>alone_excl
    timed env LAPSE_FILTER="$OUT/depth.table" LAPSE_SOCKET=/nonexistent LAPSE_SPILL=/dev/null LD_PRELOAD="$RT" ./calls >>alone_depth
    timed "$LAPSE" record -o all.lapse -- ./calls >>all
    timed "$LAPSE" record --filter '^fib$' -o fib.lapse -- ./calls >>fib
    if command -v uftrace >/dev/null; then
        rm -rf u.data && timed uftrace record -d u.data ./calls >>uall
        rm -rf u.data && timed uftrace record -d u.data -F fib ./calls >>ufib
    fi
done
col() { awk -v c="$2" '{print $c}' "$1" | median; }
ns_per() { echo "($1 - $2) * 1000000000 / $3" | bc -l | xargs printf "%.1f"; }

echo "calls.c, $RUNS runs, medians (seconds: wall / CPU of lapse and the target together)"
printf '%-44s %8s %8s\n' "" wall cpu
for f in native stubs alone alone_excl alone_depth all fib uall ufib; do
    [ -s $f ] || continue
    case $f in
    native) name="plain build (no probes)" ;;
    stubs) name="probes calling glibc's empty stubs" ;;
    alone) name="runtime alone, no filter" ;;
    alone_excl) name="runtime alone, every call but main excluded" ;;
    alone_depth) name="runtime alone, --filter ^main\$ --depth 1" ;;
    all) name="lapse record, no filter" ;;
    fib) name="lapse record --filter '^fib\$'" ;;
    uall) name="uftrace record" ;;
    ufib) name="uftrace record -F fib" ;;
    esac
    printf '%-44s %8.3f %8.3f\n' "$name" "$(col $f 1)" "$(col $f 2)"
done
echo
echo "--filter '^fib\$' speed-up: $(echo "$(col all 1) / $(col fib 1)" | bc -l | xargs printf '%.2f')x wall, $(echo "$(col all 2) / $(col fib 2)" | bc -l | xargs printf '%.2f')x CPU"
echo "events: $("$LAPSE" info all.lapse | awk '/^events:/{print $2}') without a filter, $("$LAPSE" info fib.lapse | awk '/^events:/{print $2}') with it"
echo "per call (enter + exit probes), CPU time over the plain build:"
echo "  glibc's empty stubs:         $(ns_per "$(col stubs 2)" "$(col native 2)" "$LEFT_OUT") ns"
echo "  runtime alone, kept:         $(ns_per "$(col alone 2)" "$(col native 2)" "$LEFT_OUT") ns"
echo "  runtime alone, --exclude:    $(ns_per "$(col alone_excl 2)" "$(col native 2)" "$LEFT_OUT") ns"
echo "  runtime alone, --depth:      $(ns_per "$(col alone_depth 2)" "$(col native 2)" "$LEFT_OUT") ns"
