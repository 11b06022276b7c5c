#!/usr/bin/env bash
# gguf-inspect --tokenize / --detokenize: output, JSON contract, BOS/EOS and
# special-token switches, round trips, refusals and exit codes; on gguf-gen's
# vocabularies, then (when ../shared/testdata is there) on llama.cpp's
# vocabulary-only files, including the examples of docs/gguf-inspect.md.
source "$(dirname "$0")/lib.sh"
I=$GGUFKIT_BIN/gguf-inspect
[ -x "$GEN" ] || skip "gguf-gen is not built"

"$GEN" model --arch llama --tokenizer gpt2 --sparse --no-sync "$T/bpe.gguf" >/dev/null ||
    fail "gguf-gen --tokenizer gpt2"
"$GEN" model --arch llama --sparse --no-sync "$T/spm.gguf" >/dev/null || fail "gguf-gen spm"
"$GEN" model --arch llama --no-vocab --sparse --no-sync "$T/none.gguf" >/dev/null ||
    fail "gguf-gen --no-vocab"

# gguf-gen's GPT-2 vocabulary has merges for these words (tools/gguf-gen/gen_vocab.c);
# its last id is <|endoftext|>, BOS and EOS.
expect 0 "$I" "$T/bpe.gguf" --tokenize "Once upon a time"
contains "$T/out" "tokenizer: gpt2, pre gpt-2, 512 tokens; BOS not added, EOS not added"
contains "$T/out" "4 tokens: 299 303 261 309"
contains "$T/out" '     303  " upon"'
# options after the model or before it
expect 0 "$I" --tokenize "Once upon a time" --bos --eos "$T/bpe.gguf"
contains "$T/out" "6 tokens: 511 299 303 261 309 511"
contains "$T/out" '<|endoftext|>"  control'
# a control token written in the text is found; --no-special makes it text
expect 0 "$I" "$T/bpe.gguf" --tokenize "time<|endoftext|>"
contains "$T/out" "2 tokens: 312 511"
expect 0 "$I" "$T/bpe.gguf" --tokenize "time<|endoftext|>" --no-special
grep -q "tokens: 312 511$" "$T/out" && fail "--no-special still parsed <|endoftext|>" || pass
# standard input, taken as it is (the newline too)
printf 'Once upon\n' | "$I" "$T/bpe.gguf" --tokenize - >"$T/out" 2>"$T/err" || fail "--tokenize -"
contains "$T/out" "3 tokens: 299 303 "
contains "$T/out" '"\n"'

# JSON: the ids array is the contract
expect 0 "$I" "$T/bpe.gguf" --tokenize "Once upon a time" --json --bos
python3 - "$T/out" <<'PY' && pass || fail "--tokenize --json contract"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["ids"] == [511, 299, 303, 261, 309], d["ids"]
assert d["n_tokens"] == 5 and d["tokenizer"] == "gpt2" and d["pre"] == "gpt-2"
assert d["add_bos"] is True and d["add_eos"] is False and d["parse_special"] is True
assert [t["id"] for t in d["tokens"]] == d["ids"]
assert d["tokens"][2] == {"id": 303, "piece": " upon", "hex": "2075706f6e", "type": "normal"}
assert d["tokens"][0]["type"] == "control" and d["tokens"][0]["piece"] == "<|endoftext|>"
PY

# Detokenize: back to the text; specials shown unless --no-special
expect 0 "$I" "$T/bpe.gguf" --detokenize 299,303,261,309
[ "$(cat "$T/out")" = "Once upon a time" ] && pass || fail "detokenize: $(cat "$T/out")"
expect 0 "$I" "$T/bpe.gguf" --detokenize "[511, 299, 303]"
[ "$(cat "$T/out")" = "<|endoftext|>Once upon" ] && pass || fail "detokenize: $(cat "$T/out")"
expect 0 "$I" "$T/bpe.gguf" --detokenize "511 299 303" --no-special
[ "$(cat "$T/out")" = "Once upon" ] && pass || fail "--no-special: $(cat "$T/out")"
expect 0 "$I" "$T/bpe.gguf" --detokenize "299 303" --json
python3 - "$T/out" <<'PY' && pass || fail "--detokenize --json contract"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["ids"] == [299, 303] and d["text"] == "Once upon" and d["utf8"] is True
assert bytes.fromhex(d["hex"]) == b"Once upon"
PY
# every UTF-8 text comes back through the byte tokens
text='Grüße 🙂 — naïve	tab  spaces
newline'
ids=$("$I" "$T/bpe.gguf" --tokenize "$text" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["ids"])')
expect 0 "$I" "$T/bpe.gguf" --detokenize "$ids"
[ "$(cat "$T/out")" = "$text" ] && pass || fail "round trip: $(cat "$T/out")"
# a character cut in two: the bytes stay, JSON says it is not UTF-8
ids=$("$I" "$T/bpe.gguf" --tokenize "🙂" --json | python3 -c 'import json,sys; print(*json.load(sys.stdin)["ids"][:2])')
expect 0 "$I" "$T/bpe.gguf" --detokenize "$ids" --json
contains "$T/out" '"hex": "f09f", "utf8": false'

# SentencePiece: BOS by default, the space prefix dropped again
expect 0 "$I" "$T/spm.gguf" --tokenize "upon a"
contains "$T/out" "tokenizer: llama, pre default, 512 tokens; BOS added"
contains "$T/out" '"<s>"  control'
ids=$("$I" "$T/spm.gguf" --tokenize "upon a" --no-bos --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["ids"])')
expect 0 "$I" "$T/spm.gguf" --detokenize "$ids"
[ "$(cat "$T/out")" = "upon a" ] && pass || fail "spm round trip: $(cat "$T/out")"
# that small vocabulary has no "▁" piece: as in llama.cpp, its bytes come back as "▁"
ids=$("$I" "$T/spm.gguf" --tokenize "a time" --no-bos --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["ids"])')
expect 0 "$I" "$T/spm.gguf" --detokenize "$ids"
[ "$(cat "$T/out")" = "a▁time" ] && pass || fail "spm byte fallback: $(cat "$T/out")"

# Refusals: exit 2 with the reason
expect 2 "$I" "$T/bpe.gguf" --tokenize $'ok\xff'
contains "$T/err" "invalid UTF-8 at byte 2"
expect 2 "$I" "$T/bpe.gguf" --detokenize 1,x
contains "$T/err" "--detokenize: 'x' is not a token id"
expect 2 "$I" "$T/bpe.gguf" --detokenize 1,-5
contains "$T/err" "'-5' is not a token id"
expect 2 "$I" "$T/bpe.gguf" --detokenize 1,512
contains "$T/err" "ids[1]: 512 is outside the vocabulary of 512 tokens"
expect 2 "$I" "$T/none.gguf" --tokenize x
contains "$T/err" "tokenizer.ggml.tokens"
python3 - "$T" <<'PY' || fail "writing vocabularies with gguf-py"
import sys, gguf
for name, model, pre in (("rwkv", "rwkv", None), ("nope", "gpt2", "no-such-pre")):
    w = gguf.GGUFWriter(f"{sys.argv[1]}/{name}.gguf", arch="llama")
    w.add_tokenizer_model(model)
    if pre:
        w.add_tokenizer_pre(pre)
    w.add_token_list(["a", "b", "ab"])
    w.add_token_merges(["a b"])
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
PY
expect 2 "$I" "$T/rwkv.gguf" --tokenize x
contains "$T/err" "tokenizer.ggml.model: 'rwkv' is not supported (supported: llama, gpt2, bert)"
expect 2 "$I" "$T/nope.gguf" --tokenize x
contains "$T/err" "tokenizer.ggml.pre: 'no-such-pre' is not supported (supported: default, llama3,"
contains "$T/err" "deepseek-v3"
# and the rest of gguf-inspect still reads such files
expect 0 "$I" "$T/nope.gguf" --metadata-only
contains "$T/out" "no-such-pre"

# Usage
expect 2 "$I" "$T/bpe.gguf" --tokenize a --detokenize 1
contains "$T/err" "exclude each other"
expect 2 "$I" "$T/bpe.gguf" --tokenize a --hash
contains "$T/err" "does not combine"
expect 2 "$I" "$T/bpe.gguf" --bos
contains "$T/err" "go with --tokenize"
expect 2 "$I" "$T/bpe.gguf" --detokenize 1 --no-bos
contains "$T/err" "go with --tokenize"
expect 0 "$I" --help
contains "$T/out" "--tokenize TEXT"

# llama.cpp's vocabulary-only files, and the examples of docs/gguf-inspect.md
if [ -n "$SHARED" ] && [ -f "$SHARED/vocab/ggml-vocab-gpt-2.gguf" ]; then
    V=$SHARED/vocab
    expect 0 "$I" "$V/ggml-vocab-gpt-2.gguf" --tokenize "Hello world! 🙂 <|endoftext|>"
    contains "$T/out" "6 tokens: 15496 995 0 32485 220 50256"
    contains "$T/out" '   32485  " 🙂"'
    expect 0 "$I" "$V/ggml-vocab-llama-spm.gguf" --tokenize "Hello world"
    contains "$T/out" "3 tokens: 1 15043 3186"
    contains "$T/out" '   15043  " Hello"'
    expect 0 "$I" "$V/ggml-vocab-llama-spm.gguf" --detokenize 1,15043,3186
    [ "$(cat "$T/out")" = "<s> Hello world" ] && pass || fail "spm detokenize: $(cat "$T/out")"
    expect 0 "$I" "$V/ggml-vocab-llama-spm.gguf" --detokenize 1,15043,3186 --no-special
    [ "$(cat "$T/out")" = " Hello world" ] && pass || fail "spm --no-special: $(cat "$T/out")"
    expect 0 "$I" "$V/ggml-vocab-gpt-2.gguf" --detokenize "15496 8582" --json
    # the bytes that are not UTF-8 become U+FFFD in "text" and stay in "hex"
    contains "$T/out" '"ids": [15496, 8582], "text": "Hello��", "hex": "48656c6c6ff09f", "utf8": false}'
    expect 2 "$I" "$V/ggml-vocab-gpt-2.gguf" --tokenize $'ok\xff'
    contains "$T/err" "ggml-vocab-gpt-2.gguf: --tokenize: gguf_tokenize: text: invalid UTF-8 at byte 2 (0xFF)"
    expect 0 "$I" "$V/ggml-vocab-bert-bge.gguf" --tokenize "Héllo, WORLD!"
    contains "$T/out" "6 tokens: 101 7592 1010 2088 999 102"
    expect 0 "$I" "$V/ggml-vocab-deepseek-llm.gguf" --tokenize "x = 1;" --json
    python3 - "$T/out" <<'PY' && pass || fail "deepseek-llm JSON"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["pre"] == "deepseek-llm" and d["add_bos"] is True
assert d["ids"] == [100000, 87, 403, 207, 16, 26], d["ids"]
assert d["tokens"][0]["piece"] == "<｜begin▁of▁sentence｜>" and d["tokens"][0]["type"] == "control"
PY
fi
finish
