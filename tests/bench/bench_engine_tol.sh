#!/usr/bin/env bash
# The figures behind check-engine's default tolerances (docs/check-engine.md):
# how far an engine's log-probabilities are from the reference when nothing is
# wrong (f64 instead of f32, virtual tensor-parallel ranks, the same model) and
# when something is (another model, faults of the catalog), measured through
# check-engine itself against `ref-forward serve` with every check off.
#
#   tests/bench/bench_engine_tol.sh BUILD_DIR [MODEL.gguf ...]
#
# Without models it makes gguf-gen ones (llama, deepseek2, vocab 500); a real
# trained model (../shared/testdata/models/stories260K.gguf) is added when
# present. Prints one markdown row per case: max |dlogprob| over the chosen
# tokens and every reported alternative, its 99th percentile over positions,
# max per-position KL over the top-k union, top-1 agreement.
# Other engines (llama-server's F16 KV cache) are measured by
# bench_engine_tol_llama.sh.
set -euo pipefail
B=${1:?usage: bench_engine_tol.sh BUILD_DIR [MODEL.gguf ...]}
shift
R=$B/tools/ref-forward
GEN=$B/tools/gguf-gen
here=$(cd "$(dirname "$0")/../.." && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
    for a in llama deepseek2; do
        "$GEN" model --arch "$a" --kv-heads 2 --vocab 500 --no-sync -q "$T/$a.gguf"
        "$GEN" model --arch "$a" --kv-heads 2 --vocab 500 --seed 2 --no-sync -q "$T/$a-other.gguf"
        models+=("$T/$a.gguf")
    done
    s=$here/../shared/testdata/models/stories260K.gguf
    [ -f "$s" ] && models+=("$s")
fi
python3 - "$R" "$T" "${models[@]}" <<'EOF'
import json, os, subprocess, sys
import numpy as np
R, T, models = sys.argv[1], sys.argv[2], sys.argv[3:]
rng = np.random.default_rng(11)

def serve(model, *args):
    p = subprocess.Popen([R, "serve", model, "--port", "0", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if "listening on" not in line:
        p.kill()
        return None, p.stderr.read().strip()
    return p, line.split()[-1]

def measure(ref, url, prompts):
    dl, kl, agree, counted = [], [], 0, 0
    for toks in prompts:
        out = subprocess.run([R, "check-engine", ref, "--url", url, "--tokens", toks, "-n", "16",
                              "--top-k", "5", "--json", "--tol", "dlogprob=off,kl=off,top1=off,tie=0"],
                             capture_output=True, text=True)
        if out.returncode not in (0, 1):
            return out.stderr.strip()
        d = json.loads(out.stdout)
        for r in d["prompts"][0]["positions"]:
            v = [x for x in (r["dlogprob"], r["dlogprob_top"]) if x is not None]
            if v:
                dl.append(max(v))
            if r["kl"] is not None:
                kl.append(r["kl"])
            counted += 1
            agree += r["top1_agree"]
    dl = np.array(dl)
    return (f"{dl.max():.2e} | {np.percentile(dl, 99):.2e} | {max(kl):.2e} | "
            f"{agree / counted:.3f} | {counted}")

print("| model | engine | max abs dlogprob | p99 | max KL (top-5 union) | top-1 | positions |")
print("|---|---|---|---|---|---|---|")
for m in models:
    name = os.path.basename(m)
    vocab = 512 if "stories" in name else 500
    prompts = [",".join(str(x) for x in rng.integers(3, vocab, size=12)) for _ in range(4)]
    other = m.replace(".gguf", "-other.gguf")
    arch_fault = "kv-b-rows" if "deepseek2" in name else "qkv-stream"
    cases = [("same model, same precision", m, []),
             ("--precision f64", m, ["--precision", "f64"]),
             ("--tp 2 (clean plan, f32)", m, ["--tp", "2"]),
             ("--tp 4 (clean plan, f32)", m, ["--tp", "4"]),
             (f"--tp 2 --inject {arch_fault}", m, ["--tp", "2", "--inject", arch_fault]),
             ("--tp 2 --inject rope-pairs", m, ["--tp", "2", "--inject", "rope-pairs"]),
             ("another model (seed 2)", other, [])]
    for label, served, args in cases:
        if not os.path.exists(served):
            continue
        p, url = serve(served, *args)
        if p is None:
            print(f"| {name} | {label} | refused: {url} | | | | |")
            continue
        try:
            print(f"| {name} | {label} | {measure(m, url, prompts)} |")
        finally:
            p.terminate()
            p.wait()
        sys.stdout.flush()
EOF
