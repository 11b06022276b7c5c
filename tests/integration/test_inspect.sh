#!/usr/bin/env bash
# gguf-inspect over hand-made, generated and real files: output, exit codes, errors.
source "$(dirname "$0")/lib.sh"
I=$GGUFKIT_BIN/gguf-inspect
C=$GGUFKIT_SRC/tests/fuzz/corpus/parser

# Usage errors: exit 2 and a hint.
expect 2 "$I"
contains "$T/err" "expected one MODEL.gguf"
expect 2 "$I" --no-such-option x.gguf
contains "$T/err" "unknown option"
expect 2 "$I" --filter '(' "$C/ok--small-llama.gguf"
contains "$T/err" "is not a POSIX extended regular expression"
expect 0 "$I" --help
contains "$T/out" "Examples:"
expect 0 "$I" --version
contains "$T/out" "ggufkit"

# Valid seed: text view.
expect 0 "$I" "$C/ok--small-llama.gguf"
contains "$T/out" "version:     3"
contains "$T/out" "a.weight"
contains "$T/out" "Q8_0"
contains "$T/out" "general.architecture"
contains "$T/out" "bits/weight:"
expect 0 "$I" --metadata-only "$C/ok--small-llama.gguf"
if grep -q "a.weight" "$T/out"; then fail "--metadata-only printed tensors"; else pass; fi
expect 0 "$I" --tensors-only --filter '^b\.' "$C/ok--small-llama.gguf"
contains "$T/out" "(1 of 2 tensors match the filter)"
if grep -q "general.architecture" "$T/out"; then fail "--tensors-only printed metadata"; else pass; fi

# Every malformed input: exit 2 (3 for environment), tool prefix, file named.
for f in "$C"/GGUF_E_*; do
    expect 2 "$I" "$f"
    contains "$T/err" "gguf-inspect: error: $f"
done
expect 2 "$I" "$C/GGUF_E_NOT_GGUF--lfs-pointer.gguf"
contains "$T/err" "Git LFS pointer"
expect 2 "$I" "$C/GGUF_E_TRUNCATED--data-past-eof.gguf"
contains "$T/err" "(offset "
expect 2 "$I" /nonexistent/model.gguf
contains "$T/err" "cannot open"

# JSON and hashes, on a split set opened from its middle part.
if [ -x "$GEN" ]; then
    "$GEN" model --arch llama --type Q4_K --split-max-tensors 5 "$T/m.gguf" >/dev/null 2>&1 ||
        fail "gguf-gen failed"
    parts=$(ls "$T"/m-000*-of-*.gguf | wc -l)
    [ "$parts" -gt 1 ] && pass || fail "expected a split set, got $parts parts"
    mid=$(ls "$T"/m-00002-of-*.gguf)
    expect 0 "$I" --json --hash "$mid"
    python3 - "$T/out" "$parts" <<'PY' && pass || fail "JSON contract"
import json, sys
d = json.load(open(sys.argv[1]))
parts = int(sys.argv[2])
assert {"tool", "version", "gguf_version", "alignment", "metadata", "tensors"} <= d.keys()
assert d["tool"] == "gguf-inspect" and d["gguf_version"] == 3
assert len(d["files"]) == parts
assert all({"name", "type", "shape", "offset", "nbytes", "file", "xxh3_128"} <= t.keys()
           for t in d["tensors"])
assert "split.count" in d["metadata"]
assert len(d["model_digest"]) == 32
PY
    # Text --hash prints the same model digest.
    model=$(python3 -c "import json;print(json.load(open('$T/out'))['model_digest'])")
    expect 0 "$I" --hash "$mid"
    contains "$T/out" "model xxh3-128: $model"
    contains "$T/out" "split layout:"
    # The parameter count in the unit its size calls for (was "(0.001 B)" for every small model).
    expect 0 "$I" --json "$mid"
    n=$(python3 -c "import json;print(json.load(open('$T/out'))['totals']['n_elements'])")
    want=$(python3 -c "print('parameters:  %d (%.2f M)' % ($n, $n / 1e6))")
    expect 0 "$I" "$mid"
    contains "$T/out" "$want"
fi
expect 0 "$I" --filter '^a\.' "$C/ok--small-llama.gguf"
if grep -q "^parameters:  [0-9]*\$" "$T/out"; then pass; else fail "a count below 1000 has no unit: $(grep parameters "$T/out")"; fi

# Real files written by other tools.
if have_shared models/stories260K.gguf hf/deepseek_v3/model-q8_0.gguf; then
    expect 0 "$I" "$SHARED/models/stories260K.gguf"
    contains "$T/out" "tokenizer.ggml.seperator_token_id"
    contains "$T/out" "(512 string)"
    expect 0 "$I" --json "$SHARED/hf/deepseek_v3/model-q8_0.gguf"
    contains "$T/out" '"name": "blk.0.attn_k_b.weight", "type": "Q8_0", "shape": [64, 256, 4]'
fi
finish
