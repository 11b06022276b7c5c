#!/bin/bash
# Build, test and benchmark the CUDA parts on a GPU machine in one call.
#
#   tests/gpu/run_gpu.sh                 # everything, logs under $OUT (or ./out)
#
# Uses a prebuilt tree when GGUFKIT_GPU_BUILD names one that holds the test
# binaries (built elsewhere with the same CUDA); otherwise configures build-gpu
# here for sm_90 only, Release, without -Werror (GGUFKIT_GPU_WERROR=ON to have
# it: the GPU machine's compiler may warn where ours does
# not; the warning-free check is the RelWithDebInfo build with
# GGUFKIT_WERROR=ON) and builds it (incrementally: a second call on the same
# machine rebuilds what changed). When that build
# fails (the GPU machine's image may lack a library's headers: jansson, check,
# xxhash) and GGUFKIT_GPU_PREBUILT names a pack made elsewhere by
# scripts/gpu_prepare.sh --dequant (build-gpunew: the binaries and, in its lib/,
# the shared libraries they need beyond libc and libstdc++), that pack is used
# instead; GGUFKIT_GPU_BUILD may name such a pack directly.
# GGUFKIT_GPU_TESTDATA:
# folder of real .gguf files for the bit-exactness test (default
# gpudata/testdata). Extra shared libraries (e.g. libsubunit for Check) may be
# put in gpudata/lib.
#
# Steps, each skipped when GGUFKIT_SKIP="NAME ..." names it: the tests by name
# (test_cuda_dequant test_cuda_upload test_cuda_st_dequant test_cuda_dq_check),
# verify (gguf-dequant-verify --gpu on the files of GGUFKIT_GPU_TESTDATA),
# verifygen (the same on generated models of several types, chunk sizes and
# --reference), docs (the GPU examples of docs/gguf-dequant-verify.md),
# sanitizer (compute-sanitizer memcheck and racecheck of test_cuda_dequant and
# test_cuda_upload), sanitizer_dq (the same of test_cuda_dq_check), bench
# (bench_cuda_dequant, twice), upload (bench_cuda_upload), dvbench
# (tests/bench/bench_dequant_verify_gpu.sh: gguf-dequant-verify on a 20B Q4_K
# model, CPU only against --gpu; GGUFKIT_DV_RUNS runs each, default 8: the
# host is noisy, 3 pairs gave 1.61 where 8 gave 1.38; its
# 11 GB model goes to GGUFKIT_SCRATCH, default /tmp, never $OUT; it runs
# before the sanitizer steps). Under the 10-minute limit of one call, e.g.:
#   GGUFKIT_SKIP="test_cuda_dequant test_cuda_upload test_cuda_st_dequant sanitizer bench upload" \
#       tests/gpu/run_gpu.sh
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/out}
mkdir -p "$OUT"
BUILD=${GGUFKIT_GPU_BUILD:-$ROOT/build-gpu}
export LD_LIBRARY_PATH="$ROOT/gpudata/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export GGUFKIT_GPU_TESTDATA=${GGUFKIT_GPU_TESTDATA:-$ROOT/gpudata/testdata}
SKIP=" ${GGUFKIT_SKIP:-} "
[ -d /usr/local/cuda/bin ] && PATH=$PATH:/usr/local/cuda/bin # compute-sanitizer, cuobjdump
status=0
step() { echo "=== $* ($(date +%T))"; }
SUM=$OUT/summary.txt
: > "$SUM"
note() { echo "$*" >> "$SUM"; } # the lines printed again at the end
skipped() { case "$SKIP" in *" $1 "*) return 0 ;; esac; return 1; }
echo "=== run $(date -u +%FT%TZ) skip=[${GGUFKIT_SKIP:-}]"

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv \
    2>&1 | tee "$OUT/gpu.txt"

if [ -n "${GGUFKIT_GPU_BUILD:-}" ] && [ -x "$BUILD/tests/test_cuda_dequant" ]; then
    step "prebuilt $BUILD"
    [ -d "$BUILD/lib" ] && export LD_LIBRARY_PATH="$BUILD/lib:$LD_LIBRARY_PATH"
else
    step "build $BUILD (sm_90)"
    if ! { cmake -S "$ROOT" -B "$BUILD" -DGGUFKIT_WERROR="${GGUFKIT_GPU_WERROR:-OFF}" \
            -DGGUFKIT_CUDA_ARCHITECTURES=90-real -DCMAKE_BUILD_TYPE=Release &&
          cmake --build "$BUILD" -j"$(nproc)" --target test_cuda_dequant test_cuda_upload \
            test_cuda_st_dequant test_cuda_dq_check bench_cuda_dequant bench_cuda_upload \
            gguf-dequant-verify gguf-gen; } > "$OUT/build.log" 2>&1; then
        tail -30 "$OUT/build.log"
        PRE=${GGUFKIT_GPU_PREBUILT:-}
        case "$PRE" in /* | "") ;; *) PRE=$ROOT/$PRE ;; esac
        [ -n "$PRE" ] && [ -x "$PRE/tests/test_cuda_dequant" ] || exit 3
        step "the build failed here: using the tree built elsewhere, $PRE"
        BUILD=$PRE
        [ -d "$PRE/lib" ] && export LD_LIBRARY_PATH="$PRE/lib:$LD_LIBRARY_PATH"
    fi
fi
"$BUILD/tools/gguf-dequant-verify" --version || { echo "the tools do not run here"; exit 3; }

if command -v cuobjdump > /dev/null; then
    step "kernel resources (registers, stack, spills)"
    cuobjdump --dump-resource-usage "$BUILD/tests/bench_cuda_dequant" > "$OUT/resources.txt" 2>&1
    grep -o 'REG:[0-9]*' "$OUT/resources.txt" | sort | uniq -c | sort -rn | head -8 | tr '\n' ' '
    echo
    grep -o 'STACK:[1-9][0-9]*' "$OUT/resources.txt" | sort | uniq -c | head -3
    cuobjdump --dump-resource-usage "$BUILD/tests/test_cuda_dq_check" 2>&1 |
        grep -A1 dqc_count_kernel | tr -s ' \n' ' '
    echo
fi

for t in test_cuda_dequant test_cuda_upload test_cuda_st_dequant test_cuda_dq_check; do
    [ -x "$BUILD/tests/$t" ] || continue
    skipped $t && continue
    step "$t"
    "$BUILD/tests/$t" 2>&1 | tee "$OUT/$t.log" | grep -v '^MISMATCH' | tail -20
    rc=${PIPESTATUS[0]}
    grep -c '^MISMATCH' "$OUT/$t.log" | sed 's/^/mismatch lines: /'
    grep '^MISMATCH' "$OUT/$t.log" | cut -c1-400 | head -40
    echo "$t rc=$rc"
    note "$t rc=$rc"
    [ "$rc" = 0 ] || status=1
done

if [ -x "$BUILD/tools/gguf-dequant-verify" ] && [ -d "$GGUFKIT_GPU_TESTDATA" ] &&
   ! skipped verify; then
    step "gguf-dequant-verify --gpu"
    find "$GGUFKIT_GPU_TESTDATA" -name '*.gguf' | sort | while read -r f; do
        "$BUILD/tools/gguf-dequant-verify" --gpu -q --allow-nonfinite "$f" 2>&1 | tail -2
        echo "$(basename "$f"): exit ${PIPESTATUS[0]}"
    done | tee "$OUT/dequant-verify.log"
fi

if [ -x "$BUILD/tools/gguf-dequant-verify" ] && [ -x "$BUILD/tools/gguf-gen" ] &&
   ! skipped verifygen; then
    # the tool's GPU checker end to end: every tensor equal bit for bit, with chunks that fill
    # its pinned buffers, small chunks (many in flight, rows cut), and --reference (MLA's
    # attn_k_b/attn_v_b are decoded into the tool's own memory and copied)
    step "verifygen: gguf-dequant-verify --gpu on generated models"
    G=$(mktemp -d "${TMPDIR:-/tmp}/verifygen.XXXXXX")
    {
        for ty in Q4_K IQ2_XXS Q8_0 F16 MXFP4 Q6_K IQ1_M F32; do
            "$BUILD/tools/gguf-gen" model -q --arch deepseek2 --type $ty "$G/m_$ty.gguf"
            for args in "" "--chunk 1000 --threads 3" "--chunk 100000 --json"; do
                # shellcheck disable=SC2086
                "$BUILD/tools/gguf-dequant-verify" --gpu -q $args "$G/m_$ty.gguf" > "$G/out" 2>&1
                rc=$?
                echo "$ty [$args]: exit $rc: $(grep -o 'GPU[^;]*$\|"gpu": {[^}]*}, "ok": [a-z]*' "$G/out" | tail -1)"
                [ "$rc" = 0 ] || { tail -5 "$G/out"; echo FAILED; }
            done
        done
        "$BUILD/tools/gguf-gen" hf -q "$G/m_F32.gguf" "$G/ck" --format fp8
        "$BUILD/tools/gguf-dequant-verify" --gpu -q -v --reference "$G/ck" "$G/m_F32.gguf" \
            > "$G/out" 2>&1
        rc=$?
        echo "F32 --reference fp8: exit $rc: $(tail -2 "$G/out" | tr '\n' ' ')"
        [ "$rc" = 0 ] || { tail -5 "$G/out"; echo FAILED; }
    } 2>&1 | tee "$OUT/verifygen.log"
    grep -q FAILED "$OUT/verifygen.log" && status=1
    note "verifygen: $(grep -c ': exit 0' "$OUT/verifygen.log") runs exit 0," \
        "$(grep -c FAILED "$OUT/verifygen.log") failed"
    rm -rf "$G"
fi

if [ -x "$BUILD/tools/gguf-dequant-verify" ] && [ -x "$BUILD/tools/gguf-gen" ] &&
   ! skipped docs; then
    step "docs: the GPU examples of docs/gguf-dequant-verify.md"
    timeout 300 python3 "$ROOT/tests/docs/run_docs.py" --build "$BUILD" --gpu \
        "$ROOT/docs/gguf-dequant-verify.md" > "$OUT/docs.log" 2>&1
    rc=$?
    tail -20 "$OUT/docs.log"
    echo "docs rc=$rc (77 = every GPU example skipped)"
    note "docs rc=$rc"
    [ "$rc" = 0 ] || [ "$rc" = 77 ] || status=1
fi

if [ -x "$BUILD/tools/gguf-dequant-verify" ] && [ -x "$BUILD/tools/gguf-gen" ] &&
   ! skipped dvbench; then
    step "dvbench: gguf-dequant-verify on a 20B Q4_K model, CPU only against --gpu"
    # the report is copied to $OUT/bench-dequant-verify-gpu.txt; the model stays out of $OUT
    OUT="$OUT" timeout 300 "$ROOT/tests/bench/bench_dequant_verify_gpu.sh" "$BUILD" \
        "${GGUFKIT_DV_RUNS:-8}" 2>&1 | tee "$OUT/dvbench.log"
    rc=${PIPESTATUS[0]}
    echo "dvbench rc=$rc"
    note "dvbench rc=$rc"
    grep -E "^  (cpu|gpu) |^median|^ratio|^one more" "$OUT/dvbench.log" >> "$SUM"
    [ "$rc" = 0 ] || status=1
fi

if command -v compute-sanitizer > /dev/null && ! skipped sanitizer; then
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
if command -v compute-sanitizer > /dev/null && [ -x "$BUILD/tests/test_cuda_dq_check" ] &&
   ! skipped sanitizer_dq; then
    for tool in memcheck racecheck; do
        step "compute-sanitizer $tool test_cuda_dq_check (quick)"
        GGUFKIT_GPU_QUICK=1 timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 \
            "$BUILD/tests/test_cuda_dq_check" > "$OUT/sanitizer-dq-check-$tool.log" 2>&1
        rc=$?
        echo "$tool rc=$rc"
        note "compute-sanitizer $tool test_cuda_dq_check rc=$rc"
        grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|Hazard" \
            "$OUT/sanitizer-dq-check-$tool.log" | head -5
        [ "$rc" = 0 ] || status=1
    done
fi

if ! skipped bench; then
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
fi
if [ -x "$BUILD/tests/bench_cuda_upload" ] && ! skipped upload; then
    step "bench_cuda_upload ${GGUFKIT_UPLOAD_ARGS:-2}"
    "$BUILD/tests/bench_cuda_upload" ${GGUFKIT_UPLOAD_ARGS:-2} 2>&1 | tee "$OUT/bench-upload.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
step "summary"
cat "$SUM"
step "done status=$status"
exit $status
