#!/usr/bin/env bash
# gguf-dequant-verify --reference names one block or row out of line (issue 27 part 2): one
# doubled scale of a block-scaled FP8 checkpoint (one 128 x 128 block of 896 in a 7168 x 2048
# weight, whose global SNR still passes), one doubled NVFP4 group scale (16 elements of 14.7M),
# one doubled row of a BF16 checkpoint; while honest Q8_0, Q6_K and Q4_K GGUF files of the same
# BF16, FP8 and NVFP4 originals (and their exact F32 values) pass without a flag.
# Checkpoints from `gguf-gen hf`; GGUF files and corruptions from dequant_fixture.py.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
V="$GGUFKIT_BIN/gguf-dequant-verify"
FX="$here/dequant_fixture.py"
[ -x "$V" ] || skip "gguf-dequant-verify not built"
[ -x "$GEN" ] || skip "gguf-gen not built"
python3 -c 'import numpy, gguf' 2>/dev/null || skip "python3 with numpy and gguf needed"

W=model.layers.0.mlp.down_proj.weight   # HF [7168, 2048]: GGUF blk.0.ffn_down.weight
# a llama whose ffn_down is 7168 x 2048 (o_proj 7168 x 256 rides along: a small tensor)
"$GEN" model -q --no-sync --arch llama --layers 1 --embd 7168 --ff 2048 --heads 4 --kv-heads 1 \
    --head-dim 64 --vocab 64 --no-vocab --type F32 "$T/m.gguf" || fail "gguf-gen model"
for f in bf16 fp8 nvfp4; do
    "$GEN" hf -q "$T/m.gguf" "$T/ck-$f" --format "$f" || fail "gguf-gen hf $f"
    python3 "$FX" from-ckpt "$T/ck-$f" "$T/g-$f" F32,Q8_0,Q6_K,Q4_K 'down_proj|o_proj' \
        || fail "GGUF files of the $f checkpoint"
done

# check_json FILE PYTHON-EXPR...: every expression holds over d (the report), t (the tensors
# by name), k (ffn_down's reference), b and r (its block and row reports)
check_json() {
    local f=$1
    shift
    python3 - "$f" "$@" <<'EOF' && pass || fail "$f: $(tail -c 400 "$T/why" 2>/dev/null)"
import json, sys
d = json.load(open(sys.argv[1]))
t = {x["name"]: x for x in d["tensors"]}
k = t["blk.0.ffn_down.weight"]["reference"]
b, r = k["blocks"], k["rows"]
for e in sys.argv[2:]:
    if not eval(e):
        open(sys.argv[1].rsplit("/", 1)[0] + "/why", "w").write(f"{e}: {json.dumps(k)[:1500]}")
        sys.exit(1)
EOF
}

# ---- (b) honest: exact F32 values, Q8_0, Q6_K, Q4_K of each original pass with no flag ----
for f in bf16 fp8 nvfp4; do
    for q in F32 Q8_0 Q6_K Q4_K; do
        expect 0 "$V" --json --reference "$T/ck-$f" "$T/g-$f-$q.gguf"
        cp "$T/out" "$T/h-$f-$q.json"
        check_json "$T/h-$f-$q.json" 'd["summary"]["ok"] and d["summary"]["reference_outliers"] == 0' \
            'all(x["reference"]["status"] == "ok" for x in d["tensors"])' \
            'all(x["reference"][u]["flagged"] == 0 for x in d["tensors"] for u in ("blocks", "rows"))' \
            'b["unit"] == {"bf16": [1, 32], "fp8": [128, 128], "nvfp4": [1, 16]}["'$f'"]' \
            'r["unit"] == [1, 2048] and r["count"] == 7168' \
            'b["count"] == {"bf16": 458752, "fp8": 896, "nvfp4": 917504}["'$f'"]' \
            'b["threshold_db"] == 10 and not b["medians_from_first"]'
    done
done
# exact values: every unit exact, nothing to name (no worst-block line)
check_json "$T/h-fp8-F32.json" 'k["exact"] and b["worst"]["excess_db"] is None and b["median_snr_db"] is None'
expect 0 "$V" --reference "$T/ck-nvfp4" "$T/g-nvfp4-Q4_K.gguf"
contains "$T/out" "worst block ["
contains "$T/out" "of 917504 (1x16): SNR"
contains "$T/out" "worst row "

# ---- (a) one doubled FP8 block scale: block [8][4] = rows 1024:1152, cols 512:640 ----
python3 "$FX" corrupt "$T/ck-fp8" "$T/bad-fp8" "$W" --block 8 4 >"$T/what" || fail "corrupt fp8"
contains "$T/what" "${W}_scale_inv[8][4] doubled"
for q in F32 Q8_0 Q6_K Q4_K; do
    expect 1 "$V" --json --reference "$T/bad-fp8" "$T/g-fp8-$q.gguf"
    check_json "$T/out" 'k["status"] == "fail" and k["outlier"]' \
        'k["snr_db"] >= k["expect_snr_db"]' \
        'b["flagged"] == 1 and b["worst"]["flagged"] and b["worst"]["expert"] is None' \
        'b["worst"]["rows"] == [1024, 1152] and b["worst"]["cols"] == [512, 640]' \
        'b["worst"]["excess_db"] >= 20 and abs(b["worst"]["snr_db"] - 6.02) < 1' \
        't["blk.0.attn_output.weight"]["reference"]["status"] == "ok"' \
        'd["summary"]["reference_failed"] == 1 and d["summary"]["reference_outliers"] == 1'
done
expect 1 "$V" -q --reference "$T/bad-fp8" "$T/g-fp8-Q4_K.gguf"
contains "$T/out" "worst block [1024:1152, 512:640] of 896 (128x128): SNR 6.0 dB"
contains "$T/out" "FLAGGED: 1 block out of line"
contains "$T/out" "reference: 1 ok, 1 failed (1 by a block or row out of line), 0 missing"

# ---- (a) one doubled NVFP4 group scale (the fixture says which: the first it can double) ----
python3 "$FX" corrupt "$T/ck-nvfp4" "$T/bad-nvfp4" "$W" --block 1000 64 >"$T/what" \
    || fail "corrupt nvfp4"
read -r I J < <(sed -n 's/.*_scale\[\([0-9]*\)\]\[\([0-9]*\)\] doubled/\1 \2/p' "$T/what")
[ -n "${J:-}" ] && pass || fail "which NVFP4 scale was doubled: $(cat "$T/what")"
for q in F32 Q8_0 Q6_K Q4_K; do
    expect 1 "$V" --json --reference "$T/bad-nvfp4" "$T/g-nvfp4-$q.gguf"
    check_json "$T/out" 'k["status"] == "fail" and k["outlier"]' \
        'b["flagged"] == 1 and b["worst"]["flagged"]' \
        "b['worst']['rows'] == [$I, $I + 1] and b['worst']['cols'] == [16 * $J, 16 * $J + 16]" \
        'b["worst"]["excess_db"] >= 15'
done
expect 1 "$V" -q --reference "$T/bad-nvfp4" "$T/g-nvfp4-F32.gguf"
contains "$T/out" "worst block [$I:$((I + 1)), $((16 * J)):$((16 * J + 16))] of 917504 (1x16)"

# ---- (a) one doubled row of a BF16 checkpoint: row 1000 named, and its blocks ----
python3 "$FX" corrupt "$T/ck-bf16" "$T/bad-bf16" "$W" --row 1000 >"$T/what" || fail "corrupt bf16"
for q in F32 Q8_0 Q6_K Q4_K; do
    expect 1 "$V" --json --reference "$T/bad-bf16" "$T/g-bf16-$q.gguf"
    check_json "$T/out" 'k["status"] == "fail"' \
        'r["flagged"] == 1 and r["worst"]["rows"] == [1000, 1001] and r["worst"]["cols"] == [0, 2048]' \
        'r["worst"]["excess_db"] >= 20' \
        'b["flagged"] == 64 and b["worst"]["rows"] == [1000, 1001]'
done
expect 1 "$V" -q --reference "$T/bad-bf16" "$T/g-bf16-Q8_0.gguf"
contains "$T/out" "worst row 1000 of 7168: SNR 6.0 dB"
contains "$T/out" "FLAGGED: 1 row out of line"

finish
