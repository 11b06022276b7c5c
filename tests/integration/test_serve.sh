#!/usr/bin/env bash
# ref-forward serve: real servers on free loopback ports (--port 0), driven with
# curl: every refusal class (400, 401, 404, 405, 413, 501, 503) as an OpenAI-style
# error object, a burst of concurrent clients, the --tp server against the
# reference and the --tp --inject one against both, clean SIGINT/SIGTERM, bad usage.
# The openai client and lm-eval's requests: tests/interop/test_serve_openai.py;
# misbehaving clients (slowloris, gone away, bad framing): test_serve_transport.sh.
source "$(dirname "$0")/lib.sh"
R=$GGUFKIT_BIN/ref-forward
command -v curl >/dev/null || skip "curl is not installed"
[ -x "$GEN" ] || skip "gguf-gen is not built"
# Options before positional arguments, in POSIX order: every version of the
# tools' option loop parses that (92cbb06's loses positionals under GNU
# permutation; the fix in 824961f stops at the first positional under POSIX).
export POSIXLY_CORRECT=1
"$GEN" model --arch llama --vocab 300 --no-sync --force -q "$T/llama.gguf" || fail "gguf-gen llama"



# stop [SIGNAL]: the server exits 0 and says it shut down.
stop() {
    local sig=${1:-TERM} rc=0
    kill "-$sig" "$PID" 2>/dev/null || true
    wait "$PID" || rc=$?
    PID=
    if [ "$rc" -eq 0 ] && grep -q "SIG$sig: shutting down" "$T/srv.err"; then pass; else
        fail "serve exited $rc on SIG$sig: $(tail -c 300 "$T/srv.err")"
    fi
}

# req WANT METHOD PATH BODY [CURL-ARGS...]: check the status; body in $T/body.
req() {
    local want=$1 method=$2 path=$3 body=$4 got
    shift 4
    if [ -n "$body" ]; then
        got=$(curl -s -o "$T/body" -w '%{http_code}' -X "$method" "$URL$path" \
              -H 'Content-Type: application/json' --data-binary "$body" "$@") || got="curl exit $?"
    else
        got=$(curl -s -o "$T/body" -w '%{http_code}' -X "$method" "$URL$path" "$@") ||
            got="curl exit $?"
    fi
    if [ "$got" = "$want" ]; then pass; else
        fail "$method $path ${body:0:80}: status $got, wanted $want: $(head -c 300 "$T/body")"
    fi
}

# error_is CODE [PARAM [TEXT]]: $T/body is {"error": {message, type, param, code}}.
error_is() {
    if python3 - "$T/body" "$@" <<'EOF'; then pass; else fail "error body: $(head -c 300 "$T/body")"; fi
import json, sys
e = json.load(open(sys.argv[1]))["error"]
code = int(sys.argv[2])
assert e["code"] == code and isinstance(e["type"], str) and isinstance(e["message"], str), e
if len(sys.argv) > 3:
    assert e["param"] == (sys.argv[3] or None), e
if len(sys.argv) > 4:
    assert sys.argv[4] in e["message"], e
EOF
}

C='/v1/completions'

# ---- the plain server: endpoints and refusals ----
serve_start "$T/llama.gguf" --served-model tiny --max-body 4K --max-tokens 64 || { finish; exit 1; }
req 200 GET /health ''
contains "$T/body" '"status":"ok"'
req 200 GET /v1/models ''
contains "$T/body" '"id":"tiny"'
req 200 POST $C '{"model": "tiny", "prompt": [1, 2, 3], "max_tokens": 4, "logprobs": 2, "echo": true}'
python3 - "$T/body" <<'EOF' && pass || fail "completion shape: $(head -c 300 "$T/body")"
import json, sys
r = json.load(open(sys.argv[1]))
c = r["choices"][0]
lp = c["logprobs"]
assert r["object"] == "text_completion" and r["model"] == "tiny"
assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == 7
assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
assert all(v <= 0 for v in lp["token_logprobs"][1:])
assert r["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7,
                      "prompt_tokens_details": None, "completion_tokens_details": None}
# vLLM's fields that are null here too
assert r["service_tier"] is None and isinstance(r["system_fingerprint"], str)
assert c["token_ids"] is None and c["prompt_token_ids"] is None
EOF
req 200 POST /completion '{"prompt": [1, 2, 3], "n_predict": 2, "n_probs": 3}'
contains "$T/body" '"completion_probabilities":[{"id":'
req 200 POST /detokenize '{"tokens": [1, 2, 3]}'
contains "$T/body" '"prompt":'
# text prompts: the tokens /tokenize gives, BOS first
req 200 POST /tokenize '{"prompt": "hello world"}'
python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tokens"])' "$T/body" >"$T/tok"
req 200 POST $C '{"prompt": "hello world", "max_tokens": 1, "return_token_ids": true}'
python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["prompt_token_ids"])' \
    "$T/body" | cmp -s - "$T/tok" && pass || fail "/tokenize and the completion's prompt ids differ"
# 400: malformed JSON, wrong types, unknown values, non-UTF-8, sampling
req 400 POST $C '{"prompt": [1, 2'
error_is 400 '' "malformed JSON"
req 400 POST $C '{"prompt": [1, 2], "max_tokens": "4"}'
error_is 400 max_tokens "integer"
req 400 POST $C '{"prompt": [1, 2], "echo": "yes"}'
error_is 400 echo
req 400 POST $C '{"prompt": [1, 2], "temperature": 0.7}'
error_is 400 temperature "greedily"
req 400 POST $C '{"prompt": [1, 2], "top_p": 0.9}'
error_is 400 top_p
req 400 POST $C '{"prompt": [1, 2], "n": 3}'
error_is 400 n
req 400 POST $C '{"prompt": [1, 2], "logprobs": 21}'
error_is 400 logprobs
req 400 POST $C '{"prompt": [1, 300]}'
error_is 400 prompt "vocabulary"
req 400 POST $C '{"prompt": [1, 2], "max_tokens": 63}'
error_is 400 max_tokens "--max-tokens"
req 400 POST $C '[1, 2]'
error_is 400 '' "JSON object"
printf '{"prompt": "caf\xe9"}' >"$T/latin1.json"
req 400 POST $C "@$T/latin1.json"
error_is 400 '' "UTF-8"
req 400 POST $C ''
error_is 400 '' "empty"
# 404, 405
req 404 GET /v1/chat/completions ''
error_is 404
req 404 POST $C '{"model": "gpt-4", "prompt": [1]}'
error_is 404 model "does not exist"
req 405 GET $C '' -D "$T/headers"
error_is 405
grep -qi '^Allow: POST' "$T/headers" && pass || fail "405 without Allow: POST"
req 405 DELETE /health ''
# 413: a body over --max-body (4K), by Content-Length and chunked, and one far over it
head -c 5000 /dev/zero | tr '\0' ' ' >"$T/big.json"
req 413 POST $C "@$T/big.json"
error_is 413 '' "--max-body"
req 413 POST $C "@$T/big.json" -H 'Transfer-Encoding: chunked'
error_is 413
head -c 300000 /dev/zero | tr '\0' ' ' >"$T/huge.json"
req 413 POST $C "@$T/huge.json"
# the server is still up after all of that
req 200 GET /health ''
stop INT

# ---- the API key ----
serve_start "$T/llama.gguf" --api-key s3cret || { finish; exit 1; }
req 401 POST $C '{"prompt": [1]}'
error_is 401
req 401 POST $C '{"prompt": [1]}' -H 'Authorization: Bearer wrong'
req 401 GET /v1/models '' -H 'Authorization: s3cret'
req 200 POST $C '{"prompt": [1], "max_tokens": 1}' -H 'Authorization: Bearer s3cret'
req 200 GET /v1/models '' -H 'Authorization: bearer s3cret'
req 200 GET /health ''
stop TERM

# ---- a burst of concurrent clients: same answers as alone; a full queue says 503 ----
serve_start "$T/llama.gguf" --queue 32 || { finish; exit 1; }
body='{"prompt": [1, 5, 9, 13], "max_tokens": 24, "logprobs": 3}'
req 200 POST $C "$body"
python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["choices"][0]; print(json.dumps([c["text"], c["logprobs"]]))' \
    "$T/body" >"$T/alone"
pids=()
for i in $(seq 24); do
    curl -s -o "$T/burst.$i" -w '%{http_code}\n' "$URL$C" --data-binary "$body" >"$T/code.$i" &
    pids+=($!)
done
wait "${pids[@]}" || true # a failed curl shows as code 000
ok=$(python3 - "$T" <<'EOF'
import json, sys
t = sys.argv[1]
alone = open(f"{t}/alone").read().strip()
ok = 0
for i in range(1, 25):
    if open(f"{t}/code.{i}").read().strip() != "200":
        continue
    c = json.load(open(f"{t}/burst.{i}"))["choices"][0]
    ok += json.dumps([c["text"], c["logprobs"]]) == alone
print(ok)
EOF
) || ok="no count (python failed)"
[ "$ok" = 24 ] && pass || fail "burst: $ok of 24 answered 200 with the lone request's answer"
stop TERM

serve_start "$T/llama.gguf" --queue 1 || { finish; exit 1; }
pids=()
for i in $(seq 12); do
    curl -s -o "$T/q.$i" -w '%{http_code}\n' "$URL$C" \
         --data-binary '{"prompt": [1, 2, 3], "max_tokens": 200, "ignore_eos": true}' >"$T/qc.$i" &
    pids+=($!)
done
wait "${pids[@]}" || true # a failed curl shows as code 000
n200=0 n503=0 other=0
for i in $(seq 12); do
    case $(cat "$T/qc.$i") in
    200) n200=$((n200 + 1)) ;;
    503) n503=$((n503 + 1)); cp "$T/q.$i" "$T/body"; error_is 503 '' "queue is full" ;;
    *) other=$((other + 1)) ;;
    esac
done
[ "$n200" -ge 1 ] && [ "$other" -eq 0 ] && pass ||
    fail "--queue 1 under 12 clients: $n200 answered, $n503 refused (503), $other other"
echo "queue 1, 12 clients: $n200 answered, $n503 refused with 503"
req 200 GET /health ''
stop TERM

# ---- --tp: a clean plan agrees with the reference, an injected fault does not ----
body='{"prompt": [1, 7, 42, 99, 5, 17], "max_tokens": 6, "logprobs": 5, "echo": true}'
serve_start "$T/llama.gguf" --precision f64 || { finish; exit 1; }
req 200 POST $C "$body"
cp "$T/body" "$T/ref.json"
stop TERM
serve_start "$T/llama.gguf" --precision f64 --tp 2 || { finish; exit 1; }
req 200 POST $C "$body"
cp "$T/body" "$T/tp.json"
stop TERM
serve_start "$T/llama.gguf" --precision f64 --tp 2 --inject qkv-stream || { finish; exit 1; }
req 200 POST $C "$body"
cp "$T/body" "$T/bad.json"
stop TERM
# read after the stop, when everything the server wrote is in the file
grep -q 'fault qkv-stream' "$T/srv.err" && pass || fail "the faulty server does not say so"
python3 - "$T/ref.json" "$T/tp.json" "$T/bad.json" <<'EOF' && pass || fail "--tp / --inject logprobs"
import json, sys
def lps(p):
    return json.load(open(p))["choices"][0]["logprobs"]["token_logprobs"][1:]
ref, tp, bad = (lps(p) for p in sys.argv[1:])
d_tp = max(abs(a - b) for a, b in zip(ref, tp))
d_bad = max(abs(a - b) for a, b in zip(ref, bad))
print(f"max |dlogprob|: clean tp 2 {d_tp:.3g}, qkv-stream {d_bad:.3g}")
assert d_tp < 1e-6, d_tp
assert d_bad > 1e-2, d_bad
EOF

# ---- a text prompt through the SentencePiece tokenizer (stories260K) ----
S=${SHARED:+$SHARED/models/stories260K.gguf}
if [ -n "$S" ] && [ -f "$S" ]; then
    "$R" --prompt "Once upon a time" --bos -n 8 "$S" >"$T/run.out" || fail "ref-forward --prompt"
    serve_start "$S" || { finish; exit 1; }
    req 200 POST $C '{"prompt": "Once upon a time", "max_tokens": 8, "return_token_ids": true}'
    python3 - "$T/body" "$T/run.out" <<'EOF' && pass || fail "serve and run disagree"
import json, sys
c = json.load(open(sys.argv[1]))["choices"][0]
run = dict(l.split(": ", 1) for l in open(sys.argv[2]).read().splitlines() if ": " in l)
assert c["prompt_token_ids"] == [int(t) for t in run["tokens"].split()], (c, run)
assert c["token_ids"] == [int(t) for t in run["generated"].split()], (c, run)
assert c["text"] == run["text"], (c["text"], run["text"])
EOF
    req 200 POST /tokenize '{"prompt": "Once upon a time"}'
    contains "$T/body" '"tokens":[1,403,407,261,378]'
    stop TERM
else
    echo "stories260K.gguf is absent: text prompts untested here"
fi

# ---- a byte-level BPE (gpt2) vocabulary: HF tokenizers' ids for the model's own text ----
H=${SHARED:+$SHARED/hf/deepseek_v3/model-f32.gguf}
if [ -n "$H" ] && [ -f "$H" ]; then
    serve_start "$H" || { finish; exit 1; }
    req 200 POST /tokenize '{"prompt": "The capital of France is", "add_special_tokens": false}'
    python3 -c "import json,sys; t=json.load(open('$T/body'))['tokens']; \
sys.exit(0 if t==[344,503,785,294,568,90,296,446,355] else 1)" && pass ||
        fail "deepseek_v3 /tokenize: $(cat "$T/body")"
    req 200 POST $C '{"prompt": "The capital of France is", "max_tokens": 1}'
    stop TERM
fi

# with_tokenizer KIND OUT: llama.gguf with tokenizer.ggml.model set to KIND.
with_tokenizer() {
    python3 - "$T/llama.gguf" "$2" "$1" <<'PY'
import sys, gguf
r = gguf.GGUFReader(sys.argv[1])
w = gguf.GGUFWriter(sys.argv[2], r.fields["general.architecture"].contents())
for name, f in r.fields.items():
    if name.startswith("GGUF.") or name == "general.architecture":
        continue
    v = sys.argv[3] if name == "tokenizer.ggml.model" else f.contents()
    sub = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
    w.add_key_value(name, v, f.types[0], sub_type=sub)
for t in r.tensors:
    w.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
PY
}

# ---- WordPiece (bert) drops whitespace: a text of none gives no tokens, 400 ----
# (it decoded from logits no eval wrote: a different answer each time)
with_tokenizer bert "$T/bert.gguf"
serve_start "$T/bert.gguf" || { finish; exit 1; }
req 200 POST /tokenize '{"prompt": " ", "add_special_tokens": false}'
contains "$T/body" '"count":0'
for body in '{"prompt": " ", "add_special_tokens": false, "max_tokens": 2, "logprobs": 1}' \
            '{"prompt": ["a", " \t "], "add_special_tokens": false}'; do
    req 400 POST $C "$body"
    error_is 400 prompt "no tokens"
done
req 400 POST /completion '{"prompt": " ", "add_special": false, "n_predict": 2}'
error_is 400 prompt "no tokens"
# with BOS ([CLS]) it is a prompt of one token
req 200 POST $C '{"prompt": " ", "max_tokens": 1}'
stop TERM

# ---- a vocabulary the tokenizer refuses: text gets 501, token ids work ----
with_tokenizer no-such-model "$T/nope.gguf"
serve_start "$T/nope.gguf" || { finish; exit 1; }
req 501 POST $C '{"prompt": "hello"}'
error_is 501 prompt "send token ids"
req 501 POST /tokenize '{"prompt": "hello"}'
error_is 501 prompt
req 200 POST $C '{"prompt": [1, 2, 3], "max_tokens": 1}'
stop TERM

# ---- bad usage and environment ----
expect 2 "$R" serve
contains "$T/err" "expected a MODEL.gguf"
expect 2 "$R" serve --fault qkv-stream "$T/llama.gguf"
contains "$T/err" "--fault needs --tp"
expect 2 "$R" serve --inject qkv-stream "$T/llama.gguf" # the old spelling, an alias
contains "$T/err" "--fault needs --tp"
expect 2 "$R" serve --tp 2 --inject no-such-fault "$T/llama.gguf"
contains "$T/err" "unknown fault"
expect 2 "$R" serve --host not-an-address "$T/llama.gguf"
expect 2 "$R" serve "$T/no-such.gguf"
serve_start "$T/llama.gguf" || { finish; exit 1; }
port=${URL##*:}
expect 3 timeout 20 "$R" serve --port "$port" "$T/llama.gguf"
contains "$T/err" "cannot listen"
stop TERM
finish
