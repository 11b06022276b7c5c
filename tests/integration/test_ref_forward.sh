#!/usr/bin/env bash
# ref-forward run path: the trained stories260K model writes English, the
# --json / --logits contracts, records, and every bad input with its exit code.
source "$(dirname "$0")/lib.sh"
R=$GGUFKIT_BIN/ref-forward
need_shared
S=$SHARED/models/stories260K.gguf
H=$SHARED/hf/llama/model-f32.gguf
[ -f "$S" ] || skip "stories260K.gguf is absent"

# A real trained model: greedy decoding after BOS is fluent English.
expect 0 "$R" "$S" -n 40
contains "$T/out" "text:  Once upon a time, there was a little girl named Lily."
contains "$T/out" "generated: 403 407 261 378"
# `run` is the default subcommand
expect 0 "$R" run "$S" -n 3 -q
contains "$T/out" "generated: 403 407 261"

# --json: `generated` is an array of ids (a contract), text is valid JSON.
expect 0 "$R" "$S" -n 12 --json
python3 - "$T/out" <<'EOF' && pass || fail "--json output"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["generated"][:4] == [403, 407, 261, 378], d["generated"]
assert len(d["generated"]) == 12 and d["tokens"] == [1]
assert d["text"].startswith(" Once upon a time"), d["text"]
assert d["arch"] == "llama" and d["n_vocab"] == 512
EOF

# Incremental decoding (KV cache) computes what one pass over the whole
# sequence computes: logits of prompt + generated tokens, fed at once.
expect 0 "$R" "$S" -n 6 --logits "$T/inc.npy" -q
expect 0 "$R" "$S" --tokens 1,403,407,261,378,432 --logits "$T/full.npy" -q
python3 - "$T/inc.npy" "$T/full.npy" <<'EOF' && pass || fail "KV cache differs from a full pass"
import numpy as np, sys
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
assert a.shape == b.shape == (6, 512), (a.shape, b.shape)
assert np.abs(a - b).max() <= 1e-5 * np.abs(b).max(), np.abs(a - b).max()
EOF

# --logits: float32 [n_tokens, n_vocab], every position.
if [ -f "$H" ]; then
    expect 0 "$R" "$H" --tokens 1,17,42 --logits "$T/l.npy" -q
    python3 -c "
import numpy as np, sys
a = np.load('$T/l.npy'); assert a.dtype == np.float32 and a.shape == (3, 1024), a.shape" \
        && pass || fail "--logits shape"
    # precision and MLA options are accepted; --bos prepends BOS
    expect 0 "$R" "$H" --tokens 17,42 --bos --precision f64 --threads 2 --json
    contains "$T/out" '"tokens": [1, 17, 42]'
    contains "$T/out" '"precision": "f64"'
fi

# --record writes an activation record (plain and zstd) readable by gguf-py.
expect 0 "$R" "$S" --tokens 1,403 --record "$T/rec.gguf" -q
expect 0 "$R" "$S" --tokens 1,403 --record "$T/rec.gguf.zst" --zstd -q
python3 - "$T/rec.gguf" <<'EOF' && pass || fail "record contents"
import sys, gguf
r = gguf.GGUFReader(sys.argv[1])
names = [t.name for t in r.tensors]
for want in ["blk.0.attn_norm", "blk.0.attn_out", "blk.0.attn_residual", "blk.0.ffn_norm",
             "blk.0.ffn_out", "blk.4.residual", "output_norm", "logits"]:
    assert want in names, (want, names)
lg = [t for t in r.tensors if t.name == "logits"][0]
assert list(lg.shape) == [512, 2], lg.shape
EOF
if head -c 4 "$T/rec.gguf.zst" | od -An -tx1 | grep -q "28 b5 2f fd"; then pass; else fail "--zstd"; fi

# Bad usage: exit 2 with a message.
expect 2 "$R"
contains "$T/err" "ref-forward: error: expected a MODEL.gguf"
expect 2 "$R" "$S" --tokens 1,x,3
contains "$T/err" "--tokens: '1,x,3' is not a comma-separated list"
expect 2 "$R" "$S" --tokens 1,
expect 2 "$R" "$S" --tokens -4
expect 2 "$R" "$S" --tokens 1,600
contains "$T/err" "id 600 is outside the vocabulary"
expect 2 "$R" "$S" --precision f16
contains "$T/err" "--precision: 'f16' is not f32 or f64"
expect 2 "$R" "$S" --mla folded
expect 2 "$R" "$S" --threads 0
expect 2 "$R" "$S" -n many
expect 2 "$R" "$S" --zstd
contains "$T/err" "--zstd needs --record"
expect 2 "$R" "$S" "$S"
contains "$T/err" "unexpected argument"
expect 2 "$R" "$S" --no-such-option
expect 0 "$R" --help
contains "$T/out" "Examples:"

# Bad input files: exit 2 (a missing file is bad input too).
expect 2 "$R" "$T/missing.gguf"
contains "$T/err" "ref-forward: error: $T/missing.gguf"
printf 'not a gguf file at all' > "$T/text.gguf"
expect 2 "$R" "$T/text.gguf"
head -c 100000 "$S" > "$T/trunc.gguf"
expect 2 "$R" "$T/trunc.gguf"
contains "$T/err" "$T/trunc.gguf"
V=$SHARED/vocab/ggml-vocab-gpt-2.gguf
if [ -f "$V" ]; then
    expect 2 "$R" "$V"
    contains "$T/err" "'gpt2' is not supported"
fi
# a model missing a tensor the forward needs, and one with a wrong shape
python3 - "$S" "$T" <<'EOF' && pass || fail "making broken models"
import sys, gguf, numpy as np
src, out = sys.argv[1], sys.argv[2]
r = gguf.GGUFReader(src)
def copy(path, drop=None, reshape=None):
    w = gguf.GGUFWriter(path, arch="llama")
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        t = f.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            w.add_key_value(k, f.contents(), t, sub_type=f.types[-1])
        else:
            w.add_key_value(k, f.contents(), t)
    for t in r.tensors:
        if t.name == drop:
            continue
        a = np.array(t.data)
        if t.name == reshape:
            a = a.reshape(-1)[: a.size // 2].reshape(-1, a.shape[-1] // 2 if a.ndim > 1 else 1)
        w.add_tensor(t.name, a)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
copy(out + "/no-ffn-up.gguf", drop="blk.2.ffn_up.weight")
copy(out + "/bad-shape.gguf", reshape="blk.1.attn_q.weight")
EOF
expect 2 "$R" "$T/no-ffn-up.gguf"
contains "$T/err" "blk.2.ffn_up"
expect 2 "$R" "$T/bad-shape.gguf"
contains "$T/err" "blk.1.attn_q"
finish
