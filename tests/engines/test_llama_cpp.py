"""check-engine against llama-cpp-python's server (llama.cpp behind an OpenAI-compatible API
that writes tokens as text only, from the package index): the reference's own GGUF served by it
AGREES (ids from its /extras/tokenize, byte tokens written as "" left unresolved, never
guessed; its default repeat_penalty 1.1 makes its choices non-greedy: the distributions are
compared, not the choices); another model's weights served under the same vocabulary are
DIVERGED. Version 0.3.36 answers a token-id prompt with HTTP 500 (its request model), so only
text prompts are checked here.

Skips without GGUFKIT_LLAMA_PYTHON (scripts/setup_engines.sh; scripts/test.sh sets it).
"""
import json
import os

import pytest

import engines

if not engines.LLAMA_PY:
    pytest.skip("no llama-cpp-python: run scripts/setup_engines.sh and set GGUFKIT_LLAMA_PYTHON "
                "(scripts/test.sh does)", allow_module_level=True)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("llama_cpp"))
    gguf = engines.make_gguf("llama", d)
    srv = engines.start_llama_cpp(gguf, d)
    yield d, gguf, srv
    srv.stop()


MODES = [
    ("text", ["--prompt", "Once upon a time there was a little girl é 你"]),
    ("no-echo", ["--prompt", "Once upon a time", "--no-echo"]),
    ("prompts", ["--prompts", "PROMPTS"]),
]


def test_agree(served):
    d, gguf, srv = served
    pf = os.path.join(d, "prompts.jsonl")
    with open(pf, "w") as f:
        f.write('"the little girl"\n{"prompt": "One day a boy"}\n')
    failures = []
    for name, args in MODES:
        args = [pf if a == "PROMPTS" else a for a in args]
        rc, out, err = engines.check_engine(gguf, srv.url, "-n", "8", *args)
        if rc != 0:
            failures.append(f"{name}: exit {rc}: {err.strip()[-300:]} "
                            f"{json.dumps(out)[:500] if out else ''}")
        elif out["api"] != "openai":
            failures.append(f"{name}: detected {out['api']}")
    assert not failures, "\n".join(failures) + "\n" + srv.tail(1000)


def test_chat_without_prompt_ids_is_refused_not_guessed(served):
    d, gguf, srv = served
    rc, out, err = engines.check_engine(gguf, srv.url, "-n", "4", "--chat", "hello")
    assert rc == 2, err
    assert "no prompt ids" in err


def test_another_model_diverges(tmp_path):
    d = str(tmp_path)
    ref = engines.make_gguf("llama", d, seed=1)
    other = engines.make_gguf("llama", d, seed=7)  # same vocabulary, other weights
    srv = engines.start_llama_cpp(other, d)
    try:
        rc, out, err = engines.check_engine(ref, srv.url, "-n", "8", "--prompt",
                                            "Once upon a time there was a little girl")
    finally:
        srv.stop()
    assert rc == 1, err
    assert out["ok"] is False
