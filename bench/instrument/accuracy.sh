#!/usr/bin/env bash
# bench/instrument/accuracy.sh - how true instrumentation's times are by
# function size (SPEC section 7, "accuracy of compensated times"), side by
# side with uftrace on the same binary.
#
# workloads/size.c: run() calls step() N times, step() calls leaf() 8 times,
# leaf() does K dependent multiply-adds. The truth is run()'s CPU time in the
# build without probes (the program measures it itself). For each K the
# table gives, as ratios to the truth (median of RUNS recordings):
#   raw     lapse run() application inclusive (the default)
#   comp    the same, compensated (--compensate)
#   flag    whether lapse flags run() probe_dominated
#   uftrace run()'s total time in `uftrace report` (uftrace subtracts nothing)
# With HOGS=2 it runs the same with two CPU hogs beside it.
#
# usage: bench/instrument/accuracy.sh [RUNS]   (HOGS=N for N busy loops)
set -euo pipefail
. "$(dirname "$0")/../lib.sh"

RUNS=${1:-${RUNS:-3}}
HOGS=${HOGS:-0}
bench_paths
OUT=$(mktemp -d /tmp/lapse-accuracy.XXXXXX)
HOG_PIDS=()
cleanup() {
    for p in "${HOG_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$OUT"
}
trap cleanup EXIT

echo "building lapse (release)..." >&2
(cd "$ROOT" && cargo build --release -q -p lapse-cli)
LAPSE=$ROOT/target/release/lapse

# size.c with run()'s own CPU time on stderr (no probe on the measurement).
sed -e 's|#include <stdlib.h>|#include <stdlib.h>\n#include <time.h>|' \
    -e 's|sink = run(n);|struct timespec a_, b_; clock_gettime(CLOCK_THREAD_CPUTIME_ID, \&a_); sink = run(n); clock_gettime(CLOCK_THREAD_CPUTIME_ID, \&b_); fprintf(stderr, "run_cpu_ns %lld\\n", (b_.tv_sec - a_.tv_sec) * 1000000000LL + b_.tv_nsec - a_.tv_nsec);|' \
    "$WL/size.c" >"$OUT/size.c"
gcc -O2 -o "$OUT/plain" "$OUT/size.c"
gcc -O2 -finstrument-functions -o "$OUT/inst" "$OUT/size.c"
gcc -O2 -pg -o "$OUT/inst_pg" "$OUT/size.c"

for _ in $(seq "$HOGS"); do
    (while :; do :; done) &
    HOG_PIDS+=($!)
done

python3 - "$OUT" "$LAPSE" "$RUNS" "$HOGS" <<'PY'
import json, os, re, shutil, statistics, subprocess, sys
out, lapse, runs, hogs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
uftrace = shutil.which("uftrace")

def plain(k, n):
    r = subprocess.run([f"{out}/plain", str(k), str(n)], capture_output=True, text=True)
    return float(re.search(r"run_cpu_ns (\d+)", r.stderr).group(1))

def lapse_run(k, n):
    data = f"{out}/k.lapse"
    subprocess.run([lapse, "record", "-o", data, "--", f"{out}/inst", str(k), str(n)],
                   capture_output=True, check=True)
    def row(extra):
        v = json.loads(subprocess.run([lapse, "report", data, "--format", "json"] + extra,
                                      capture_output=True, text=True, check=True).stdout)
        return next(r for r in v["rows"] if r["function"] == "run")
    raw, comp = row([]), row(["--compensate"])
    return raw["application_inclusive_ns"], comp["application_inclusive_ns"], raw["probe_dominated"]

def uftrace_run(k, n):
    if not uftrace:
        return None
    d = f"{out}/uftrace.data"
    subprocess.run([uftrace, "record", "-d", d, f"{out}/inst_pg", str(k), str(n)],
                   capture_output=True)
    r = subprocess.run([uftrace, "report", "-d", d, "-F", "run", "-f", "total", "--no-pager"],
                       capture_output=True, text=True).stdout
    units = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}
    for line in r.splitlines():
        m = re.match(r"\s*([\d.]+)\s+(ns|us|ms|s)\s+run\s*$", line)
        if m:
            return float(m.group(1)) * units[m.group(2)]
    return None

print(f"function-size sweep, {runs} runs each, {hogs} CPU hogs; ratios to the plain build's run() CPU time")
print(f"{'K':>4} {'plain/leaf':>10} {'raw':>7} {'comp':>7} {'flag':>5} {'uftrace':>8}")
for k in [0, 2, 5, 20, 100, 500]:
    n = int(4e7 / (k * 4 + 12))
    truth = min(plain(k, n) for _ in range(5))
    got = [lapse_run(k, n) for _ in range(runs)]
    raw = statistics.median(g[0] for g in got) / truth
    comp = statistics.median(g[1] for g in got) / truth
    flag = "yes" if all(g[2] for g in got) else ("no" if not any(g[2] for g in got) else "mixed")
    uf = [u for u in (uftrace_run(k, n) for _ in range(runs)) if u]
    ufs = f"{statistics.median(uf) / truth:.2f}x" if uf else "-"
    print(f"{k:>4} {truth / n / 8:>8.2f}ns {raw:>6.2f}x {comp:>6.2f}x {flag:>5} {ufs:>8}")
PY
