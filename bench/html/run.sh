#!/usr/bin/env bash
# HTML report: export time, page bytes and the time until the page has
# rendered in headless Chromium (its `data-rendered-ms` mark: navigation
# start to first view drawn, measured by the page with performance.now()),
# and the slowest interaction (the page's own `data-last-ms` for opening
# each tab, zooming the timeline, picking a thread, searching, switching to
# application time), on:
#   - the synthetic 100 M-event recording of the engine benchmark
#     (4 threads, 2,000 functions; made if missing);
#   - a 5 M-sample synthetic sampling recording (4 threads);
#   - a 20,000-deep recursion imported from a Chrome trace.
#
# Usage: bench/html/run.sh           (RUNS=5 by default)
# Needs node and /usr/bin/chromium; installs playwright-core (npm ci) in
# crates/lapse-export/tests/browser if it is missing.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"

RUNS=${RUNS:-5}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BROWSER="$ROOT/crates/lapse-export/tests/browser"
WORK=$(mktemp -d /tmp/lapse-bench-html.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

[[ -d "$BROWSER/node_modules/playwright-core" ]] || (cd "$BROWSER" && npm ci --no-audit --no-fund >&2)
log "building lapse and the generators (release)..."
(cd "$ROOT" && cargo build --release -q -p lapse-cli &&
    cargo build --release -q -p lapse-analysis --example engine_bench &&
    cargo build --release -q -p lapse-export --example sample_recording)
LAPSE="$ROOT/target/release/lapse"

BIG=/tmp/lapse-engine-bench-100000000-4.data
if [[ ! -f $BIG ]]; then
    log "writing the 100 M-event recording..."
    "$ROOT/target/release/examples/engine_bench" 100000000 4 1 >&2
fi
log "writing the 5 M-sample recording..."
"$ROOT/target/release/examples/sample_recording" "$WORK/sampled.data" 5000000 4 >&2
log "writing the 20,000-deep recursion..."
node -e '
  const n = 20000, ev = [{ph: "B", name: "main", pid: 1, tid: 1, ts: 0}];
  for (let i = 0; i < n; i++) ev.push({ph: "B", name: "rec", pid: 1, tid: 1, ts: 1 + i});
  for (let i = 0; i < n; i++) ev.push({ph: "E", name: "rec", pid: 1, tid: 1, ts: n + 1 + 2 * i});
  ev.push({ph: "E", name: "main", pid: 1, tid: 1, ts: 3 * n + 5});
  process.stdout.write(JSON.stringify(ev));' >"$WORK/deep.json"
"$LAPSE" import "$WORK/deep.json" -o "$WORK/deep.data" 2>/dev/null

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "chromium: $(/usr/bin/chromium --version 2>/dev/null | head -1); node $(node --version)"
echo
echo "| recording | events or samples | export wall (CPU), median of $RUNS | page bytes | rendered, median of $RUNS | slowest interaction |"
echo "|---|---|---|---|---|---|"
for case in "100M-events:100,000,000 events:$BIG" "5M-samples:5,000,000 samples:$WORK/sampled.data" "20000-deep:40,002 events:$WORK/deep.data"; do
    name=${case%%:*}
    rest=${case#*:}
    count=${rest%%:*}
    data=${rest#*:}
    page="$WORK/$name.html"
    times=() cpus=()
    for _ in $(seq "$RUNS"); do
        read -r wall cpu < <(/usr/bin/time -f "%e %U %S" "$LAPSE" export "$data" --format html -o "$page" 2>&1 >/dev/null |
            awk 'END {print $1, $2 + $3}')
        times+=("$wall")
        cpus+=("$cpu")
    done
    export_s=$(printf '%s\n' "${times[@]}" | median_low)
    export_cpu=$(printf '%s\n' "${cpus[@]}" | median_low)
    bytes=$(stat -c %s "$page")
    log "opening $name in chromium ($RUNS runs)..."
    json=$(cd "$BROWSER" && node drive.js bench "$page" "$RUNS")
    read -r rendered slowest < <(node -e '
      const r = JSON.parse(process.argv[1]).runs;
      const med = (a) => a.slice().sort((x, y) => x - y)[Math.floor((a.length - 1) / 2)];
      const errs = r.flatMap((x) => x.errors);
      if (errs.length) { console.error(errs.join("\n")); process.exit(1); }
      const keys = Object.keys(r[0].timings);
      const worst = keys.map((k) => [k, med(r.map((x) => x.timings[k]))]).sort((a, b) => b[1] - a[1])[0];
      console.log(med(r.map((x) => x.rendered_ms)) + " " + worst[0] + ":" + worst[1]);' "$json")
    printf '| %s | %s | %.2f s (%.2f s) | %s | %s ms | %s ms |\n' "$name" "$count" "$export_s" "$export_cpu" "$bytes" "$rendered" "${slowest/:/ }"
    log "$json"
done
