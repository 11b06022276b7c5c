"""The table of real-engine runs in docs/check-engine.md: check-engine against vLLM's CPU build
(float32 and bfloat16, each architecture vLLM CPU serves) and llama-cpp-python's server, in
every API mode, with the verdict and max |dlogprob| of each run.

    GGUFKIT_BIN=... GGUFKIT_GEN=... GGUFKIT_VLLM_PYTHON=... GGUFKIT_LLAMA_PYTHON=... \\
    python3 tests/bench/bench_engine_modes.py [--archs a,b] [--dtypes float32,bfloat16]
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "engines"))
import engines  # noqa: E402

VLLM_MODES = [
    ("text", ["--prompt", "Once upon a time there was a little girl é 你"]),
    ("ids", ["--tokens", "1,259,261,300,301,302,310"]),
    ("chat", ["--chat", "Once upon a time"]),
    ("messages", ["--messages", "MESSAGES"]),
    ("prompts file", ["--prompts", "PROMPTS"]),
    ("--no-echo", ["--prompt", "Once upon a time", "--no-echo"]),
    ("--api openai", ["--prompt", "Once upon a time é 你", "--api", "openai"]),
    ("--top-k 20", ["--prompt", "Once upon a time", "--top-k", "20"]),
    ("HF folder as MODEL", ["HF", "--prompt", "Once upon a time"]),
]
LLAMA_MODES = [m for m in VLLM_MODES if m[0] in ("text", "--no-echo")]


def files(d):
    m = os.path.join(d, "messages.json")
    with open(m, "w") as f:
        json.dump([{"role": "system", "content": "You tell stories."},
                   {"role": "user", "content": "Once upon a time"}], f)
    p = os.path.join(d, "prompts.jsonl")
    with open(p, "w") as f:
        f.write('"Once upon a time"\n{"prompt": "the girl"}\n{"chat": "a little boy"}\n')
    return m, p


def row(engine, version, dtype, arch, mode, gguf, hf, url, args, tol):
    model = gguf
    if args and args[0] == "HF":
        model, args = hf, args[1:] + ["--vocab", gguf]
    rc, out, err = engines.check_engine(model, url, "-n", "8", "--tol", tol, *args)
    verdict = {0: "agree", 1: "DIVERGED"}.get(rc, f"exit {rc}")
    dl = f"{out['max_abs_dlogprob']:.1e}" if out else "-"
    med = f"{out['median_abs_dlogprob']:.1e}" if out else "-"
    note = "" if rc in (0, 1) else err.strip().splitlines()[-1][:120]
    print(f"| {engine} | {version} | {dtype} | {arch} | {mode} | {tol} | {verdict} | {dl} | "
          f"{med} | {note} |", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--archs", default="llama,qwen3,qwen3moe,glm4moe,deepseek2")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    a = ap.parse_args()
    print("| engine | version | dtype | architecture | API mode | --tol | verdict | "
          "max \\|dlogprob\\| | median | note |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for arch in a.archs.split(","):
        for dtype in a.dtypes.split(","):
            with tempfile.TemporaryDirectory() as d:
                gguf, hf = engines.make_model(arch, d)
                m, p = files(d)
                srv = engines.start_vllm(hf, d, dtype=dtype)
                try:
                    for name, args in VLLM_MODES:
                        args = [m if x == "MESSAGES" else p if x == "PROMPTS" else x
                                for x in args]
                        row("vLLM CPU", "0.32.0", dtype, arch, name, gguf, hf, srv.url, args,
                            "default" if dtype == "float32" else "bf16")
                finally:
                    srv.stop()
    if engines.LLAMA_PY:
        with tempfile.TemporaryDirectory() as d:
            gguf = engines.make_gguf("llama", d)
            m, p = files(d)
            srv = engines.start_llama_cpp(gguf, d)
            try:
                for name, args in LLAMA_MODES:
                    args = [p if x == "PROMPTS" else x for x in args]
                    row("llama-cpp-python", "0.3.36", "float32", "llama", name, gguf, None,
                        srv.url, args, "default")
            finally:
                srv.stop()


if __name__ == "__main__":
    main()
