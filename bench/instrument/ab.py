#!/usr/bin/env python3
"""bench/instrument/ab.py - two or more lapse builds on one recording,
alternated run by run, so that a busy moment of the machine falls on all
of them alike (issue #27: the recorder's CPU time, the target's waits,
the wall time).

For each build, RUNS times: `BUILD record -o TMP -- MT T N`, then the
recorder CPU time and the waits for the recorder from `lapse info` (the
"recorder CPU time" and "ms of waiting" notes). Prints q1 / median / q3 of
each in ms.

usage: bench/instrument/ab.py T N RUNS BUILD [BUILD ...]
       MT=/path/to/mt bench/instrument/ab.py 2 5000000 13 old/lapse new/lapse
MT defaults to /tmp/mt/mt: gcc -O2 -finstrument-functions -pthread
../shared/workloads/mt.c (bench/instrument/scale.sh builds it the same way).
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time


def quartiles(values):
    v = sorted(values)
    n = len(v)
    return f"{v[n // 4]:7.1f} {statistics.median(v):7.1f} {v[(3 * n) // 4]:7.1f}"


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__.split("\n\n")[2])
    threads, calls, runs, builds = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    mt = os.environ.get("MT", "/tmp/mt/mt")
    data = os.path.join(tempfile.mkdtemp(prefix="lapse-ab-"), "ab.lapse")
    got = {b: {"cpu": [], "wait": [], "wall": []} for b in builds}
    for _ in range(runs):
        for b in builds:
            start = time.monotonic()
            subprocess.run([b, "record", "-o", data, "--", mt, threads, calls],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            got[b]["wall"].append((time.monotonic() - start) * 1e3)
            info = subprocess.run([b, "info", data], capture_output=True, text=True).stdout
            got[b]["cpu"].append(float(re.search(r"recorder CPU time: ([0-9.]+)", info).group(1)))
            waited = re.search(r"([0-9.]+) ms of waiting", info)
            got[b]["wait"].append(float(waited.group(1)) if waited else 0.0)
    os.remove(data)
    os.rmdir(os.path.dirname(data))
    print(f"mt {threads} {calls}, {runs} runs each (q1 median q3, ms)")
    for b in builds:
        r = got[b]
        print(f"{b}\n  recorder CPU {quartiles(r['cpu'])} | waits {quartiles(r['wait'])}"
              f" | wall {quartiles(r['wall'])}")


if __name__ == "__main__":
    main()
