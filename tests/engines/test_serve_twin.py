"""ref-forward serve as vLLM's twin: the same requests sent to a real vLLM 0.32 (the CPU build,
float32, serving the HF checkpoint) and to `ref-forward serve` (serving the GGUF that
checkpoint was written from) must get replies of the same shape: the same keys, the same JSON
types, null where vLLM writes null, the same strings (token texts, generated text, finish
reasons) and numbers within 2e-6 (float32 log-probabilities; the HF checkpoint holds exactly the
GGUF's values). Only values that differ by nature are exempt (VOLATILE: ids, clocks, the model's
path, the context length, the version string), and their types are still compared. The
differences serve keeps on purpose are listed in docs/serve.md ("Where serve is not vLLM").

Run by hand, it writes both sides' replies to a folder (for looking at them):
    python3 tests/engines/test_serve_twin.py OUT_DIR

Skips without GGUFKIT_VLLM_PYTHON (scripts/setup_engines.sh; scripts/test.sh sets it).
"""
import json
import math
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

import engines

if __name__ != "__main__" and not engines.VLLM_PY:
    pytest.skip("no vLLM: run scripts/setup_engines.sh and set GGUFKIT_VLLM_PYTHON "
                "(scripts/test.sh does)", allow_module_level=True)

TOL = 2e-6
# greedy, and every sampling field neutral: vLLM takes an omitted one from the checkpoint's
# generation_config.json (repetition_penalty 1.05 there)
G = {"model": "tiny", "temperature": 0, "top_p": 1, "top_k": -1, "min_p": 0,
     "repetition_penalty": 1.0}

# (name, method, path, body): every shape of issue 25 part 4
REQUESTS = [
    # text prompt, partial-UTF-8 pieces ("" in tokens and as top_logprobs keys), null fields
    ("text_logprobs", "POST", "/v1/completions",
     dict(G, prompt="Once\u00e9\u4f60", max_tokens=4, logprobs=2)),
    ("text_echo", "POST", "/v1/completions",
     dict(G, prompt="girl\u00e9\u4f60boy", max_tokens=3, logprobs=1, echo=True)),
    # a token-id prompt echoed: its BOS piece and text_offset
    ("ids_echo", "POST", "/v1/completions",
     dict(G, prompt=[1, 300, 301, 302], max_tokens=3, logprobs=1, echo=True)),
    # return_token_ids with echo: the text is the generated text alone
    ("return_token_ids", "POST", "/v1/completions",
     dict(G, prompt=[1, 300, 301], max_tokens=3, echo=True, return_token_ids=True)),
    # prompt_logprobs: decoded_token is the real text
    ("prompt_logprobs", "POST", "/v1/completions",
     dict(G, prompt="Onceuponatime\u00e9", max_tokens=2, prompt_logprobs=2)),
    # max_tokens 0 with echo: completion_tokens
    ("max_tokens_0_echo", "POST", "/v1/completions",
     dict(G, prompt=[1, 300, 301, 302], max_tokens=0, echo=True, logprobs=1)),
    # what check-engine sends to vLLM
    ("check_engine_ids", "POST", "/v1/completions",
     dict(G, prompt=[1, 300, 301], max_tokens=2, logprobs=2, echo=True, prompt_logprobs=2,
          return_tokens_as_token_ids=True, return_token_ids=True)),
    ("batch", "POST", "/v1/completions",
     dict(G, prompt=[[1, 300], [1, 301, 302]], max_tokens=2, logprobs=1)),
    ("no_logprobs", "POST", "/v1/completions", dict(G, prompt="little girl", max_tokens=3)),
    # streams: one chunk per token
    ("stream", "POST", "/v1/completions",
     dict(G, prompt=[1, 300, 301], max_tokens=3, logprobs=1, stream=True)),
    ("stream_text", "POST", "/v1/completions",
     dict(G, prompt="big happy", max_tokens=3, stream=True)),
    ("stream_echo_usage", "POST", "/v1/completions",
     dict(G, prompt=[1, 300, 301], max_tokens=2, logprobs=1, echo=True, stream=True,
          stream_options={"include_usage": True})),
    ("stream_echo_0", "POST", "/v1/completions",
     dict(G, prompt=[1, 300, 301], max_tokens=0, logprobs=1, echo=True, stream=True)),
    ("models", "GET", "/v1/models", None),
    ("version", "GET", "/version", None),
    ("tokenize", "POST", "/tokenize",
     {"model": "tiny", "prompt": "Onceuponatime\u00e9", "return_token_strs": True}),
    ("tokenize_plain", "POST", "/tokenize",
     {"model": "tiny", "prompt": "little girl", "add_special_tokens": False}),
    ("tokenize_messages", "POST", "/tokenize",
     {"model": "tiny", "messages": [{"role": "user", "content": "Once"}]}),
    ("detokenize", "POST", "/detokenize", {"model": "tiny", "tokens": [1, 300, 301, 302]}),
    ("error_logprobs", "POST", "/v1/completions", dict(G, prompt="x", logprobs=21)),
]

# Values that differ by nature (compared by type only): path patterns over the reply. The
# text prompts above are ones that the checkpoint's HF tokenizer and the GGUF's tokenize alike.
VOLATILE = [r"^(\.(first|last|middle|usage_chunk))?\.(id|created)$", r"\.system_fingerprint$",
            r"^\.data\[\d+\]\.(root|owned_by|created)$",
            r"^\.data\[\d+\]\.permission\[\d+\]\.(id|created)$",
            r"max_model_len$", r"^\.version$", r"^\.error\.message$"]

# Keys serve writes beside vLLM's on purpose (docs/serve.md): llama-server's /detokenize field
EXTRA_KEYS = {"detokenize": {"content"}}

# Requests serve answers otherwise on purpose (docs/serve.md says why): name -> status serve gives
DIFFERENT = {"tokenize_messages": 400}


def ask(url, method, path, body):
    """(status, parsed reply): JSON, or for an event stream the list of its events (each
    parsed, "[DONE]" kept as the string)."""
    data = json.dumps(body).encode() if body is not None else None
    rq = urllib.request.Request(url + path, data=data, method=method,
                                headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(rq, timeout=300) as r:
            status, ctype, raw = r.status, r.headers.get("Content-Type", ""), r.read()
    except urllib.error.HTTPError as e:
        status, ctype, raw = e.code, e.headers.get("Content-Type", ""), e.read()
    text = raw.decode()
    if ctype.startswith("text/event-stream"):
        events = []
        for block in text.split("\n\n"):
            if not block.strip():
                continue
            assert block.startswith("data: "), f"{path}: not an SSE data line: {block!r}"
            payload = block[len("data: "):]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
        return status, {"stream": events}
    return status, json.loads(text)


def shape_diff(a, b, path=""):
    """Differences between vLLM's reply a and serve's reply b (list of strings)."""
    out = []
    volatile = any(re.search(p, path) for p in VOLATILE)
    if type(a) is not type(b):
        return [f"{path or '.'}: vLLM {type(a).__name__} {json.dumps(a)[:80]}, "
                f"serve {type(b).__name__} {json.dumps(b)[:80]}"]
    if isinstance(a, dict):
        if set(a) != set(b):
            out.append(f"{path or '.'}: keys only in vLLM {sorted(set(a) - set(b))}, "
                       f"only in serve {sorted(set(b) - set(a))}")
        for k in a:
            if k in b:
                out += shape_diff(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        if len(a) != len(b):
            out.append(f"{path}: vLLM {len(a)} entries, serve {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            out += shape_diff(x, y, f"{path}[{i}]")
    elif volatile:
        pass
    elif isinstance(a, float):
        if not (math.isclose(a, b, rel_tol=0, abs_tol=TOL)):
            out.append(f"{path}: vLLM {a!r}, serve {b!r} (|d| {abs(a - b):.3g})")
    elif a != b:
        out.append(f"{path}: vLLM {json.dumps(a)[:80]}, serve {json.dumps(b)[:80]}")
    return out


def merge_stream(events):
    """A stream's chunks joined into one choice per index: the texts and logprobs lists
    concatenated, the last finish_reason (vLLM joins the tokens of a slow reader's chunks, so
    its chunk count is not fixed; serve writes one per token)."""
    merged = {}
    for ev in events:
        if ev == "[DONE]" or not ev.get("choices"):
            continue
        for c in ev["choices"]:
            m = merged.setdefault(c["index"], {"text": "", "logprobs": None})
            m["text"] += c["text"]
            if c.get("logprobs"):
                lp = m["logprobs"] or {k: [] for k in c["logprobs"]}
                for k, v in c["logprobs"].items():
                    lp[k] = lp[k] + v
                m["logprobs"] = lp
            m["finish_reason"] = c["finish_reason"]
    return merged


def stream_diff(a, b, n_tokens):
    """vLLM's stream a against serve's b: each chunk's shape against the serve chunk of the
    same role (first, middle, last, usage, [DONE]), the joined content, one chunk per token."""
    out = []
    ea, eb = a["stream"], b["stream"]
    if eb[-1] != "[DONE]" or ea[-1] != "[DONE]":
        out.append("a stream does not end with [DONE]")
    ca = [e for e in ea if e != "[DONE]" and e.get("choices")]
    cb = [e for e in eb if e != "[DONE]" and e.get("choices")]
    ua = [e for e in ea if e != "[DONE]" and not e.get("choices")]
    ub = [e for e in eb if e != "[DONE]" and not e.get("choices")]
    if len(cb) != n_tokens:
        out.append(f"serve wrote {len(cb)} chunks for {n_tokens} tokens")
    if not ca or not cb:
        return out + ["no chunks"]
    for x, y, role in [(ca[0], cb[0], "first"), (ca[-1], cb[-1], "last")] + \
            [(ca[len(ca) // 2], cb[len(cb) // 2], "middle")] * (len(ca) > 2):
        shape = [d for d in shape_diff(strip_values(x), strip_values(y), f".{role}")]
        out += shape
    if len(ua) != len(ub):
        out.append(f"usage chunks: vLLM {len(ua)}, serve {len(ub)}")
    for x, y in zip(ua, ub):
        out += shape_diff(x, y, ".usage_chunk")
    out += shape_diff(merge_stream(ea), merge_stream(eb), ".joined")
    return out


def strip_values(ev):
    """A chunk with its choice's text and logprobs lists emptied: the shape only (which
    tokens share a chunk is vLLM's timing)."""
    ev = json.loads(json.dumps(ev))
    for c in ev.get("choices", []):
        c["text"] = ""
        if c.get("logprobs"):
            c["logprobs"] = {k: [] for k in c["logprobs"]}
        if c.get("token_ids") is not None:
            c["token_ids"] = []
    return ev


def max_float_diff(a, b):
    if isinstance(a, dict) and isinstance(b, dict):
        return max([max_float_diff(a[k], b[k]) for k in a if k in b] or [0.0])
    if isinstance(a, list) and isinstance(b, list):
        return max([max_float_diff(x, y) for x, y in zip(a, b)] or [0.0])
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b)
    return 0.0


def start_serve(gguf, folder):
    def start(port):
        argv = [engines.tool("ref-forward"), "serve", gguf, "--port", str(port),
                "--served-model", "tiny", "--request-timeout", "120"]
        return engines.Server(argv, dict(os.environ), f"http://127.0.0.1:{port}",
                              os.path.join(folder, "serve.log"), model="tiny", timeout=120)
    return engines.on_free_port(start)


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("twin"))
    gguf, hf = engines.make_model("llama", d)
    vllm = engines.start_vllm(hf, d)
    try:
        serve = start_serve(gguf, d)
    except Exception:
        vllm.stop()
        raise
    yield vllm, serve
    serve.stop()
    vllm.stop()


def test_same_shape_as_vllm(twins):
    vllm, serve = twins
    failures, worst = [], 0.0
    for name, method, path, body in REQUESTS:
        sa, a = ask(vllm.url, method, path, body)
        sb, b = ask(serve.url, method, path, body)
        if name in DIFFERENT:
            if sb != DIFFERENT[name]:
                failures.append(f"{name}: serve answered {sb}, not {DIFFERENT[name]}")
            continue
        diffs = [f"status: vLLM {sa}, serve {sb}"] if sa != sb else []
        if isinstance(a, dict) and isinstance(b, dict) and "stream" in a and "stream" in b:
            n_tokens = 1 if body.get("max_tokens") == 0 else body["max_tokens"]
            diffs += stream_diff(a, b, n_tokens)
            a, b = merge_stream(a["stream"]), merge_stream(b["stream"])
        else:
            for k in EXTRA_KEYS.get(name, ()):
                b.pop(k, None)
            diffs += shape_diff(a, b)
        worst = max(worst, max_float_diff(a, b))
        if diffs:
            failures.append(f"{name}:\n    " + "\n    ".join(diffs[:12]) +
                            f"\n    vLLM:  {json.dumps(a)[:600]}\n    serve: {json.dumps(b)[:600]}")
    print(f"max |d| over the numbers of every reply: {worst:.3g}")
    assert not failures, "\n".join(failures)


def test_shape_diff_catches_differences():
    """The comparison itself: each kind of difference is reported."""
    assert shape_diff({"a": 1}, {"a": 1}) == []
    assert shape_diff({"a": None}, {"a": 0})
    assert shape_diff({"a": 1}, {"a": 1, "b": None})
    assert shape_diff({"a": [1, 2]}, {"a": [1]})
    assert shape_diff({"a": -1.0}, {"a": -1.0 + 3e-6})
    assert shape_diff({"a": -1.0}, {"a": -1.0 + 1e-6}) == []
    assert shape_diff({"a": 1.0}, {"a": 1})
    assert shape_diff({"t": "x"}, {"t": "y"})
    assert shape_diff({"id": "a"}, {"id": "b"}) == []
    assert shape_diff({"id": "a"}, {"id": None})


if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    gguf, hf = engines.make_model("llama", out)
    which = sys.argv[2] if len(sys.argv) > 2 else "both"
    servers = []
    if which in ("both", "vllm"):
        servers.append(("vllm", engines.start_vllm(hf, out)))
    if which in ("both", "serve"):
        servers.append(("serve", start_serve(gguf, out)))
    try:
        for side, srv in servers:
            replies = {name: ask(srv.url, m, p, body) for name, m, p, body in REQUESTS}
            with open(os.path.join(out, f"{side}.json"), "w") as f:
                json.dump(replies, f, indent=1, ensure_ascii=False)
    finally:
        for _, srv in servers:
            srv.stop()
