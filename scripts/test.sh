#!/usr/bin/env bash
# Set up everything and run the whole test suite (what CI runs through .ci/run).
#   1. a warnings-as-errors build and every ctest test (unit, integration, interop,
#      fuzz corpus replay, the real engines vLLM and llama-cpp-python against check-engine;
#      GPU tests skip without a GPU);
#   2. an ASan+UBSan build running the unit tests and the fuzz corpus;
#   3. a bounded libFuzzer run of every fuzz target (parser, records).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc)

bash "$here/scripts/setup.sh" --tests "$here/build-ci" -DGGUFKIT_WERROR=ON
# The real engines of the engine tests (vLLM's CPU build, llama-cpp-python's server, llama.cpp's
# llama-server), cached in /var/cache/ggufkit/engines between runs on one machine;
# GGUFKIT_NO_ENGINES=1 skips them.
if [ "${GGUFKIT_NO_ENGINES:-0}" != 1 ]; then
    engines=$(bash "$here/scripts/setup_engines.sh" all)
    GGUFKIT_VLLM_PYTHON=$(sed -n 's/^vllm=//p' <<<"$engines")
    GGUFKIT_LLAMA_PYTHON=$(sed -n 's/^llama=//p' <<<"$engines")
    GGUFKIT_LLAMA_SERVER=$(sed -n 's/^llama_server=//p' <<<"$engines")
    # the same build's llama-perplexity sits beside it (test_check_engine_llama.sh)
    GGUFKIT_LLAMA_BIN=$(dirname "$GGUFKIT_LLAMA_SERVER")
    export GGUFKIT_VLLM_PYTHON GGUFKIT_LLAMA_PYTHON GGUFKIT_LLAMA_SERVER GGUFKIT_LLAMA_BIN
fi
(cd "$here/build-ci" && ctest --output-on-failure -j"$jobs" --timeout 900)

echo "== sanitizer build (ASan + UBSan): unit tests and fuzz corpus" >&2
# built without the network libraries too (GGUFKIT_NETWORK=OFF): that build must stand
cmake -S "$here" -B "$here/build-asan" -DGGUFKIT_SANITIZE=ON -DGGUFKIT_CUDA=OFF \
      -DGGUFKIT_NETWORK=OFF -DGGUFKIT_WERROR=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build "$here/build-asan" -j"$jobs"
(cd "$here/build-asan" && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j"$jobs" -L 'unit|fuzz' --timeout 900)

echo "== libFuzzer: every fuzz target, 45 seconds each" >&2
cmake -S "$here" -B "$here/build-fuzz" -DCMAKE_C_COMPILER=clang -DGGUFKIT_FUZZ=ON \
      -DGGUFKIT_CUDA=OFF -DGGUFKIT_TESTS=ON >/dev/null
for src in "$here"/tests/fuzz/fuzz_*.c; do
    name=$(basename "$src" .c)
    cmake --build "$here/build-fuzz" -j"$jobs" --target "$name" >/dev/null
    work=$(mktemp -d)
    cp "$here/tests/fuzz/corpus/${name#fuzz_}"/* "$work"/
    echo "-- $name" >&2
    "$here/build-fuzz/tests/fuzz/$name" -max_total_time=45 -rss_limit_mb=2048 -max_len=65536 \
        "$work" 2>&1 | tail -n 2
    rm -rf "$work"
done
echo "all test stages passed"
