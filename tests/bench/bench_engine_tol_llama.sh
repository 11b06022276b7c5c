#!/usr/bin/env bash
# The distance between llama-server and the reference when nothing is wrong:
# llama.cpp computing the same GGUF with its defaults (F16 KV cache, flash
# attention where the backend has it), F32 KV cache, flash attention off, and a
# Q8_0 KV cache, measured through check-engine with every check off (the
# figures behind check-engine's default tolerances, docs/check-engine.md).
#
#   tests/bench/bench_engine_tol_llama.sh LLAMA_BIN BUILD_DIR MODEL.gguf [REFERENCE.gguf]
#
# LLAMA_BIN holds llama-server (a llama.cpp build); MODEL is served by it and
# is the reference too unless REFERENCE is given (e.g. MODEL a BF16 conversion
# of an F32 REFERENCE: the deployment's conversion error is in the figures).
# Text prompts: the engine tokenizes, check-engine teacher-forces its ids and
# reports whether ours agree.
set -euo pipefail
L=${1:?usage: bench_engine_tol_llama.sh LLAMA_BIN BUILD_DIR MODEL.gguf}
B=${2:?}
M=${3:?}
python3 - "$L/llama-server" "$B/tools/ref-forward" "$M" "${4:-$M}" <<'EOF'
import json, socket, subprocess, sys, time, urllib.request
import numpy as np
SERVER, R, M, REF = sys.argv[1:5]
PROMPTS = ["Once upon a time, there was a little girl named",
           "The cat sat on the mat and",
           "Tom and his dog went to the park. They saw",
           "One day, a big bird flew over the house and",
           "Lily wanted to play with her friend, but",
           "The sun was shining and the sky was blue. Ben said"]

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p

def start(*args):
    port = free_port()
    p = subprocess.Popen([SERVER, "-m", M, "--host", "127.0.0.1", "--port", str(port),
                          "--threads", "1", "-c", "512", "--no-webui", *args],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as r:
                if r.status == 200:
                    return p, url
        except Exception:
            time.sleep(0.2)
    p.kill()
    raise RuntimeError(f"llama-server {args} did not start")

print("| llama-server | max abs dlogprob | p99 | median | max KL (top-5 union) | top-1 | positions | tokenization |")
print("|---|---|---|---|---|---|---|---|")
for label, args in (("defaults (F16 KV cache, flash attention auto)", []),
                    ("F32 KV cache", ["-ctk", "f32", "-ctv", "f32"]),
                    ("F16 KV cache, -fa off", ["-fa", "off"]),
                    ("F32 KV cache, -fa off", ["-fa", "off", "-ctk", "f32", "-ctv", "f32"]),
                    ("Q8_0 KV cache (-fa on)", ["-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on"])):
    p, url = start(*args)
    dl, kl, agree, counted, tok = [], [], 0, 0, set()
    try:
        for text in PROMPTS:
            out = subprocess.run([R, "check-engine", REF, "--url", url, "--prompt", text, "-n", "24",
                                  "--top-k", "5", "--json", "--tol",
                                  "dlogprob=off,kl=off,top1=off,tie=0"],
                                 capture_output=True, text=True)
            if out.returncode not in (0, 1):
                raise RuntimeError(out.stderr)
            d = json.loads(out.stdout)
            tok.add(d["tokenization_match"])
            for r in d["prompts"][0]["positions"]:
                v = [x for x in (r["dlogprob"], r["dlogprob_top"]) if x is not None]
                if v:
                    dl.append(max(v))
                if r["kl"] is not None:
                    kl.append(r["kl"])
                counted += 1
                agree += r["top1_agree"]
    finally:
        p.terminate()
        p.wait()
    dl = np.array(dl)
    print(f"| {label} | {dl.max():.2e} | {np.percentile(dl, 99):.2e} | {np.median(dl):.2e} | "
          f"{max(kl):.2e} | {agree / counted:.3f} | {counted} | "
          f"{'agrees' if tok == {True} else tok} |")
    sys.stdout.flush()
EOF
