#!/usr/bin/env bash
# Benchmark of gguf-gen: generation throughput per tensor type, peak memory, sparse outputs.
#   tests/bench/bench_gen.sh [BUILD_DIR]
# Writes into a temporary folder (about 1.5 GB at the peak) and removes it.
# Figures: wall time (best of 3), CPU time (user+sys) of the last run, output MB/s and million
# parameters/s (from the wall time), peak RSS, disk blocks used.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$here/build}
gen=$build/tools/gguf-gen
map=${MAP:-$here/../shared/testdata/tensor-maps/GLM-5.1-Q4_K.map}
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-gen-XXXXXX")
trap 'rm -rf "$work"' EXIT

# run NAME ARGS...: best wall time of 3 runs, size, peak RSS of the last
run() {
    local name=$1 best=999999 t0 t1 dt
    shift
    for _ in 1 2 3; do
        rm -f "$work"/out*.gguf
        t0=$(date +%s.%N)
        /usr/bin/time -f "%M %U %S" -o "$work/rss" "$gen" "$@" --no-sync -q "$work/out.gguf"
        t1=$(date +%s.%N)
        dt=$(echo "$t1 - $t0" | bc -l)
        best=$(echo "if ($dt < $best) $dt else $best" | bc -l)
    done
    local size params
    size=$(stat -c %s "$work"/out*.gguf | paste -sd+ | bc)
    params=$("$build/tools/gguf-inspect" --json --tensors-only "$(ls "$work"/out*.gguf | head -1)" | python3 -c \
        "import json,sys; print(json.load(sys.stdin)['totals']['n_elements'])" 2>/dev/null || echo 0)
    local used
    used=$(du -ck "$work"/out*.gguf | tail -1 | cut -f1)
    local rss cpu
    read -r rss u s <"$work/rss"
    cpu=$(echo "$u + $s" | bc -l)
    printf '%-34s %7.2f s wall %6.2f s cpu %9.1f MB %7.0f MB/s %7.0f Mparam/s RSS %5d KB disk %8d KB\n' \
        "$name" "$best" "$cpu" "$(echo "$size / 1000000" | bc -l)" "$(echo "$size / 1000000 / $best" | bc -l)" \
        "$(echo "$params / 1000000 / $best" | bc -l)" "$rss" "$used"
}

echo "gguf-gen $("$gen" --version | awk '{print $NF}'), $(nproc) cores, $(uname -m)"
# llama --preset 1b cut to 4 blocks: 16 blocks would take 2.4 GB in F16 per run.
for t in F32 F16 BF16 Q8_0 Q4_0 Q4_K Q6_K IQ2_XXS IQ4_XS MXFP4; do
    run "llama 1b/4 blocks --type $t" model --arch llama --preset 1b --layers 4 --type "$t"
done
run "llama --preset 1b --type Q8_0" model --arch llama --preset 1b --type Q8_0
run "deepseek2 --preset 20b --sparse" model --arch deepseek2 --preset 20b --type Q4_K --sparse
run "glm-dsa 1b split 10 tensors/part" model --arch glm-dsa --preset 1b --layers 4 --type Q8_0 \
    --split-max-tensors 10
if [ -f "$map" ]; then
    run "replica GLM-5.1-Q4_K (sparse)" replica "$map"
fi
