#!/usr/bin/env bash
# shard-plan --write-shards --dump-format vllm and shard-plan check-dump: a clean dump passes,
# every weight fault of the catalog injected into a dump is diagnosed by name (exit 1), a
# tensor changed by hand is "no known fault", unreadable dumps exit 2.
source "$(dirname "$0")/lib.sh"
S=$GGUFKIT_BIN/shard-plan
[ -x "$GEN" ] || skip "gguf-gen not built"
"$GEN" model -q --no-sync --arch deepseek2 --type F32 "$T/ds.gguf" || fail "gguf-gen deepseek2"
"$GEN" model -q --no-sync --arch llama --type F32 "$T/ll.gguf" || fail "gguf-gen llama"

# clean dumps: vLLM's file names and fused parameter names
expect 0 "$S" "$T/ds.gguf" --tp 2 --write-shards "$T/ok" --dump-format vllm -q
[ -f "$T/ok/model-rank-0-part-0.safetensors" ] && [ -f "$T/ok/model-rank-1-part-0.safetensors" ] \
    && pass || fail "rank files"
python3 - "$T/ok/model-rank-1-part-0.safetensors" <<'PY' && pass || fail "vLLM names"
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
h = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
for n in ("model.layers.0.mlp.gate_up_proj.weight", "model.layers.1.mlp.experts.w13_weight",
          "model.layers.1.mlp.experts.w2_weight", "model.layers.0.self_attn.kv_b_proj.weight",
          "model.embed_tokens.weight", "lm_head.weight"):
    assert n in h, (n, sorted(h))
assert h["model.layers.1.mlp.experts.w13_weight"]["dtype"] == "BF16"
assert h["__metadata__"]["rank"] == "1"
PY
expect 0 "$S" check-dump "$T/ds.gguf" "$T/ok" --tp 2
contains "$T/out" "0 differ"
expect 0 "$S" check-dump --tp 2 --json "$T/ds.gguf" "$T/ok"
python3 -c "import json; d = json.load(open('$T/out')); assert d['ok'] and d['findings'] == [] and d['tp'] == 2" \
    && pass || fail "clean JSON"

# every weight fault, injected and diagnosed by name: "MODEL FAULT OPTIONS"
while read -r model fault opts; do
    rm -rf "$T/f"
    # (the faulty shards asked for are written: exit 0)
    # shellcheck disable=SC2086
    expect 0 "$S" "$T/$model.gguf" $opts --fault "$fault" --write-shards "$T/f" --dump-format vllm -q
    # shellcheck disable=SC2086
    expect 1 "$S" check-dump "$T/$model.gguf" "$T/f" $opts
    contains "$T/out" ": fault $fault"
    # shellcheck disable=SC2086
    expect 1 "$S" check-dump "$T/$model.gguf" "$T/f" $opts --json
    python3 -c "
import json; d = json.load(open('$T/out'))
assert not d['ok'] and d['findings'] and all(f['fault'] == '$fault' for f in d['findings']), d" \
        && pass || fail "$fault JSON"
done <<'LIST'
ds kv-b-whole --tp 2
ds kv-b-rows --tp 2
ds kv-b-stacked --tp 2
ds k-b-no-transpose --tp 2
ds rank0-everywhere --tp 2
ds gate-up-stream --tp 2
ds mla-cache-sharded --tp 2
ds norm-sliced --tp 2
ds expert-offset --tp 2 --ep 2
ds vocab-no-pad --tp 2 --vocab-pad 100
ll qkv-stream --tp 4
ll rank0-everywhere --tp 4
ll kv-heads-split --tp 16
LIST

# not in the weights: no-allreduce changes what ranks do with them, not what they hold
rm -rf "$T/f"
expect 0 "$S" "$T/ds.gguf" --tp 2 --fault no-allreduce --write-shards "$T/f" --dump-format vllm -q
expect 0 "$S" check-dump "$T/ds.gguf" "$T/f" --tp 2

# a tensor changed by hand matches no fault of the catalog
cp -r "$T/ok" "$T/hand"
python3 - "$T/hand/model-rank-1-part-0.safetensors" <<'PY' || fail "editing a dump"
import json, struct, sys
p = sys.argv[1]
raw = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
e = json.loads(raw[8:8 + n])["model.layers.0.self_attn.o_proj.weight"]
b, en = e["data_offsets"]
raw[8 + n + b:8 + n + en] = bytes(reversed(raw[8 + n + b:8 + n + en]))
open(p, "wb").write(raw)
PY
expect 1 "$S" check-dump "$T/ds.gguf" "$T/hand" --tp 2
contains "$T/out" "rank 1 model.layers.0.self_attn.o_proj.weight"
contains "$T/out" "no known fault"

# unreadable dumps: exit 2
expect 2 "$S" check-dump "$T/ds.gguf" "$T/nonexistent" --tp 2
expect 2 "$S" check-dump "$T/ds.gguf" "$T/ok" --tp 3
contains "$T/err" "no model-rank-2-part-*.safetensors"
cp -r "$T/ok" "$T/extra"
cp "$T/ok/model-rank-0-part-0.safetensors" "$T/extra/model-rank-5-part-0.safetensors"
expect 2 "$S" check-dump "$T/ds.gguf" "$T/extra" --tp 2
contains "$T/err" "rank 5"
printf '\x10\x00\x00\x00\x00\x00\x00\x00{"a": {"dtype"' >"$T/extra/model-rank-5-part-0.safetensors"
cp "$T/extra/model-rank-5-part-0.safetensors" "$T/ok/model-rank-1-part-1.safetensors"
expect 2 "$S" check-dump "$T/ds.gguf" "$T/ok" --tp 2
contains "$T/err" "model-rank-1-part-1.safetensors"
expect 2 "$S" check-dump "$T/ds.gguf" --tp 2
expect 2 "$S" "$T/ds.gguf" --tp 2 --write-shards "$T/w" --dump-format onnx
finish
