#!/bin/bash
# The GPU forward pass (issue 8) on a GPU machine in one call: build, test,
# compare with the CPU on every architecture, benchmark. Logs under $OUT.
#
#   OUT=/path/to/logs tests/gpu/run_gpu_forward.sh
#
# Steps (each logs to $OUT/NAME.log; a summary goes to stdout and
# $OUT/summary.txt):
#   build        build-gpufwd-run (sm_90 only; GGUFKIT_CUDA_ARCHITECTURES to change)
#   test         tests/gpu/test_gpu_forward (GPU vs CPU captures, every arch)
#   nccl         tests/gpu/test_nccl_comm (2 GPUs: all-reduce, all-gather, dead ranks)
#   tp           tests/gpu/test_gpu_tp (2 GPUs: each rank vs the CPU's virtual rank, faults)
#   integration  tests/integration/test_ref_forward_cuda.sh (GPU branch)
#   cli          per architecture: ref-forward --record (CPU), then
#                ref-forward --backend cuda --compare CPU.gguf (exit 0 = within tolerance)
#   docs         the examples of docs/ref-forward.md tagged gpu / gpu2 (tests/docs/run_docs.py
#                --gpu; the gpu2 ones need two GPUs), compared with the page
#   sanitizer    compute-sanitizer memcheck on the quick test
#   stream       bench_cuda_forward on a generated ~8 GB MoE model (Q4_K):
#                weight GB/s into the GPU vs pinned H2D GB/s (target >= 70%); then
#                (memcap) the same model under --gpu-mem-limit 256M against no cap
#   model20b     a generated ~20B-parameter MoE (Q4_K): 64-token prompt on the
#                CPU (all cores) and on the GPU, timed, records compared; with 2 GPUs
#                also --backend cuda --tp 2 against the single-GPU record, timed
#   tpfaults     tests/gpu/tp_faults.py at tp = the GPUs of the host (GGUFKIT_TP to
#                override; 2 or more): a deepseek2 model whose counts divide by 8, a
#                correct plan and every fault of the catalog, GPU ranks against CPU ranks
# (-Werror stays off here: the GPU machine's compiler may warn where ours does not.)
# GGUFKIT_GPU_BUILD=DIR uses a tree built elsewhere (same CUDA; sm_90) that holds
# tools/ref-forward, tools/gguf-gen, tests/test_gpu_forward, tests/test_nccl_comm and
# tests/bench_cuda_forward, instead of building here. Prebuild with:
#   cmake -S . -B build-gpufwd-run -DGGUFKIT_WERROR=OFF -DCMAKE_BUILD_TYPE=Release \
#         -DGGUFKIT_CUDA_ARCHITECTURES=90-real
#   cmake --build build-gpufwd-run -j2 --target ref-forward gguf-gen test_gpu_forward \
#         test_nccl_comm test_gpu_tp bench_cuda_forward shard-plan
# GGUFKIT_SKIP="..." skips steps by name (test nccl tp integration cli docs sanitizer stream
# memcap model20b tpfaults; memcap runs inside stream, on its model); GGUFKIT_20B_CPU=0 leaves
# out the CPU run of the 20B model;
# GGUFKIT_STREAM_RUNS="THREADS:CHUNK_MIB:REGISTER ..." picks the stream step's runs;
# GGUFKIT_TP=N the tpfaults step's tp (default: the GPUs of the host). On the 2-GPU
# machine (2026-11-30) everything but stream/model20b/tpfaults took 90 s, stream and
# model20b 76 s, tpfaults 70 s; under a 10-minute limit per command, e.g.
#   GGUFKIT_SKIP="stream model20b tpfaults" tests/gpu/run_gpu_forward.sh
#   GGUFKIT_SKIP="test nccl tp integration cli sanitizer" tests/gpu/run_gpu_forward.sh
# With one GPU the nccl, tp and tpfaults steps skip. Scratch models go to
# $GGUFKIT_SCRATCH (default $OUT/scratch, removed at the end).
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/out}
mkdir -p "$OUT"
BUILD=${GGUFKIT_GPU_BUILD:-$ROOT/build-gpufwd-run}
case "$BUILD" in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
SCR=${GGUFKIT_SCRATCH:-$OUT/scratch}
mkdir -p "$SCR"
SKIP=" ${GGUFKIT_SKIP:-} "
export LD_LIBRARY_PATH="$ROOT/gpudata/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
NPROC=$(nproc)
status=0
SUM=$OUT/summary.txt
echo "=== run $(date -u +%FT%TZ) skip=[${GGUFKIT_SKIP:-}]" >> "$SUM"
step() { echo "=== $* ($(date +%T))"; }
note() { echo "$*" | tee -a "$SUM"; }
skipped() { case "$SKIP" in *" $1 "*) return 0 ;; esac; return 1; }

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current \
    --format=csv 2>&1 | tee "$OUT/gpu.txt"
nproc > "$OUT/cpu.txt"; free -g >> "$OUT/cpu.txt"; df -h "$SCR" >> "$OUT/cpu.txt"

if [ -x "$BUILD/tools/ref-forward" ] && [ -x "$BUILD/tools/gguf-gen" ] &&
   [ -x "$BUILD/tests/test_gpu_forward" ] && [ -x "$BUILD/tests/test_nccl_comm" ] &&
   [ -x "$BUILD/tests/test_gpu_tp" ] &&
   [ -x "$BUILD/tests/bench_cuda_forward" ] && [ -x "$BUILD/tools/shard-plan" ] &&
   [ -n "${GGUFKIT_GPU_BUILD:-}" ]; then
    step "prebuilt $BUILD"
    echo "prebuilt tree $BUILD" > "$OUT/build.log"
else
step "build $BUILD"
{ cmake -S "$ROOT" -B "$BUILD" -DGGUFKIT_WERROR=OFF -DCMAKE_BUILD_TYPE=Release \
    -DGGUFKIT_CUDA_ARCHITECTURES="${GGUFKIT_CUDA_ARCHITECTURES:-90-real}" &&
  cmake --build "$BUILD" -j"$NPROC" --target ref-forward gguf-gen test_gpu_forward \
    test_nccl_comm test_gpu_tp bench_cuda_forward shard-plan; } > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; note "build FAILED"; exit 3; }
fi
RF=$BUILD/tools/ref-forward
GEN=$BUILD/tools/gguf-gen
export GGUFKIT_GEN=$GEN GGUFKIT_BIN=$BUILD/tools GGUFKIT_BUILD=$BUILD GGUFKIT_SRC=$ROOT

if ! skipped test; then
step "test_gpu_forward"
timeout 600 "$BUILD/tests/test_gpu_forward" > "$OUT/test.log" 2>&1
rc=$?
cat "$OUT/test.log"
note "test_gpu_forward rc=$rc"
[ "$rc" = 0 ] || status=1
fi

if ! skipped nccl; then
step "test_nccl_comm (2 GPUs; skips with 1)"
NCCL_NVLS_ENABLE=0 timeout 300 "$BUILD/tests/test_nccl_comm" > "$OUT/nccl.log" 2>&1
rc=$?
cat "$OUT/nccl.log"
note "test_nccl_comm rc=$rc (77 = skipped)"
[ "$rc" = 0 ] || [ "$rc" = 77 ] || status=1
fi

if ! skipped tp; then
step "test_gpu_tp (2 GPUs; skips with 1)"
NCCL_NVLS_ENABLE=0 timeout 500 "$BUILD/tests/test_gpu_tp" > "$OUT/tp.log" 2>&1
rc=$?
cat "$OUT/tp.log"
note "test_gpu_tp rc=$rc (77 = skipped)"
[ "$rc" = 0 ] || [ "$rc" = 77 ] || status=1
fi

if ! skipped integration; then
step "integration test_ref_forward_cuda.sh"
timeout 300 bash "$ROOT/tests/integration/test_ref_forward_cuda.sh" > "$OUT/integration.log" 2>&1
rc=$?
tail -5 "$OUT/integration.log"
note "integration rc=$rc"
[ "$rc" = 0 ] || status=1
fi

if ! skipped cli; then
step "cli: ref-forward --backend cuda --compare, every architecture"
TOK=1,17,42,99,3,250,7,11
: > "$OUT/cli.log"
for v in "llama" "llama --rope-freqs 8" "qwen2" "qwen3" "qwen3moe" "deepseek2" \
         "deepseek2 --legacy-kv-b" "deepseek2 --gating softmax" "glm4moe --qk-norm" "glm-dsa" \
         "llama --type Q4_K" "deepseek2 --type Q8_0"; do
    name=$(echo "$v" | tr ' ' '_')
    # shellcheck disable=SC2086
    "$GEN" model --arch $v --no-sync --force "$SCR/$name.gguf" > /dev/null 2>&1
    "$RF" "$SCR/$name.gguf" --tokens $TOK --record "$SCR/$name.cpu.gguf" > /dev/null 2>> "$OUT/cli.log"
    { echo "--- $v"; "$RF" "$SCR/$name.gguf" --tokens $TOK --backend cuda --stats \
        --compare "$SCR/$name.cpu.gguf"; } >> "$OUT/cli.log" 2>&1
    rc=$?
    note "cli $v: rc=$rc"
    [ "$rc" = 0 ] || status=1
    rm -f "$SCR/$name.gguf" "$SCR/$name.cpu.gguf"
done
fi

if ! skipped docs; then
step "docs: the GPU examples of docs/ref-forward.md"
timeout 300 python3 "$ROOT/tests/docs/run_docs.py" --build "$BUILD" --gpu "$ROOT/docs/ref-forward.md" \
    > "$OUT/docs.log" 2>&1
rc=$?
tail -20 "$OUT/docs.log"
note "docs rc=$rc (77 = every GPU example skipped)"
[ "$rc" = 0 ] || [ "$rc" = 77 ] || status=1
fi

if ! skipped sanitizer && command -v compute-sanitizer > /dev/null; then
    step "compute-sanitizer memcheck (quick test)"
    # API errors are not reported: the test provokes one on purpose (a 4 TiB
    # staging request must fail with GGUF_E_NOMEM)
    GGUFKIT_GPU_QUICK=1 timeout 600 compute-sanitizer --tool memcheck --error-exitcode 9 \
        --report-api-errors no \
        "$BUILD/tests/test_gpu_forward" > "$OUT/sanitizer-memcheck.log" 2>&1
    rc=$?
    grep -E "ERROR SUMMARY|Invalid" "$OUT/sanitizer-memcheck.log" | head -5
    note "memcheck rc=$rc"
fi

if ! skipped stream; then
    step "stream: bench_cuda_forward on a generated MoE model"
    M=$SCR/stream-moe.gguf
    # qwen3moe, 6 layers of 128 experts (4096 x 1536), Q4_K: about 8 GB
    "$GEN" model --arch qwen3moe --embd 4096 --heads 32 --kv-heads 4 --head-dim 128 \
        --experts 128 --experts-used 8 --expert-ff 1536 --layers 6 --vocab 32000 --type Q4_K \
        --no-sync --force "$M" > "$OUT/stream-gen.log" 2>&1
    ls -la "$M" >> "$OUT/stream-gen.log"
    : > "$OUT/stream.log"
    # COPY_THREADS:CHUNK_MIB:REGISTER (1: the mapping registered, read in place;
    # -1: gathered into pinned staging by the copy threads)
    for tc in ${GGUFKIT_STREAM_RUNS:-16:64:1 16:32:1 16:64:-1 24:32:-1 8:64:-1}; do
        IFS=: read -r th ch reg <<< "$tc"
        "$BUILD/tests/bench_cuda_forward" "$M" 64 "$th" "$ch" "$reg" >> "$OUT/stream.log" 2>&1
    done
    # a single token routes to few experts: only those move
    "$BUILD/tests/bench_cuda_forward" "$M" 1 16 64 >> "$OUT/stream.log" 2>&1
    cat "$OUT/stream.log" | tee -a "$SUM"
    if ! skipped memcap; then
        # the same ~8 GB model under a 256 MiB cap (issue 16): the same answer as without
        # a cap, the device memory held, and the time of the pass next to the uncapped one
        T64=$(python3 -c "print(','.join(str((i*7919+1)%32000) for i in range(64)))")
        for cap in none 256M; do
            extra=""
            [ $cap != none ] && extra="--gpu-mem-limit $cap"
            s0=$(date +%s.%N)
            # shellcheck disable=SC2086
            timeout 300 "$RF" "$M" --tokens "$T64" --backend cuda $extra --stats \
                --record "$SCR/cap.$cap.gguf" > "$OUT/memcap-$cap.log" 2>&1
            rc=$?
            s1=$(date +%s.%N)
            note "memcap $cap: rc=$rc wall=$(awk "BEGIN { printf \"%.1f\", $s1 - $s0 }") s $(grep -o 'gpu: .*' "$OUT/memcap-$cap.log")"
        done
        "$RF" compare "$SCR/cap.none.gguf" "$SCR/cap.256M.gguf" > "$OUT/memcap-compare.txt" 2>&1
        note "memcap compare rc=$? $(tail -3 "$OUT/memcap-compare.txt" | tr '\n' ' ')"
        rm -f "$SCR"/cap.*.gguf
    fi
    rm -f "$M"
fi

if ! skipped model20b; then
    step "model20b: 64-token prompt, CPU vs GPU"
    M=$SCR/moe20b.gguf
    # qwen3moe, 32 layers, 128 experts of 2048 x 768, 32 heads of 128: ~20B parameters
    "$GEN" model --arch qwen3moe --embd 2048 --heads 32 --kv-heads 4 --head-dim 128 \
        --experts 128 --experts-used 8 --expert-ff 768 --layers 32 --vocab 32000 --type Q4_K \
        --no-sync --force "$M" > "$OUT/model20b.log" 2>&1
    ls -la "$M" >> "$OUT/model20b.log"
    # the streaming figure on this larger model too (64 tokens, the defaults)
    "$BUILD/tests/bench_cuda_forward" "$M" 64 2>&1 | tee -a "$OUT/model20b.log" "$SUM"
    T64=$(python3 -c "print(','.join(str((i*7919+1)%32000) for i in range(64)))")
    sides="cuda cpu"
    [ "${GGUFKIT_20B_CPU:-1}" = 0 ] && sides=cuda
    for side in $sides; do
        extra=""
        [ $side = cpu ] && extra="--threads $NPROC"
        s0=$(date +%s.%N)
        # shellcheck disable=SC2086
        timeout 400 "$RF" "$M" --tokens "$T64" --backend $side $extra --stats \
            --record "$SCR/20b.$side.gguf" >> "$OUT/model20b.log" 2>&1
        rc=$?
        s1=$(date +%s.%N)
        note "model20b $side: rc=$rc wall=$(awk "BEGIN { printf \"%.1f\", $s1 - $s0 }") s"
    done
    if [ -f "$SCR/20b.cpu.gguf" ]; then
        "$RF" compare "$SCR/20b.cpu.gguf" "$SCR/20b.cuda.gguf" > "$OUT/model20b-compare.txt" 2>&1
        rc=$?
        "$RF" compare "$SCR/20b.cpu.gguf" "$SCR/20b.cuda.gguf" --json > "$OUT/model20b-compare.json" 2>&1
        tail -15 "$OUT/model20b-compare.txt"
        note "model20b compare rc=$rc"
    fi
    if [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -ge 2 ]; then
        # tp 2 on two GPUs against the single-GPU record
        s0=$(date +%s.%N)
        timeout 580 "$RF" "$M" --tokens "$T64" --backend cuda --tp 2 \
            --compare "$SCR/20b.cuda.gguf" > "$OUT/model20b-tp2.txt" 2>&1
        rc=$?
        s1=$(date +%s.%N)
        tail -15 "$OUT/model20b-tp2.txt"
        note "model20b cuda tp 2 vs single GPU: rc=$rc wall=$(awk "BEGIN { printf \"%.1f\", $s1 - $s0 }") s"
    fi
    rm -f "$M" "$SCR"/20b.*.gguf
fi
if ! skipped tpfaults; then
    NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    TPN=${GGUFKIT_TP:-$NGPU}
    if [ "$TPN" -ge 2 ]; then
        step "tpfaults: --backend cuda --tp $TPN, every fault of the catalog, against the CPU ranks"
        NCCL_NVLS_ENABLE=0 timeout 900 python3 "$ROOT/tests/gpu/tp_faults.py" "$BUILD" "$SCR/tpf" \
            "$TPN" > "$OUT/tpfaults-tp$TPN.log" 2>&1
        rc=$?
        cp "$SCR/tpf/tp_faults.json" "$OUT/tpfaults-tp$TPN.json" 2>/dev/null
        cat "$OUT/tpfaults-tp$TPN.log"
        note "tpfaults tp $TPN rc=$rc"
        [ "$rc" = 0 ] || status=1
    else
        note "tpfaults: skipped (needs 2 GPUs or more)"
    fi
fi
[ -z "${GGUFKIT_SCRATCH:-}" ] && rm -rf "$SCR"
step "done status=$status"
note "status=$status"
exit $status
