#!/usr/bin/env bash
# ref-forward serve against misbehaving clients (serve_clients.py: raw sockets bound
# to several 127.0.0.N addresses, which the server sees as different clients):
# slowloris clients held to --max-per-client connections per address and cut off at
# --request-timeout, a client that goes away has its request cancelled, ambiguous
# framing (Content-Length headers that differ) gets 400 and a closed connection.
# Every wait is bounded; the whole test takes about 15 s.
source "$(dirname "$0")/lib.sh"
R=$GGUFKIT_BIN/ref-forward
CLIENTS="$(dirname "$0")/serve_clients.py"
command -v curl >/dev/null || skip "curl is not installed"
[ -x "$GEN" ] || skip "gguf-gen is not built"
python3 -c 'import socket; socket.socket().bind(("127.0.0.2", 0))' 2>/dev/null ||
    skip "cannot bind 127.0.0.2: the loopback network is not 127.0.0.0/8 here"
export POSIXLY_CORRECT=1 # options before positionals, as test_serve.sh says why
"$GEN" model --arch llama --vocab 300 --no-sync --force -q "$T/llama.gguf" || fail "gguf-gen llama"
# a long context: 8000 greedy tokens take 30 s here, so a request abandoned after
# 0.5 s is far from done when the server notices
"$GEN" model --arch llama --vocab 300 --ctx 8192 --no-sync --force -q "$T/long.gguf" ||
    fail "gguf-gen long"



# stop: SIGTERM; the server exits 0 after saying so.
stop() {
    local rc=0
    kill -TERM "$PID" 2>/dev/null || true
    wait "$PID" || rc=$?
    PID=
    if [ "$rc" -eq 0 ] && grep -q "SIGTERM: shutting down" "$T/srv.err"; then pass; else
        fail "serve exited $rc on SIGTERM: $(tail -c 300 "$T/srv.err")"
    fi
}

# clients SCENARIO ARGS...: one scenario of serve_clients.py against the server.
clients() {
    local rc=0
    python3 "$CLIENTS" "$1" "$PORT" "${@:2}" >"$T/clients.out" 2>&1 || rc=$?
    sed 's/^/    /' "$T/clients.out"
    if [ "$rc" -eq 0 ]; then pass; else fail "serve_clients.py $1: exit $rc (its lines above)"; fi
}

# ---- slowloris from one address: held to the per-client limit; others get in ----
# the defaults: --max-per-client is 16, or --queue + 1 when larger (17 here)
serve_start "$T/llama.gguf" || { finish; exit 1; }
clients crowd --count 200 --slow-from 127.0.0.2 --want-open 17
# ---- Content-Length headers that differ, or beside Transfer-Encoding ----
clients framing
stop

# ---- a client that goes away: its request stops, the next one runs at once ----
serve_start "$T/long.gguf" --max-tokens 8192 || { finish; exit 1; }
clients gone '{"prompt": [1, 2, 3], "max_tokens": 8000, "ignore_eos": true}'
for _ in $(seq 100); do
    grep -q "the client went away" "$T/srv.err" && break
    sleep 0.1
done
contains "$T/srv.err" "127.0.0.1: POST /v1/completions: the client went away: request cancelled"
# were the abandoned request still running, this would wait ~30 s for its turn
got=$(curl -s --max-time 10 -o "$T/body" -w '%{http_code}' "$URL/v1/completions" \
      --data-binary '{"prompt": [1, 2, 3], "max_tokens": 1}') || got="curl exit $?"
[ "$got" = 200 ] && pass || fail "the request after the abandoned one: $got"
# the same for a stream (a chunk per token): abandoned, it stops too
n=$(grep -c "the client went away" "$T/srv.err")
clients gone '{"prompt": [1, 2, 3], "max_tokens": 8000, "ignore_eos": true, "stream": true}'
for _ in $(seq 100); do
    [ "$(grep -c "the client went away" "$T/srv.err")" -gt "$n" ] && break
    sleep 0.1
done
[ "$(grep -c "the client went away" "$T/srv.err")" -gt "$n" ] && pass ||
    fail "an abandoned stream was not cancelled: $(tail -n 3 "$T/srv.err")"
got=$(curl -s --max-time 10 -o "$T/body" -w '%{http_code}' "$URL/v1/completions" \
      --data-binary '{"prompt": [1, 2, 3], "max_tokens": 1, "stream": true}') || got="curl exit $?"
[ "$got" = 200 ] && pass || fail "the request after the abandoned stream: $got"
# a stream read slowly (a few bytes at a time): whole, and nobody else waits on it
clients slowread '{"prompt": [1, 2, 3], "max_tokens": 300, "ignore_eos": true, "logprobs": 5, "stream": true}' \
    --chunks 300
stop

# ---- --max-per-client ----
serve_start "$T/llama.gguf" --max-per-client 3 || { finish; exit 1; }
clients crowd --count 20 --slow-from 127.0.0.3 --want-open 3
stop

# ---- the deadline for a whole request: a slow header, a slow body ----
serve_start "$T/llama.gguf" --request-timeout 2 -v || { finish; exit 1; }
clients late --deadline 2
stop
contains "$T/srv.err" "127.0.0.3: no whole request within 2 s (--request-timeout): connection closed"
# every slot held by slow clients of 12 addresses: the deadline frees them
serve_start "$T/llama.gguf" --request-timeout 2 --max-per-client 8 || { finish; exit 1; }
clients full --deadline 2 --addresses 12 --per 8
stop

# ---- bad usage ----
expect 2 "$R" serve --request-timeout soon "$T/llama.gguf"
contains "$T/err" "--request-timeout: 'soon' is not a number of seconds"
expect 2 "$R" serve --max-per-client -1 "$T/llama.gguf"
contains "$T/err" "--max-per-client"
finish
