#!/usr/bin/env bash
# ref-forward compare over real records of a generated MoE model: same runs pass, a
# fault on one rank is found at its layer/op/rank, --tol, --json, --all, and every
# record that cannot be compared (missing capture, shape, not a record, F16,
# other tokens, other model, corrupt zstd, bad usage) with its exit code.
source "$(dirname "$0")/lib.sh"
R=$GGUFKIT_BIN/ref-forward
FX="python3 $GGUFKIT_SRC/tests/integration/record_fixture.py"
[ -x "$R" ] || skip "ref-forward is not built"
[ -x "$GEN" ] || skip "gguf-gen is not built"
python3 -c "import gguf, numpy" 2>/dev/null || skip "gguf-py or numpy missing"

SMALL="--embd 64 --heads 4 --kv-heads 2 --head-dim 16 --ff 128 --vocab 128 --expert-ff 64 --no-sync"
"$GEN" model --arch qwen3moe $SMALL "$T/m.gguf" >/dev/null
"$GEN" model --arch qwen3moe $SMALL --seed 2 "$T/m2.gguf" >/dev/null
expect 0 "$R" "$T/m.gguf" --tokens 1,2,3 --record "$T/f32.gguf" -q
expect 0 "$R" "$T/m.gguf" --tokens 1,2,3 --record "$T/f32b.gguf" -q
expect 0 "$R" "$T/m.gguf" --tokens 1,2,3 --precision f64 --record "$T/f64.gguf.zst" --zstd -q
expect 0 "$R" "$T/m2.gguf" --tokens 1,2,3 --record "$T/other.gguf" -q

# Same run twice: exact, exit 0.
expect 0 "$R" compare "$T/f32.gguf" "$T/f32b.gguf"
contains "$T/out" "result: SAME within tolerance: 18 comparisons"
contains "$T/out" "tolerance (default f32 vs f32): rel_l2 <= 0.0001"
contains "$T/out" "logits                       -  0.000e+00  0.000e+00   1.0000000000  kl 0.00e+00 top1 1.000 top5 1.000 ok"
# f32 against the f64 reference (zstd-compressed), options after the records.
expect 0 "$R" compare "$T/f64.gguf.zst" "$T/f32.gguf" --json
python3 - "$T/out" <<'EOF' && pass || fail "--json of a passing comparison"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["schema"] == "ggufkit.compare/1" and d["ok"] is True, d["ok"]
assert d["first_divergence"] is None and d["n_over"] == 0 and d["n_comparisons"] == 18
assert d["a"]["precision"] == "f64" and d["a"]["compressed"] is True and d["b"]["compressed"] is False
assert d["a"]["tokens"] == [1, 2, 3] and d["a"]["arch"] == "qwen3moe"
assert d["tolerances"]["origin"] == "default f64 vs f32" and d["tolerances"]["max_abs"] is None
kinds = {e["point"]: e["kind"] for e in d["entries"]}
assert kinds["logits"] == "logits" and kinds["blk.0.moe_experts"] == "experts"
assert kinds["blk.0.moe_weights"] == "weights" and kinds["blk.1.ffn_out"] == "tensor"
lg = [e for e in d["entries"] if e["point"] == "logits"][0]
assert 0 < lg["rel_l2"] < 1e-5 and lg["kl"] < 1e-10 and lg["top1"] == 1 and lg["rows"] == 3
assert lg["cols"] == 128 and lg["layer"] is None and lg["over"] == []
ex = [e for e in d["entries"] if e["kind"] == "experts"][0]
assert ex["experts"] == 1 and ex["experts_first_token"] is None and "rel_l2" not in ex
EOF

# Four ranks, rank 2 hurt at blk.1.attn_out: exit 1, the first divergence first.
$FX ranks "$T/f32.gguf" "$T/tp4.gguf" 4 --fault 2:blk.1.attn_out:0.01 --backend cpu-tp
expect 1 "$R" compare "$T/f32.gguf" "$T/tp4.gguf"
contains "$T/out" "FIRST DIVERGENCE: blk.1.attn_out (layer 1, op attn_out, rank 2): rel_l2"
if [ "$(sed -n 5p "$T/out" | cut -c1-17)" = "FIRST DIVERGENCE:" ]; then pass; else fail "first divergence is not printed first: $(head -6 "$T/out")"; fi
contains "$T/out" "blk.1.attn_out               2"
contains "$T/out" "OVER (first)"
contains "$T/out" "result: DIFFERENT: 8 of 72 comparisons over tolerance"
contains "$T/out" "fault noise 0.01 at blk.1.attn_out rank 2"
# -q: nothing when the records agree, the first divergence in one line when not.
expect 0 "$R" compare "$T/f32.gguf" "$T/f32b.gguf" -q
if [ ! -s "$T/out" ]; then pass; else fail "-q printed: $(head -2 "$T/out")"; fi
expect 1 "$R" compare "$T/f32.gguf" "$T/tp4.gguf" -q
if [ "$(wc -l <"$T/out")" -eq 1 ]; then pass; else fail "-q: $(cat "$T/out")"; fi
contains "$T/out" "$T/tp4.gguf: first divergence at blk.1.attn_out (layer 1, op attn_out, rank 2): rel_l2"
# --all (or -v) lists every rank of every point.
expect 1 "$R" compare "$T/f32.gguf" "$T/tp4.gguf" -v
if [ "$(grep -c '^blk.0.attn_out ' "$T/out")" = 4 ]; then pass; else fail "-v rows"; fi
expect 1 "$R" compare "$T/f32.gguf" "$T/tp4.gguf" --all
if [ "$(grep -c '^blk.0.attn_out ' "$T/out")" = 4 ]; then pass; else fail "--all rows"; fi
expect 1 "$R" compare "$T/f32.gguf" "$T/tp4.gguf" --json
python3 - "$T/out" <<'EOF' && pass || fail "--json of a divergence"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["ok"] is False and d["ranks"] == 4 and d["n_over"] == 8
f = d["first_divergence"]
assert (f["point"], f["layer"], f["op"], f["rank"]) == ("blk.1.attn_out", 1, "attn_out", 2), f
assert "rel_l2" in f["over"] and d["entries"][f["index"]]["point"] == "blk.1.attn_out"
assert len(d["entries"]) == 72 and all(e["ok"] for e in d["entries"][:f["index"]])
EOF
# The same against the multi-rank record as reference, and multi vs multi.
expect 1 "$R" compare "$T/tp4.gguf" "$T/f32.gguf"
contains "$T/out" "FIRST DIVERGENCE: blk.1.attn_out (layer 1, op attn_out, rank 2)"
$FX ranks "$T/f32.gguf" "$T/tp4ok.gguf" 4
expect 1 "$R" compare "$T/tp4ok.gguf" "$T/tp4.gguf" -q
expect 0 "$R" compare "$T/tp4ok.gguf" "$T/f32.gguf"
contains "$T/out" "result: SAME within tolerance: 72 comparisons"
# --tol: loose bounds pass; a bare number is rel_l2.
expect 0 "$R" compare "$T/f32.gguf" "$T/tp4.gguf" --tol rel_l2=1,cosine=off,kl=off,top1=off,top5=off
contains "$T/out" "tolerance (--tol rel_l2=1,cosine=off,kl=off,top1=off,top5=off): rel_l2 <= 1, experts >= 1"
expect 1 "$R" compare "$T/f32.gguf" "$T/tp4.gguf" --tol 0.5
contains "$T/out" "FIRST DIVERGENCE: blk.1.attn_out (layer 1, op attn_out, rank 2): cosine 0.99"
# max_abs is off by default and can be turned on.
expect 1 "$R" compare "$T/f64.gguf.zst" "$T/f32.gguf" --tol max_abs=0
contains "$T/out" "max_abs"

# A router that picks another expert for one token: found at its layer, with both sets.
$FX expert "$T/f32.gguf" "$T/moe.gguf" blk.1.moe_experts 2
expect 1 "$R" compare "$T/f32.gguf" "$T/moe.gguf"
contains "$T/out" "FIRST DIVERGENCE: blk.1.moe_experts (layer 1, op moe_experts, rank 0): experts 0.667 < 1.000"
contains "$T/out" "  first token with other experts: 2: A chose"
contains "$T/out" "blk.1.moe_weights            -"
contains "$T/out" "experts 0.667"

# Records that cannot be compared: exit 2 and a message naming the file and capture.
$FX drop "$T/f32.gguf" "$T/drop.gguf" blk.1.ffn_out
expect 2 "$R" compare "$T/f32.gguf" "$T/drop.gguf"
contains "$T/err" "ref-forward: error: $T/drop.gguf: capture 'blk.1.ffn_out' rank 0: missing ($T/f32.gguf has it)"
expect 0 "$R" compare "$T/f32.gguf" "$T/drop.gguf" --common
contains "$T/out" "1 capture(s) of A are missing in B (--common: not compared)"
contains "$T/out" "result: SAME within tolerance: 17 comparisons"
expect 0 "$R" compare "$T/drop.gguf" "$T/f32.gguf"
contains "$T/out" "1 capture(s) of B have no counterpart in A (not compared)"
$FX reshape "$T/f32.gguf" "$T/shape.gguf" blk.0.attn_out
expect 2 "$R" compare "$T/f32.gguf" "$T/shape.gguf"
contains "$T/err" "capture 'blk.0.attn_out' rank 0: shape [64, 2], but $T/f32.gguf has [64, 3] (offset"
$FX f16 "$T/f32.gguf" "$T/f16.gguf"
expect 2 "$R" compare "$T/f32.gguf" "$T/f16.gguf"
contains "$T/err" "capture 'blk.0.attn_norm': type F16, records hold F32 only (offset"
$FX model "$T/f32.gguf" "$T/model.gguf"
expect 2 "$R" compare "$T/model.gguf" "$T/f32.gguf"
contains "$T/err" "$T/model.gguf: general.type: missing: a GGUF file but not a ggufkit record"
expect 2 "$R" compare "$T/m.gguf" "$T/f32.gguf"
contains "$T/err" "not a ggufkit record"
$FX tokens "$T/f32.gguf" "$T/tok.gguf"
expect 2 "$R" compare "$T/f32.gguf" "$T/tok.gguf"
contains "$T/err" "record.tokens: differ from $T/f32.gguf's (3 against 3 tokens, different ids): runs of different inputs"
expect 0 "$R" compare "$T/f32.gguf" "$T/tok.gguf" --any-tokens -q
expect 2 "$R" compare "$T/f32.gguf" "$T/other.gguf"
contains "$T/err" "records of different models (allow with --any-model)"
expect 1 "$R" compare "$T/f32.gguf" "$T/other.gguf" --any-model
contains "$T/out" "FIRST DIVERGENCE: blk.0.attn_norm (layer 0, op attn_norm, rank 0)"
$FX ranks "$T/f32.gguf" "$T/tp3.gguf" 3
expect 2 "$R" compare "$T/tp3.gguf" "$T/tp4.gguf"
contains "$T/err" "4 ranks cannot be paired with the 3 ranks of"
# Corrupt and non-GGUF inputs.
head -c 3000 "$T/f64.gguf.zst" >"$T/cut.gguf.zst"
expect 2 "$R" compare "$T/cut.gguf.zst" "$T/f32.gguf"
contains "$T/err" "$T/cut.gguf.zst: zstd data ends inside a frame"
: >"$T/empty.gguf"
expect 2 "$R" compare "$T/empty.gguf" "$T/f32.gguf"
contains "$T/err" "$T/empty.gguf"
echo "<html>not a record</html>" >"$T/page.gguf"
expect 2 "$R" compare "$T/f32.gguf" "$T/page.gguf"
contains "$T/err" "$T/page.gguf"
expect 2 "$R" compare "$T/f32.gguf" "$T/nonexistent.gguf"
contains "$T/err" "$T/nonexistent.gguf: cannot open"
# Bad usage.
expect 2 "$R" compare "$T/f32.gguf"
contains "$T/err" "expected two records, A (reference) and B, got 1"
expect 2 "$R" compare "$T/f32.gguf" "$T/f32.gguf" "$T/f32.gguf"
contains "$T/err" "unexpected argument"
expect 2 "$R" compare "$T/f32.gguf" "$T/f32b.gguf" --tol kl=x
contains "$T/err" "--tol: 'kl=x': not a non-negative number or 'off'"
expect 2 "$R" compare "$T/f32.gguf" "$T/f32b.gguf" --tol speed=1
contains "$T/err" "unknown name 'speed'"
expect 2 "$R" compare "$T/f32.gguf" "$T/f32b.gguf" --frobnicate
expect 0 "$R" compare --help
contains "$T/out" "Usage: ref-forward compare A.gguf B.gguf [OPTIONS]"
# An HTML report where no file can be created: environment, exit 3, and no stray files.
expect 3 "$R" compare "$T/f32.gguf" "$T/f32b.gguf" --html "$T/no/such/dir/r.html"
contains "$T/err" "cannot create a temporary file"
finish
