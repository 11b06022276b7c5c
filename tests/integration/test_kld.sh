#!/usr/bin/env bash
# ref-forward kld-base / kld on a text file (the path llama-perplexity -f takes):
# the SentencePiece model of ../shared/testdata tokenizes the text with BOS
# first, kld-base writes every whole chunk (or --chunks), and the model against
# its own file shows only the uint16 rounding. The layout and the statistics
# are checked against numpy in tests/interop/test_kld_numpy.py.
source "$(dirname "$0")/lib.sh"
R=$GGUFKIT_BIN/ref-forward
need_shared
M=$SHARED/models/stories260K.gguf
[ -f "$M" ] || skip "$M is absent"
python3 - > "$T/text.txt" <<'PY'
import random
random.seed(3)
words = "once upon a time there was a little girl named lily she liked to play in the park with her dog".split()
print(" ".join(random.choice(words) for _ in range(400)))
PY
expect 0 "$R" kld-base "$M" --text-file "$T/text.txt" -c 64 -o "$T/base.kld" --json
python3 -c "
import json, sys
d = json.load(open('$T/out'))
assert d['bos'] is True and d['n_ctx'] == 64 and d['n_vocab'] == 512, d
assert d['n_chunk'] >= 2 and d['rows'] == d['n_chunk'] * 31, d
assert d['ppl'] > 1, d
" && pass || fail "kld-base summary: $(cat "$T/out")"
expect 0 "$R" kld-base "$M" --text-file "$T/text.txt" -c 64 --chunks 2 -o "$T/two.kld"
contains "$T/out" "2 chunks, 62 scored positions (BOS first in each chunk)"
expect 0 "$R" kld "$M" --kl-divergence-base "$T/two.kld"
contains "$T/out" "====== KL divergence statistics ======"
contains "$T/out" "Same top p: 100.000 ± 0.000 %"
contains "$T/out" "fewer than 100 positions"
expect 0 "$R" kld "$M" --kl-divergence-base "$T/base.kld" --chunks 2 --json
python3 -c "
import json
d = json.load(open('$T/out'))
for k in ('mean_kld', 'mean_kld_uncertainty', 'max_kld', 'same_top_p', 'rms_dp'):
    assert k in d, k
assert d['count'] == 62 and d['same_top_p'] == 1 and d['mean_kld'] < 1e-4, d
" && pass || fail "kld --json: $(cat "$T/out")"
# usage and input errors
expect 2 "$R" kld-base "$M" -c 64 -o "$T/x.kld"
contains "$T/err" "--tokens-file or --text-file"
expect 2 "$R" kld "$M"
contains "$T/err" "--kl-divergence-base"
printf 'not a kld file at all, really' > "$T/junk.kld"
expect 2 "$R" kld "$M" --kl-divergence-base "$T/junk.kld"
contains "$T/err" "junk.kld: magic: not a llama.cpp log-probability file"
expect 3 "$R" kld "$M" --kl-divergence-base "$T/missing.kld"
finish
