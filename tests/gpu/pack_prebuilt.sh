#!/bin/bash
# Build the binaries that tests/gpu/run_gpu.sh runs, here (Release, sm_90), and pack
# them with the shared libraries they need beyond glibc and libstdc++ (jansson, subunit,
# xxhash, pcre2, unistring) into one small folder that a call to the GPU machine can carry:
# run_gpu.sh uses it (GGUFKIT_GPU_PREBUILT=FOLDER) when its own build fails there, e.g. for lack
# of a library's headers in the GPU machine's image. The binaries link CUDA's runtime
# statically and need only the driver there.
#
#   tests/gpu/pack_prebuilt.sh [BUILD_DIR] [PACK_DIR]   # defaults: build-gpu-rel, build-gpu-carry
#
# JOBS: parallel build jobs (default 2). Both folders match build*/, which git ignores, so the
# pack travels only when a call names it in carry.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:-$ROOT/build-gpu-rel}
P=${2:-$ROOT/build-gpu-carry}
tools="gguf-dequant-verify gguf-gen"
tests="test_cuda_dequant test_cuda_upload test_cuda_st_dequant test_cuda_dq_check
       bench_cuda_dequant bench_cuda_upload"
# without -Werror, as run_gpu.sh builds: at -O3 GCC 12 warns in engine/serve_request.c
mkdir -p "$B"
cmake -S "$ROOT" -B "$B" -DGGUFKIT_WERROR=OFF -DGGUFKIT_CUDA_ARCHITECTURES=90-real \
    -DCMAKE_BUILD_TYPE=Release > "$B/configure.log"
# shellcheck disable=SC2086
cmake --build "$B" -j"${JOBS:-2}" --target $tools $tests
rm -rf "$P"
mkdir -p "$P/tools" "$P/tests" "$P/lib"
for t in $tools; do cp "$B/tools/$t" "$P/tools/"; done
for t in $tests; do cp "$B/tests/$t" "$P/tests/"; done
# the shared libraries beyond glibc, libstdc++ and libgcc, as resolved here
for f in "$P"/tools/* "$P"/tests/*; do
    ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'
done | sort -u | while read -r lib; do
    case $(basename "$lib") in
    libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | ld-linux* | libstdc++.so* | \
        libgcc_s.so*) ;;
    *) cp -L "$lib" "$P/lib/" ;;
    esac
done
ls "$P/lib"
du -sh "$P"
