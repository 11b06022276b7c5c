#!/usr/bin/env bash
# Prepare a run on the GPU machine from here. That machine has nvcc but none of our
# -dev packages, so the binaries are built here (sm_90, Release) and travel with
# the shared libraries they need beside them:
#
#   scripts/gpu_prepare.sh [--old REV] [--dequant]
#
# builds this tree into build-gputree/ and packs ref-forward, gguf-gen,
# gguf-inspect, shard-plan and the forward's GPU tests and benchmark into
# build-gpunew/ (tools/, tests/, lib/; about 20 MB: every binary holds the CUDA
# library's kernels), with --dequant also gguf-dequant-verify and the
# dequantization's tests and benchmark (16 MB more); with --old REV that
# revision's ref-forward, gguf-gen and gguf-inspect into build-gpuold/ (for
# scripts/gpu_guard.py). The tree and the carried packs must stay under 64 MiB:
# carry them (the `run` tool's carry: ["build-gpunew", "build-gpuold"]) and run
# there, in one call:
#
#   export LD_LIBRARY_PATH=$PWD/build-gpunew/lib NCCL_NVLS_ENABLE=0
#   python3 scripts/gpu_guard.py save build-gpuold /tmp/guard &&
#   python3 scripts/gpu_guard.py check build-gpunew /tmp/guard;
#   OUT=$OUT GGUFKIT_GPU_BUILD=build-gpunew GGUFKIT_SKIP="stream model20b" tests/gpu/run_gpu_forward.sh
#
# The network libraries stay out (GGUFKIT_NETWORK=OFF): the GPU runs need no
# check-engine or serve, and libcurl would drag two dozen libraries along.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
old=
tools=(ref-forward gguf-gen gguf-inspect shard-plan)
gpu_tests=(test_gpu_forward test_gpu_tp test_nccl_comm bench_cuda_forward)
while [ $# -gt 0 ]; do
    case "$1" in
    --old) old=$2; shift 2 ;;
    --dequant)
        tools+=(gguf-dequant-verify)
        gpu_tests+=(test_cuda_dequant test_cuda_upload test_cuda_st_dequant test_cuda_dq_check
                    bench_cuda_dequant bench_cuda_upload)
        shift ;;
    *) echo "usage: $0 [--old REV] [--dequant]" >&2; exit 2 ;;
    esac
done
jobs=$(nproc)

configure() { # SRC BUILD TESTS
    cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DGGUFKIT_CUDA_ARCHITECTURES=90-real \
          -DGGUFKIT_NETWORK=OFF -DGGUFKIT_TESTS="$3" -DGGUFKIT_WERROR=OFF >/dev/null
}

pack() { # BUILD PACK TARGETS...
    local build=$1 pack=$2
    shift 2
    rm -rf "$pack"
    mkdir -p "$pack/tools" "$pack/tests" "$pack/lib"
    for t in "$@"; do
        f=$(find "$build/tools" "$build/tests" -maxdepth 2 -type f -name "$t" 2>/dev/null | head -1 || true)
        [ -n "$f" ] || { echo "gpu_prepare: $t was not built" >&2; exit 3; }
        case "$f" in "$build"/tests/*) dst=$pack/tests ;; *) dst=$pack/tools ;; esac
        cp "$f" "$dst/"
        strip --strip-debug "$dst/$t"
    done
    # what the device image lacks: every non-system library the binaries load
    for b in "$pack"/tools/* "$pack"/tests/*; do if [ -f "$b" ]; then ldd "$b"; fi; done |
        awk '/=> \// {print $3}' | sort -u |
        grep -E 'lib(zstd|xxhash|jansson|pcre2-8|unistring|check|subunit)\.so' |
        while read -r so; do cp -L "$so" "$pack/lib/"; done
}

configure "$here" "$here/build-gputree" ON
cmake --build "$here/build-gputree" -j"$jobs" --target "${tools[@]}" "${gpu_tests[@]}"
pack "$here/build-gputree" "$here/build-gpunew" "${tools[@]}" "${gpu_tests[@]}"

if [ -n "$old" ]; then
    src=$here/build-gpuold-src
    rm -rf "$src"
    mkdir -p "$src"
    git -C "$here" archive "$old" | tar -x -C "$src"
    configure "$src" "$here/build-gpuoldtree" OFF
    cmake --build "$here/build-gpuoldtree" -j"$jobs" --target ref-forward gguf-gen gguf-inspect
    pack "$here/build-gpuoldtree" "$here/build-gpuold" ref-forward gguf-gen gguf-inspect
fi
du -sh "$here/build-gpunew" ${old:+"$here/build-gpuold"}
