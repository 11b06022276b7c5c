#!/usr/bin/env bash
# ref-forward check-engine against a real `ref-forward serve` on a free loopback
# port (no mock of our own), on generated models of every architecture:
#  - clean models agree (exit 0, verdict agree), through the vLLM dialect (what
#    serve is detected as), llama-server's /completion and the JSON, HTML and
#    --prompts outputs; a clean virtual-TP plan agrees too;
#  - faulty plans (serve --tp N --inject FAULT) diverge (exit 1) at the right
#    position: the first position compared (sequence index 1) for faults in
#    the weights, the second for faults on the key side (RoPE, MLA's attn_k_b):
#    with one token the attention weight is 1 whatever the keys, so the first
#    row of logits is still right;
#  - a closed port is exit 3; a server that answers garbage (or, as SGLang before
#    0.5.13, a chat reply without prompt ids) is exit 2 naming the
#    field, HTTP 5xx and timeouts are exit 3, a refusal (4xx) exit 2 with the
#    server's message (a tiny python http.server, for these cases only);
#  - a text prompt on the SentencePiece model of ../shared/testdata (when there)
#    checks the tokenization too.
source "$(dirname "$0")/lib.sh"
R=$GGUFKIT_BIN/ref-forward
[ -x "$GEN" ] || skip "gguf-gen is not built"
command -v python3 >/dev/null || skip "python3 is not installed"
export GEN_ARCHS=$(gen_archs)
for a in $GEN_ARCHS; do
    "$GEN" model --arch "$a" --kv-heads 2 --vocab 500 --type Q4_K --no-sync --force -q \
        "$T/$a.gguf" || fail "gguf-gen $a"
done

python3 - "$R" "$T" "${SHARED:-}" <<'EOF' && pass || fail "check-engine end to end (details above)"
import http.server, json, os, select, socket, subprocess, sys, tempfile, threading, time
R, T, SHARED = sys.argv[1], sys.argv[2], sys.argv[3]
TOK = "1,17,42,99,123,7,250,31"
ARCHS = os.environ["GEN_ARCHS"].split()
bad = []

class Serve:
    """ref-forward serve on a free port (--port 0 prints the URL)."""
    def __init__(self, model, *args):
        # stderr to a file: a pipe nobody reads could fill and stall the server
        self.err = tempfile.TemporaryFile("w+")
        self.p = subprocess.Popen([R, "serve", model, "--port", "0", *args],
                                  stdout=subprocess.PIPE, stderr=self.err, text=True)
        ready = select.select([self.p.stdout], [], [], 120)[0]
        line = self.p.stdout.readline() if ready else ""
        if "listening on" not in line:
            self.p.kill()
            self.p.wait()
            self.err.seek(0)
            raise RuntimeError(f"serve {model} {args}: {line!r} {self.err.read()[:600]}")
        self.url = line.split()[-1]
    def __enter__(self):
        return self
    def __exit__(self, *a):
        self.p.terminate()
        self.p.wait(timeout=30)
        self.err.close()

def check(model, url, *args):
    p = subprocess.run([R, "check-engine", model, "--url", url, *args],
                       capture_output=True, text=True, timeout=600)
    d = None
    if "--json" in args and p.returncode in (0, 1):
        d = json.loads(p.stdout)
    return p.returncode, d, p.stdout, p.stderr

# 1. clean models of every architecture agree, with the default tolerances
for arch in ARCHS:
    m = f"{T}/{arch}.gguf"
    with Serve(m) as s:
        rc, d, out, err = check(m, s.url, "--tokens", TOK, "-n", "6", "--json")
        if rc != 0 or d["ok"] is not True or d["api"] != "vllm":
            bad.append(f"{arch}: exit {rc} {d and d['ok']} {err.strip()}")
            continue
        pr = d["prompts"][0]
        # the engine's own tokens are teacher-forced: 7 echoed prompt positions + 6 generated
        if len(pr["positions"]) != 13 or pr["prompt_tokens"] != [int(x) for x in TOK.split(",")]:
            bad.append(f"{arch}: {len(pr['positions'])} positions, prompt {pr['prompt_tokens']}")
        if d["max_abs_dlogprob"] > 1e-4 or d["top1_agreement"] != 1:
            bad.append(f"{arch}: max |dlogprob| {d['max_abs_dlogprob']}")
        for key in ("tool", "version", "ok", "first_divergence", "top1_agreement", "kl_topk_mean",
                    "max_abs_dlogprob", "tokenization_match"):
            if key not in d:
                bad.append(f"{arch}: JSON lacks {key}")
        if d["tokenization_match"] is not None:
            bad.append(f"{arch}: token ids need no tokenization check")
        if arch == "llama":
            # llama-server's native dialect against the same server: /completion, no echo
            rc, d2, out, err = check(m, s.url, "--api", "llama-server", "--tokens", TOK,
                                     "-n", "4", "--json")
            if rc != 0 or len(d2["prompts"][0]["positions"]) != 4 or \
                    d2["prompts"][0]["positions"][0]["seq"] != 8:
                bad.append(f"llama-server dialect: exit {rc} {err.strip()}")
            # text table, HTML, two prompts from a JSONL file
            with open(f"{T}/p.jsonl", "w") as f:
                f.write('{"tokens": [1, 2, 3]}\n{"tokens": [5, 6, 7, 8]}\n')
            rc, _, out, err = check(m, s.url, "--prompts", f"{T}/p.jsonl", "-n", "3",
                                    "--html", f"{T}/r.html")
            html = open(f"{T}/r.html").read() if os.path.exists(f"{T}/r.html") else ""
            if rc != 0 or "== prompt 1" not in out or "result: AGREE (2 prompts)" not in out \
                    or "<svg" not in html or "AGREE" not in html:
                bad.append(f"--prompts/--html: exit {rc} {err.strip()} {out[-300:]}")
            # -q: the result line alone; -v: every position in the table
            rc, _, out, err = check(m, s.url, "--tokens", TOK, "-n", "3", "-q")
            if rc != 0 or out.count("\n") != 1 or not out.startswith("result: AGREE"):
                bad.append(f"-q: exit {rc} {out!r}")
            rc, _, out, err = check(m, s.url, "--tokens", TOK, "-n", "3", "-v")
            kinds = [l.split()[2] for l in out.splitlines()
                     if len(l.split()) > 3 and l.split()[2] in ("in", "gen")]
            if rc != 0 or kinds.count("gen") != 3 or kinds.count("in") < 5:
                bad.append(f"-v: exit {rc}: rows {kinds}")
            # a line that is a plain JSON string is a text prompt (--help says so)
            with open(f"{T}/p.jsonl", "w") as f:
                f.write('"Once upon a time"\n{"tokens": [1, 2, 3]}\n')
            rc, _, out, err = check(m, s.url, "--prompts", f"{T}/p.jsonl", "-n", "2", "-q")
            if rc != 0:
                bad.append(f"--prompts with a plain string: exit {rc} {err.strip()}")
            with open(f"{T}/p.jsonl", "w") as f:
                f.write('{"tokens": [1, 2, 3], "prompt": "x"}\n')
            rc, _, out, err = check(m, s.url, "--prompts", f"{T}/p.jsonl")
            if rc != 2 or "line 1" not in err:
                bad.append(f"--prompts with two fields: exit {rc} {err.strip()}")

# 2. a clean virtual-TP plan agrees (f32 ranks: rounding only, even under strict)
for arch, tp in (("llama", 2), ("deepseek2", 2), ("qwen3moe", 4)):
    m = f"{T}/{arch}.gguf"
    with Serve(m, "--tp", str(tp)) as s:
        rc, d, out, err = check(m, s.url, "--tokens", TOK, "-n", "4", "--json", "--tol", "strict")
        if rc != 0:
            bad.append(f"clean tp {tp} {arch}: exit {rc} {d and d['first_divergence']} {err.strip()}")

# a check turned off is null in --json (the contract) and "off" in the text
m = f"{T}/llama.gguf"
with Serve(m) as s:
    rc, d, out, err = check(m, s.url, "--tokens", TOK, "-n", "2", "--json", "--tol",
                            "dlogprob=off,kl=0.001")
    if rc != 0 or d["tolerances"] != {"dlogprob": None, "kl": 0.001, "top1": 0.9, "tie": 0.02,
                                          "outliers": 0.2, "median": 0.01}:
        bad.append(f"--tol dlogprob=off --json: exit {rc} {d and d['tolerances']} {err.strip()}")
    rc, _, out, err = check(m, s.url, "--tokens", TOK, "-n", "2", "--tol", "strict,tie=off")
    if rc != 0 or "tolerances: dlogprob 0.001, kl 1e-05, top1 1, tie off, outliers off, median off\n" not in out:
        bad.append(f"--tol tie=off text: exit {rc} {out[-200:]!r} {err.strip()}")

# 3. faulty plans diverge at the right sequence index
FAULTS = [("deepseek2", "kv-b-rows@1", 1, "default", []),
          ("deepseek2", "k-b-no-transpose", 2, "strict", []),
          ("llama", "qkv-stream", 1, "strict", []),
          ("llama", "gate-up-stream", 1, "strict", []),
          ("llama", "no-allreduce", 1, "default", []),
          ("qwen3moe", "expert-offset", 1, "strict", ["--ep", "2"]),
          ("llama", "rope-pairs", 2, "strict", []),
          ("glm-dsa", "kv-b-whole", 1, "default", [])]
for arch, fault, seq, tol, extra in FAULTS:
    m = f"{T}/{arch}.gguf"
    with Serve(m, "--tp", "2", *extra, "--inject", fault) as s:
        rc, d, out, err = check(m, s.url, "--tokens", TOK, "-n", "4", "--json", "--tol", tol)
        fd = d and d["first_divergence"]
        if rc != 1 or d["ok"] is not False or fd["row"]["seq"] != seq:
            bad.append(f"{arch} --inject {fault}: exit {rc} first divergence "
                       f"{fd and fd['row']['seq']} (want sequence index {seq}) {err.strip()}")
        # the row shows both sides' best tokens
        elif not fd["row"]["engine_top"] or len(fd["row"]["reference_top"]) != 5:
            bad.append(f"{arch} --inject {fault}: tops missing in {fd['row']}")
        if fault == "kv-b-rows@1":
            rc, _, out, err = check(m, s.url, "--tokens", TOK, "-n", "4")
            if rc != 1 or "verdict:   DIVERGED at prompt position 1 (sequence index 1)" not in out \
                    or "first divergent generated position: 0 (sequence index 8)" not in out:
                bad.append(f"text verdict: {out[:600]}")
            # the incident's view: generated positions only, flagged at the first one
            rc, d, out, err = check(m, s.url, "--tokens", TOK, "-n", "4", "--no-echo", "--json")
            pr = d and d["prompts"][0]
            if rc != 1 or len(pr["positions"]) != 4 or pr["first_divergence_generated"] != 0 or \
                    d["first_divergence"]["generated_position"] != 0:
                bad.append(f"--no-echo: exit {rc} {pr and pr['first_divergence']} {err.strip()}")

# 4. closed port: exit 3 naming the URL (the port stays bound, never listening,
# so no other test's server can take it meanwhile)
sock = socket.socket()
sock.bind(("127.0.0.1", 0))
port = sock.getsockname()[1]
m = f"{T}/llama.gguf"
rc, _, out, err = check(m, f"http://127.0.0.1:{port}", "--tokens", TOK)
sock.close()
if rc != 3 or f"127.0.0.1:{port}" not in err or "unreachable" not in err:
    bad.append(f"closed port: exit {rc} {err.strip()}")

# 5. a server that answers garbage (this one case only is a python server)
MODELS = json.dumps({"object": "list", "data": [{"id": "m", "owned_by": "vllm"}]}).encode()
class Garbage(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def answer(self, code, body):
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        if self.path.endswith("/v1/models"):
            self.answer(200, MODELS)
        else:
            self.answer(404, b'{"detail": "Not Found"}')
    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        self.rfile.read(n)
        mode = self.path.split("/")[1]
        if mode == "garbage":
            self.answer(200, b'{"choices": [{"text": "x", "logprobs": {"tokens": ["a", "b"], '
                             b'"token_logprobs": [-1.0, "oops"]}}]}')
        elif mode == "html":
            self.answer(200, b"<html>hello</html>")
        elif mode == "nologprobs":
            self.answer(200, b'{"choices": [{"text": "x", "logprobs": null}]}')
        elif mode == "e500":
            self.answer(500, b'{"error": {"message": "CUDA error: an illegal memory access"}}')
        elif mode == "e400":
            self.answer(400, b'{"error": {"message": "logprobs must be at most 5"}}')
        elif mode == "oldchat":
            # SGLang before 0.5.13: a chat reply without prompt_token_ids
            self.answer(200, json.dumps({"model": "m", "choices": [{
                "index": 0, "finish_reason": "length",
                "message": {"role": "assistant", "content": "x"},
                "logprobs": {"content": [{"token": "x", "logprob": -0.5,
                                          "top_logprobs": []}]}}]}).encode())
        elif mode == "sglchat":
            # SGLang 0.5.13's chat reply with return_prompt_token_ids and
            # return_meta_info (serving_chat.py _build_chat_response)
            self.answer(200, json.dumps({"model": "m", "choices": [{
                "index": 0, "finish_reason": "length",
                "message": {"role": "assistant", "content": "x"},
                "prompt_token_ids": [1, 17, 42],
                "meta_info": {"finish_reason": {"type": "length"},
                              "output_token_logprobs": [[-0.5, 99, "x"], [-0.25, 7, "y"]],
                              "output_top_logprobs": [[[-0.5, 99, "x"]], [[-0.25, 7, "y"]]]}
            }]}).encode())
        elif mode == "slow":
            time.sleep(30)
            self.answer(200, b"{}")
        elif mode == "mismatch":
            # vLLM reporting other prompt ids than the ones sent: another prompt answered
            ids = [int(x) for x in TOK.split(",")]
            ids[3] += 1
            self.answer(200, json.dumps({"model": "m", "choices": [{
                "text": "x", "finish_reason": "length", "prompt_token_ids": ids,
                "logprobs": {"tokens": ["token_id:5"], "token_logprobs": [-1.0],
                             "top_logprobs": [{"token_id:5": -1.0}]}}],
                "usage": {"prompt_tokens": len(ids), "completion_tokens": 1}}).encode())
        elif mode == "nousage":
            # an OpenAI echo without usage: prompt and generated cannot be told apart
            self.answer(200, json.dumps({"model": "m", "choices": [{
                "text": "x", "finish_reason": "length",
                "logprobs": {"tokens": ["token_id:1", "token_id:5", "token_id:7"],
                             "token_logprobs": [None, -1.0, -1.0],
                             "top_logprobs": [None, {"token_id:5": -1.0},
                                              {"token_id:7": -1.0}]}}]}).encode())
        elif mode == "emptytok":
            if self.path.endswith("/tokenize"):
                self.answer(200, b'{"tokens": []}')
            else:
                self.answer(200, json.dumps({"model": "m", "choices": [{
                    "text": "x", "finish_reason": "length",
                    "logprobs": {"tokens": ["token_id:5"], "token_logprobs": [-1.0],
                                 "top_logprobs": [{"token_id:5": -1.0}]}}],
                    "usage": {"completion_tokens": 1}}).encode())
        elif mode == "bigprompt":
            # an engine claiming 5000 prompt ids: over --max-positions, no reference run
            self.answer(200, json.dumps({"model": "m", "choices": [{
                "text": "x", "finish_reason": "length", "prompt_token_ids": [1] * 5000,
                "logprobs": {"tokens": ["token_id:5"], "token_logprobs": [-1.0],
                             "top_logprobs": [{"token_id:5": -1.0}]}}],
                "usage": {"completion_tokens": 1}}).encode())
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Garbage)
threading.Thread(target=srv.serve_forever, daemon=True).start()
base = f"http://127.0.0.1:{srv.server_address[1]}"
for mode, want_rc, want_err in (
        ("garbage", 2, "choices[0].logprobs.token_logprobs[1]: expected a number or null, got a string"),
        ("html", 2, "reply: not JSON"),
        ("nologprobs", 2, "no log-probabilities"),
        ("e500", 3, "HTTP 500: CUDA error: an illegal memory access"),
        ("e400", 2, "HTTP 400: logprobs must be at most 5"),
        ("slow", 3, "timed out")):
    # a generous timeout except where it is the point: the python server may
    # be slow to answer on a loaded machine
    rc, _, out, err = check(m, f"{base}/{mode}", "--tokens", TOK,
                            "--timeout", "2" if mode == "slow" else "30")
    if rc != want_rc or want_err not in err or f"{base}/{mode}" not in err:
        bad.append(f"{mode}: exit {rc} (want {want_rc}): {err.strip()}")
# wrong verdicts closed: another prompt answered is DIVERGED; a missing usage, an empty
# /tokenize and a sequence over --max-positions are exit 2, never a verdict
rc, d, out, err = check(m, f"{base}/mismatch", "--tokens", TOK, "--json")
if rc != 1 or d["ok"] is not False or d["prompts"][0]["prompt_mismatch"] != \
        {"index": 3, "sent": 99, "engine": 100}:
    bad.append(f"prompt ids that differ: exit {rc}: {err.strip()} {d and d['prompts'][0]}")
for mode, args, want in (
        ("nousage", ["--api", "openai", "--tokens", TOK], "usage.completion_tokens: missing"),
        ("emptytok", ["--prompt", "hello"], "tokens: empty"),
        ("bigprompt", ["--prompt", "hello", "--max-positions", "100"], "over the limit of 100")):
    rc, _, out, err = check(m, f"{base}/{mode}", *args)
    if rc != 2 or want not in err:
        bad.append(f"{mode}: exit {rc} (want 2, '{want}'): {err.strip()}")
# --deadline ends the whole run (exit 3) however long each request may take
rc, _, out, err = check(m, f"{base}/slow", "--tokens", TOK, "--timeout", "60", "--deadline", "2")
if rc != 3 or "--deadline passed" not in err:
    bad.append(f"--deadline: exit {rc}: {err.strip()}")
rc, _, out, err = check(m, f"{base}/oldchat", "--api", "sglang", "--chat", "Hi")
if rc != 2 or "no prompt_token_ids" not in err or "SGLang before 0.5.13" not in err:
    bad.append(f"SGLang chat without prompt ids: exit {rc}: {err.strip()}")
rc, d, out, err = check(m, f"{base}/sglchat", "--api", "sglang", "--chat", "Hi", "--json")
if rc not in (0, 1) or d["prompts"][0]["prompt_ids_from"] != "reply" or \
        d["prompts"][0]["prompt_tokens"] != [1, 17, 42] or len(d["prompts"][0]["positions"]) != 2:
    bad.append(f"SGLang chat with prompt ids: exit {rc}: {err.strip()} {d and d['prompts'][0]}")
srv.shutdown()

# 6. usage errors
for args, want in ((["--tokens", TOK], "--url"),
                   (["--url", base, "--tokens", TOK, "--prompt", "x"], "exactly one"),
                   (["--url", base, "--tokens", "1,x"], "--tokens"),
                   (["--url", base, "--tokens", TOK, "--tol", "kl=-1"], "kl"),
                   (["--url", base, "--tokens", TOK, "--api", "tgi"], "--api")):
    p = subprocess.run([R, "check-engine", m, *args], capture_output=True, text=True)
    if p.returncode != 2 or want not in p.stderr:
        bad.append(f"usage {args}: exit {p.returncode} {p.stderr.strip()}")

# 7. a text prompt on a SentencePiece model: the engine's tokenization and ours
spm = os.path.join(SHARED, "models", "stories260K.gguf") if SHARED else ""
if spm and os.path.exists(spm):
    with Serve(spm) as s:
        rc, d, out, err = check(spm, s.url, "--prompt", "Once upon a time, there was", "-n", "8",
                                "--json")
        if rc != 0 or d["tokenization_match"] is not True or \
                d["prompts"][0]["prompt_ids_from"] != "reply":
            bad.append(f"stories260K text prompt: exit {rc} {d and d['tokenization_match']} "
                       f"{err.strip()}")
else:
    print("note: ../shared/testdata/models/stories260K.gguf absent: text prompts not checked")

for b in bad:
    print("FAIL:", b, file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
finish
