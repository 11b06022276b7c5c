#!/usr/bin/env bash
# gguf-dequant-verify over generated and real files: exit codes, JSON, the
# --dump .npy contract (numpy shape = reversed ne, values = gguf-py's), the
# --reference comparison with MLA kv_b reassembly, and fault injection (a
# reordered tensor and a wrongly reassembled kv_b must fail).
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
V="$GGUFKIT_BIN/gguf-dequant-verify"
[ -x "$V" ] || skip "gguf-dequant-verify not built"
[ -x "$GEN" ] || skip "gguf-gen not built"
have_py=0
python3 -c 'import numpy, gguf' 2>/dev/null && have_py=1

# ---- usage and input errors: exit 2 ----
expect 0 "$V" --help
contains "$T/out" "--dump"
expect 2 "$V"
expect 2 "$V" --bogus-option x.gguf
printf 'not a gguf file at all\n' >"$T/junk.gguf"
expect 2 "$V" "$T/junk.gguf"
contains "$T/err" "gguf-dequant-verify: error:"

# ---- generated models of many types: all finite, exit 0, JSON parses ----
for t in F16 BF16 Q4_0 Q5_1 Q8_0 Q8_1 Q2_K Q3_K Q4_K Q5_K Q6_K Q8_K IQ2_XXS IQ2_XS IQ2_S IQ3_XXS \
         IQ3_S IQ1_S IQ1_M IQ4_NL IQ4_XS TQ1_0 TQ2_0 MXFP4 NVFP4 Q1_0 I32 F64; do
    "$GEN" model -q --no-sync --arch llama --layers 1 --type "$t" "$T/m_$t.gguf" || fail "gguf-gen $t"
    expect 0 "$V" -q --threads 2 "$T/m_$t.gguf"
    contains "$T/out" "all values finite"
done
"$GEN" model -q --no-sync --arch deepseek2 --type Q4_K --type-map 'attn_k_b=Q8_0' \
    --split-max-tensors 20 "$T/ds.gguf" || fail "gguf-gen deepseek2 split"
first=$(ls "$T"/ds-00001-of-*.gguf | head -1)
expect 0 "$V" --json "$first"
if [ "$have_py" = 1 ]; then
    python3 - "$T/out" "$first" <<'EOF' || fail "JSON report of a split set"
import json, sys, gguf, glob
d = json.load(open(sys.argv[1]))
parts = sorted(glob.glob(sys.argv[2].replace("00001", "*")))
names = [t.name for p in parts for t in gguf.GGUFReader(p).tensors]
assert d["parts"] == len(parts) > 1, d["parts"]
assert [t["name"] for t in d["tensors"]] == names
assert d["summary"]["tensors"] == len(names) and d["summary"]["ok"] is True
for t in d["tensors"]:
    assert t["shape"] == t["ne"][::-1]
    assert t["nan"] == 0 and t["inf"] == 0 and t["std"] is not None
    assert set(t["suspicious_blocks"]) == {"zero_scale", "nan_scale", "inf_scale",
                                           "subnormal_scale", "bad_scale_encoding"}
EOF
    pass
fi
# every CPU path gives the same report
expect 0 "$V" --json --path scalar "$T/m_Q4_K.gguf"
cp "$T/out" "$T/scalar.json"
expect 0 "$V" --json --path portable --threads 1 --chunk 1000 "$T/m_Q4_K.gguf"
sed -e 's/"cpu_path": "[a-z0-9]*", "threads": [0-9]*/X/' "$T/scalar.json" >"$T/a"
sed -e 's/"cpu_path": "[a-z0-9]*", "threads": [0-9]*/X/' "$T/out" >"$T/b"
cmp -s "$T/a" "$T/b" && pass || fail "--path scalar and --path portable reports differ"
expect 2 "$V" --path sse9 "$T/m_Q4_K.gguf"

# ---- --tensor / --dump ----
expect 2 "$V" --tensor no.such.tensor "$T/m_Q4_K.gguf"
expect 2 "$V" --dump "$T/x.npy" "$T/m_Q4_K.gguf"              # --dump without --tensor
expect 2 "$V" --tensor 'blk\.0\.' --dump "$T/x.npy" "$T/m_Q4_K.gguf" # selects many
[ ! -e "$T/x.npy" ] && pass || fail "a refused --dump left a file"
expect 0 "$V" --json --tensor 'blk\.0\.ffn_(up|down|gate)' "$T/m_Q4_K.gguf"
if [ "$have_py" = 1 ]; then
    python3 -c "import json,sys; d=json.load(open('$T/out')); assert len(d['tensors'])==3, d" \
        && pass || fail "--tensor REGEX selection"
    for t in Q4_K IQ2_XS NVFP4 BF16 Q8_0; do
        expect 0 "$V" --tensor blk.0.ffn_down.weight --dump "$T/d_$t.npy" "$T/m_$t.gguf"
        expect 0 "$V" --tensor token_embd.weight --dump "$T/e_$t.npy" "$T/m_$t.gguf"
        python3 - "$T/m_$t.gguf" "$T/d_$t.npy" "$T/e_$t.npy" <<'EOF' || fail "--dump contract for $t"
import sys, numpy as np, gguf
from gguf import quants
r = gguf.GGUFReader(sys.argv[1])
for name, path in (("blk.0.ffn_down.weight", sys.argv[2]), ("token_embd.weight", sys.argv[3])):
    t = next(t for t in r.tensors if t.name == name)
    a = np.load(path)
    want = quants.dequantize(t.data, t.tensor_type)
    # numpy shape = reversed ggml ne = the array gguf-py gives
    assert a.dtype == np.float32 and a.shape == tuple(int(x) for x in t.shape[::-1]) == want.shape, (a.shape, t.shape)
    same = (a.view(np.uint32) == want.view(np.uint32)) | (np.isnan(a) & np.isnan(want))
    assert same.all(), name
EOF
        pass
    done
fi

# ---- statistics equal numpy's over gguf-py's dequantization ----
if [ "$have_py" = 1 ]; then
    # token_embd: 2M elements, so the statistics are split over threads too
    "$GEN" model -q --no-sync --arch llama --layers 1 --vocab 4096 --embd 512 --type Q5_K \
        "$T/big.gguf" || fail "gguf-gen big"
    expect 0 "$V" --json --threads 3 --tensor 'blk\.0\.ffn_down|token_embd' "$T/big.gguf"
    cp "$T/out" "$T/stats3.json"
    expect 0 "$V" --json --threads 1 --chunk 5000 --tensor 'blk\.0\.ffn_down|token_embd' "$T/big.gguf"
    python3 - "$T/big.gguf" "$T/out" "$T/stats3.json" <<'EOF' || fail "statistics differ from numpy"
import json, sys, numpy as np, gguf
from gguf import quants
r = gguf.GGUFReader(sys.argv[1])
d = json.load(open(sys.argv[2]))
assert len(d["tensors"]) == 2
d3 = json.load(open(sys.argv[3]))
for rep in d["tensors"] + d3["tensors"]:
    t = next(t for t in r.tensors if t.name == rep["name"])
    a = quants.dequantize(t.data, t.tensor_type).astype(np.float64)
    for k, v in (("min", a.min()), ("max", a.max()), ("mean", a.mean()), ("std", a.std()),
                 ("absmax", np.abs(a).max())):
        assert abs(rep[k] - v) <= 1e-9 * max(1.0, abs(v)), (rep["name"], k, rep[k], v)
EOF
    pass
fi

# ---- non-finite values: exit 1, unless --allow-nonfinite ----
if [ "$have_py" = 1 ]; then
    python3 - "$T/nan.gguf" <<'EOF' || fail "writing the NaN fixture"
import sys, numpy as np, gguf
w = gguf.GGUFWriter(sys.argv[1], "llama")
x = np.zeros((4, 64), dtype=np.float32)
x[1, 3] = np.nan
x[2, 5] = np.inf
w.add_tensor("with_nan", x)
q = np.frombuffer(gguf.quants.quantize(np.ones((2, 32), np.float32), gguf.GGMLQuantizationType.Q8_0).tobytes(), np.uint8).copy()
q[0:2] = np.array([np.nan], dtype=np.float16).view(np.uint8)   # NaN scale in block 0
q[34:36] = 0                                                       # zero scale in block 1
w.add_tensor("q8_nan_scale", q.reshape(2, 34), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
EOF
    expect 1 "$V" "$T/nan.gguf"
    contains "$T/out" "NaN 1 Inf 1"
    contains "$T/out" "1 NaN-scale"
    contains "$T/out" "1 zero-scale"
    expect 0 "$V" --allow-nonfinite "$T/nan.gguf"
    expect 1 "$V" --json "$T/nan.gguf"
    python3 -c "
import json; d = json.load(open('$T/out'))
t = {x['name']: x for x in d['tensors']}
assert t['with_nan']['nan'] == 1 and t['with_nan']['inf'] == 1
s = t['q8_nan_scale']['suspicious_blocks']
assert s['nan_scale'] == 1 and s['zero_scale'] == 1 and t['q8_nan_scale']['nan'] == 32
assert d['summary']['ok'] is False or d['summary']['nonfinite_tensors'] == 2" && pass || fail "non-finite JSON"
fi

# ---- --gpu: no GPU is an environment error (3) unless --gpu auto (then a skip, exit 0) ----
expect 0 "$V" --gpu auto -q "$T/m_Q8_0.gguf"
if ! grep -q "GPU: equal" "$T/out"; then
    contains "$T/err" "--gpu auto: skipped:"
    expect 3 "$V" --gpu -q "$T/m_Q8_0.gguf"
    contains "$T/err" "use --gpu auto"
    expect 0 "$V" -q --gpu=auto "$T/m_Q8_0.gguf"
fi
expect 2 "$V" --gpu=always "$T/m_Q8_0.gguf"

# ---- --reference against safetensors we write here (always runs with python) ----
if [ "$have_py" = 1 ]; then
    python3 - "$T" <<'EOF' || fail "writing the reference fixtures"
import json, struct, sys, numpy as np, gguf
from gguf import GGMLQuantizationType as Q, quants
T = sys.argv[1]
rng = np.random.default_rng(5)
H, NOPE, V, LORA, EMB = 4, 32, 32, 64, 64
kv_b = (rng.standard_normal((H * (NOPE + V), LORA)) * 0.05).astype(np.float32)
up = (rng.standard_normal((96, EMB)) * 0.05).astype(np.float32)
experts = (rng.standard_normal((3, 32, EMB)) * 0.05).astype(np.float32)

def safetensors(path, tensors):
    hdr, off, blobs = {}, 0, []
    for name, a in tensors.items():
        b = a.astype(np.float32).tobytes()
        hdr[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b); blobs.append(b)
    hdr["__metadata__"] = {"format": "pt"}
    h = json.dumps(hdr).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h))); f.write(h); f.write(b"".join(blobs))

ref = {"model.layers.0.self_attn.kv_b_proj.weight": kv_b, "model.layers.0.mlp.up_proj.weight": up}
for e in range(3):
    ref[f"model.layers.0.mlp.experts.{e}.up_proj.weight"] = experts[e]
safetensors(f"{T}/ref.safetensors", ref)

kv = kv_b.reshape(H, NOPE + V, LORA)
k_b = np.ascontiguousarray(kv[:, :NOPE, :].transpose(0, 2, 1))   # [H, LORA, NOPE]: ne [NOPE, LORA, H]
v_b = np.ascontiguousarray(kv[:, NOPE:, :])                       # [H, V, LORA]:   ne [LORA, V, H]

def write(path, k_b, v_b, up):
    w = gguf.GGUFWriter(path, "deepseek2")
    for name, a in (("blk.0.attn_k_b.weight", k_b), ("blk.0.attn_v_b.weight", v_b),
                    ("blk.0.ffn_up.weight", up), ("blk.0.ffn_up_exps.weight", experts)):
        q = quants.quantize(a, Q.Q8_0)
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=Q.Q8_0)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()

write(f"{T}/good.gguf", k_b, v_b, up)
write(f"{T}/bad_up.gguf", k_b, v_b, up[::-1].copy())              # rows reversed: same shape
write(f"{T}/bad_kvb.gguf", k_b[[1, 0, 2, 3]].copy(), v_b, up)      # two heads of k_b swapped
write(f"{T}/bad_kb_t.gguf", np.ascontiguousarray(kv[:, :NOPE, :]).reshape(H, LORA, NOPE), v_b, up)  # no transpose
EOF
    expect 0 "$V" --reference "$T/ref.safetensors" "$T/good.gguf"
    contains "$T/out" "kv_b_proj (attn_k_b + attn_v_b): vs kv_b_proj (F32): SNR"
    contains "$T/out" "reference: 3 ok, 0 failed"
    expect 0 "$V" --json --reference "$T" "$T/good.gguf"   # a folder works too
    python3 -c "
import json; d = json.load(open('$T/out'))
k = d['kv_b_proj'][0]
assert k['layer'] == 0 and k['reference']['status'] == 'ok' and 'roundtrip_exact' not in k
assert k['reference']['snr_db'] > 30 and k['reference']['ref_dtype'] == 'F32', k
t = {x['name']: x for x in d['tensors']}
assert t['blk.0.ffn_up_exps.weight']['reference']['hf_name'] == 'model.layers.0.mlp.experts.*.up_proj.weight'
assert 'reference' not in t['blk.0.attn_k_b.weight']" && pass || fail "reference JSON"
    expect 1 "$V" --reference "$T/ref.safetensors" "$T/bad_up.gguf"
    contains "$T/out" "FAIL"
    contains "$T/out" "reference: 2 ok, 1 failed"
    expect 1 "$V" --reference "$T/ref.safetensors" "$T/bad_kvb.gguf"
    contains "$T/out" "kv_b_proj (attn_k_b + attn_v_b): vs kv_b_proj (F32): SNR"
    contains "$T/out" "FAIL"
    expect 1 "$V" --reference "$T/ref.safetensors" "$T/bad_kb_t.gguf"
    expect 2 "$V" --reference "$T/nonexistent.safetensors" "$T/good.gguf"
    printf '\x10\x00\x00\x00\x00\x00\x00\x00{"a": {"dtype"' >"$T/broken.safetensors"
    expect 2 "$V" --reference "$T/broken.safetensors" "$T/good.gguf"
    contains "$T/err" "broken.safetensors"
fi

# ---- block-scaled FP8 and NVFP4 references (gguf-gen hf), kv_b_proj included ----
"$GEN" model -q --no-sync --arch deepseek2 --type F32 --seed 1 "$T/ds1.gguf" || fail "gguf-gen ds1"
"$GEN" model -q --no-sync --arch deepseek2 --type F32 --seed 2 "$T/ds2.gguf" || fail "gguf-gen ds2"
for fmt in fp8 nvfp4; do
    "$GEN" hf -q "$T/ds1.gguf" "$T/ref-$fmt" --format "$fmt" || fail "gguf-gen hf $fmt"
    expect 0 "$V" -q --reference "$T/ref-$fmt" "$T/ds1.gguf"
    contains "$T/out" "0 failed, 0 missing"
    expect 0 "$V" -q --reference "$T/ref-$fmt/model.safetensors.index.json" "$T/ds1.gguf"
    expect 0 "$V" --json --reference "$T/ref-$fmt" "$T/ds1.gguf"
    python3 -c "
import json, sys; d = json.load(open('$T/out'))
k = d['kv_b_proj'][0]['reference']
assert k['status'] == 'ok' and k['ref_format'] == {'fp8': 'fp8-scaled', 'nvfp4': 'nvfp4'}['$fmt'], k
t = {x['name']: x for x in d['tensors']}
r = t['blk.0.attn_q_b.weight']['reference']
assert r['ref_dtype'] == {'fp8': 'F8_E4M3', 'nvfp4': 'U8'}['$fmt'] and r['status'] == 'ok', r" \
        && pass || fail "$fmt reference JSON"
    # other weights: every projection, and kv_b_proj, named as differing; exit 1
    expect 1 "$V" -q --reference "$T/ref-$fmt" "$T/ds2.gguf"
    contains "$T/out" "blk.0 kv_b_proj (attn_k_b + attn_v_b): vs kv_b_proj"
    contains "$T/out" "vs model.layers.1.mlp.experts.*.down_proj.weight"
    contains "$T/out" "FAIL"
done
# an index that omits a scale its file holds is inconsistent: refused by name (exit 2)
python3 - "$T" <<'EOF' || fail "dropping a scale"
import json, sys
T = sys.argv[1]
p = f"{T}/ref-fp8/model.safetensors.index.json"
idx = json.load(open(p))
idx["weight_map"].pop("model.layers.0.self_attn.q_b_proj.weight_scale_inv")
json.dump(idx, open(p, "w"))
EOF
expect 2 "$V" -q --reference "$T/ref-fp8/model.safetensors.index.json" "$T/ds1.gguf"
contains "$T/err" "q_b_proj.weight_scale_inv"

# ---- real converter output against the original HF weights (../shared) ----
if have_shared hf/deepseek_v3; then
    for m in deepseek_v3 llama; do
        for g in model-q8_0.gguf model-f32.gguf; do
            expect 0 "$V" -q --reference "$SHARED/hf/$m" "$SHARED/hf/$m/$g"
            contains "$T/out" "0 failed, 0 missing"
        done
    done
fi

finish
