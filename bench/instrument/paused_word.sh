#!/usr/bin/env bash
# bench/instrument/paused_word.sh - what the pause check costs the probe
# path: the runtime as it was before pause/resume (git revision $BASE,
# default the commit before the first #30 change) against this checkout's,
# both built with build.rs's own compiler flags, on calls.c
# (-finstrument-functions -O2, 57 M calls), the runtime alone (no recorder:
# buffers go nowhere). Interleaved runs; per call: (CPU time with the
# runtime - CPU time of the build without probes) / calls, and, where perf
# may count, instructions per call. Also the cost of a probe while paused
# (LAPSE_PAUSED set: every probe is the load, the branch and a call).
# usage: bench/instrument/paused_word.sh [RUNS]   (default 7)
set -euo pipefail
. "$(dirname "$0")/../lib.sh"

RUNS=${1:-7}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BASE=${BASE:-$(cd "$ROOT" && git log --format=%H --grep='^#30: pause, resume and marks' | tail -1)^}
WL=${WORKLOADS:-/work/shared/workloads}
OUT=$(mktemp -d /tmp/lapse-paused.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$OUT"' EXIT

# build.rs's flags (crates/lapse-rt/build.rs), for a runtime from a tree
build_rt() { # DIR OUT.so
    local src=$1/crates/lapse-rt/csrc
    local files
    files=$(cd "$src" && ls *.c | grep -v sancov_stub.c | sed "s|^|$src/|")
    # shellcheck disable=SC2086
    cc -shared -fPIC -O2 -g -std=gnu11 -fvisibility=hidden -fno-omit-frame-pointer \
        -Wl,-z,defs -I"$src" -o "$2" $files "$src/x86_64.S" -ldl -pthread
}
mkdir "$OUT/base"
(cd "$ROOT" && git archive "$BASE" crates/lapse-rt/csrc) | tar -x -C "$OUT/base"
build_rt "$OUT/base" "$OUT/base.so"
build_rt "$ROOT" "$OUT/new.so"
gcc -O2 -o "$OUT/native" "$WL/calls.c"
gcc -O2 -finstrument-functions -o "$OUT/calls" "$WL/calls.c"
CALLS=57049156

cpu() { /usr/bin/time -f "%U %S" -o "$OUT/t" "$@" >/dev/null 2>&1 || true; awk '{print $1 + $2}' "$OUT/t"; }
insns() {
    perf stat -x, -e instructions:u -o "$OUT/p" "$@" >/dev/null 2>&1 || { echo NA; return; }
    awk -F, '/instructions/ {print ($1 ~ /^[0-9]+$/) ? $1 : "NA"}' "$OUT/p"
}
# (a command, not a function: /usr/bin/time and perf run it)
with() { echo env LAPSE_SOCKET=/nonexistent LAPSE_SPILL=/dev/null LD_PRELOAD="$1"; }

: >"$OUT/native.t"; : >"$OUT/base.t"; : >"$OUT/new.t"; : >"$OUT/paused.t"
for i in $(seq "$RUNS"); do
    log "run $i/$RUNS"
    cpu "$OUT/native" >>"$OUT/native.t"
    # shellcheck disable=SC2046
    cpu $(with "$OUT/base.so") "$OUT/calls" >>"$OUT/base.t"
    # shellcheck disable=SC2046
    cpu $(with "$OUT/new.so") "$OUT/calls" >>"$OUT/new.t"
    # shellcheck disable=SC2046
    cpu $(with "$OUT/new.so") LAPSE_PAUSED=1 "$OUT/calls" >>"$OUT/paused.t"
done
per_call() { echo "($(med "$1") - $(med "$OUT/native.t")) * 1000000000 / $CALLS" | bc -l; }
ni=$(insns "$OUT/native")
per_insn() {
    local n
    n=$(insns "$@")
    if [ "$n" = NA ] || [ "$ni" = NA ] || [ -z "$n" ]; then echo NA; return; fi
    printf "%.2f" "$(echo "($n - $ni) / $CALLS" | bc -l)"
}
printf "%-28s %14s %18s\n" "runtime" "ns per call" "instructions/call"
# shellcheck disable=SC2046
printf "%-28s %14.2f %18s\n" "before (no pause check)" "$(per_call "$OUT/base.t")" "$(per_insn $(with "$OUT/base.so") "$OUT/calls")"
# shellcheck disable=SC2046
printf "%-28s %14.2f %18s\n" "with the pause check" "$(per_call "$OUT/new.t")" "$(per_insn $(with "$OUT/new.so") "$OUT/calls")"
# shellcheck disable=SC2046
printf "%-28s %14.2f %18s\n" "paused (nothing recorded)" "$(per_call "$OUT/paused.t")" "$(per_insn $(with "$OUT/new.so") LAPSE_PAUSED=1 "$OUT/calls")"
echo "(CPU time medians of $RUNS interleaved runs; native calls.c: $(med "$OUT/native.t") s; base $BASE)"
