#!/usr/bin/env bash
# bench/instrument/threads.sh - the recorder's memory against the number of
# threads alive at once (SPEC section 7: at most 64 MiB RSS whatever the
# thread count).
#
# Records bench/instrument/threads.c (built -O2 -finstrument-functions:
# N threads, each 5 calls, a barrier all of them wait at, 5 calls) with this
# tree's lapse (release) for each N given, and prints the recorder's peak
# (its VmHWM, from `lapse info`), the events recorded and lost, the threads,
# and the run's wall time beside the program's own without lapse.
#
# The kernel allows about 32,000 threads by default (kernel.pid_max 32768,
# vm.max_map_count 65530: a thread's stack and guard are two mappings).
# RAISE=1 raises both for the run (as root) and puts them back after.
#
# usage: bench/instrument/threads.sh [N ...]   (default: 50 5000 20000)
#        RAISE=1 bench/instrument/threads.sh 60000 90000
#        LAPSE=/path/to/other/lapse bench/instrument/threads.sh ...  (that
#        build instead of this tree's)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=$(mktemp -d /tmp/lapse-threads.XXXXXX)
PID_MAX=$(cat /proc/sys/kernel/pid_max)
MAP_COUNT=$(cat /proc/sys/vm/max_map_count)
restore() {
    if [ "${RAISE:-0}" = 1 ]; then
        echo "$PID_MAX" >/proc/sys/kernel/pid_max
        echo "$MAP_COUNT" >/proc/sys/vm/max_map_count
    fi
    rm -rf "$OUT"
}
trap restore EXIT
if [ "${RAISE:-0}" = 1 ]; then
    echo 4194304 >/proc/sys/kernel/pid_max
    echo 1048576 >/proc/sys/vm/max_map_count
fi
[ $# -gt 0 ] || set -- 50 5000 20000

if [ -n "${LAPSE:-}" ]; then
    L=$LAPSE # (another build, for a side-by-side run)
else
    echo "building lapse (release)..." >&2
    (cd "$ROOT" && cargo build --release -q -p lapse-cli)
    L=$ROOT/target/release/lapse
fi
gcc -O2 -finstrument-functions -pthread -o "$OUT/threads" "$HERE/threads.c"

printf '%-8s %-12s %-10s %-10s %-8s %-9s %-9s %s\n' \
    threads recorder_MiB events lost status lapse_s native_s load
for n in "$@"; do
    s0=$(date +%s.%N)
    "$OUT/threads" "$n" >/dev/null || true
    s1=$(date +%s.%N)
    status=0
    "$L" record -o "$OUT/t.data" -- "$OUT/threads" "$n" >/dev/null 2>"$OUT/err" || status=$?
    s2=$(date +%s.%N)
    info=$("$L" info "$OUT/t.data")
    peak=$(sed -n 's/.*recorder peak memory: \([0-9.]*\) MiB.*/\1/p' <<<"$info")
    events=$(sed -n 's/^events: *\([0-9]*\).*/\1/p' <<<"$info")
    lost=$(sed -n 's/^lost: *\([0-9]*\).*/\1/p' <<<"$info")
    printf '%-8s %-12s %-10s %-10s %-8s %-9.2f %-9.2f %s\n' "$n" "$peak" "$events" "$lost" \
        "$status" "$(echo "$s2 - $s1" | bc)" "$(echo "$s1 - $s0" | bc)" "$(cut -d' ' -f1 /proc/loadavg)"
done
