#!/usr/bin/env bash
# Rewrite the golden records of testdata/golden/models.txt after an intended change of the
# forward pass or of gguf-gen, e.g. from the repository root:
#   GGUFKIT_BIN=build/tools GGUFKIT_GEN=build/tools/gguf-gen testdata/golden/regen.sh [DIR]
# DIR (default: testdata/golden itself) receives the records, e.g. to review them first:
# `ref-forward compare OLD NEW` says what moved and where.
set -euo pipefail
: "${GGUFKIT_BIN:?set GGUFKIT_BIN to the folder holding ref-forward}"
: "${GGUFKIT_GEN:?set GGUFKIT_GEN to the gguf-gen binary}"
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here}
mkdir -p "$out"
# Small sizes keep each record near 15 KB compressed; shared by test_golden.sh.
GOLDEN_SMALL="--embd 64 --heads 4 --kv-heads 2 --head-dim 16 --ff 128 --vocab 128 --expert-ff 64"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
grep -v '^#' "$here/models.txt" | while read -r name tokens args; do
    [ -n "$name" ] || continue
    # shellcheck disable=SC2086
    "$GGUFKIT_GEN" model $GOLDEN_SMALL $args --no-sync -q "$tmp/$name.gguf"
    "$GGUFKIT_BIN/ref-forward" "$tmp/$name.gguf" --tokens "$tokens" --precision f64 \
        --record "$out/$name.gguf.zst" --zstd -q
    echo "$name.gguf.zst: $(stat -c %s "$out/$name.gguf.zst") bytes"
done
