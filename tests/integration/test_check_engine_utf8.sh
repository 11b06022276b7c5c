#!/usr/bin/env bash
# check-engine against a llama-server that answers HTTP 500 ("Failed to parse input at
# pos 0") when the text it generated is not valid UTF-8 - the llama-server versions whose
# chat parser failed on it (llama.cpp issue 27543; the llama-server of
# scripts/setup_engines.sh writes U+FFFD instead, tests/engines/test_llama_server.py) -
# played by `ref-forward serve --quirk llama-utf8-500` on a small F32 llama whose greedy text
# is mostly byte tokens:
#  - a generation that turns into broken bytes after a few tokens: a verdict all the same
#    (exit 0, AGREE), one token per request over the engine's own tokens, compared up to
#    the first token that is not UTF-8 alone; before the fallback: exit 3 (HTTP 500);
#  - a generation whose first token is not UTF-8: the prompt positions scored by prefix
#    give the verdict;
#  - --prompt-by-prefix compares the prompt positions of a healthy generation too, and a
#    model with other weights is DIVERGED there, in the prompt;
#  - --prompt-by-prefix is refused for the dialects that return prompt log-probabilities;
#  - llama-server writes no probabilities for a generated token that ends inside a
#    character (it scores the token that completes it) while `tokens` lists them all: such
#    tokens stay in the sequence, not compared (a proxy that drops one entry plays it;
#    before: exit 2, "token_ids contradict the log-probability positions").
source "$(dirname "$0")/lib.sh"
R=$GGUFKIT_BIN/ref-forward
[ -x "$GEN" ] || skip "gguf-gen is not built"
"$GEN" model --arch llama --type F32 --seed 1 --heads 4 --kv-heads 2 --head-dim 64 --no-sync \
    --force -q "$T/m.gguf" || fail "gguf-gen m"
"$GEN" model --arch llama --type F32 --seed 7 --heads 4 --kv-heads 2 --head-dim 64 --no-sync \
    --force -q "$T/other.gguf" || fail "gguf-gen other"

serve_start "$T/m.gguf" --quirk llama-utf8-500 || { finish; exit 1; }

# the quirk itself: llama-server's 500 and error body
code=$(curl -s -o "$T/body" -w '%{http_code}' "$URL/completion" \
       -d '{"prompt": [1, 301, 302], "n_predict": 8}')
[ "$code" = 500 ] && pass || fail "the quirk: HTTP $code"
contains "$T/body" '"message":"Failed to parse input at pos 0: butbut'
contains "$T/body" '"type":"server_error"'

# valid first tokens, then bytes: one token per request
expect 0 "$R" check-engine "$T/m.gguf" --url "$URL" --api llama-server --tokens 1,301,302 -n 8 \
    --json
python3 - "$T/out" <<'EOF' && pass || fail "token by token: $(head -c 600 "$T/out")"
import json, sys
d = json.load(open(sys.argv[1]))
p = d["prompts"][0]
assert d["ok"] is True, d["ok"]
notes = " ".join(p["notes"])
assert "one token per request" in notes and "HTTP 500" in notes, notes
n = len(p["generated"])
assert 1 <= n < 8, n  # compared up to the first token that is not UTF-8 alone
EOF
# the first generated token is not UTF-8: the prompt, by prefix
expect 0 "$R" check-engine "$T/m.gguf" --url "$URL" --api llama-server --tokens 1,300,301,302 \
    -n 8 --json
python3 - "$T/out" <<'EOF' && pass || fail "prompt by prefix after a 500: $(head -c 600 "$T/out")"
import json, sys
d = json.load(open(sys.argv[1]))
p = d["prompts"][0]
assert d["ok"] is True, d["ok"]
assert "prompt positions by prefix" in " ".join(p["notes"]), p["notes"]
assert d["positions"] >= 1, d["positions"]
EOF
# --prompt-by-prefix on a healthy generation: prompt and generated positions
expect 0 "$R" check-engine "$T/m.gguf" --url "$URL" --api llama-server --tokens 1,301,302,356 \
    -n 2 --prompt-by-prefix --json
python3 - "$T/out" <<'EOF' && pass || fail "--prompt-by-prefix: $(head -c 600 "$T/out")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["ok"] is True, d["ok"]
n_gen = len(d["prompts"][0]["generated"])
assert d["positions"] > n_gen, (d["positions"], n_gen)  # prompt positions compared too
EOF
# other weights, same vocabulary: diverged, already in the prompt
expect 1 "$R" check-engine "$T/other.gguf" --url "$URL" --api llama-server --tokens 1,300,301,302 \
    -n 8 --prompt-by-prefix --json
python3 - "$T/out" <<'EOF' && pass || fail "other weights: $(head -c 600 "$T/out")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["ok"] is False, d["ok"]
assert d["first_divergence"]["row"]["prompt"] is True, d["first_divergence"]
EOF
expect 2 "$R" check-engine "$T/m.gguf" --url "$URL" --api vllm --tokens 1,300 -n 4 \
    --prompt-by-prefix
contains "$T/err" "only with llama-server"

# a proxy in front of serve that drops the probabilities of the second generated token
cat >"$T/proxy.py" <<'PY'
import http.server, json, sys, urllib.error, urllib.request
UP = sys.argv[1]
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def go(self, body):
        rq = urllib.request.Request(UP + self.path, data=body, method=self.command)
        try:
            with urllib.request.urlopen(rq, timeout=60) as r:
                code, data = r.status, r.read()
        except urllib.error.HTTPError as e:
            code, data = e.code, e.read()
        if self.path == "/completion" and code == 200:
            d = json.loads(data)
            if len(d.get("completion_probabilities", [])) >= 3:
                del d["completion_probabilities"][1]
            data = json.dumps(d).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        self.go(None)
    def do_POST(self):
        self.go(self.rfile.read(int(self.headers.get("Content-Length", 0))))
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(f"http://127.0.0.1:{s.server_address[1]}", flush=True)
s.serve_forever()
PY
: >"$T/proxy.out" # the child opens it after the fork: never a missing file
python3 "$T/proxy.py" "$URL" >"$T/proxy.out" 2>"$T/proxy.err" &
PROXY=$!
trap 'kill $PID $PROXY 2>/dev/null; rm -rf "$T"' EXIT
P=
for _ in $(seq 200); do
    P=$(head -n 1 "$T/proxy.out")
    [ -n "$P" ] && break
    sleep 0.05
done
expect 0 "$R" check-engine "$T/m.gguf" --url "$P" --api llama-server --tokens 1,300 -n 4 --json
python3 - "$T/out" <<'EOF' && pass || fail "a token without probabilities: $(head -c 600 "$T/out")"
import json, sys
d = json.load(open(sys.argv[1]))
p = d["prompts"][0]
assert d["ok"] is True, d["ok"]
assert len(p["generated"]) == 4 and d["positions"] == 3, (p["generated"], d["positions"])
assert "without probabilities" in " ".join(p["notes"]), p["notes"]
EOF
finish
