#!/usr/bin/env bash
# CI regression check: every golden record of testdata/golden (f64 reference runs of
# generated models, zstd-compressed) still matches what the forward pass computes today,
# in f64, in f32, and under virtual tensor parallelism (tp 2 and 4). A failure prints the comparison, first divergence first; after an
# intended change, testdata/golden/regen.sh rewrites the records (docs/ci-regression.md).
source "$(dirname "$0")/lib.sh"
R=$GGUFKIT_BIN/ref-forward
G=$GGUFKIT_SRC/testdata/golden
[ -x "$R" ] || skip "ref-forward is not built"
[ -x "$GEN" ] || skip "gguf-gen is not built"
eval "$(grep '^GOLDEN_SMALL=' "$G/regen.sh")"
n=0
while read -r name tokens args; do
    [ -n "$name" ] || continue
    n=$((n + 1))
    [ -f "$G/$name.gguf.zst" ] || { fail "$name: golden record missing"; continue; }
    # shellcheck disable=SC2086
    "$GEN" model $GOLDEN_SMALL $args --no-sync "$T/$name.gguf" >/dev/null 2>&1
    # Virtual tensor parallel against the same golden record: every rank must match.
    for tp in 2 4; do
        rc=0
        "$R" "$T/$name.gguf" --tokens "$tokens" --tp $tp --compare "$G/$name.gguf.zst" \
            >"$T/report" 2>&1 || rc=$?
        if [ $rc -eq 0 ]; then
            pass
        else
            fail "$name (--tp $tp against the f64 golden record): exit $rc"
            grep -v ' ok$' "$T/report" | head -20 | sed 's/^/    /' >&2
        fi
    done
    for prec in f64 f32; do
        rc=0
        "$R" "$T/$name.gguf" --tokens "$tokens" --precision $prec --record "$T/$name-$prec.gguf" -q ||
            rc=$?
        [ $rc -eq 0 ] || { fail "$name: ref-forward --precision $prec exited $rc"; continue; }
        rc=0
        "$R" compare "$G/$name.gguf.zst" "$T/$name-$prec.gguf" >"$T/report" 2>&1 || rc=$?
        if [ $rc -eq 0 ]; then
            pass
        else
            fail "$name ($prec against the f64 golden record): exit $rc"
            grep -v ' ok$' "$T/report" | head -20 | sed 's/^/    /' >&2
        fi
    done
done < <(grep -v '^#' "$G/models.txt")
[ $n -ge 7 ] && pass || fail "only $n golden models listed"
# The check can fail: a broken shard plan is caught by the golden record, at its layer.
expect 1 "$R" "$T/qwen3moe-q4_0.gguf" --tokens 1,5,9,13 --tp 2 --inject rank0-everywhere@1 \
    --compare "$G/qwen3moe-q4_0.gguf.zst"
contains "$T/out" "FIRST DIVERGENCE: blk.1."
finish
