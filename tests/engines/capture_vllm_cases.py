"""Capture the vLLM cases of tests/data/engine (vllm_*.case, detect_vllm.case) from a real vLLM
(the CPU build of scripts/setup_engines.sh) serving a gguf-gen llama: the request body is the
one check-engine builds from the case's options (test_engine --request; a case without options
says what it sent instead), the reply is the server's, and the expected parse is read back
(test_engine --dump) - then checked by eye before committing, as these files become the unit
test's truth about vLLM's shapes. The reasoning case runs a second server with
--reasoning-parser deepseek_r1, whose HF tokenizer names two of the vocabulary's ids <think>
and </think> (the second one the model's second greedy token of the chat, so that the reply
has reasoning and content both).

    GGUFKIT_BIN=build/tools GGUFKIT_GEN=build/tools/gguf-gen \\
    GGUFKIT_VLLM_PYTHON=$(bash scripts/setup_engines.sh vllm | sed -n 's/^vllm=//p') \\
    python3 tests/engines/capture_vllm_cases.py build tests/data/engine
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import urllib.request

import engines

PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions",
         "tokenize": "/tokenize", "models": "/v1/models"}

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
    ("vllm_completions_echo", "completions",
     "vLLM 0.32.0 /v1/completions, token-id prompt, echo with logprobs=2, "
     "return_tokens_as_token_ids and return_token_ids (what check-engine sends with --api vllm "
     "--tokens): the first echoed position has null logprob and null top_logprobs; a "
     "top_logprobs dict holds the position's token plus the top K; with echo vLLM also fills "
     "prompt_logprobs (it defaults to logprobs): the parser keeps the echoed positions and "
     "ignores the duplicate",
     {"api": "vllm", "model": "tiny", "tokens": [1, 300, 301], "max_tokens": 2, "top_k": 2,
      "echo": True}),
    ("vllm_completions_text", "completions",
     "vLLM 0.32.0 /v1/completions asked as any OpenAI-compatible server: a text prompt, no "
     "echo, top_logprobs keyed by the tokens' text (the OpenAI legacy completions shape). Ids "
     "stay -1: check-engine resolves them from the vocabulary (gguf_engine_reply_resolve)",
     {"api": "openai", "model": "tiny", "text": "Onceuponatime", "max_tokens": 3, "top_k": 2,
      "echo": False}),
    ("vllm_prompt_logprobs", "completions",
     "vLLM 0.32.0 /v1/completions with prompt_logprobs and return_token_ids but without echo: "
     "the prompt's log-probabilities come only in choices[0].prompt_logprobs, one entry per "
     "prompt token, null first, each a {\"TOKEN_ID\": {logprob, rank, decoded_token}} dict that "
     "holds the prompt token itself. They become the leading prompt positions, their ids from "
     "prompt_token_ids. (check-engine asks no prompt_logprobs without echo: the body below is "
     "its --no-echo body with prompt_logprobs 1 added, so the case has no options)",
     {"body": {"model": "tiny", "prompt": "Once", "max_tokens": 1, "temperature": 0.0,
               "top_p": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "top_k": -1,
               "min_p": 0.0, "repetition_penalty": 1.0, "logprobs": 1, "prompt_logprobs": 1,
               "return_tokens_as_token_ids": True, "return_token_ids": True,
               "stream": False}}),
    ("vllm_tokenize", "tokenize",
     "vLLM 0.32.0 POST /tokenize with a text prompt (TokenizeCompletionRequest {model, prompt, "
     "add_special_tokens}; TokenizeResponse {count, max_model_len, tokens, token_strs}). "
     "SGLang's /tokenize takes and answers the same fields",
     {"api": "vllm", "model": "tiny", "text": "little girl", "add_special": True}),
    ("vllm_tokenize_chat", "tokenize",
     "vLLM 0.32.0 POST /tokenize with chat messages (TokenizeChatRequest {model, messages, "
     "add_generation_prompt}): the engine applies its own chat template, and the ids are the "
     "prompt check-engine teacher-forces for --chat",
     {"api": "vllm", "model": "tiny", "chat": "What is 2+2?"}),
    ("detect_vllm", "models",
     "vLLM 0.32.0 GET /v1/models: a ModelList whose cards say owned_by \"vllm\" (id, object, "
     "created, owned_by, root, parent, max_model_len, permission)", None),
]

REASONING_CASES = [
    ("vllm_chat_reasoning", "chat",
     "vLLM 0.32.0 /v1/chat/completions with a reasoning parser (--reasoning-parser "
     "deepseek_r1): the message carries reasoning (older vLLM: reasoning_content) beside "
     "content, and logprobs.content covers every generated token, reasoning and the </think> "
     "token included; with return_tokens_as_token_ids the tokens are \"token_id:N\", "
     "return_token_ids adds the top-level prompt_token_ids and choices[0].token_ids",
     {"api": "vllm", "model": "tiny", "chat": "Once upon a time", "max_tokens": 4, "top_k": 2}),
]

# the reasoning server's tokenizer: these ids are renamed <think> and </think>
THINK_IDS = (500, 281)


def rename_tokens(hf, renames):
    """Give vocabulary ids other strings in the HF tokenizer (merges that name the old ones
    dropped), so that vLLM's reasoning parser finds its tokens."""
    path = os.path.join(hf, "tokenizer.json")
    with open(path) as f:
        tj = json.load(f)
    vocab = tj["model"]["vocab"]
    by_id = {i: t for t, i in vocab.items()}
    old = set()
    for i, new in renames.items():
        old.add(by_id[i])
        del vocab[by_id[i]]
        vocab[new] = i
    merges = tj["model"]["merges"]
    def pair(m):
        return m.split(" ", 1) if isinstance(m, str) else m
    tj["model"]["merges"] = [m for m in merges
                             if not (set(pair(m)) & old or "".join(pair(m)) in old)]
    with open(path, "w") as f:
        json.dump(tj, f)


def capture(srv, test_engine, out_dir, cases):
    for name, ep, what, opts in cases:
        path = os.path.join(out_dir, name + ".case")
        head = "".join(f"# {line}\n" for line in textwrap.wrap(what + ".", 94))
        head += (f"# Captured from the real server by tests/engines/capture_vllm_cases.py "
                 f"(a gguf-gen llama, float32).\nendpoint {ep}\n")
        if opts is None:  # a probe
            with urllib.request.urlopen(srv.url + PATHS[ep], timeout=120) as r:
                reply = json.loads(r.read())
            for card in reply["data"]:
                card["created"] = 1796400000
                card["root"] = "/models/tiny"
                for perm in card.get("permission", []):
                    perm["id"], perm["created"] = "modelperm-captured", 1796400000
            with open(path, "w") as f:
                f.write(head + f"--- models\n{json.dumps(reply)}\n--- expect\n"
                        f"api vllm model {reply['data'][0]['id']}\n")
            print(path)
            continue
        if "body" in opts:
            body = json.dumps(opts["body"], separators=(",", ":"))
        else:
            head += f"--- options\n{json.dumps(opts)}\n"
            with open(path, "w") as f:
                f.write(head)
            body = subprocess.run([test_engine, "--request", path], check=True,
                                  capture_output=True, text=True).stdout.strip()
        rq = urllib.request.Request(srv.url + PATHS[ep], data=body.encode(),
                                    headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(rq, timeout=120) as r:
            reply = json.loads(r.read())
        # volatile fields: ids, clocks and fingerprints differ on every run
        fixed = {"id": "cmpl-captured", "created": 1796400000,
                 "system_fingerprint": "vllm-0.32.0-captured"}
        for k in fixed:
            if reply.get(k) is not None:
                reply[k] = fixed[k]
        with open(path, "w") as f:
            f.write(head + f"--- request\n{body}\n--- reply\n{json.dumps(reply)}\n")
        expect = subprocess.run([test_engine, "--dump", path], check=True,
                                capture_output=True, text=True).stdout
        with open(path, "a") as f:
            f.write("--- expect\n" + expect)
        print(path)


def main():
    build, out_dir = sys.argv[1], sys.argv[2]
    only = set(sys.argv[3:])  # case names; none: all
    test_engine = os.path.join(build, "tests", "test_engine")
    pick = lambda cases: [c for c in cases if not only or c[0] in only]
    with tempfile.TemporaryDirectory() as d:
        gguf, hf = engines.make_model("llama", d)
        if pick(CASES):
            srv = engines.start_vllm(hf, d)
            try:
                capture(srv, test_engine, out_dir, pick(CASES))
            finally:
                srv.stop()
        if pick(REASONING_CASES):
            rhf = os.path.join(d, "reasoning-hf")
            shutil.copytree(hf, rhf)
            rename_tokens(rhf, {THINK_IDS[0]: "<think>", THINK_IDS[1]: "</think>"})
            srv = engines.start_vllm(rhf, d, extra=("--reasoning-parser", "deepseek_r1"))
            try:
                capture(srv, test_engine, out_dir, pick(REASONING_CASES))
            finally:
                srv.stop()


if __name__ == "__main__":
    main()
