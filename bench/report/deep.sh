#!/usr/bin/env bash
# A deep recursion through every view and export that walks a call tree:
# a C program recursing DEPTH levels (2,000,000 by default, as a real
# parser or a bad recursion can), recorded by instrumentation; then the
# time (wall, CPU) and peak memory of `report --view calltree` (table and
# JSON), `export --format collapsed` and `--format flamegraph`, and
# `uftrace report` / `uftrace dump --flame-graph` beside them where
# uftrace is installed.
#
# usage: bench/report/deep.sh            (DEPTH=2000000)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
DEPTH=${DEPTH:-2000000}
cargo build --release -q -p lapse-cli --manifest-path "$root/Cargo.toml"
lapse=$root/target/release/lapse
tmp=$(mktemp -d /tmp/lapse-bench-deep.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
cat > deep.c <<'C'
#include <stdlib.h>
__attribute__((noinline)) long rec(long n) { if (n == 0) return 0; return rec(n - 1) + 1; }
int main(int argc, char **argv) { long n = atol(argv[1]); return rec(n) == n ? 0 : 1; }
C
gcc -O1 -finstrument-functions -fno-optimize-sibling-calls -o deep deep.c
( ulimit -s unlimited; "$lapse" record -o deep.data -- ./deep "$DEPTH" >/dev/null 2>&1 )
printf '%-44s %9s %9s %10s\n' "command (depth $DEPTH)" "wall s" "cpu s" "peak MiB"
measure() {
  local name=$1; shift
  /usr/bin/time -f '%e %U %S %M' -o time.txt "$@" >/dev/null 2>&1 || true
  read -r wall user sys kib < time.txt
  printf '%-44s %9s %9.2f %10.0f\n' "$name" "$wall" "$(echo "$user + $sys" | bc -l)" "$(echo "$kib / 1024" | bc -l)"
}
measure "lapse report --view calltree" "$lapse" report deep.data --view calltree
measure "lapse report --view calltree --format json" "$lapse" report deep.data --view calltree --format json
measure "lapse export --format collapsed" "$lapse" export deep.data --format collapsed -o deep.folded
measure "lapse export --format flamegraph" "$lapse" export deep.data --format flamegraph -o deep.svg
if command -v uftrace >/dev/null; then
  ( ulimit -s unlimited; timeout 600 uftrace record -d uftrace.data ./deep "$DEPTH" >/dev/null 2>&1 ) || true
  measure "uftrace report (at most 600 s)" timeout 600 uftrace report -d uftrace.data
  measure "uftrace graph (at most 600 s)" timeout 600 uftrace graph -d uftrace.data
  measure "uftrace dump --flame-graph (at most 600 s)" timeout 600 uftrace dump -d uftrace.data --flame-graph
fi
