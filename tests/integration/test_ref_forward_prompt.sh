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
# BOS as the metadata says (stories260K: add_bos_token true), --no-bos drops it
expect 0 "$R" "$S" --prompt "Once upon a time"
contains "$T/out" "tokens: 1 403 407 261 378"
expect 0 "$R" "$S" --prompt "Once upon a time" --no-bos
contains "$T/out" "tokens: 403 407 261 378"
# special tokens written in the text are the token (<s> is BOS, id 1) unless --no-special
expect 0 "$R" "$S" --prompt "<s>Once" --no-bos
contains "$T/out" "tokens: 1 "
expect 0 "$R" "$S" --prompt "<s>Once" --no-bos --no-special
grep -q "^tokens: 1 " "$T/out" && fail "--no-special still made <s> a token" || pass

# Bad usage
expect 2 "$R" "$S" --prompt "Once" --tokens 1
contains "$T/err" "--prompt and --tokens exclude each other"
expect 2 "$R" "$S" --tokens 1 --no-bos
contains "$T/err" "--no-bos applies to --prompt"
expect 2 "$R" "$S" --prompt "Once" --bos --no-bos
contains "$T/err" "exclude each other"

# A "gpt2" vocabulary: the ids are the ones HF tokenizers gives with the
# model's own tokenizer.json (hf/deepseek_v3/tokenizer.json).
H=$SHARED/hf/deepseek_v3/model-f32.gguf
if [ -f "$H" ]; then
    expect 0 "$R" "$H" --prompt "The capital of France is" -n 1
    contains "$T/out" "tokens: 344 503 785 294 568 90 296 446 355"
fi
# every architecture of the forward takes --prompt, with either of gguf-gen's vocabularies
export GEN_ARCHS=$(gen_archs)
for a in $GEN_ARCHS; do
    for tk in spm gpt2; do
        "$GEN" model --arch $a --tokenizer $tk --no-sync --force -q "$T/$a.gguf" ||
            fail "gguf-gen $a $tk"
        expect 0 "$R" "$T/$a.gguf" --prompt "the quick brown fox" -n 2
    done
done
finish
