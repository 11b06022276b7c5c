"""ref-forward serve against independent clients:

- the official `openai` Python client: completions with logprobs, echo, stop,
  batches, a stream, and its typed errors for our refusals;
- the requests lm-evaluation-harness's `local-completions` model sends for
  loglikelihood (token-id prompts, echo, logprobs 1, max_tokens 1, seed), scored
  the way its parse_logprobs does (sum of token_logprobs[ctxlen:-1], greedy when
  each equals the max of its top_logprobs);
- llama-server's /completion with n_probs.

Every log-probability is checked against the reference's own logits, written by
`ref-forward MODEL --tokens ... --logits out.npy` for the whole teacher-forced
sequence and turned into log-softmax by numpy in float64.
"""
import json
import os
import select
import signal
import subprocess
import urllib.error
import urllib.request

import numpy as np
import pytest

openai = pytest.importorskip("openai")

BIN = os.environ.get("GGUFKIT_BIN", "")
GEN = os.environ.get("GGUFKIT_GEN", "")
pytestmark = pytest.mark.skipif(not GEN or not os.path.exists(GEN),
                                reason="gguf-gen is not built (GGUFKIT_GEN)")
# Options before positional arguments, in POSIX order: every version of the
# tools' option loop parses that (92cbb06's loses positionals under GNU
# permutation; the fix in 824961f stops at the first positional under POSIX).
ENV = dict(os.environ, POSIXLY_CORRECT="1")
KEY = "k-test"
TOL = 1e-9


def ref_forward():
    return os.path.join(BIN, "ref-forward")


class Server:
    def __init__(self, model, *args):
        self.p = subprocess.Popen([ref_forward(), "serve", "--port", "0", *args, model],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=ENV)
        ready, _, _ = select.select([self.p.stdout], [], [], 30)
        line = self.p.stdout.readline() if ready else ""
        if not line.startswith("listening on "):
            self.p.kill()
            raise RuntimeError(f"serve did not start: {line!r} {self.p.stderr.read()}")
        self.url = line.split()[-1]

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        assert self.p.wait(timeout=30) == 0


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("serve") / "llama.gguf")
    subprocess.run([GEN, "model", "--arch", "llama", "--vocab", "300", "--type", "F32",
                    "--no-sync", "--force", "-q", path], check=True, env=ENV)
    return path


@pytest.fixture(scope="module")
def server(model):
    s = Server(model, "--served-model", "tiny", "--api-key", KEY)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=60)


def log_softmax(model, tokens, tmp_path):
    """Rows i = log p(. | tokens[:i+1]) from the reference's float32 logits."""
    out = str(tmp_path / f"logits-{len(tokens)}-{tokens[-1]}.npy")
    subprocess.run([ref_forward(), "--tokens", ",".join(map(str, tokens)), "--logits", out,
                    "-q", model], check=True, env=ENV, capture_output=True)
    x = np.load(out).astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def post(server, path, body):
    req = urllib.request.Request(server.url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json",
                                          "Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


def extra(obj, key):
    return (obj.model_extra or {}).get(key)


PROMPT = [1, 5, 9, 200, 33, 7]


def test_echo_logprobs_match_the_reference(client, model, tmp_path):
    r = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=6, logprobs=5,
                                  echo=True, temperature=0,
                                  extra_body={"return_token_ids": True,
                                              "return_tokens_as_token_ids": True})
    c = r.choices[0]
    gen = extra(c, "token_ids")
    assert len(gen) == r.usage.completion_tokens == 6
    seq = PROMPT + gen
    lp = log_softmax(model, seq, tmp_path)
    lps = c.logprobs
    assert len(lps.tokens) == len(lps.token_logprobs) == len(lps.top_logprobs) == len(seq)
    assert lps.token_logprobs[0] is None and lps.top_logprobs[0] is None
    for i in range(1, len(seq)):
        row = lp[i - 1]
        assert lps.tokens[i] == f"token_id:{seq[i]}"
        assert abs(lps.token_logprobs[i] - row[seq[i]]) < TOL, i
        top = {int(k.split(":")[1]): v for k, v in lps.top_logprobs[i].items()}
        want = list(np.argsort(-row, kind="stable")[:5])
        assert set(want) <= set(top) <= set(want) | {seq[i]}
        for t, v in top.items():
            assert abs(v - row[t]) < TOL
        if i >= len(PROMPT):  # generated: the argmax
            assert seq[i] == int(np.argmax(row))
    # text_offset adds up the token strings' lengths, from 0
    offs = lps.text_offset
    assert offs[0] == 0
    assert all(offs[i + 1] - offs[i] == len(lps.tokens[i]) for i in range(len(seq) - 1))


def test_lm_eval_loglikelihood(server, model, tmp_path):
    """lm-eval's local-completions loglikelihood, request and scoring as it does them."""
    ctx = [1, 17, 42, 99, 5]
    lp_ctx = log_softmax(model, ctx, tmp_path)
    greedy = [int(np.argmax(lp_ctx[-1]))]
    lp_g = log_softmax(model, ctx + greedy, tmp_path)
    greedy.append(int(np.argmax(lp_g[-1])))
    other = [(greedy[0] + 1) % 300, 3]
    pairs = [(ctx, greedy), (ctx, other), ([1, 250], [12, 13, 14])]
    payload = {"model": "tiny", "prompt": [c + k for c, k in pairs], "temperature": 0,
               "max_tokens": 1, "logprobs": 1, "seed": 1234, "echo": True}
    out = post(server, "/v1/completions", payload)
    choices = sorted(out["choices"], key=lambda ch: ch["index"])
    assert len(choices) == 3
    for (c, k), ch in zip(pairs, choices):
        ctxlen = len(c)
        toks = ch["logprobs"]["token_logprobs"][ctxlen:-1]
        tops = ch["logprobs"]["top_logprobs"][ctxlen:-1]
        got = sum(toks)
        is_greedy = all(t == max(top.values()) for t, top in zip(toks, tops))
        seq = c + k
        lp = log_softmax(model, seq, tmp_path)
        want = sum(lp[j - 1, seq[j]] for j in range(ctxlen, len(seq)))
        want_greedy = all(int(np.argmax(lp[j - 1])) == seq[j] for j in range(ctxlen, len(seq)))
        assert len(toks) == len(k)
        assert abs(got - want) < 1e-8, (got, want)
        assert is_greedy == want_greedy
    assert [c["index"] for c in choices] == [0, 1, 2]
    assert choices_greedy(choices[0], len(ctx)) and not choices_greedy(choices[1], len(ctx))


def choices_greedy(ch, ctxlen):
    toks = ch["logprobs"]["token_logprobs"][ctxlen:-1]
    tops = ch["logprobs"]["top_logprobs"][ctxlen:-1]
    return all(t == max(top.values()) for t, top in zip(toks, tops))


def test_batch_equals_single(client):
    prompts = [[1, 5, 9], [1, 250, 3, 4]]
    batch = client.completions.create(model="tiny", prompt=prompts, max_tokens=5, logprobs=2)
    for i, p in enumerate(prompts):
        one = client.completions.create(model="tiny", prompt=p, max_tokens=5, logprobs=2)
        b = batch.choices[i]
        assert b.index == i
        assert b.text == one.choices[0].text
        assert b.logprobs.token_logprobs == one.choices[0].logprobs.token_logprobs


def test_text_prompt_stop_and_stream(client, server):
    full = client.completions.create(model="tiny", prompt="hello world", max_tokens=16,
                                     extra_body={"return_token_ids": True})
    text = full.choices[0].text
    assert full.choices[0].finish_reason == "length"
    tok = post(server, "/tokenize", {"prompt": "hello world"})
    assert tok["tokens"] == extra(full.choices[0], "prompt_token_ids")
    # a stop string taken from the middle of the continuation
    stop = next((text[i:i + 2] for i in range(2, len(text) - 1)
                 if text[i:i + 2].strip() and text[i:i + 2] not in text[:i + 1]), None)
    assert stop, text
    cut = client.completions.create(model="tiny", prompt="hello world", max_tokens=16,
                                    stop=[stop])
    ch = cut.choices[0]
    assert ch.finish_reason == "stop"
    assert extra(ch, "stop_reason") == stop
    assert text.startswith(ch.text) and stop not in ch.text
    assert text[len(ch.text):].startswith(stop)
    chunks = list(client.completions.create(model="tiny", prompt="hello world", max_tokens=16,
                                            stream=True))
    assert "".join(c.choices[0].text for c in chunks) == text


def test_refusals_are_typed_errors(client, server):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="tiny", prompt=[1, 2], temperature=0.8)
    assert "greedily" in str(e.value)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="tiny", prompt=[1, 2], logprobs=21)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="tiny", prompt=[1, 2], top_p=0.5)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="gpt-4", prompt=[1, 2])
    bad = openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.completions.create(model="tiny", prompt=[1, 2])
    assert [m.id for m in client.models.list().data] == ["tiny"]


def test_llama_server_completion_n_probs(server, model, tmp_path):
    out = post(server, "/completion", {"prompt": PROMPT, "n_predict": 4, "n_probs": 3,
                                       "return_tokens": True})
    gen = out["tokens"]
    assert len(gen) == out["tokens_predicted"] == 4
    seq = PROMPT + gen
    lp = log_softmax(model, seq, tmp_path)
    for g, e in enumerate(out["completion_probabilities"]):
        row = lp[len(PROMPT) - 1 + g]
        assert e["id"] == gen[g] == int(np.argmax(row))
        assert abs(e["logprob"] - row[gen[g]]) < TOL
        assert [t["id"] for t in e["top_logprobs"]] == list(np.argsort(-row, kind="stable")[:3])
        for t in e["top_logprobs"]:
            assert abs(t["logprob"] - row[t["id"]]) < TOL


def test_health_needs_no_key(server):
    with urllib.request.urlopen(server.url + "/health", timeout=10) as r:
        assert json.load(r) == {"status": "ok"}
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(server.url + "/v1/models", timeout=10)
    assert e.value.code == 401
    assert json.load(e.value)["error"]["code"] == 401
