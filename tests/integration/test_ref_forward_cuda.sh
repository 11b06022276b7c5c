#!/bin/bash
# ref-forward --backend: option checks everywhere; without a GPU (or in a
# build without CUDA) --backend cuda fails at once with exit 3 and a clear
# message, before any long work and without leaving an output behind; with a
# GPU, a cuda run is compared with the CPU record of the same model.
. "$(dirname "$0")/lib.sh"
RF=$GGUFKIT_BIN/ref-forward
"$GEN" model --arch deepseek2 --no-sync "$T/ds.gguf" > /dev/null

# usage: exit 2
expect 2 "$RF" "$T/ds.gguf" --tokens 1,2,3 --backend gpu
contains "$T/err" "--backend: 'gpu' is not cpu or cuda"
expect 2 "$RF" "$T/ds.gguf" --tokens 1,2,3 --backend cuda --precision f64
contains "$T/err" "f64 is CPU only"
expect 2 "$RF" "$T/ds.gguf" --tokens 1,2,3 --backend cuda --mla absorbed
contains "$T/err" "absorbed is CPU only"
expect 2 "$RF" "$T/ds.gguf" --tokens 1,2,3 --backend cuda --host-register maybe
contains "$T/err" "--host-register: 'maybe' is not auto, on or off"
expect 2 "$RF" "$T/ds.gguf" --tokens 1,2,3 --host-register on
contains "$T/err" "--host-register applies to --backend cuda"
expect 2 "$RF" "$T/ds.gguf" --tokens 1,2,3 --gpu-mem-limit 1G
contains "$T/err" "--gpu-mem-limit applies to --backend cuda"
expect 2 "$RF" "$T/ds.gguf" --tokens 1,2,3 --backend cuda --gpu-mem-limit lots
contains "$T/err" "--gpu-mem-limit: 'lots' is not a size"
# the tensor-parallel ranks take it too (issue 16): no usage error, whatever the machine
rc=0
"$RF" "$T/ds.gguf" --tokens 1,2,3 --backend cuda --tp 2 --host-register off >"$T/out" 2>"$T/err" ||
    rc=$?
[ "$rc" -ne 2 ] && pass || fail "--tp with --host-register refused: $(cat "$T/err")"

# --backend cpu is the default
expect 0 "$RF" "$T/ds.gguf" --tokens 1,2,3 --backend cpu --record "$T/cpu.gguf"
expect 0 "$RF" "$T/ds.gguf" --tokens 1,2,3 --record "$T/cpu2.gguf"
expect 0 "$RF" compare "$T/cpu.gguf" "$T/cpu2.gguf"

if command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1 &&
   "$RF" "$T/ds.gguf" --tokens 1 --backend cuda > /dev/null 2>&1; then
    # a GPU: records compare with the CPU's within the default f32 tolerance
    expect 0 "$RF" "$T/ds.gguf" --tokens 1,2,3 --backend cuda --record "$T/gpu.gguf"
    expect 0 "$RF" compare "$T/cpu.gguf" "$T/gpu.gguf"
    expect 0 "$RF" "$T/ds.gguf" --tokens 1,2,3 --backend cuda --compare "$T/cpu.gguf"
    contains "$T/out" "logits"
    # the copy engine reading the locked mapping in place, or the host gathering
    expect 0 "$RF" "$T/ds.gguf" --tokens 1,2,3 --backend cuda --host-register on --stats \
        --compare "$T/cpu.gguf"
    grep -qF "(0 MiB registered" "$T/out" && fail "--host-register on registered nothing" || pass
    expect 0 "$RF" "$T/ds.gguf" --tokens 1,2,3 --backend cuda --host-register off --stats \
        --compare "$T/cpu.gguf"
    contains "$T/out" "0.00 GB read in place from the registered mapping (0 MiB registered"
    # a cap: chunks sized to it, the same answer; a cap below one layer: exit 3, said so
    expect 0 "$RF" "$T/ds.gguf" --tokens 1,2,3 --backend cuda --gpu-mem-limit 128M \
        --compare "$T/cpu.gguf"
    expect 3 "$RF" "$T/ds.gguf" --tokens 1,2,3 --backend cuda --gpu-mem-limit 8M
    contains "$T/err" "not even one layer fits"
    # tensor parallel on the GPUs of this host
    if [ "$(nvidia-smi -L | grep -c '^GPU')" -ge 2 ]; then
        expect 0 "$RF" "$T/ds.gguf" --tokens 1,2,3 --backend cuda --tp 2
        expect 0 "$RF" "$T/ds.gguf" --tokens 1,2,3 --backend cuda --tp 2 --host-register off
        expect 0 "$RF" "$T/ds.gguf" --tokens 1,2,3 --backend cuda --tp 2 --host-register on
        expect 1 "$RF" "$T/ds.gguf" --tokens 1,2,3 --backend cuda --tp 2 --inject kv-b-rows
        contains "$T/out" "blk.0"
    else
        expect 3 "$RF" "$T/ds.gguf" --tokens 1,2,3 --backend cuda --tp 2
        contains "$T/err" "GPU(s)"
    fi
else
    # no GPU: exit 3, a message that says what is missing, no output written
    expect 3 "$RF" "$T/ds.gguf" --tokens 1,2,3 --backend cuda --record "$T/gpu.gguf"
    if grep -qF "no usable GPU" "$T/err" || grep -qF "built without CUDA" "$T/err"; then
        pass
    else
        fail "no clear message: $(cat "$T/err")"
    fi
    contains "$T/err" "--backend cuda"
    [ ! -e "$T/gpu.gguf" ] && pass || fail "a record was left behind without a GPU"
    expect 3 "$RF" "$T/ds.gguf" --tokens 1,2,3 --backend cuda --compare "$T/cpu.gguf"
    expect 3 "$RF" "$T/ds.gguf" --tokens 1,2,3 --backend cuda --tp 2
    contains "$T/err" "--backend cuda"
    expect 3 "$RF" "$T/ds.gguf" --tokens 1,2,3 -n 4 --backend cuda --json
    [ ! -s "$T/out" ] && pass || fail "stdout not empty without a GPU: $(head -c 200 "$T/out")"
fi
finish
