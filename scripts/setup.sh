#!/usr/bin/env bash
# Set up a fresh Debian 12 machine (root, CUDA toolkit optional) and build ggufkit.
#   scripts/setup.sh [BUILD_DIR] [extra cmake args...]
# Installs only what is missing: Debian packages, then gguf-py/numpy/pytest from PyPI.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
shift || true

need_pkgs=()
for p in build-essential cmake pkg-config libzstd-dev libxxhash-dev check clang \
         libclang-rt-14-dev libcurl4-openssl-dev libjansson-dev libmicrohttpd-dev \
         libpcre2-dev chromium; do
    dpkg -s "$p" >/dev/null 2>&1 || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
    echo "setup: installing ${need_pkgs[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi

py=${PYTHON:-python3}
if ! "$py" -c 'import gguf, numpy, pytest, openai' >/dev/null 2>&1; then
    echo "setup: installing gguf numpy pytest openai from PyPI" >&2
    "$py" -m pip install -q gguf numpy pytest openai
fi

# nvcc is optional: the CUDA parts build where it exists.
if [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH=/usr/local/cuda/bin:$PATH
fi
mkdir -p "$build"
log=$build/build.log
echo "setup: building into $build (log: $log)" >&2
if ! { cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" &&
       cmake --build "$build" -j"$(nproc)"; } >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "setup: the build failed (full log: $log)" >&2
    exit 1
fi
