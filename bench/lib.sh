# What the benchmark scripts share; each sources it after `set -euo pipefail`:
#   . "$(dirname "$0")/../lib.sh"
# Only functions: nothing runs, nothing is built, no variable is set until
# a script calls one.

# The places every script needs: HERE (the script's folder), ROOT (the
# repository), WL (the shared workloads: $WORKLOADS, else beside the
# repository, else /work/shared/workloads).
bench_paths() {
    HERE=$(cd "$(dirname "$0")" && pwd)
    ROOT=$(cd "$HERE/../.." && pwd)
    WL=${WORKLOADS:-$ROOT/../shared/workloads}
    [ -d "$WL" ] || WL=/work/shared/workloads
}

# The median of the numbers on stdin, one per line: the middle value, or
# the mean of the two middle values when there is an even number of them.
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# The lower middle of the numbers on stdin: the median for an odd count,
# the lower of the two middle values for an even one, so always a value
# that was measured (as the HTML page's own timings are summarised).
median_low() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# The median of the numbers in file $1.
med() { median <"$1"; }

# Progress and notes, on stderr (stdout is the result).
log() { echo "$@" >&2; }

# Seconds since the epoch, to the nanosecond.
now() { date +%s.%N; }

# The value of an arithmetic expression of decimal numbers (awk: also on a
# machine without bc).
calc() { awk "BEGIN { printf \"%.9g\\n\", $1 }"; }

# Wall seconds of running "$@" (its output dropped; a failure still timed).
wall() { local t0 t1; t0=$(now); "$@" >/dev/null 2>&1 || true; t1=$(now); calc "$t1 - $t0"; }

# Runs "$@" with lapse's runtime preloaded from $RT but no recorder to
# talk to: the probes' cost without the recording's.
alone() { env LAPSE_SOCKET=/nonexistent LAPSE_SPILL=/dev/null LD_PRELOAD="$RT" "$@"; }
