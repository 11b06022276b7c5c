#!/usr/bin/env bash
# ref-forward --prompt: text through the model's tokenizer into the forward
# pass: SentencePiece (the trained stories260K model) and byte-level BPE (the
# DeepSeek-V3 model of ../shared/testdata/hf).
source "$(dirname "$0")/lib.sh"
R=$GGUFKIT_BIN/ref-forward
need_shared
S=$SHARED/models/stories260K.gguf
[ -f "$S" ] || skip "stories260K.gguf is absent"

# The prompt tokenizes to the ids greedy decoding writes for it; --bos adds BOS,
# and then the run equals --tokens with the same ids.
expect 0 "$R" "$S" --prompt "Once upon a time" --bos -n 16
contains "$T/out" "tokens: 1 403 407 261 378"
contains "$T/out" "text: , there was a little girl named Lily."
cp "$T/out" "$T/prompt.txt"
expect 0 "$R" "$S" --tokens 1,403,407,261,378 -n 16
sed 1d "$T/out" >"$T/a"; sed 1d "$T/prompt.txt" >"$T/b"
cmp -s "$T/a" "$T/b" && pass || fail "--prompt --bos differs from --tokens 1,403,407,261,378"
expect 0 "$R" "$S" --prompt "Once upon a time"
contains "$T/out" "tokens: 403 407 261 378"

# Bad usage
expect 2 "$R" "$S" --prompt "Once" --tokens 1
contains "$T/err" "--prompt and --tokens exclude each other"

# A "gpt2" vocabulary: the ids are the ones HF tokenizers gives with the
# model's own tokenizer.json (hf/deepseek_v3/tokenizer.json).
H=$SHARED/hf/deepseek_v3/model-f32.gguf
if [ -f "$H" ]; then
    expect 0 "$R" "$H" --prompt "The capital of France is" -n 1
    contains "$T/out" "tokens: 344 503 785 294 568 90 296 446 355"
fi
finish
