#!/usr/bin/env bash
# ref-forward on generated models of every architecture: the properties a
# correct forward pass must have, whatever the weights.
#  - f32 (f64 sums) and f64 agree; one thread and two (three for MLA, both
#    modes) give the same bits;
#  - decoding token by token through the KV cache equals one pass over the
#    whole sequence;
#  - MLA plain == MLA absorbed, split attn_k_b/attn_v_b == legacy attn_kv_b;
#  - glm-dsa: with a prompt up to the indexer's top-k, sparse == dense; past
#    it the first top-k positions still agree and later ones do not;
#  - group-limited routing, tied embeddings, split sets and quantized types run.
source "$(dirname "$0")/lib.sh"
R=$GGUFKIT_BIN/ref-forward
[ -x "$GEN" ] || skip "gguf-gen is not built"
gen() { "$GEN" model --no-sync --force -q "$@"; }
TOK=1,5,9,200,33,7,81,4,150,3,60,12

# close A.npy B.npy TOL [ROWS]: relative L2 of B against A (over rows < ROWS) <= TOL
close() {
    python3 - "$@" <<'EOF'
import sys, numpy as np
a, b, tol = np.load(sys.argv[1]), np.load(sys.argv[2]), float(sys.argv[3])
if len(sys.argv) > 4:
    n = int(sys.argv[4]); a, b = a[:n], b[:n]
assert a.shape == b.shape, (a.shape, b.shape)
r = np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(a)
assert r <= tol, f"relative L2 {r:.3g} > {tol}"
EOF
}

export GEN_ARCHS=$(gen_archs)
for arch in $GEN_ARCHS; do
    M=$T/$arch.gguf
    gen --arch "$arch" --type Q8_0 "$M" || { fail "gguf-gen $arch"; continue; }
    expect 0 "$R" "$M" --tokens $TOK --logits "$T/$arch-f32.npy" -q
    expect 0 "$R" "$M" --tokens $TOK --logits "$T/$arch-f64.npy" --precision f64 -q
    close "$T/$arch-f32.npy" "$T/$arch-f64.npy" 1e-4 && pass || fail "$arch: f32 vs f64"
    expect 0 "$R" "$M" --tokens $TOK --logits "$T/$arch-t2.npy" --threads 2 -q
    cmp -s "$T/$arch-f32.npy" "$T/$arch-t2.npy" && pass || fail "$arch: threads change the bits"
    # KV cache: 4 decoded tokens == a full pass over prompt + those tokens
    expect 0 "$R" "$M" --tokens 1,5,9 -n 4 --json --logits "$T/$arch-inc.npy"
    gen_ids=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open('$T/out'))['generated'])))")
    full=1,5,9,$(echo "$gen_ids" | cut -d, -f1-3)
    expect 0 "$R" "$M" --tokens "$full" --logits "$T/$arch-full.npy" -q
    close "$T/$arch-full.npy" "$T/$arch-inc.npy" 1e-5 && pass || fail "$arch: KV cache"
done

# MLA: absorbed == plain; legacy attn_kv_b == split k_b/v_b (same weights: the
# split file is made from the legacy one by numpy, tests/integration/mla_split.py,
# so the two runs must agree bit for bit)
for arch in deepseek2 glm-dsa; do
    gen --arch "$arch" --type F32 --legacy-kv-b "$T/$arch-l32.gguf"
    python3 "$(dirname "$0")/mla_split.py" "$T/$arch-l32.gguf" "$T/$arch-s32.gguf" \
        && pass || fail "$arch: mla_split.py"
    expect 0 "$R" "$T/$arch-l32.gguf" --tokens $TOK --logits "$T/$arch-l32.npy" -q
    expect 0 "$R" "$T/$arch-s32.gguf" --tokens $TOK --logits "$T/$arch-s32.npy" -q
    cmp -s "$T/$arch-l32.npy" "$T/$arch-s32.npy" && pass \
        || fail "$arch: legacy attn_kv_b and split attn_k_b/attn_v_b of the same weights differ"
    expect 0 "$R" "$T/$arch.gguf" --tokens $TOK --mla absorbed --logits "$T/$arch-abs.npy" -q
    close "$T/$arch-f32.npy" "$T/$arch-abs.npy" 1e-5 && pass || fail "$arch: absorbed vs plain"
    # MLA heads run on the pool: 3 threads give the bits of one, both modes
    expect 0 "$R" "$T/$arch.gguf" --tokens $TOK --mla absorbed --threads 3 --logits "$T/$arch-abs3.npy" -q
    cmp -s "$T/$arch-abs.npy" "$T/$arch-abs3.npy" && pass || fail "$arch: absorbed MLA: threads change the bits"
    expect 0 "$R" "$T/$arch.gguf" --tokens $TOK --threads 3 --logits "$T/$arch-t3.npy" -q
    cmp -s "$T/$arch-f32.npy" "$T/$arch-t3.npy" && pass || fail "$arch: plain MLA: threads change the bits"
    gen --arch "$arch" --type Q8_0 --legacy-kv-b "$T/$arch-legacy.gguf"
    expect 0 "$R" "$T/$arch-legacy.gguf" --tokens $TOK --logits "$T/$arch-legacy.npy" -q
    python3 -c "
import gguf; names = [t.name for t in gguf.GGUFReader('$T/$arch-legacy.gguf').tensors]
assert 'blk.0.attn_kv_b.weight' in names and 'blk.0.attn_k_b.weight' not in names" \
        && pass || fail "$arch: legacy file has no attn_kv_b"
done

# glm-dsa indexer: 12 tokens. top-k 12 (= prompt): sparse == dense, exactly.
D=$T/glm-dsa.gguf
expect 0 "$R" "$D" --tokens $TOK --dense-indexer --logits "$T/dsa-dense.npy" -q
expect 0 "$R" "$D" --tokens $TOK --indexer-top-k 12 --logits "$T/dsa-k12.npy" -q
cmp -s "$T/dsa-dense.npy" "$T/dsa-k12.npy" && pass || fail "glm-dsa: top-k = prompt differs from dense"
# top-k 4 < prompt: positions 0..3 see every key either way; later ones do not
expect 0 "$R" "$D" --tokens $TOK --indexer-top-k 4 --logits "$T/dsa-k4.npy" -q
close "$T/dsa-dense.npy" "$T/dsa-k4.npy" 1e-7 4 && pass || fail "glm-dsa: first top-k rows"
# the selection runs on the pool (40 tokens: enough work for threads): 3 give the bits of one
T40=$(python3 -c "print(','.join(str(i * 37 % 500 + 1) for i in range(40)))")
expect 0 "$R" "$D" --tokens "$T40" --indexer-top-k 8 --logits "$T/dsa-k8t1.npy" -q
expect 0 "$R" "$D" --tokens "$T40" --indexer-top-k 8 --threads 3 --logits "$T/dsa-k8t3.npy" -q
cmp -s "$T/dsa-k8t1.npy" "$T/dsa-k8t3.npy" && pass || fail "glm-dsa: threads change the indexer's bits"
if close "$T/dsa-dense.npy" "$T/dsa-k4.npy" 1e-3 2>/dev/null; then
    fail "glm-dsa: top-k 4 over 12 tokens changed nothing (indexer not applied)"
else pass; fi
# and the KV cache path of the indexer agrees with a full pass
expect 0 "$R" "$D" --tokens 1,5,9,200,33,7 -n 3 --indexer-top-k 4 --json --logits "$T/dsa-inc.npy"
ids=$(python3 -c "import json; print(','.join(map(str, json.load(open('$T/out'))['generated'][:2])))")
expect 0 "$R" "$D" --tokens "1,5,9,200,33,7,$ids" --indexer-top-k 4 --logits "$T/dsa-full.npy" -q
close "$T/dsa-full.npy" "$T/dsa-inc.npy" 1e-5 && pass || fail "glm-dsa: indexer with KV cache"

# group-limited routing (4 groups, 2 used), tied embeddings, split set, types
gen --arch deepseek2 --experts 16 --experts-used 4 --expert-groups 4 --groups-used 2 --tied \
    --type Q4_K --type-map 'attn_k_b|attn_v_b=Q8_0' "$T/ds-groups.gguf"
expect 0 "$R" "$T/ds-groups.gguf" --tokens $TOK --record "$T/ds-groups-rec.gguf" -q
python3 - "$T/ds-groups-rec.gguf" <<'EOF' && pass || fail "group-limited routing"
import sys, gguf, numpy as np
r = {t.name: np.array(t.data) for t in gguf.GGUFReader(sys.argv[1]).tensors}
ids = r["blk.1.moe_experts"].reshape(12, 4).astype(int)
for row in ids:   # 16 experts in 4 groups of 4, 2 groups kept: at most 2 groups used
    assert len(set(row // 4)) <= 2, row
w = r["blk.1.moe_weights"].reshape(12, 4)
assert np.allclose(w.sum(axis=1), 2.5, atol=1e-5), w.sum(axis=1)  # normalised, scaled 2.5
EOF
gen --arch qwen3moe --split-max-tensors 12 "$T/split.gguf"
gen --arch qwen3moe "$T/single.gguf"
ls "$T"/split-0000*-of-* >/dev/null 2>&1 && pass || fail "split set was not written"
first=$(ls "$T"/split-00001-of-*.gguf | head -1)
expect 0 "$R" "$first" --tokens $TOK --logits "$T/split.npy" -q
expect 0 "$R" "$T/single.gguf" --tokens $TOK --logits "$T/single.npy" -q
cmp -s "$T/split.npy" "$T/single.npy" && pass || fail "split set differs from one file"
for ty in F32 BF16 Q4_0 Q6_K IQ4_NL; do
    gen --arch qwen3 --type "$ty" "$T/q-$ty.gguf"
    expect 0 "$R" "$T/q-$ty.gguf" --tokens $TOK -q
done
finish
