#!/usr/bin/env bash
# ref-forward --prompt: text through the SentencePiece tokenizer into the
# forward pass of the trained stories260K model.
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

# Bad usage and unsupported vocabularies
expect 2 "$R" "$S" --prompt "Once" --tokens 1
contains "$T/err" "--prompt and --tokens exclude each other"
H=$SHARED/hf/deepseek_v3/model-f32.gguf
if [ -f "$H" ]; then
    expect 2 "$R" "$H" --prompt "hi"
    contains "$T/err" "tokenizer.ggml.model: 'gpt2' is not supported"
fi
finish
