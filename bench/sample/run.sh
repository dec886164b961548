#!/usr/bin/env bash
# Sampling benchmark: lapse vs `perf record --call-graph dwarf -F 1000` side
# by side in one run, on the same CPU-bound program (bench/sample/workload.c).
#
# Measures (medians of RUNS interleaved runs):
#   - target slowdown: the workload's own run time (it prints it), so the
#     recorders' start-up and finishing are not counted;
#   - fixed start-up cost: wall time of `RECORDER -- true` minus `true`;
#   - bytes per sample in the final file;
#   - report throughput: samples/s of `lapse report --view functions` vs
#     `perf report --children` on a 10 kHz recording of the same workload.
#
# Usage: bench/sample/run.sh            (RUNS=9 ROUNDS=300 by default)
# Prints a markdown section for BENCHMARKS.md on stdout; progress on stderr.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"

RUNS=${RUNS:-9}
ROUNDS=${ROUNDS:-300}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
WORK=$(mktemp -d /tmp/lapse-bench-sample.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

if [[ -z "${LAPSE:-}" ]]; then
    log "building lapse (release)..."
    (cd "$ROOT" && cargo build --release -q -p lapse-cli)
    LAPSE="$ROOT/target/release/lapse"
fi
command -v perf >/dev/null || { log "perf not found"; exit 1; }

gcc -O2 -g -fomit-frame-pointer -o "$WORK/workload" "$HERE/workload.c"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

now_ns() { date +%s%N; }
# "wall cpu" of the workload's own run.
workload_ms() { grep -o 'workload_ms [0-9.]* cpu_ms [0-9.]*' | awk '{print $2, $4}'; }

PERF_REC=(perf record -q --call-graph dwarf -F 1000 --no-bpf-event)

# 1. Target slowdown.
: >"$WORK/native" ; : >"$WORK/lapse" ; : >"$WORK/perf"
for i in $(seq "$RUNS"); do
    log "slowdown run $i/$RUNS"
    "$WORK/workload" "$ROUNDS" 2>&1 | workload_ms >>"$WORK/native"
    "$LAPSE" record -o "$WORK/w.lapse" -- "$WORK/workload" "$ROUNDS" 2>&1 | workload_ms >>"$WORK/lapse"
    "${PERF_REC[@]}" -o "$WORK/w.perf" -- "$WORK/workload" "$ROUNDS" 2>&1 | workload_ms >>"$WORK/perf"
done
native_ms=$(cut -d' ' -f1 "$WORK/native" | median)
lapse_ms=$(cut -d' ' -f1 "$WORK/lapse" | median)
perf_ms=$(cut -d' ' -f1 "$WORK/perf" | median)
# Slowdown: median of the per-run ratios to the native run just before, so
# that a burst of load from elsewhere on the machine moves one pair only;
# column 1 is wall time, column 2 the workload's CPU time.
paired() { paste -d' ' "$1" "$WORK/native" | awk -v c="$2" '{b = c + 2; printf "%.4f\n", 100 * ($c - $b) / $b}' | median; }
lapse_slow=$(paired "$WORK/lapse" 1)
perf_slow=$(paired "$WORK/perf" 1)
lapse_cpu=$(paired "$WORK/lapse" 2)
perf_cpu=$(paired "$WORK/perf" 2)

# 2. Bytes per sample (last runs' files).
lapse_line=$("$LAPSE" record -o "$WORK/w.lapse" -- "$WORK/workload" "$ROUNDS" 2>&1 | grep 'recorded')
lapse_samples=$(echo "$lapse_line" | grep -o 'recorded [0-9]* samples' | awk '{print $2}')
lapse_bytes=$(stat -c %s "$WORK/w.lapse")
perf_samples=$(perf report -i "$WORK/w.perf" --stats 2>/dev/null | awk '/SAMPLE events:/ {print $3; exit}')
perf_bytes=$(stat -c %s "$WORK/w.perf")
per() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", a / b}'; }

# 3. Fixed start-up cost: `true` under each recorder.
: >"$WORK/t_native" ; : >"$WORK/t_lapse" ; : >"$WORK/t_perf"
for i in $(seq $((RUNS * 2))); do
    t0=$(now_ns); true; t1=$(now_ns); echo $(((t1 - t0) / 1000)) >>"$WORK/t_native"
    t0=$(now_ns); /bin/true; t1=$(now_ns); echo $(((t1 - t0) / 1000)) >>"$WORK/t_native"
    t0=$(now_ns); "$LAPSE" record -o "$WORK/t.lapse" -- /bin/true 2>/dev/null; t1=$(now_ns)
    echo $(((t1 - t0) / 1000)) >>"$WORK/t_lapse"
    t0=$(now_ns); "${PERF_REC[@]}" -o "$WORK/t.perf" -- /bin/true 2>/dev/null; t1=$(now_ns)
    echo $(((t1 - t0) / 1000)) >>"$WORK/t_perf"
done
base_us=$(grep -v '^$' "$WORK/t_native" | median)
lapse_start_ms=$(awk -v a="$(median <"$WORK/t_lapse")" -v b="$base_us" 'BEGIN {printf "%.1f", (a - b) / 1000}')
perf_start_ms=$(awk -v a="$(median <"$WORK/t_perf")" -v b="$base_us" 'BEGIN {printf "%.1f", (a - b) / 1000}')

# 4. Report throughput on a 10 kHz recording.
log "report throughput"
"$LAPSE" record -F 10000 -o "$WORK/big.lapse" -- "$WORK/workload" "$ROUNDS" >/dev/null 2>&1
perf record -q --call-graph dwarf -F 10000 --no-bpf-event -o "$WORK/big.perf" -- "$WORK/workload" "$ROUNDS" >/dev/null 2>&1
big_lapse_samples=$("$LAPSE" report "$WORK/big.lapse" --view functions --format json | grep -o '"samples":[0-9]*' | head -1 | cut -d: -f2)
big_perf_samples=$(perf report -i "$WORK/big.perf" --stats 2>/dev/null | awk '/SAMPLE events:/ {print $3; exit}')
: >"$WORK/r_lapse" ; : >"$WORK/r_perf"
for i in 1 2 3; do
    t0=$(now_ns); "$LAPSE" report "$WORK/big.lapse" --view functions --format json >/dev/null; t1=$(now_ns)
    echo $(((t1 - t0) / 1000)) >>"$WORK/r_lapse"
    t0=$(now_ns); perf report -i "$WORK/big.perf" --children --stdio >/dev/null 2>&1; t1=$(now_ns)
    echo $(((t1 - t0) / 1000)) >>"$WORK/r_perf"
done
rate() { awk -v n="$1" -v us="$2" 'BEGIN {printf "%.2f", n / us}'; } # M samples/s
lapse_rate=$(rate "$big_lapse_samples" "$(median <"$WORK/r_lapse")")
perf_rate=$(rate "$big_perf_samples" "$(median <"$WORK/r_perf")")

cpu=$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)
cat <<MD
## Sampling

Measured by \`bench/sample/run.sh\` (RUNS=$RUNS, ROUNDS=$ROUNDS) on $(date -u +%Y-%m-%d):
$(nproc) CPUs ($cpu), Linux $(uname -r), $(perf version). Workload:
\`bench/sample/workload.c\` (gcc -O2 -fomit-frame-pointer, single thread,
60/30/10 split between three functions), medians of interleaved runs.
Load average when the run started: $load_before (other work on the machine
shows up as noise in the slowdown row).

| what | lapse (\`lapse record\`, cpu-clock 1 kHz, DWARF) | perf (\`perf record --call-graph dwarf -F 1000 --no-bpf-event\`) | target |
|---|---|---|---|
| workload run time (native: ${native_ms} ms) | ${lapse_ms} ms | ${perf_ms} ms | |
| target slowdown, wall time (median of paired runs) | $(printf %.1f "$lapse_slow") % | $(printf %.1f "$perf_slow") % | ≤ 3 % |
| target slowdown, its CPU time (median of paired runs) | $(printf %.1f "$lapse_cpu") % | $(printf %.1f "$perf_cpu") % | |
| fixed start-up cost (\`-- true\`) | ${lapse_start_ms} ms | ${perf_start_ms} ms | ≤ 20 ms |
| bytes per sample in the file | $(per "$lapse_bytes" "$lapse_samples") ($lapse_bytes B / $lapse_samples samples) | $(per "$perf_bytes" "$perf_samples") ($perf_bytes B / $perf_samples samples) | ≤ 64 |
| report throughput (10 kHz recording) | $lapse_rate M samples/s (\`lapse report --view functions\`, $big_lapse_samples samples) | $perf_rate M samples/s (\`perf report --children\`, $big_perf_samples samples) | ≥ 1 M samples/s |
MD
