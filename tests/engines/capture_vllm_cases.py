"""Capture tests/data/engine/vllm_real_*.case from a real vLLM (the CPU build of
scripts/setup_engines.sh) serving a gguf-gen llama: the request body is the one check-engine
builds from the case's options (test_engine --request), the reply is the server's, and the
expected parse is read back (test_engine --dump) - then checked by eye before committing, as
these files become the unit test's truth about vLLM's shapes.

    GGUFKIT_BIN=build/tools GGUFKIT_GEN=build/tools/gguf-gen \\
    GGUFKIT_VLLM_PYTHON=$(bash scripts/setup_engines.sh vllm | sed -n 's/^vllm=//p') \\
    python3 tests/engines/capture_vllm_cases.py build tests/data/engine
"""
import json
import os
import subprocess
import sys
import tempfile
import urllib.request

import engines

PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions",
         "tokenize": "/tokenize"}

CASES = [
    ("vllm_real_completions_ids", "completions",
     "vLLM 0.32.0 /v1/completions, a token-id prompt with echo, prompt_logprobs, return_token_ids "
     "and return_tokens_as_token_ids: every position with its id",
     {"api": "vllm", "model": "tiny", "tokens": [1, 300, 301, 302], "max_tokens": 3, "top_k": 2,
      "echo": True}),
    ("vllm_real_chat", "chat",
     "vLLM 0.32.0 /v1/chat/completions with prompt_logprobs and return_token_ids: the templated "
     "prompt's ids at the top level, logprobs.content with token_id:N tokens",
     {"api": "vllm", "model": "tiny", "chat": "Once upon a time", "max_tokens": 3, "top_k": 2,
      "echo": True}),
    ("vllm_real_openai_text", "completions",
     "vLLM 0.32.0 /v1/completions asked as a plain OpenAI server (no ids): tokens that are part "
     "of a character are \"\", and top_logprobs is keyed by text, so tokens sharing a text keep "
     "one entry (the chosen token's own logprob may differ from its key's)",
     {"api": "openai", "model": "tiny", "text": "Once upon a time \u00e9 \u4f60", "max_tokens": 4,
      "top_k": 3, "echo": True}),
    ("vllm_real_tokenize", "tokenize",
     "vLLM 0.32.0 /tokenize of a text, BOS added (add_special_tokens)",
     {"api": "vllm", "model": "tiny", "text": "Once upon a time", "add_special": True}),
]


def main():
    build, out_dir = sys.argv[1], sys.argv[2]
    test_engine = os.path.join(build, "tests", "test_engine")
    with tempfile.TemporaryDirectory() as d:
        gguf, hf = engines.make_model("llama", d)
        srv = engines.start_vllm(hf, d)
        try:
            for name, ep, what, opts in CASES:
                path = os.path.join(out_dir, name + ".case")
                head = (f"# {what}.\n# Captured from the real server by "
                        f"tests/engines/capture_vllm_cases.py (a gguf-gen llama, float32).\n"
                        f"endpoint {ep}\n--- options\n{json.dumps(opts)}\n")
                with open(path, "w") as f:
                    f.write(head)
                body = subprocess.run([test_engine, "--request", path], check=True,
                                      capture_output=True, text=True).stdout.strip()
                rq = urllib.request.Request(srv.url + PATHS[ep], data=body.encode(),
                                            headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(rq, timeout=120) as r:
                    reply = json.loads(r.read())
                # volatile fields: ids and clocks differ on every run
                for k in ("id", "created"):
                    if k in reply:
                        reply[k] = {"id": "cmpl-captured", "created": 1796400000}[k]
                with open(path, "w") as f:
                    f.write(head + f"--- request\n{body}\n--- reply\n{json.dumps(reply)}\n")
                expect = subprocess.run([test_engine, "--dump", path], check=True,
                                        capture_output=True, text=True).stdout
                with open(path, "a") as f:
                    f.write("--- expect\n" + expect)
                print(path)
        finally:
            srv.stop()


if __name__ == "__main__":
    main()
