#!/usr/bin/env bash
# shard-plan check-dump on dumps the real vLLM 0.32 CPU build wrote (tests/data/vllm_dumps, its
# README.md): vLLM 0.32's names (routed_experts, _shared_experts._layer, experts.gate,
# fused_qkv_a_proj, mla_attn, W_UV), llama's q/k rows in HF order, tied embeddings saved once,
# zero-padded expert intermediates, attention scales and an absent NextN block are clean; the
# same dumps broken by hand are named (rank, parameter, fault); an unknown tensor is a note.
source "$(dirname "$0")/lib.sh"
S=$GGUFKIT_BIN/shard-plan
D=${GGUFKIT_SRC:-$(dirname "$0")/../..}/tests/data/vllm_dumps
[ -x "$GEN" ] || skip "gguf-gen not built"
[ -f "$D/recipes.json" ] || fail "no $D/recipes.json"

# the GGUFs the dumps were made from, from their recipes (the digests say gguf-gen is unchanged)
python3 - "$D/recipes.json" "$GEN" "$T" <<'PY' || fail "making the GGUFs of recipes.json"
import hashlib, json, subprocess, sys
recipes, gen, out = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
for arch, r in recipes.items():
    path = f"{out}/{arch}.gguf"
    subprocess.run([gen, "model", *r["gguf_gen"], "--no-sync", "-q", path], check=True)
    got = hashlib.sha256(open(path, "rb").read()).hexdigest()
    if got != r["sha256"]:
        sys.exit(f"{path}: sha256 {got}, recipes.json says {r['sha256']}: gguf-gen changed its "
                 "output; re-capture tests/data/vllm_dumps (its README.md)")
PY

# clean, every one
expect 0 "$S" check-dump "$T/llama.gguf" "$D/llama-tp2" --tp 2
contains "$T/out" "2 ranks, 8 parameters each, 0 differ"
expect 0 "$S" check-dump "$T/glm4moe.gguf" "$D/glm4moe-tp2" --tp 2
contains "$T/out" "0 differ, 34 absent (NextN/MTP, not loaded)"
expect 0 "$S" check-dump "$T/deepseek2.gguf" "$D/deepseek2-tp1" --tp 1
contains "$T/out" "1 ranks, 18 parameters each, 0 differ"
# every tensor of the dumps compared (or a known buffer), under the names vLLM gave it
expect 0 "$S" check-dump "$T/deepseek2.gguf" "$D/deepseek2-tp1" --tp 1 -v
for n in self_attn.fused_qkv_a_proj.weight self_attn.mla_attn.q_b_proj.weight \
    self_attn.mla_attn.o_proj.weight self_attn.mla_attn.mla_attn.W_UV \
    mlp.experts.gate.e_score_correction_bias mlp.experts.gate.weight \
    mlp.experts.routed_experts.w13_weight mlp.experts._shared_experts._layer.down_proj.weight; do
    contains "$T/out" "rank 0 model.layers.0.$n"
done
expect 0 "$S" check-dump "$T/glm4moe.gguf" "$D/glm4moe-tp2" --tp 2 -v
contains "$T/out" "rank 1 model.layers.0.mlp.experts.routed_experts.e_score_correction_bias ok"
E=model.layers.0.mlp.experts.routed_experts
contains "$T/out" "rank 1 $E.w13_weight ok ([4, 64, 32]: zero padding of the intermediate left out)"
contains "$T/out" "rank 0 model.layers.1.eh_proj.weight"
contains "$T/out" "absent: a NextN/MTP block's, not loaded by the engine"
expect 0 "$S" check-dump "$T/llama.gguf" "$D/llama-tp2" --tp 2 --json
python3 - "$T/out" <<'PY' && pass || fail "clean JSON"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["ok"] and d["failed"] == 0 and d["absent"] == 0 and d["unknown"] == 0, d
assert d["findings"] == [] and d["params_per_rank"] == 8, d
PY

# broken by hand: edit FILE TENSOR STATEMENT: the tensor (BF16 or F32) as float32 numpy `a`,
# changed in place by the Python STATEMENT, written back (BF16 truncated)
edit() {
    python3 - "$@" <<'PY'
import json, struct, sys
import numpy as np
path, name, stmt = sys.argv[1:4]
raw = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
e = json.loads(raw[8:8 + n])[name]
b, end = (8 + n + o for o in e["data_offsets"])
if e["dtype"] == "BF16":
    bits = np.frombuffer(bytes(raw[b:end]), np.uint16).astype(np.uint32) << 16
    a = bits.view(np.float32).reshape(e["shape"]).copy()
else:
    a = np.frombuffer(bytes(raw[b:end]), np.float32).reshape(e["shape"]).copy()
exec(stmt)
a = np.ascontiguousarray(a, np.float32)
raw[b:end] = ((a.view(np.uint32) >> 16).astype(np.uint16) if e["dtype"] == "BF16" else a).tobytes()
open(path, "wb").write(raw)
PY
}

# llama: rank 1's q and k rows (its q head and the kv head, 32 rows each) left in the GGUF's
# order: GGUF row 2i+j of a head holds HF row 16j+i
cp -r "$D/llama-tp2" "$T/ll"
Q=model.layers.0.self_attn.qkv_proj.weight
edit "$T/ll/model-rank-1-part-0.safetensors" $Q \
    "a[:64] = a[:64].reshape(2, 2, 16, -1).transpose(0, 2, 1, 3).reshape(64, -1)" \
    || fail "editing llama"
expect 1 "$S" check-dump "$T/llama.gguf" "$T/ll" --tp 2
contains "$T/out" "rank 1 $Q"
contains "$T/out" "fault rope-pairs"
contains "$T/out" "2 ranks, 8 parameters each, 1 differ; fault rope-pairs"

# glm4moe: two rows of one expert swapped on rank 0 (no fault of the catalog does that)
cp -r "$D/glm4moe-tp2" "$T/glm"
W=model.layers.0.mlp.experts.routed_experts.w2_weight
edit "$T/glm/model-rank-0-part-0.safetensors" $W "a[2, [3, 7]] = a[2, [7, 3]]" \
    || fail "editing glm4moe"
expect 1 "$S" check-dump "$T/glm4moe.gguf" "$T/glm" --tp 2 --json
python3 - "$T/out" "$W" <<'PY' && pass || fail "swapped rows: JSON"
import json, sys
d = json.load(open(sys.argv[1]))
bad = [f for f in d["findings"] if f["status"] != "absent"]
assert len(bad) == 1 and d["failed"] == 1, bad
f = bad[0]
assert f["rank"] == 0 and f["param"] == sys.argv[2] and f["status"] == "differs", f
assert f["fault"] is None and f["padded"] and f["shape"] == [4, 32, 32], f
PY

# deepseek2: the absorbed W_UV (computed by the engine from kv_b_proj) 2 % off, kv_b_proj right
cp -r "$D/deepseek2-tp1" "$T/ds"
V=model.layers.0.self_attn.mla_attn.mla_attn.W_UV
edit "$T/ds/model-rank-0-part-0.safetensors" $V "a *= 1.02" || fail "editing deepseek2"
expect 1 "$S" check-dump "$T/deepseek2.gguf" "$T/ds" --tp 1
contains "$T/out" "rank 0 $V"
contains "$T/out" "differs (rel-L2 0.0"
contains "$T/out" "no known fault"
contains "$T/out" "1 ranks, 18 parameters each, 1 differ"

# a tensor under a name the checker does not know: the parameter is missing, the tensor a note
cp -r "$D/deepseek2-tp1" "$T/renamed"
python3 - "$T/renamed/model-rank-0-part-0.safetensors" <<'PY' || fail "renaming"
import json, struct, sys
p = sys.argv[1]
raw = open(p, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = raw[8:8 + n].replace(b"fused_qkv_a_proj", b"fused_qkv_x_proj")
open(p, "wb").write(raw[:8] + h + raw[8 + n:])
PY
expect 1 "$S" check-dump "$T/deepseek2.gguf" "$T/renamed" --tp 1
contains "$T/out" "rank 0 model.layers.0.self_attn.q_a_proj.weight"
contains "$T/out" "missing"
contains "$T/out" "rank 0 model.layers.0.self_attn.fused_qkv_x_proj.weight"
contains "$T/out" "unknown [608, 32]: no parameter of the plan (not compared)"
contains "$T/out" "2 differ, 1 unknown (not compared)"
finish
