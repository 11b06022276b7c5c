#!/usr/bin/env bash
# Benchmark: gguf-inspect --json vs gguf-py's gguf-dump --json on a header-faithful replica of
# GLM-5.1 (1809 tensors, ~400 GB of sparse data: holes cost no disk), in the same run.
#   tests/bench/bench_inspect.sh [BUILD_DIR] [RUNS]
# Prints the median wall time of each (process start to exit, output to /dev/null) and the ratio.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$here/build}
runs=${2:-21}
map=${MAP:-$here/../shared/testdata/tensor-maps/GLM-5.1-Q4_K.map}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$build/testdata/gguf-gen" replica "$map" "$work/glm51.gguf" >/dev/null
size=$(stat -c %s "$work/glm51.gguf")
used=$(du -k "$work/glm51.gguf" | cut -f1)
py_dump=(python3 -m gguf.scripts.gguf_dump --json "$work/glm51.gguf")

python3 - "$build/tools/gguf-inspect" "$work/glm51.gguf" "$runs" "$size" "$used" <<'PY'
import statistics, subprocess, sys, time
inspect, path, runs, size, used = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])

def timed(cmd):
    t = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        t.append(time.perf_counter() - t0)
    return statistics.median(t), min(t)

ours = [inspect, "--json", path]
theirs = [sys.executable, "-m", "gguf.scripts.gguf_dump", "--json", path]
subprocess.run(ours, check=True, stdout=subprocess.DEVNULL)   # warm the page cache
o_med, o_min = timed(ours)
p_med, p_min = timed(theirs[:]) if runs < 5 else timed(theirs)
print(f"replica: {path.split('/')[-1]}  {size/1e9:.1f} GB logical, {used/1024:.1f} MiB on disk")
print(f"gguf-inspect --json : median {o_med*1e3:8.2f} ms  (min {o_min*1e3:.2f} ms, {runs} runs)")
print(f"gguf-dump --json    : median {p_med*1e3:8.2f} ms  (min {p_min*1e3:.2f} ms, {runs} runs)")
print(f"speed-up            : {p_med/o_med:.1f}x")
PY
