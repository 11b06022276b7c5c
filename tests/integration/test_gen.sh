#!/usr/bin/env bash
# gguf-gen: determinism, every architecture, every type, split sets, sparse files,
# replicas of the real tensor maps, and every bad-usage class with its exit code.
. "$(dirname "$0")/lib.sh"
[ -x "$GEN" ] || { echo "gguf-gen not built: $GEN" >&2; exit 1; }
INSPECT=$GGUFKIT_BIN/gguf-inspect
[ -x "$INSPECT" ] || skip "gguf-inspect is not built"
command -v python3 >/dev/null || skip "python3 is absent (JSON checks)"
G() { "$GEN" "$@" --no-sync; }
# Small sizes: K-quant rows (256) still fit the embedding and FFN widths.
SMALL=(--embd 256 --ff 256 --heads 8 --kv-heads 4 --head-dim 32 --vocab 300 --expert-ff 256
       --experts 4 --kv-lora 32 --q-lora 64 --indexer-heads 4 --indexer-head-dim 16 -q)

# want WHAT FILE PYEXPR EXPECTED [INSPECT-ARGS]: str(PYEXPR) == EXPECTED, with d = the
# gguf-inspect --json view of FILE taken now. Evaluated together at the end (one python).
nj=0
want() {
    nj=$((nj + 1))
    "$INSPECT" --json "${@:5}" "$2" >"$T/j.$nj" 2>"$T/j.$nj.err" || { fail "$1: gguf-inspect failed on $2"; return 0; }
    printf '%s\t%s\t%s\t%s\n' "$nj" "$1" "$3" "$4" >>"$T/checks"
}
check() { if [ "$2" == "$3" ]; then pass; else fail "$1: got '$2', wanted '$3'"; fi; }
run_checks() {
    local out
    out=$(python3 - "$T" <<'PY'
import json, sys
T = sys.argv[1]
bad = good = 0
for line in open(T + "/checks"):
    n, what, expr, exp = line.rstrip("\n").split("\t")
    d = json.load(open("%s/j.%s" % (T, n)))
    try:
        got = str(eval(expr))
    except Exception as e:
        got = "error: %r" % e
    if got == exp:
        good += 1
    else:
        bad += 1
        print("FAIL: %s: got %r, wanted %r" % (what, got[:300], exp[:300]))
print("OK %d" % good)
PY
)
    local good=${out##*OK }
    passes=$((passes + good))
    local bad
    bad=$(grep -c '^FAIL' <<<"$out" || true)
    fails=$((fails + bad))
    grep '^FAIL' <<<"$out" >&2 || true
}

# ---- determinism: same arguments, same bytes; another seed, other data ----
for arch in llama deepseek2 glm-dsa; do
    expect 0 G model --arch "$arch" "${SMALL[@]}" --type Q4_K "$T/a-$arch.gguf"
    expect 0 G model --arch "$arch" "${SMALL[@]}" --type Q4_K "$T/b-$arch.gguf"
    if cmp -s "$T/a-$arch.gguf" "$T/b-$arch.gguf"; then pass; else fail "$arch: two runs differ"; fi
done
expect 0 G model --arch llama "${SMALL[@]}" --seed 7 "$T/seed7.gguf"
expect 0 G model --arch llama "${SMALL[@]}" "$T/seed1.gguf"
if cmp -s "$T/seed1.gguf" "$T/seed7.gguf"; then fail "--seed does not change the data"; else pass; fi
off=$("$INSPECT" --json "$T/seed1.gguf" | grep -o '"data_offset": *[0-9]*' | head -1 | tr -dc 0-9)
if [ -n "$off" ] && cmp -s -n "$off" "$T/seed1.gguf" "$T/seed7.gguf"; then pass; else fail "--seed changed the header"; fi

# ---- the data stream is stable: other modules keep fixtures and golden records made with it.
# Changing these digests means every golden record downstream must be regenerated: say so in
# the commit message and docs/gguf-gen.md.
for pair in F16:926b483adf987cbb70be3a9e5ed4c1e5 Q4_K:80b6c42e36e25cfdf974f43470bae349 \
    IQ2_XXS:f1718dac48882fbbb1a86b5a1572273b; do
    expect 0 G model --arch glm-dsa -q --type "${pair%%:*}" "$T/stable-${pair%%:*}.gguf"
    want "stable data stream, glm-dsa --type ${pair%%:*}" "$T/stable-${pair%%:*}.gguf" "d['model_digest']" \
        "${pair#*:}" --hash
done

# ---- every architecture: opens, with its arch key, block count and key tensors ----
declare -A TENSOR=([llama]=blk.0.attn_q.weight [qwen2]=blk.1.attn_q.bias [qwen3]=blk.1.attn_k_norm.weight
    [qwen3moe]=blk.0.ffn_gate_exps.weight [deepseek2]=blk.1.attn_k_b.weight
    [glm4moe]=blk.2.nextn.shared_head_head.weight [glm-dsa]=blk.2.indexer.attn_q_b.weight)
declare -A BLOCKS=([llama]=2 [qwen2]=2 [qwen3]=2 [qwen3moe]=2 [deepseek2]=2 [glm4moe]=3 [glm-dsa]=3)
for arch in $("$GEN" archs); do
    expect 0 G model --arch "$arch" "${SMALL[@]}" "$T/$arch.gguf"
    want "$arch: arch, blocks, ${TENSOR[$arch]}, vocab" "$T/$arch.gguf" \
        "[d['metadata']['general.architecture'], d['metadata']['$arch.block_count'], any(t['name'] == '${TENSOR[$arch]}' for t in d['tensors']), len(d['metadata']['tokenizer.ggml.tokens'])]" \
        "['$arch', ${BLOCKS[$arch]}, True, 300]"
done
# MLA variants: plain q, legacy attn_kv_b
expect 0 G model --arch deepseek2 "${SMALL[@]}" --q-lora 0 --legacy-kv-b "$T/ds-legacy.gguf"
want "plain q + legacy kv_b" "$T/ds-legacy.gguf" \
    "sorted(t['name'] for t in d['tensors'] if t['name'].startswith('blk.0.attn_q') or 'kv_b' in t['name'])" \
    "['blk.0.attn_kv_b.weight', 'blk.0.attn_q.weight', 'blk.1.attn_kv_b.weight']"
want "legacy head_count_kv" "$T/ds-legacy.gguf" "d['metadata']['deepseek2.attention.head_count_kv']" 8
# GPT-2 BPE vocabulary (contents checked in test_gen_gguf_py.py)
expect 0 G model --arch llama "${SMALL[@]}" --tokenizer gpt2 "$T/bpe.gguf"
want "--tokenizer gpt2" "$T/bpe.gguf" \
    "[d['metadata']['tokenizer.ggml.model'], len(d['metadata']['tokenizer.ggml.tokens']), len(d['metadata']['tokenizer.ggml.merges']), d['metadata']['tokenizer.ggml.tokens'][-1], 'tokenizer.ggml.scores' in d['metadata']]" \
    "['gpt2', 300, 43, '<|endoftext|>', False]"
# Llama 3 rope_freqs (values checked against numpy in test_gen_gguf_py.py)
expect 0 G model --arch llama "${SMALL[@]}" --rope-freqs 8 "$T/rf.gguf"
want "--rope-freqs" "$T/rf.gguf" "[d['tensors'][0][k] for k in ('name', 'type', 'shape')]" "['rope_freqs.weight', 'F32', [16]]"
# DeepSeek-V2 routing; GLM-4.5 355B q/k norms
expect 0 G model --arch deepseek2 "${SMALL[@]}" --gating softmax "$T/ds-v2.gguf"
want "--gating softmax" "$T/ds-v2.gguf" \
    "[d['metadata'][k] for k in ('deepseek2.expert_gating_func', 'deepseek2.expert_weights_norm', 'deepseek2.expert_weights_scale')] + [any('exp_probs_b' in t['name'] for t in d['tensors'])]" \
    "[1, False, 1, False]"
expect 0 G model --arch glm4moe "${SMALL[@]}" --qk-norm "$T/glm-qk.gguf"
want "--qk-norm" "$T/glm-qk.gguf" "sorted(t['shape'][0] for t in d['tensors'] if t['name'].startswith('blk.0.attn_') and t['name'].endswith('_norm.weight'))" \
    "[32, 32, 256]"

# The model module and the reference forward take every architecture and variant.
RF=$GGUFKIT_BIN/ref-forward
if [ -x "$RF" ]; then
    expect 0 G model --arch glm-dsa "${SMALL[@]}" --legacy-kv-b "$T/dsa-legacy.gguf"
    expect 0 G model --arch llama "${SMALL[@]}" --rope-freqs 8 --tied --tokenizer gpt2 "$T/llama3.gguf"
    for f in $("$GEN" archs) ds-legacy ds-v2 glm-qk dsa-legacy llama3; do
        expect 0 "$RF" "$T/$f.gguf" --tokens 1,2,3
        contains "$T/out" "next:"
    done
else
    echo "note: ref-forward is not built: generated models not run here"
fi

# The default sizes divide by 8: shard plans for 2, 4 and 8 ranks pass their checks.
SP=$GGUFKIT_BIN/shard-plan
if [ -x "$SP" ]; then
    for arch in $("$GEN" archs); do
        expect 0 G model --arch "$arch" -q --type Q8_0 "$T/default-$arch.gguf"
        for tp in 2 4 8; do expect 0 "$SP" --tp $tp "$T/default-$arch.gguf"; done
    done
else
    echo "note: shard-plan is not built: default sizes not planned here"
fi

# ---- every valid type as --type; norms stay F32 ----
for t in $("$GEN" types); do
    expect 0 G model --arch llama "${SMALL[@]}" --layers 1 --type "$t" "$T/t-$t.gguf"
    want "--type $t (norms F32)" "$T/t-$t.gguf" \
        "[[t['type'] for t in d['tensors'] if t['name'] == n][0] for n in ('blk.0.attn_q.weight', 'output_norm.weight')]" \
        "['$t', 'F32']"
done

# Our dequantizer: every value finite, no zero/NaN/Inf/subnormal scales, |x| <= 0.07 for weights.
DV=$GGUFKIT_BIN/gguf-dequant-verify
if [ -x "$DV" ]; then
    for t in $("$GEN" types); do
        expect 0 "$DV" "$T/t-$t.gguf"
        if grep -q suspicious "$T/out"; then fail "--type $t: $(grep -o 'suspicious.*' "$T/out" | head -1)"; else pass; fi
        case $t in I8 | I16 | I32 | I64) continue ;; esac # integers: the value x 100, not a weight
        awk -v t="$t" '$1 ~ /weight$/ && $1 !~ /norm/ { for (i = 1; i < NF; i++) if ($i == "absmax" && $(i + 1) + 0 > 0.07) { print "FAIL: --type " t ": " $1 " absmax " $(i + 1); bad = 1 } } END { exit bad }' "$T/out" >&2 \
            && pass || fail "--type $t: weights over 0.07"
    done
else
    echo "note: gguf-dequant-verify is not built: dequantized values not checked here"
fi

# ---- --type-map, first match wins; fallback when rows are not whole blocks ----
expect 0 G model --arch deepseek2 "${SMALL[@]}" --type Q4_K --type-map 'attn_k_b=Q8_0' \
    --type-map 'ffn_.*_exps=Q2_K' --type-map 'exps=F32' "$T/tm.gguf"
want "type-map" "$T/tm.gguf" "sorted({t['type'] for t in d['tensors'] if 'attn_k_b' in t['name'] or '_exps' in t['name']})" \
    "['Q2_K', 'Q8_0']"
"$GEN" model --arch llama --embd 64 --ff 128 --heads 4 --kv-heads 2 --head-dim 16 --vocab 64 --type Q4_K \
    --no-sync "$T/fb.gguf" >"$T/out" 2>"$T/err" || fail "fallback run failed"
contains "$T/err" "fall back as llama-quantize does"
want "Q4_K -> Q5_0 fallback" "$T/fb.gguf" \
    "sorted({t['type'] for t in d['tensors'] if t['name'].endswith('weight') and len(t['shape']) == 2})" "['Q5_0']"
"$GEN" model --arch llama --embd 48 --ff 48 --heads 3 --kv-heads 1 --head-dim 16 --vocab 64 --type Q4_0 \
    --no-sync -q "$T/fb16.gguf" 2>"$T/err" || fail "F16 fallback run failed"
check "-q is quiet" "$(wc -c <"$T/err")" 0
want "Q4_0 on 48 -> F16" "$T/fb16.gguf" "[t['type'] for t in d['tensors'] if t['name'] == 'blk.0.attn_q.weight'][0]" F16

# ---- split sets, as gguf-split writes them; data identical to the single file ----
expect 0 G model --arch glm-dsa "${SMALL[@]}" --type Q8_0 "$T/one.gguf"
expect 0 G model --arch glm-dsa "${SMALL[@]}" --type Q8_0 --split-max-tensors 20 "$T/sp.gguf"
parts=$(ls "$T" | grep -c '^sp-000..-of-000..\.gguf$')
last=$(printf '%s/sp-%05d-of-%05d.gguf' "$T" "$parts" "$parts")
want "split: parts of 20 tensors, split keys on every part" "$last" \
    "[[f['n_tensors'] for f in d['files']][:-1] == [20] * (len(d['files']) - 1), d['files'][-1]['n_tensors'] <= 20, len(d['files']), [d['metadata_types'][k] for k in ('split.no', 'split.count', 'split.tensors.count')], d['metadata']['split.count'], d['metadata']['split.tensors.count'] == len(d['tensors'])]" \
    "[True, True, $parts, ['uint16', 'uint16', 'int32'], $parts, True]"
# Metadata in the first part only; the library checks split.no of every part when it opens the set.
want "split: metadata in part 1, only the split keys elsewhere" "$last" \
    "[d['files'][0]['n_kv'] > 3] + [f['n_kv'] for f in d['files'][1:]]" "[True$(printf ', 3%.0s' $(seq 2 "$parts"))]"
"$INSPECT" --json --hash "$last" | python3 -c "import json,sys; print([(t['name'], t['xxh3_128']) for t in json.load(sys.stdin)['tensors']])" >"$T/h1"
"$INSPECT" --json --hash "$T/one.gguf" | python3 -c "import json,sys; print([(t['name'], t['xxh3_128']) for t in json.load(sys.stdin)['tensors']])" >"$T/h2"
if cmp -s "$T/h1" "$T/h2"; then pass; else fail "split set tensors differ from the single file"; fi
expect 0 G model --arch llama "${SMALL[@]}" --split-max-tensors 1000 "$T/single.gguf"
want "a split set of one part when all fits (as gguf-split)" "$T/single-00001-of-00001.gguf" \
    "[d['metadata'][k] for k in ('split.no', 'split.count', 'split.tensors.count')]" "[0, 1, 21]"
expect 0 G model --arch llama "${SMALL[@]}" --split-max-size 200K "$T/ss.gguf"
want "--split-max-size: parts of at most 200K = 200000 bytes of data" "$(ls "$T"/ss-00001-of-*.gguf)" \
    "[len(d['files']) > 2, all(f['size'] - f['data_offset'] <= 200 * 1000 for f in d['files'])]" "[True, True]"
# Units as llama-gguf-split (and gguf-merge): K is 1000, KiB 1024; the same parts as bytes.
for spec in 200K:200000 200KiB:204800 0.2M:200000; do
    rm -rf "$T/u" && mkdir -p "$T/u/a" "$T/u/b"
    expect 0 G model --arch llama "${SMALL[@]}" -q --no-sync --split-max-size "${spec%%:*}" "$T/u/a/m.gguf"
    expect 0 G model --arch llama "${SMALL[@]}" -q --no-sync --split-max-size "${spec##*:}" "$T/u/b/m.gguf"
    a=$(cd "$T/u/a" && stat -c '%n %s' m-*.gguf)
    b=$(cd "$T/u/b" && stat -c '%n %s' m-*.gguf)
    check "--split-max-size ${spec%%:*} is ${spec##*:} bytes" "$a" "$b"
done

# --json: what was written (the contract of docs/gguf-gen.md)
"$GEN" model --arch qwen3 "${SMALL[@]}" --split-max-tensors 10 --json --no-sync "$T/js.gguf" >"$T/js.json" ||
    fail "--json run failed"
python3 - "$T" >"$T/jsout" <<'PY' && pass || { fail "--json: $(cat "$T/jsout")"; }
import json, os, sys
T = sys.argv[1]
d = json.load(open(T + "/js.json"))
assert set(d) == {"tool", "version", "arch", "seed", "sparse", "n_tensors", "nbytes", "files"}, d
assert d["arch"] == "qwen3" and d["seed"] == 1 and d["sparse"] is False
assert d["n_tensors"] == sum(f["n_tensors"] for f in d["files"]) == 25
for f in d["files"]:
    assert os.path.getsize(f["path"]) == f["size"], f
assert [os.path.basename(f["path"]) for f in d["files"]] == ["js-%05d-of-00003.gguf" % i for i in (1, 2, 3)]
PY

# ---- sparse: holes, zeros, full size ----
expect 0 G model --arch llama "${SMALL[@]}" --sparse "$T/sparse.gguf"
check "sparse size = dense size" "$(stat -c %s "$T/sparse.gguf")" "$(stat -c %s "$T/seed1.gguf")"
alloc=$(( $(stat -c %b "$T/sparse.gguf") * $(stat -c %B "$T/sparse.gguf") ))
[ "$alloc" -lt "$(stat -c %s "$T/sparse.gguf")" ] && pass || fail "sparse file is not sparse ($alloc bytes allocated)"

# ---- replicas: the map's exact tensor list, sparse ----
if [ -n "$SHARED" ] && [ -d "$SHARED/tensor-maps" ]; then
    for map in "$SHARED"/tensor-maps/*.map; do
        b=$(basename "$map" .map)
        expect 0 G replica "$map" "$T/r-$b.gguf"
        python3 -c "
import sys
for l in open('$map'):
    f = l.rstrip('\n').split(':')
    shape = [int(x) for x in f[3][len('shape=('):-1].split(',') if x.strip()]
    print((f[2], f[4][len('dtype='):].upper(), shape))
" >"$T/map-$b.txt"
        want "replica $b: the map's names, types, shapes, order" "$T/r-$b.gguf" \
            "'\n'.join(str((t['name'], t['type'], t['shape'])) for t in d['tensors']) == open('$T/map-$b.txt').read().rstrip('\n')" True
        alloc=$(( $(stat -c %b "$T/r-$b.gguf") * 512 ))
        [ "$alloc" -lt $((64 << 20)) ] && pass || fail "replica $b uses $alloc bytes of disk"
    done
    want "GLM-5.1 replica metadata" "$T/r-GLM-5.1-Q4_K.gguf" \
        "[d['metadata'][k] for k in ('general.architecture', 'glm-dsa.block_count', 'glm-dsa.attention.head_count', 'glm-dsa.attention.q_lora_rank', 'glm-dsa.attention.kv_lora_rank', 'glm-dsa.attention.key_length_mla', 'glm-dsa.attention.value_length_mla', 'glm-dsa.expert_count', 'glm-dsa.leading_dense_block_count', 'glm-dsa.nextn_predict_layers', 'glm-dsa.attention.indexer.head_count', 'glm-dsa.attention.indexer.key_length', 'glm-dsa.attention.indexer.top_k')]" \
        "['glm-dsa', 79, 64, 2048, 512, 256, 256, 256, 3, 1, 32, 128, 2048]" --metadata-only
    want "DeepSeek-V3 replica metadata" "$T/r-DeepSeek-V3.1-Terminus-BF16.gguf" \
        "[d['metadata'][k] for k in ('general.architecture', 'deepseek2.block_count', 'deepseek2.attention.head_count', 'deepseek2.attention.q_lora_rank', 'deepseek2.expert_count', 'deepseek2.expert_shared_count', 'deepseek2.leading_dense_block_count', 'deepseek2.expert_group_count', 'deepseek2.rope.scaling.factor', 'deepseek2.vocab_size')]" \
        "['deepseek2', 61, 128, 1536, 256, 1, 3, 8, 40, 129280]" --metadata-only
    expect 0 G replica --tokenizer gpt2 "$SHARED/tensor-maps/Kimi-K2-Thinking-BF16.map" "$T/kimi-bpe.gguf"
    want "replica --tokenizer gpt2" "$T/kimi-bpe.gguf" \
        "[d['metadata']['tokenizer.ggml.model'], len(d['metadata']['tokenizer.ggml.tokens']), len(d['metadata']['tokenizer.ggml.merges'])]" \
        "['gpt2', 163840, 163583]" --metadata-only
    expect 0 G replica "$SHARED/tensor-maps/DeepSeek-V3.1-Terminus-BF16.map" --split-max-size 100G "$T/dsv3.gguf"
    # 100G is 100 * 10^9 bytes of tensor data a part (llama-gguf-split's units), packed
    # greedily: no part over it, and no part could have taken the next part's first tensor.
    "$INSPECT" --json "$(ls "$T"/dsv3-00001-of-*.gguf)" >"$T/dsv3.json" 2>&1 || fail "inspect dsv3"
    python3 - "$T/dsv3.json" <<'PY' && pass || fail "replica split by size: $(tail -1 "$T/dsv3.json")"
import json, sys
d = json.load(open(sys.argv[1]))
lim, pad = 100 * 10**9, lambda n: (n + 31) // 32 * 32
data = [0] * len(d["files"])
first = {}
for t in d["tensors"]:
    data[t["part"]] += pad(t["nbytes"])
    first.setdefault(t["part"], pad(t["nbytes"]))
assert len(data) > 2 and all(x <= lim for x in data), data
assert all(data[k] + first[k + 1] > lim for k in range(len(data) - 1)), data
PY
else
    echo "note: $SHARED/tensor-maps absent: replica checks skipped"
fi

# ---- bad usage and bad input: exit 2 with a message; environment: exit 3 ----
expect 2 "$GEN"
expect 2 "$GEN" frobnicate
contains "$T/err" "unknown command"
expect 2 G model "$T/x.gguf"
contains "$T/err" "needs --arch"
expect 2 G model --arch gpt5 "$T/x.gguf"
contains "$T/err" "unknown architecture"
expect 2 G model --arch llama --type Q9_9 "$T/x.gguf"
contains "$T/err" "unknown tensor type"
expect 2 G model --arch llama --type Q4_2 "$T/x.gguf"
expect 2 G model --arch llama --type-map 'attn=Q4_Z' "$T/x.gguf"
expect 2 G model --arch llama --type-map 'attn(=Q4_0' "$T/x.gguf"
contains "$T/err" "bad regular expression"
expect 2 G model --arch llama --type-map 'noequals' "$T/x.gguf"
expect 2 G model --arch llama --heads 6 --kv-heads 4 "$T/x.gguf"
contains "$T/err" "multiple of --kv-heads"
expect 2 G model --arch llama --layers abc "$T/x.gguf"
expect 2 G model --arch llama --layers 0 "$T/x.gguf"
expect 2 G model --arch qwen3moe --experts 4 --experts-used 5 "$T/x.gguf"
expect 2 G model --arch glm-dsa --q-lora 0 "$T/x.gguf"
expect 2 G model --arch llama --preset 7t "$T/x.gguf"
expect 2 G model --arch llama --split-max-size 12Q "$T/x.gguf"
expect 2 G model --arch llama --split-max-size 0 "$T/x.gguf"
expect 2 G model --arch llama --split-max-tensors 0 "$T/x.gguf"
expect 2 G model --arch llama "$T/x.gguf" "$T/y.gguf"
expect 2 G model --arch llama --rope-scaling linear "$T/x.gguf"
expect 2 G model --arch glm-dsa --gating softmax "$T/x.gguf"
contains "$T/err" "deepseek2 only"
expect 2 G model --arch deepseek2 --gating max "$T/x.gguf"
expect 2 G model --arch llama --qk-norm "$T/x.gguf"
expect 2 G model --arch llama --tokenizer gpt2 --vocab 257 "$T/x.gguf"
contains "$T/err" "needs --vocab >= 258"
expect 2 G model --arch llama --tokenizer wordpiece "$T/x.gguf"
contains "$T/err" "neither spm nor gpt2"
expect 2 G model --arch qwen2 --rope-freqs 8 "$T/x.gguf"
contains "$T/err" "llama only"
expect 2 G model --arch llama --rope-freqs 0.5 "$T/x.gguf"
[ -e "$T/x.gguf" ] && fail "a failed run left an output" || pass
expect 2 G model --arch llama "${SMALL[@]}" "$T/seed1.gguf"
contains "$T/err" "exists"
expect 0 G model --arch llama "${SMALL[@]}" --force "$T/seed1.gguf"
expect 3 G model --arch llama "$T/no-such-dir/x.gguf"
# Interrupted: exit 3, nothing left behind (no output, no temporary file).
mkdir "$T/int"
expect 3 timeout --preserve-status -s INT 0.5 "$GEN" model --arch llama --preset 1b --type F32 --no-sync "$T/int/big.gguf"
contains "$T/err" "interrupted"
check "nothing left after an interrupt" "$(ls -A "$T/int")" ""
expect 3 timeout --preserve-status -s INT 0.5 "$GEN" model --arch llama --preset 1b --type F32 --no-sync \
    --split-max-tensors 40 "$T/int/big.gguf"
check "no part left after an interrupted split" "$(ls -A "$T/int")" ""
cp "$SHARED/tensor-maps/GLM-5.1-Q4_K.map" "$T/in.map" 2>/dev/null || printf 'x\n' >"$T/in.map"
ln -s in.map "$T/alias.map"
expect 2 G replica --force "$T/in.map" "$T/alias.map"
contains "$T/err" "the output is the input map"
[ -L "$T/alias.map" ] && cmp -s "$T/in.map" "$T/alias.map" && pass || fail "the input map was touched"
# Refused before the map is read: a map that is no map is still never replaced.
printf 'x\n' >"$T/junk.map"
ln -s junk.map "$T/junk-alias.map"
expect 2 G replica --force "$T/junk.map" "$T/junk-alias.map"
contains "$T/err" "the output is the input map"
check "the junk map is unchanged" "$(cat "$T/junk.map")" "x"
mkdir "$T/adir"
expect 2 G model --arch llama "$T/adir"
expect 2 G replica "$T/missing.map" "$T/x.gguf"
contains "$T/err" "cannot open"
printf 'garbage line\n' >"$T/bad.map"
expect 2 G replica "$T/bad.map" "$T/x.gguf"
contains "$T/err" "bad.map:1: not a tensor map line"
printf 'f:0:blk.0.x.weight:shape=(7168, 3):dtype=q9_k:elements=21504:bytes=43008\n' >"$T/bad.map"
expect 2 G replica "$T/bad.map" "$T/x.gguf"
contains "$T/err" "unknown type"
printf 'f:0:blk.0.x.weight:shape=(7168, 3):dtype=bf16:elements=21504:bytes=43000\n' >"$T/bad.map"
expect 2 G replica "$T/bad.map" "$T/x.gguf"
contains "$T/err" "disagree"
printf 'f:0:blk.0.x.weight:shape=(7168, -3):dtype=bf16:elements=21504:bytes=43008\n' >"$T/bad.map"
expect 2 G replica "$T/bad.map" "$T/x.gguf"
contains "$T/err" "bad shape"
printf 'f:0:blk.0.x.weight:shape=(8,):dtype=f32:elements=8:bytes=32\n' >"$T/bad.map"
expect 2 G replica "$T/bad.map" "$T/x.gguf"
contains "$T/err" "not an MLA model"
printf 'f:0:token_embd.weight:shape=(8,):dtype=f32:elements=8:bytes=32\n%.0s' 1 2 >"$T/bad.map"
expect 2 G replica "$T/bad.map" "$T/x.gguf"
contains "$T/err" "bad.map:2: token_embd.weight: duplicate tensor name"
printf 'f:0:blk.0.x.weight:shape=(1, 2, 3, 4, 5):dtype=f32:elements=120:bytes=480\n' >"$T/bad.map"
expect 2 G replica "$T/bad.map" "$T/x.gguf"
contains "$T/err" "bad shape"
printf 'f:0:%0200d:shape=(8,):dtype=f32:elements=8:bytes=32\n' 0 >"$T/bad.map"
expect 2 G replica "$T/bad.map" "$T/x.gguf"
contains "$T/err" "tensor name longer than 127 bytes"
: >"$T/empty.map"
expect 2 G replica "$T/empty.map" "$T/x.gguf"
contains "$T/err" "no tensors"
expect 2 G replica --layers 3 "$T/bad.map" "$T/x.gguf"
contains "$T/err" "replica takes its sizes from the map"
if have_shared tensor-maps/Kimi-K2-Thinking-BF16.map; then
    expect 2 G replica --arch llama "$SHARED/tensor-maps/Kimi-K2-Thinking-BF16.map" "$T/x.gguf"
    contains "$T/err" "deepseek2 or glm-dsa"
fi
expect 2 G replica --layers 3 "$T/bad.map" "$T/x.gguf"
contains "$T/err" "replica takes its sizes from the map"

run_checks
finish
