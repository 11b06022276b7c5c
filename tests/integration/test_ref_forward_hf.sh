#!/usr/bin/env bash
# ref-forward over a Hugging Face checkpoint: every architecture and format
# gguf-gen hf writes runs (folder, index and config.json paths alike, to the
# same logits), what a checkpoint cannot do is refused with exit 2 and a
# message saying why, and broken checkpoints exit 2 naming the file and the
# tensor or key. The numbers are checked in tests/interop/test_forward_hf_dir.py.
source "$(dirname "$0")/lib.sh"
R=$GGUFKIT_BIN/ref-forward
TOK=1,5,9,200,33,7

export GEN_ARCHS=$(gen_archs)
for a in $GEN_ARCHS; do
    "$GEN" model -q --no-sync --arch "$a" --type BF16 "$T/$a.gguf"
    for f in bf16 fp8 nvfp4; do
        "$GEN" hf -q "$T/$a.gguf" "$T/$a-$f" --format "$f"
        expect 0 "$R" "$T/$a-$f" --tokens "$TOK" -n 2 --logits "$T/$a-$f.npy" --stats
        contains "$T/out" "generated:"
        contains "$T/out" "text: (no vocabulary: give --vocab FILE.gguf)"
        contains "$T/out" "experts loaded"
        # the checkpoint's rows are converted on every thread: the bits of one
        expect 0 "$R" "$T/$a-$f" --tokens "$TOK" -n 2 --threads 3 --logits "$T/$a-$f-t3.npy" -q
        cmp -s "$T/$a-$f.npy" "$T/$a-$f-t3.npy" && pass || fail "$a $f: threads change the bits"
    done
done

# Folder, index and config.json name the same checkpoint: the same logits
D=$T/deepseek2-fp8
expect 0 "$R" "$D/model.safetensors.index.json" --tokens "$TOK" -n 2 --logits "$T/idx.npy" -q
cmp -s "$T/idx.npy" "$T/deepseek2-fp8.npy" && pass || fail "index path: other logits"
expect 0 "$R" "$D/config.json" --tokens "$TOK" -n 2 --logits "$T/cfg.npy" -q
cmp -s "$T/cfg.npy" "$T/deepseek2-fp8.npy" && pass || fail "config.json path: other logits"

# Records: backend cpu-hf, comparable with the GGUF's given --any-model
expect 0 "$R" "$T/llama-bf16" --tokens "$TOK" --record "$T/hf.rec.gguf"
expect 0 "$R" "$T/llama.gguf" --tokens "$TOK" --record "$T/gg.rec.gguf"
expect 2 "$R" compare "$T/gg.rec.gguf" "$T/hf.rec.gguf"
contains "$T/err" "records of different models (allow with --any-model)"
expect 1 "$R" compare "$T/gg.rec.gguf" "$T/hf.rec.gguf" --any-model
contains "$T/out" "(cpu-hf, f32, tp 1"
expect 0 "$R" compare "$T/gg.rec.gguf" "$T/hf.rec.gguf" --any-model --tol rel_l2=0.02,cosine=0.9997,kl=1e-3
expect 0 "$R" "$T/llama.gguf" --tokens "$TOK" --compare "$T/hf.rec.gguf" --any-model --tol 0.02,cosine=0.9997,kl=1e-3
expect 2 "$R" "$T/llama.gguf" --tokens "$TOK" --compare "$T/hf.rec.gguf"
contains "$T/err" "--any-model"
expect 0 "$R" "$T/llama-bf16" --tokens "$TOK" --compare "$T/gg.rec.gguf" --tol 0.02,cosine=0.9997,kl=1e-3
contains "$T/out" "result: SAME"

# --vocab: the prompt and the text from a GGUF of the model
expect 0 "$R" "$T/llama-bf16" --prompt "Once upon a time" --bos --vocab "$T/llama.gguf" -n 2
contains "$T/out" "tokens: 1 "
expect 0 "$R" "$T/llama-bf16" --json
contains "$T/out" '"tokens": [1]'

# What a checkpoint cannot do
expect 2 "$R" "$T/llama-bf16" --tokens "$TOK" --tp 2
contains "$T/err" "--tp: shard plans slice GGUF tensors"
expect 2 "$R" "$T/llama-bf16" --tokens "$TOK" --backend cuda
contains "$T/err" "--backend cuda: an HF checkpoint runs on the CPU reference only"
expect 2 "$R" "$T/llama-bf16" --prompt "Once"
contains "$T/err" "--prompt needs a vocabulary"
expect 2 "$R" "$T/llama-bf16" --tokens "$TOK" --any-model
contains "$T/err" "--any-model needs --compare"
expect 2 "$R" "$T/llama-bf16" --tokens 600
contains "$T/err" "outside the vocabulary"

# Broken checkpoints: exit 2, the file and the key or tensor named
cp -r "$T/llama-bf16" "$T/b1"
sed -i 's/"hidden_act":"silu"/"hidden_act":"gelu"/' "$T/b1/config.json"
expect 2 "$R" "$T/b1" --tokens "$TOK"
contains "$T/err" "b1/config.json: hidden_act: only silu (SwiGLU) is supported"
sed -i 's/"architectures":\["LlamaForCausalLM"\]/"architectures":["MambaForCausalLM"]/' "$T/b1/config.json"
expect 2 "$R" "$T/b1" --tokens "$TOK"
contains "$T/err" "architectures: 'MambaForCausalLM' is not supported"
rm "$T/b1/config.json"
expect 2 "$R" "$T/b1" --tokens "$TOK"
contains "$T/err" "b1/config.json"
cp -r "$T/llama-bf16" "$T/b2"
sed -i 's/"num_key_value_heads":8/"num_key_value_heads":4/' "$T/b2/config.json"
expect 2 "$R" "$T/b2" --tokens "$TOK"
contains "$T/err" "k_proj.weight: shape [128, 256], expected [64, 256] from $T/b2/config.json"
contains "$T/err" "(offset "
cp -r "$T/qwen3moe-bf16" "$T/b3"
# drop one expert's tensor from its file and the index (the rest kept as it was)
python3 - "$T/b3" model.layers.1.mlp.experts.3.up_proj.weight <<'EOF'
import json, os, struct, sys
d, gone = sys.argv[1], sys.argv[2]
ip = os.path.join(d, "model.safetensors.index.json")
idx = json.load(open(ip))
fp = os.path.join(d, idx["weight_map"].pop(gone))
raw = open(fp, "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
hdr = json.loads(raw[8:8 + n])
del hdr[gone]
data, off = b"", 0
for k, e in sorted(((k, e) for k, e in hdr.items() if k != "__metadata__"),
                   key=lambda kv: kv[1]["data_offsets"][0]):
    b, en = e["data_offsets"]
    data += raw[8 + n + b:8 + n + en]
    e["data_offsets"] = [off, off + en - b]
    off += en - b
h = json.dumps(hdr).encode()
open(fp, "wb").write(struct.pack("<Q", len(h)) + h + data)
json.dump(idx, open(ip, "w"))
EOF
expect 2 "$R" "$T/b3" --tokens "$TOK"
contains "$T/err" "missing 1 tensor(s) the qwen3moe forward needs: model.layers.1.mlp.experts.3.up_proj.weight"
expect 2 "$R" "$T/nowhere" --tokens "$TOK"
finish
