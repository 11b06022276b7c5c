#!/bin/bash
# Build, test and benchmark the CUDA parts on a GPU machine in one call.
#
#   tests/gpu/run_gpu.sh                 # everything, logs under $OUT (or ./out)
#
# Uses a prebuilt tree when GGUFKIT_GPU_BUILD names one that holds the test
# binaries (built elsewhere with the same CUDA); otherwise configures and
# builds build-gpu here for sm_90 only. GGUFKIT_GPU_TESTDATA: folder of real
# .gguf files for the bit-exactness test (default gpudata/testdata).
# Extra shared libraries (e.g. libsubunit for Check) may be put in gpudata/lib.
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/out}
mkdir -p "$OUT"
BUILD=${GGUFKIT_GPU_BUILD:-$ROOT/build-gpu}
export LD_LIBRARY_PATH="$ROOT/gpudata/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export GGUFKIT_GPU_TESTDATA=${GGUFKIT_GPU_TESTDATA:-$ROOT/gpudata/testdata}
status=0
step() { echo "=== $* ($(date +%T))"; }

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv \
    2>&1 | tee "$OUT/gpu.txt"

if [ ! -x "$BUILD/tests/test_cuda_dequant" ]; then
    step "build $BUILD (sm_90)"
    { cmake -S "$ROOT" -B "$BUILD" -DGGUFKIT_WERROR=ON -DGGUFKIT_CUDA_ARCHITECTURES=90-real \
        -DCMAKE_BUILD_TYPE=Release &&
      cmake --build "$BUILD" -j"$(nproc)" --target test_cuda_dequant test_cuda_upload test_cuda_st_dequant bench_cuda_dequant \
        bench_cuda_upload gguf-dequant-verify gguf-gen; } \
        > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 3; }
fi

if command -v cuobjdump > /dev/null; then
    step "kernel resources (registers, stack, spills)"
    cuobjdump --dump-resource-usage "$BUILD/tests/bench_cuda_dequant" > "$OUT/resources.txt" 2>&1
    grep -o 'REG:[0-9]*' "$OUT/resources.txt" | sort | uniq -c | sort -rn | head -8 | tr '\n' ' '
    echo
    grep -o 'STACK:[1-9][0-9]*' "$OUT/resources.txt" | sort | uniq -c | head -3
fi

for t in test_cuda_dequant test_cuda_upload test_cuda_st_dequant; do
    [ -x "$BUILD/tests/$t" ] || continue
    step "$t"
    "$BUILD/tests/$t" 2>&1 | tee "$OUT/$t.log" | grep -v '^MISMATCH' | tail -20
    rc=${PIPESTATUS[0]}
    grep -c '^MISMATCH' "$OUT/$t.log" | sed 's/^/mismatch lines: /'
    grep '^MISMATCH' "$OUT/$t.log" | cut -c1-400 | head -40
    echo "$t rc=$rc"
    [ "$rc" = 0 ] || status=1
done

if [ -x "$BUILD/tools/gguf-dequant-verify" ] && [ -d "$GGUFKIT_GPU_TESTDATA" ]; then
    step "gguf-dequant-verify --gpu"
    find "$GGUFKIT_GPU_TESTDATA" -name '*.gguf' | sort | while read -r f; do
        "$BUILD/tools/gguf-dequant-verify" --gpu -q --allow-nonfinite "$f" 2>&1 | tail -2
        echo "$(basename "$f"): exit ${PIPESTATUS[0]}"
    done | tee "$OUT/dequant-verify.log"
fi

if [ -x "$BUILD/tools/gguf-dequant-verify" ] && [ -x "$BUILD/tools/gguf-gen" ]; then
    step "docs: the GPU examples of docs/gguf-dequant-verify.md"
    timeout 300 python3 "$ROOT/tests/docs/run_docs.py" --build "$BUILD" --gpu \
        "$ROOT/docs/gguf-dequant-verify.md" > "$OUT/docs.log" 2>&1
    rc=$?
    tail -20 "$OUT/docs.log"
    echo "docs rc=$rc (77 = every GPU example skipped)"
    [ "$rc" = 0 ] || [ "$rc" = 77 ] || status=1
fi

if command -v compute-sanitizer > /dev/null; then
    for tool in memcheck racecheck; do
        step "compute-sanitizer $tool (quick test)"
        GGUFKIT_GPU_QUICK=1 timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 \
            "$BUILD/tests/test_cuda_dequant" > "$OUT/sanitizer-$tool.log" 2>&1
        echo "$tool rc=$?"
        grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|Hazard" "$OUT/sanitizer-$tool.log" | head -5
    done
    if [ -x "$BUILD/tests/test_cuda_upload" ]; then
        step "compute-sanitizer memcheck test_cuda_upload"
        timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 \
            "$BUILD/tests/test_cuda_upload" > "$OUT/sanitizer-upload.log" 2>&1
        echo "memcheck rc=$?"
        grep -E "ERROR SUMMARY|Invalid" "$OUT/sanitizer-upload.log" | head -5
    fi
fi

step "bench_cuda_dequant ${GGUFKIT_BENCH_ARGS:-29 20}"
# shellcheck disable=SC2086
# twice: the spread between two runs of the same code is the noise floor
for run in 1 2; do
    "$BUILD/tests/bench_cuda_dequant" ${GGUFKIT_BENCH_ARGS:-29 20} > "$OUT/bench$run.txt" 2>&1 ||
        status=1
done
cat "$OUT/bench1.txt"
echo "--- second run, f32 output, % of copy:"
awk '$3 == "f32" { printf "%s %s  ", $1, $6 } END { print "" }' "$OUT/bench2.txt"
if [ -x "$BUILD/tests/bench_cuda_upload" ]; then
    step "bench_cuda_upload ${GGUFKIT_UPLOAD_ARGS:-2}"
    "$BUILD/tests/bench_cuda_upload" ${GGUFKIT_UPLOAD_ARGS:-2} 2>&1 | tee "$OUT/bench-upload.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
step "done status=$status"
exit $status
