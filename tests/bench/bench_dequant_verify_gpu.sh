#!/usr/bin/env bash
# Benchmark: gguf-dequant-verify on all cores, CPU only against --gpu (issue 27 part 3), on a
# generated 20B-class llama in Q4_K (gguf-gen --preset 20b: 435 tensors, 11.0 GB = 10.2 GiB,
# 19.5 billion weights, random blocks), the file in the page cache. The two commands
#   gguf-dequant-verify -q --threads N MODEL
#   gguf-dequant-verify -q --threads N --gpu MODEL
# run alternately RUNS times each in the same run (after one untimed run of each); the report
# gives every run's wall, user and system time, the medians and the ratio of the medians
# (goal: --gpu within 1.5x of the CPU-only time), then one more --gpu run with -v for the
# checker's figures (chunks, bytes, host waits; not timed).
#
#   tests/bench/bench_dequant_verify_gpu.sh [BUILD_DIR] [RUNS]     # defaults: build, 8
#
# Environment: THREADS (default: nproc); GGUFKIT_BENCH_MODEL=FILE uses that model instead of
# generating one (kept); GGUFKIT_SCRATCH: where the model is generated (default ${TMPDIR:-/tmp};
# removed at exit; needs 12 GB; never put it under $OUT); OUT: a copy of the report goes to
# $OUT/bench-dequant-verify-gpu.txt. Exit 0 when every run passed (the GPU equal bit for bit),
# 1 when one failed, 77 without a usable GPU or a CUDA build (a tiny model is tried first).
set -u -o pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$here/build}
runs=${2:-8}
threads=${THREADS:-$(nproc)}
DV=$build/tools/gguf-dequant-verify
GEN=$build/tools/gguf-gen
for b in "$DV" "$GEN"; do
    [ -x "$b" ] || { echo "bench_dequant_verify_gpu: $b is missing (build it first)"; exit 2; }
done
scratch=$(mktemp -d "${GGUFKIT_SCRATCH:-${TMPDIR:-/tmp}}/bench-dv-gpu.XXXXXX") || exit 2
trap 'rm -rf "$scratch"' EXIT
report=$scratch/report.txt
say() { echo "$*" | tee -a "$report"; }
finish() {
    [ -n "${OUT:-}" ] && mkdir -p "$OUT" && cp "$report" "$OUT/bench-dequant-verify-gpu.txt"
    exit "$1"
}

# A GPU and a CUDA build? (a tiny model: seconds)
"$GEN" model -q --arch llama --type Q4_K "$scratch/tiny.gguf" || finish 2
"$DV" -q --gpu "$scratch/tiny.gguf" > "$scratch/tiny.log" 2>&1
rc=$?
if [ "$rc" != 0 ]; then
    say "bench_dequant_verify_gpu: skipped: gguf-dequant-verify --gpu exit $rc: $(tail -1 "$scratch/tiny.log")"
    [ "$rc" = 3 ] && finish 77
    finish 1
fi

say "=== bench_dequant_verify_gpu $(date -u +%FT%TZ): $(nproc) CPUs, --threads $threads," \
    "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
say "host: $(lscpu 2>/dev/null | grep -E '^(Model name|L3 cache|NUMA node\(s\))' |
    sed 's/  */ /g' | paste -sd';' -)"
say "GPU link: $(nvidia-smi --query-gpu=pcie.link.gen.current,pcie.link.width.current \
    --format=csv,noheader 2>/dev/null | head -1)"
model=${GGUFKIT_BENCH_MODEL:-}
if [ -z "$model" ]; then
    model=$scratch/llama20b-q4k.gguf
    avail=$(df -Pk "$scratch" | awk 'NR == 2 { print $4 }')
    if [ "${avail:-0}" -lt $((12 * 1024 * 1024)) ]; then
        say "bench_dequant_verify_gpu: $scratch has $((avail / 1024)) MiB free, 12 GiB needed" \
            "(set GGUFKIT_SCRATCH)"
        finish 1
    fi
    t0=$(date +%s.%N)
    "$GEN" model --arch llama --preset 20b --type Q4_K --no-sync --force "$model" \
        > "$scratch/gen.log" 2>&1 || { cat "$scratch/gen.log"; finish 1; }
    say "generated: $(cat "$scratch/gen.log") in $(echo "$(date +%s.%N) $t0" | awk '{ printf "%.1f", $1 - $2 }') s"
fi
say "model: $model, $(stat -c %s "$model") bytes"
t0=$(date +%s.%N)
cat "$model" > /dev/null
say "page cache warmed: $(echo "$(date +%s.%N) $t0" | awk '{ printf "%.1f", $1 - $2 }') s to read it"

# One run: "wall user sys exit" on stdout, the tool's output in $scratch/NAME.{out,err}.
timed() {
    local name=$1
    shift
    local TIMEFORMAT='%R %U %S'
    local rc
    { time "$DV" "$@" > "$scratch/$name.out" 2> "$scratch/$name.err"; } 2> "$scratch/$name.time"
    rc=$?
    echo "$(tail -1 "$scratch/$name.time") $rc"
}

status=0
timed warm-cpu -q --threads "$threads" "$model" > /dev/null
timed warm-gpu -q --threads "$threads" --gpu "$model" > /dev/null
say "runs (wall user sys, seconds; exit code):"
cpu_walls="" gpu_walls=""
for i in $(seq 1 "$runs"); do
    for side in cpu gpu; do
        extra=()
        [ $side = gpu ] && extra=(--gpu)
        read -r wall user sys rc < <(timed "$side$i" -q --threads "$threads" ${extra[@]+"${extra[@]}"} "$model")
        last=$(tail -1 "$scratch/$side$i.out")
        say "  $side $i: $wall $user $sys; exit $rc; $last"
        if [ "$rc" != 0 ]; then
            status=1
            sed 's/^/    /' "$scratch/$side$i.err" | tail -5 | tee -a "$report"
        fi
        if [ $side = cpu ]; then cpu_walls="$cpu_walls $wall"; else gpu_walls="$gpu_walls $wall"; fi
    done
done
median() { echo "$@" | tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END {
    print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
mc=$(median $cpu_walls)
mg=$(median $gpu_walls)
say "median wall: CPU only $mc s, --gpu $mg s"
say "$(echo "$mg $mc" | awk '{ r = $1 / $2; printf "ratio --gpu / CPU only: %.2f (goal <= 1.5: %s)", r, r <= 1.5 ? "met" : "NOT met" }')"

timed figures -v --threads "$threads" --gpu "$model" > /dev/null
say "one more --gpu run with -v (not timed): $(grep -- '--gpu:' "$scratch/figures.err" | tail -1)"
finish $status
