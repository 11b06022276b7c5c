#!/usr/bin/env bash
# Benchmark: gguf-inspect --json vs gguf-py's gguf-dump --json on a header-faithful replica of
# GLM-5.1 (1809 tensors, ~400 GB of sparse data: holes cost no disk), in the same run.
#   tests/bench/bench_inspect.sh [BUILD_DIR] [RUNS]
# Prints the median wall and CPU time of each (process start to exit, output to /dev/null)
# and the ratios; on a loaded machine the CPU time is the steadier figure.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$here/build}
runs=${2:-21}
map=${MAP:-$here/../shared/testdata/tensor-maps/GLM-5.1-Q4_K.map}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$build/tools/gguf-gen" replica "$map" "$work/glm51.gguf" >/dev/null
size=$(stat -c %s "$work/glm51.gguf")
used=$(du -k "$work/glm51.gguf" | cut -f1)
py_dump=(python3 -m gguf.scripts.gguf_dump --json "$work/glm51.gguf")

python3 - "$build/tools/gguf-inspect" "$work/glm51.gguf" "$runs" "$size" "$used" <<'PY'
import statistics, subprocess, sys, time
inspect, path, runs, size, used = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])

import os

def timed(cmd):
    """Median wall time and median CPU time (user+sys of the child, from wait4)."""
    wall, cpu = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        wall.append(time.perf_counter() - t0)
        assert os.waitstatus_to_exitcode(status) == 0, cmd
        cpu.append(ru.ru_utime + ru.ru_stime)
    return statistics.median(wall), statistics.median(cpu)

ours = [inspect, "--json", path]
theirs = [sys.executable, "-m", "gguf.scripts.gguf_dump", "--json", path]
subprocess.run(ours, check=True, stdout=subprocess.DEVNULL)   # warm the page cache
o_med, o_cpu = timed(ours)
p_med, p_cpu = timed(theirs)
print(f"replica: {path.split('/')[-1]}  {size/1e9:.1f} GB logical, {used/1024:.1f} MiB on disk")
print(f"load average        : {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
print(f"gguf-inspect --json : wall {o_med*1e3:8.2f} ms  cpu {o_cpu*1e3:8.2f} ms  (medians of {runs})")
print(f"gguf-dump --json    : wall {p_med*1e3:8.2f} ms  cpu {p_cpu*1e3:8.2f} ms  (medians of {runs})")
print(f"speed-up            : wall {p_med/o_med:.1f}x  cpu {p_cpu/o_cpu:.1f}x")
PY
