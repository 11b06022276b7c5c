#!/usr/bin/env bash
# Set up a fresh Debian 12 machine (root, CUDA toolkit optional) and build ggufkit.
#   scripts/setup.sh [--tests] [BUILD_DIR] [extra cmake args...]
# Installs only what is missing: the Debian packages of the build, then, with --tests, what
# only the test suite needs (clang and its runtime for the fuzzers, chromium for the HTML
# report's screenshot test, the zstd, curl and jq commands of the docs' examples, gguf-py/
# numpy/pytest from PyPI as oracles).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
tests=0
if [ "${1:-}" = "--tests" ]; then
    tests=1
    shift
fi
build=${1:-$here/build}
shift || true

pkgs=(build-essential cmake pkg-config libzstd-dev libxxhash-dev check libcurl4-openssl-dev
      libjansson-dev libmicrohttpd-dev libpcre2-dev libunistring-dev)
[ "$tests" = 1 ] && pkgs+=(clang libclang-rt-14-dev chromium zstd curl jq xfsprogs)
need_pkgs=()
for p in "${pkgs[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
    echo "setup: installing ${need_pkgs[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi

py=${PYTHON:-python3}
if [ "$tests" = 1 ] && ! "$py" -c 'import gguf, numpy, pytest, openai, safetensors, ml_dtypes, xxhash, tokenizers, transformers; assert int(transformers.__version__.split(".")[0]) >= 5' \
        >/dev/null 2>&1; then
    # transformers (no torch): its config classes are the oracle of the HF config tests
    echo "setup: installing gguf numpy pytest openai safetensors ml_dtypes xxhash tokenizers transformers from PyPI" >&2
    "$py" -m pip install -q gguf numpy pytest openai safetensors ml_dtypes xxhash tokenizers 'transformers>=5'
fi

# nvcc is optional: the CUDA parts build where it exists.
if [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH=/usr/local/cuda/bin:$PATH
fi
mkdir -p "$build"
log=$build/build.log
echo "setup: building into $build (log: $log)" >&2
# The build takes minutes on 2 cores: its progress every 10 %, the rest in the log.
progress() {
    tee -a "$log" | awk '/^\[ *[0-9]+%\]/ {
        p = substr($0, 2, index($0, "%") - 2) + 0
        if (p >= last + 10) { printf "setup: building, %d %%\n", p > "/dev/stderr"; last = p }
    }'
}
if ! { cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >"$log" 2>&1 &&
       cmake --build "$build" -j"$(nproc)" 2>&1 | progress; }; then
    tail -n 40 "$log" >&2
    echo "setup: the build failed (full log: $log)" >&2
    exit 1
fi
