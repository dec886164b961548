#!/usr/bin/env bash
# bench/instrument/sources.sh - cost per call of each probe source (SPEC
# section 7: "trampoline sources <= 1.5 x the -finstrument-functions cost,
# below uftrace's on the same binary"), side by side with uftrace:
#   - calls.c built with -finstrument-functions, -pg and -pg -mfentry
#     (57,049,156 calls each; -pg's exits come from lapse's return
#     trampoline), against the plain -O2 build;
#   - libcalls.c: 60,000,000 calls from an instrumented module into libc's
#     labs() (a library call: stub + trampoline), against the same program
#     run without any profiler;
#   - the plain -O2 build of calls.c itself, patched at run time (`lapse
#     record --method instrument`; uftrace: `uftrace record -P .`). Its
#     "runtime alone" column stays empty: the patching plan comes from the
#     recorder.
# Per call = (profiled wall - native wall) / calls. For each source: lapse's
# runtime alone (events handed to a null sink), `lapse record` end to end,
# and `uftrace record`. Runs are interleaved (every variant once per round)
# and each figure is the median of $RUNS rounds (default 5).
# usage: bench/instrument/sources.sh [RUNS]
set -euo pipefail
. "$(dirname "$0")/../lib.sh"

RUNS=${1:-${RUNS:-5}}
bench_paths
OUT=$(mktemp -d /tmp/lapse-bench-sources.XXXXXX)
trap 'rm -rf "$OUT"' EXIT

if ! command -v uftrace >/dev/null; then
    echo "installing uftrace..." >&2
    (apt-get update -qq && apt-get install -y -qq uftrace) >/dev/null 2>&1 || echo "uftrace unavailable; its column stays empty" >&2
fi

echo "building lapse (release)..." >&2
(cd "$ROOT" && cargo build --release -q -p lapse-cli)
LAPSE=$ROOT/target/release/lapse
RT=$(ls -t "$ROOT"/target/release/build/lapse-rt-*/out/liblapse_rt.so | head -1)

cd "$OUT"
gcc -O2 -o calls_native "$WL/calls.c"
gcc -O2 -finstrument-functions -o calls_cyg "$WL/calls.c"
gcc -O2 -pg -o calls_pg "$WL/calls.c"
gcc -O2 -pg -mfentry -o calls_fentry "$WL/calls.c"
cat >libcalls.c <<'EOF'
/* 60,000,000 calls into libc (labs, through the PLT) from an instrumented
 * module; main is the one instrumented function. */
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 60000000L, sum = 0;
    for (long i = 0; i < n; i++)
        sum += labs(i - n / 2);
    printf("%ld\n", sum);
    return 0;
}
EOF
gcc -O2 -fno-builtin -finstrument-functions -o libcalls libcalls.c
gcc -O2 "$HERE/tsc_pair.c" -o tsc_pair
CALLS=57049156 # calls.c defaults: 2*fib(33)-1 + 50,000,000 tiny() + main
LIBCALLS=60000000 # (as many as calls.c makes: the fixed cost of a recording, naming the C library's functions included, weighs the same)

for f in tsc native lcnative; do : >"$f"; done
for src in cyg pg fentry lib patch; do : >"rt_$src"; : >"rec_$src"; : >"uf_$src"; done
for i in $(seq "$RUNS"); do
    echo "round $i/$RUNS" >&2
    ./tsc_pair >>tsc
    wall ./calls_native >>native
    wall ./libcalls >>lcnative
    for src in cyg pg fentry lib patch; do
        method=() uf_opts=()
        case $src in
            lib) exe=./libcalls ;;
            patch) exe=./calls_native method=(--method instrument) uf_opts=(-P .) ;;
            *) exe=./calls_$src ;;
        esac
        [ "$src" = patch ] || wall alone "$exe" >>"rt_$src"
        wall "$LAPSE" record "${method[@]}" -o x.lapse -- "$exe" >>"rec_$src"
        if [ "$src" = lib ] && [ "$i" = 1 ]; then
            "$LAPSE" report x.lapse --view functions --format json >lib_functions.json
        fi
        if [ "$src" = patch ] && [ "$i" = 1 ]; then
            "$LAPSE" report x.lapse --view functions --format json >patch_functions.json
        fi
        if command -v uftrace >/dev/null; then
            rm -rf uftrace.data
            wall uftrace record -d uftrace.data "${uf_opts[@]}" "$exe" >>"uf_$src"
        fi
    done
done

per() { # per-call ns: file, native file, calls
    echo "($(med "$1") - $(med "$2")) * 1000000000 / $3" | bc -l
}
TSC=$(med tsc)
printf '| probe source | lapse runtime alone, per call | `lapse record` end to end, per call | ÷ -finstrument-functions (end to end) | `uftrace record`, per call | uftrace ÷ lapse (end to end) |\n'
printf '|---|---|---|---|---|---|\n'
CYG_REC=$(per rec_cyg native $CALLS)
for src in cyg pg fentry lib patch; do
    case $src in
        cyg) name='-finstrument-functions (calls.c)'; nat=native; n=$CALLS ;;
        pg) name='-pg (calls.c; exits by the trampoline)'; nat=native; n=$CALLS ;;
        fentry) name='-pg -mfentry (calls.c; exits by the trampoline)'; nat=native; n=$CALLS ;;
        lib) name='library calls (labs() x 60 M, stub + trampoline)'; nat=lcnative; n=$LIBCALLS ;;
        patch) name='run-time patching (plain -O2 calls.c; uftrace -P .)'; nat=native; n=$CALLS ;;
    esac
    if [ -s "rt_$src" ]; then rt=$(per "rt_$src" $nat $n); else rt=nan; fi
    rec=$(per "rec_$src" $nat $n)
    ratio=$(echo "$rec / $CYG_REC" | bc -l)
    if [ -s "uf_$src" ]; then
        uf=$(per "uf_$src" $nat $n)
        printf '| %s | %.1f ns | %.1f ns | %.2f × | %.1f ns | %.1f × |\n' "$name" "$rt" "$rec" "$ratio" "$uf" "$(echo "$uf / $rec" | bc -l)"
    else
        printf '| %s | %.1f ns | %.1f ns | %.2f × | | |\n' "$name" "$rt" "$rec" "$ratio"
    fi
done
printf '\ntwo TSC reads (the floor): %.1f ns; native calls.c %.3f s, libcalls %.3f s\n' "$TSC" "$(med native)" "$(med lcnative)"
python3 - lib_functions.json <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
print("libcalls.c as lapse reports it (first round):", ", ".join(
    "%s (%s) %d calls" % (r["function"], r["module"], r["calls"]) for r in rows))
PY
python3 - patch_functions.json <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
print("plain calls.c patched at run time (first round):", ", ".join(
    "%s (%s) %d calls" % (r["function"], r["module"], r["calls"]) for r in rows))
PY
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), kernel $(uname -r), uftrace $(uftrace --version 2>/dev/null | head -1 | awk '{print $2}'), load $(cut -d' ' -f1-3 /proc/loadavg)"
