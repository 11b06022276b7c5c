#!/usr/bin/env bash
# ref-forward import-dump on real HF transformers output (../shared/testdata/hf: hidden_states.npy,
# layer_outputs.npy, logits.npy of the llama and deepseek_v3 models) with the shipped maps,
# compared with `ref-forward --record` of the converter's model-f32.gguf: every comparable
# point agrees within the default f32 tolerance, both ways round (--common); the HTML report
# is written; against the Q8_0 model's record the first divergence is named (the check can
# fail); the shipped maps are found by name and installed.
source "$(dirname "$0")/lib.sh"
R=$GGUFKIT_BIN/ref-forward
[ -x "$R" ] || skip "ref-forward is not built"
need_shared
python3 -c "import json" 2>/dev/null || skip "python3 missing"

for m in llama deepseek_v3; do
    H=$SHARED/hf/$m
    [ -f "$H/hidden_states.npy" ] || { fail "$H/hidden_states.npy missing"; continue; }
    ids=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['token_ids'])))" "$H/tokens.json")
    expect 0 "$R" "$H/model-f32.gguf" --tokens "$ids" --record "$T/ref-$m.gguf" -q
    expect 0 "$R" import-dump "$H" --map hf --model "$H/model-f32.gguf" --tokens "$ids" -o "$T/hf-$m.gguf"
    contains "$T/out" "$H through map hf: 4 capture(s) of 12 tokens (backend hf-transformers, precision f32)"
    contains "$T/out" "output_norm              <- hidden_states.npy[2]  f32 [12, 128]"
    contains "$T/out" "wrote $T/hf-$m.gguf (tokens from --tokens, model digest from --model)"
    # the reference has more points than HF dumps: --common; token_embd has no partner in ours
    expect 0 "$R" compare "$T/ref-$m.gguf" "$T/hf-$m.gguf" --common --json
    python3 - "$T/out" "$m" <<'PY' && pass || fail "$m: hf import against the reference"
import json, sys
d = json.load(open(sys.argv[1]))
pts = {e["point"]: e for e in d["entries"]}
assert d["ok"] and sorted(pts) == ["blk.0.residual", "logits", "output_norm"], sorted(pts)
assert d["b"]["backend"] == "hf-transformers" and d["b"]["model_digest"] == d["a"]["model_digest"]
assert d["extra_in_b"] == 1  # token_embd: our forward has no such capture
for e in pts.values():
    assert 0 < e["rel_l2"] < 1e-5, (e["point"], e["rel_l2"])
assert pts["logits"]["top1"] == 1
PY
    # the other way round: the HF record is the reference
    expect 0 "$R" compare "$T/hf-$m.gguf" "$T/ref-$m.gguf" --common --html "$T/r-$m.html"
    contains "$T/out" "result: SAME within tolerance: 3 comparisons"
    contains "$T/r-$m.html" "SAME"
    # the raw layer outputs: every block's residual
    expect 0 "$R" import-dump "$H" --map hf-layer-outputs --model "$H/model-f32.gguf" --tokens "$ids" -o "$T/lo-$m.gguf" -q
    expect 0 "$R" compare "$T/ref-$m.gguf" "$T/lo-$m.gguf" --common
    contains "$T/out" "blk.1.residual"
    contains "$T/out" "result: SAME within tolerance: 3 comparisons"
    # the quantized model's record is not what HF computed: the first divergence is named
    expect 0 "$R" "$H/model-q8_0.gguf" --tokens "$ids" --record "$T/q8-$m.gguf" -q
    expect 1 "$R" compare "$T/hf-$m.gguf" "$T/q8-$m.gguf" --common --any-model
    contains "$T/out" "FIRST DIVERGENCE: blk.0.residual (layer 0, op residual, rank 0)"
    # without --common the missing points are an error (exit 2), as for any record
    expect 2 "$R" compare "$T/ref-$m.gguf" "$T/hf-$m.gguf"
    contains "$T/err" "capture 'blk.0.attn_norm' rank 0: missing"
done

# no tokens: the record says none, compare needs --any-tokens
H=$SHARED/hf/llama
expect 0 "$R" import-dump "$H" --map hf -o "$T/nt.gguf"
contains "$T/err" "note: no token ids (--tokens): compare needs --any-tokens"
expect 2 "$R" compare "$T/ref-llama.gguf" "$T/nt.gguf" --common
contains "$T/err" "record.tokens"
expect 0 "$R" compare "$T/ref-llama.gguf" "$T/nt.gguf" --common --any-tokens -q
# --zstd records are read back by compare
expect 0 "$R" import-dump "$H" --map hf --tokens 1,17,42,99,123,7,256,300,511,64,5,77 -o "$T/z.gguf.zst" --zstd -q
expect 0 "$R" compare "$T/ref-llama.gguf" "$T/z.gguf.zst" --common -q

# shipped maps: listed by name, installed with cmake --install
expect 0 "$R" import-dump --list-maps
for n in hf hf-layer-outputs vllm sglang; do contains "$T/out" "$n.map"; done
if cmake --install "$GGUFKIT_BUILD" --prefix "$T/prefix" >"$T/install.log" 2>&1; then
    for n in hf hf-layer-outputs vllm sglang; do
        [ -f "$T/prefix/share/ggufkit/maps/$n.map" ] && pass || fail "not installed: share/ggufkit/maps/$n.map"
    done
else
    fail "cmake --install: $(tail -3 "$T/install.log")"
fi
finish
