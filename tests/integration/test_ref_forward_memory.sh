#!/usr/bin/env bash
# Layer-by-layer weight streaming: a generated model whose weights, once
# dequantized, need ~714 MiB runs under an address-space limit (RLIMIT_AS,
# `ulimit -v`) of its file size + 150 MiB, and gives the same logits as
# without the limit. The mmap of the file counts against RLIMIT_AS, so the
# limit cannot go below the file size; what it proves is that the
# dequantized model is never resident: only a few cache-sized blocks of rows
# per thread plus activations and the KV cache. A negative control (file
# size + 10 MiB, a 64-token prompt whose logits alone need more) must fail
# cleanly with exit 3 (environment: out of memory).
source "$(dirname "$0")/lib.sh"
R=$GGUFKIT_BIN/ref-forward
[ -x "$GEN" ] || skip "gguf-gen is not built"
M=$T/big.gguf
"$GEN" model --arch llama --embd 1024 --ff 4096 --layers 8 --heads 16 --kv-heads 4 \
    --head-dim 64 --vocab 32000 --type Q8_0 --no-sync --force -q "$M"
size=$(stat -c %s "$M")
f32_bytes=$(python3 -c "
import gguf; print(sum(int(t.n_elements) for t in gguf.GGUFReader('$M').tensors) * 4)")
limit_kib=$(( (size + 150 * 1024 * 1024) / 1024 ))
if [ "$f32_bytes" -gt $(( limit_kib * 1024 )) ]; then pass; else fail "model too small for the test"; fi

expect 0 "$R" "$M" --tokens 1,2,3,4 --logits "$T/free.npy" -q
( ulimit -v "$limit_kib"; exec "$R" "$M" --tokens 1,2,3,4 --logits "$T/limited.npy" --json ) \
    >"$T/out" 2>"$T/err" && pass || fail "under RLIMIT_AS: $(cat "$T/err")"
cmp -s "$T/free.npy" "$T/limited.npy" && pass || fail "logits differ under the limit"
python3 - "$T/out" "$T/limited.npy" <<'EOF' && pass || fail "stats or logits"
import json, sys, numpy as np
d = json.load(open(sys.argv[1]))
assert d["stats"]["peak_weight_bytes"] <= 33 * 2**20, d["stats"]
a = np.load(sys.argv[2])
assert a.shape == (4, 32000) and (a.std(axis=1) > 0).all()   # every row computed
EOF
long=$(python3 -c "print(','.join(str(i * 37 % 31999 + 1) for i in range(64)))")
( ulimit -v $(( (size + 10 * 1024 * 1024) / 1024 )); exec "$R" "$M" --tokens "$long" -q ) \
    >"$T/out" 2>"$T/err" && rc=0 || rc=$?
[ "$rc" -eq 3 ] && pass || fail "negative control: exit $rc, wanted 3"
contains "$T/err" "out of memory"
finish
