#!/usr/bin/env bash
# bench/export/min_duration.sh - how much `lapse export --min-duration`
# and `--function` shrink the timeline exports of a call-heavy recording.
#
# workloads/calls.c run as `calls 20 N` (fib(20), 21,891 calls, then N
# calls of a tiny function, 2 M by default) built -O2 -finstrument-functions and
# recorded once; each timeline format is then exported whole, with
# --min-duration 10us and with --function fib. Prints one row a format:
# bytes whole, bytes with each filter, and the ratios.
#
# usage: bench/export/min_duration.sh [N]
set -euo pipefail
. "$(dirname "$0")/../lib.sh"

N=${1:-2000000}
bench_paths
OUT=$(mktemp -d /tmp/lapse-export-bench.XXXXXX)
trap 'rm -rf "$OUT"' EXIT

log "building lapse (release)..."
(cd "$ROOT" && cargo build --release -q -p lapse-cli)
LAPSE=$ROOT/target/release/lapse
gcc -O2 -finstrument-functions -o "$OUT/calls" "$WL/calls.c"
"$LAPSE" record -o "$OUT/calls.data" -- "$OUT/calls" 20 "$N" >/dev/null 2>&1

size() { stat -c %s "$1"; }
ratio() { echo "scale=1; $1 / $2" | bc -l; }
printf '%-11s %14s %14s %8s %14s %8s\n' format whole "min-duration" ratio "function fib" ratio
for f in chrome perfetto firefox speedscope html; do
    "$LAPSE" export "$OUT/calls.data" --format "$f" --force -o "$OUT/whole.$f" 2>/dev/null
    "$LAPSE" export "$OUT/calls.data" --format "$f" --min-duration 10us -o "$OUT/thin.$f" 2>/dev/null
    "$LAPSE" export "$OUT/calls.data" --format "$f" --function '^fib$' -o "$OUT/fib.$f" 2>/dev/null
    w=$(size "$OUT/whole.$f"); t=$(size "$OUT/thin.$f"); b=$(size "$OUT/fib.$f")
    printf '%-11s %14s %14s %8s %14s %8s\n' "$f" "$w" "$t" "$(ratio "$w" "$t")x" "$b" "$(ratio "$w" "$b")x"
done
