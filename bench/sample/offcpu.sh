#!/usr/bin/env bash
# Off-CPU benchmark: `lapse record --off-cpu` vs `perf record -e
# sched:sched_switch -g` side by side in one run, on a program that is
# switched out about 10,000 times a second (bench/sample/switcher.c: 45 µs
# of computing, a 50 µs sleep, over and over).
#
# Measures (medians of RUNS interleaved runs, each recorder's run paired
# with the native run just before it):
#   - the target's own CPU time (user + system, as it measures it: the
#     kernel's work at each switch, stack copies included, is charged to
#     it) and wall time, against the native run;
#   - switches per second the target made (it counts them);
#   - bytes per off-CPU period in the file.
#
# Usage: bench/sample/offcpu.sh          (RUNS=15 ROUNDS=20000 WORK=25000)
# Prints a markdown section for BENCHMARKS.md on stdout; progress on stderr.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"

RUNS=${RUNS:-15}
ROUNDS=${ROUNDS:-20000}
WORK=${WORK:-25000}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TMP=$(mktemp -d /tmp/lapse-bench-offcpu.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

if [[ -z "${LAPSE:-}" ]]; then
    log "building lapse (release)..."
    (cd "$ROOT" && cargo build --release -q -p lapse-cli)
    LAPSE="$ROOT/target/release/lapse"
fi
command -v perf >/dev/null || { log "perf not found (apt-get install linux-perf)"; exit 1; }

gcc -O2 -g -fomit-frame-pointer -o "$TMP/switcher" "$HERE/switcher.c"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# "wall cpu switches/s" of the switcher's own run.
own() { grep -o 'switcher_ms [0-9.]* cpu_ms [0-9.]* switches [0-9]* per_s [0-9.]*' | awk '{print $2, $4, $8}'; }
run() { "$@" "$TMP/switcher" "$ROUNDS" "$WORK" 2>&1 | own; }

# The recorders, by name: lapse with DWARF stacks (its default) and frame
# pointers (what perf's -g takes), and without --off-cpu (CPU samples
# only); perf's tracepoint sampling with the kernel's frame-pointer
# callchain (-g) and with DWARF stack copies, which samples no CPU time;
# and perf's own CPU sampling at 1 kHz, for what CPU sampling alone costs
# a program that switches this often.
declare -A REC=(
    [lapse_dwarf]="$LAPSE record --method sample --off-cpu -o $TMP/o.lapse --"
    [lapse_fp]="$LAPSE record --method sample --off-cpu --call-graph fp -o $TMP/f.lapse --"
    [lapse_cpu_only]="$LAPSE record --method sample -o $TMP/c.lapse --"
    [perf_g]="perf record -q -e sched:sched_switch -g -o $TMP/g.perf --"
    [perf_dwarf]="perf record -q -e sched:sched_switch --call-graph dwarf -o $TMP/d.perf --"
    [perf_cpu]="perf record -q -e cpu-clock -F 1000 --call-graph dwarf -o $TMP/p.perf --"
)
NAMES=(lapse_dwarf lapse_fp lapse_cpu_only perf_g perf_dwarf perf_cpu)

: >"$TMP/native"
for n in "${NAMES[@]}"; do : >"$TMP/$n"; done
for i in $(seq "$RUNS"); do
    log "run $i/$RUNS"
    for n in "${NAMES[@]}"; do
        run >>"$TMP/native"
        # shellcheck disable=SC2086
        run ${REC[$n]} >>"$TMP/$n"
        # (the native run of this pair, repeated beside it for `paste`)
        tail -1 "$TMP/native" >>"$TMP/$n.base"
    done
done
# Median of the per-pair ratios: a burst of load elsewhere moves one pair.
paired() { paste -d' ' "$TMP/$1" "$TMP/$1.base" | awk -v c="$2" '{b = c + 3; printf "%.4f\n", 100 * ($c - $b) / $b}' | median; }
col() { cut -d' ' -f"$2" "$TMP/$1" | median; }

periods=$("$LAPSE" report "$TMP/o.lapse" --format json --view threads | grep -o '"off_cpu_periods":[0-9]*' | cut -d: -f2)
lapse_bytes=$(stat -c %s "$TMP/o.lapse")
perf_bytes=$(stat -c %s "$TMP/g.perf")
perf_dwarf_bytes=$(stat -c %s "$TMP/d.perf")
perf_events=$(perf report -i "$TMP/g.perf" --stats 2>/dev/null | awk '/SAMPLE events:/ {print $3; exit}')
per() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", a / b}'; }
lost=$("$LAPSE" info "$TMP/o.lapse" | awk '/^lost:/ {print $2}')

row() {
    printf '| %s | %.1f %% | %.1f %% | %.0f |\n' "$1" "$(paired "$2" 2)" "$(paired "$2" 1)" "$(col "$2" 3)"
}
cpu=$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)
cat <<MD
### Off-CPU (\`--off-cpu\`) at 10,000 switches a second

Measured by \`bench/sample/offcpu.sh\` (RUNS=$RUNS, ROUNDS=$ROUNDS, WORK=$WORK) on $(date -u +%Y-%m-%d):
$(nproc) CPUs ($cpu), Linux $(uname -r), $(perf version). Workload:
\`bench/sample/switcher.c\` (one thread: about 45 µs of computing, then a
50 µs \`nanosleep\`, $ROUNDS times; native: $(col native 1) ms wall,
$(col native 2) ms CPU, $(col native 3) switches/s). Slowdowns are medians of
the per-pair ratios to the native run just before each recorded run; the
CPU time is the target's own (user + system: the kernel's stack copy at
each switch is charged to it). Load average when the run started:
$load_before.

| recorder | slowdown, target's CPU time | slowdown, wall time | switches/s |
|---|---|---|---|
$(row "lapse \`record --method sample --off-cpu\` (DWARF, 16 KiB stack copies)" lapse_dwarf)
$(row "lapse \`record --method sample --off-cpu --call-graph fp\`" lapse_fp)
$(row "lapse \`record --method sample\` (no --off-cpu, for reference)" lapse_cpu_only)
$(row "perf \`record -e sched:sched_switch -g\`" perf_g)
$(row "perf \`record -e sched:sched_switch --call-graph dwarf\`" perf_dwarf)
$(row "perf \`record -e cpu-clock -F 1000 --call-graph dwarf\` (CPU samples only, for reference)" perf_cpu)

With \`--off-cpu\` lapse takes its CPU samples from one timer event per CPU
for every task (where allowed, as here: root), not from one per thread: a
per-thread timer is stopped and restarted at each of the thread's switches,
which is what the two reference rows (per-thread CPU sampling, lapse's and
perf's) pay at this rate. The first two rows are the whole cost of
\`--off-cpu\`, CPU samples and off-CPU samples together; perf's tracepoint
rows take no CPU samples.

Target: ≤ 3 % of the target's CPU time. In the file: lapse $(per "$lapse_bytes" "$periods") bytes per
off-CPU period ($lapse_bytes B for $periods periods and the CPU samples; lost: $lost), perf -g
$(per "$perf_bytes" "$perf_events") bytes per switch ($perf_bytes B / $perf_events samples), perf dwarf
$(per "$perf_dwarf_bytes" "$perf_events") ($perf_dwarf_bytes B).
MD
