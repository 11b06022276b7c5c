#!/bin/bash
# On the GPU machine, in one call: the GPU guard (scripts/gpu_guard.py: the old
# build's records against the new build's, bit for bit) and the forward's GPU tests,
# over the packs of scripts/gpu_prepare.sh --old REV (carried: build-gpunew,
# build-gpuold). Logs and a summary under $OUT.
#
#   tests/gpu/run_gpu_guard.sh            # guard, then run_gpu_forward.sh's quick steps
#   GGUFKIT_SKIP="..." is passed on to run_gpu_forward.sh (default: "stream model20b")
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/out}
mkdir -p "$OUT"
NEW=$ROOT/build-gpunew
OLD=$ROOT/build-gpuold
# the packs' libraries, and NCCL wherever the machine's Python stack keeps it
nccl=$(find /opt /usr -name 'libnccl.so.2' 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$NEW/lib${nccl:+:$(dirname "$nccl")}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
status=0
echo "=== NCCL: ${nccl:-not found}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tail -n +2

echo "=== gpu guard: $OLD against $NEW ($(date +%T))"
guard=$(mktemp -d)
python3 "$ROOT/scripts/gpu_guard.py" save "$OLD" "$guard" > "$OUT/guard-save.log" 2>&1
grep -v '^[0-9]*/' "$OUT/guard-save.log" | tail -5
python3 "$ROOT/scripts/gpu_guard.py" check "$NEW" "$guard" > "$OUT/guard.log" 2>&1 || status=1
grep -v '^[0-9]*/' "$OUT/guard.log" | tail -40
rm -rf "$guard"

echo "=== run_gpu_forward.sh ($(date +%T))"
OUT=$OUT GGUFKIT_GPU_BUILD=$NEW GGUFKIT_SKIP="${GGUFKIT_SKIP:-stream model20b}" \
    bash "$ROOT/tests/gpu/run_gpu_forward.sh" || status=1
exit $status
