#!/usr/bin/env bash
# bench/instrument/keepup.sh - does the recorder keep up? (SPEC section 7:
# on calls.c the target waits for the recorder at most 10 % of its run.)
#
# Records ../shared/workloads/calls.c (built -O2 -finstrument-functions)
# RUNS times with this tree's lapse (release) and reads, from `lapse report
# --format json`, the session's recorder_wait_ns (the hand-over time cut
# out of the threads' timelines) and duration_ns (the target's run). Prints
# every run with the load average beside it, then the medians, and the
# recorder's max RSS (/usr/bin/time).
#
# With a second lapse binary (for instance one built from main), the runs
# alternate between the two (A B A B ...) and both medians are printed: an
# A/B on a machine shared with other work needs the rounds interleaved.
#
# usage: bench/instrument/keepup.sh [RUNS] [OTHER_LAPSE]   (RUNS default 9)
set -euo pipefail
. "$(dirname "$0")/../lib.sh"

RUNS=${1:-${RUNS:-9}}
OTHER=${2:-}
bench_paths
OUT=$(mktemp -d /tmp/lapse-keepup.XXXXXX)
trap 'rm -rf "$OUT"' EXIT

echo "building lapse (release)..." >&2
(cd "$ROOT" && cargo build --release -q -p lapse-cli)
A=$ROOT/target/release/lapse
gcc -O2 -finstrument-functions -o "$OUT/calls" "$WL/calls.c"

# one_run NAME LAPSE: appends "share wall_s wait_ms rss_kib load" to $OUT/NAME
one_run() {
    local name=$1 lapse=$2
    /usr/bin/time -f "%M" -o "$OUT/time.txt" "$lapse" record -o "$OUT/c.lapse" -- "$OUT/calls" >/dev/null 2>&1
    local load
    load=$(cut -d' ' -f1 /proc/loadavg)
    "$lapse" report "$OUT/c.lapse" --format json | python3 -c '
import json, sys
s = json.load(sys.stdin)["session"]
print("%.2f %.3f %.0f" % (100 * s["recorder_wait_ns"] / s["duration_ns"], s["duration_ns"] / 1e9, s["recorder_wait_ns"] / 1e6), end=" ")' >>"$OUT/$name"
    echo "$(cat "$OUT/time.txt") $load" >>"$OUT/$name"
    tail -1 "$OUT/$name" | awk -v n="$name" '{printf "%-5s waited %5s %% of a %s s run (%s ms), recorder max RSS %.1f MiB, load %s\n", n, $1, $2, $3, $4 / 1024, $5}'
}

: >"$OUT/A"
[ -n "$OTHER" ] && : >"$OUT/B"
for i in $(seq "$RUNS"); do
    one_run A "$A"
    [ -n "$OTHER" ] && one_run B "$OTHER"
done

summary() {
    local name=$1 label=$2
    printf '| %s | %s %% (%s-%s %%) | %s s | %.1f MiB | %s-%s |\n' "$label" \
        "$(cut -d' ' -f1 "$OUT/$name" | median)" \
        "$(cut -d' ' -f1 "$OUT/$name" | sort -g | head -1)" "$(cut -d' ' -f1 "$OUT/$name" | sort -g | tail -1)" \
        "$(cut -d' ' -f2 "$OUT/$name" | median)" \
        "$(echo "$(cut -d' ' -f4 "$OUT/$name" | median) / 1024" | bc -l)" \
        "$(cut -d' ' -f5 "$OUT/$name" | sort -g | head -1)" "$(cut -d' ' -f5 "$OUT/$name" | sort -g | tail -1)"
}
echo
echo "calls.c, $RUNS runs each; medians (min-max); target: at most 10 % (SPEC 7)"
echo
printf '| lapse | waiting for the recorder, share of the run | run (wall) | recorder max RSS | load average |\n|---|---|---|---|---|\n'
summary A "this tree"
[ -n "$OTHER" ] && summary B "$OTHER"
echo
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), kernel $(uname -r)"
