#!/usr/bin/env python3
"""Guard for refactors of the GPU forward pass: what scripts/forward_guard.py is for
the CPU, on a GPU machine. Records every test model under the GPU executor's modes
with one build, then checks that another build gives the same bits.

    scripts/gpu_guard.py save  BUILD DIR    # before: records and logits into DIR
    scripts/gpu_guard.py check BUILD DIR    # after: same commands, bit-identical results

Cases: --backend cuda on every model of forward_guard.py (prefill, decoding, the
glm-dsa indexer dense, a --gpu-mem-limit, --host-register off), and the NCCL rank
executor at tp 1 (--backend cuda --tp 1) on each architecture, clean and with the
faults of the catalog that act at one rank. Records are compared by the XXH3-128 of
each tensor (gguf-inspect --hash --json: no gguf-py needed on the GPU machine),
logits byte for byte, exit codes as they are. Needs only the Python standard library.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from forward_guard import ARCHS, TOK, guard, models  # noqa: E402

# faults of the catalog that change a one-rank run (the others need tp > 1)
TP1_FAULTS = ["rope-pairs", "yarn-mscale", "routed-scale", "exp-probs-b", "shared-scaled",
              "routed-scale-twice", "kv-b-rows", "k-b-no-transpose"]
MOE = ("qwen3moe", "deepseek2", "glm4moe", "glm-dsa", "ds-groups", "ds-softmax", "glm4moe-qk")


def cases(ms):
    c = []
    cuda = ["--backend", "cuda"]
    for name, path in ms.items():
        if name.endswith("-tp"):
            continue
        dsa = ["--dense-indexer"] if name.startswith("glm-dsa") else []
        c.append((f"{name}.cuda", [path, "--tokens", TOK, *cuda, *dsa]))
        c.append((f"{name}.cudadec", [path, "--tokens", "1,5,9", "-n", "4", *cuda, *dsa]))
    c.append(("glm-dsa.cudatopk", [ms["glm-dsa"], "--tokens", TOK, *cuda]))
    c.append(("qwen3moe.cudacap", [ms["qwen3moe"], "--tokens", TOK, *cuda,
                                   "--gpu-mem-limit", "256M"]))
    c.append(("llama.cudanoreg", [ms["llama"], "--tokens", TOK, *cuda, "--host-register", "off"]))
    tptok = ",".join(str((i * 37 + 5) % 500) for i in range(16))
    for a in ARCHS:
        p = ms[a + "-tp"]
        dsa = ["--dense-indexer"] if a == "glm-dsa" else []
        c.append((f"{a}.nccl1", [p, "--tokens", tptok, *cuda, "--tp", "1", *dsa]))
        for f in TP1_FAULTS:
            if f.startswith(("routed", "exp-probs", "shared")) and a not in MOE:
                continue
            if f.startswith(("kv-b", "k-b")) and a not in ("deepseek2", "glm-dsa"):
                continue
            c.append((f"{a}.nccl1.{f}", [p, "--tokens", tptok, *cuda, "--tp", "1", *dsa,
                                         "--fault", f]))
    return c


def tensor_hashes(inspect, path):
    p = subprocess.run([inspect, "--hash", "--json", "--tensors-only", path],
                       capture_output=True, text=True)
    if p.returncode != 0:
        return None
    doc = json.loads(p.stdout)
    return [(t["name"], t.get("shape"), t.get("xxh3_128") or t.get("hash")) for t in doc["tensors"]]


def same_record(inspect, a, b):
    ha, hb = tensor_hashes(inspect, a), tensor_hashes(inspect, b)
    if ha is None or hb is None:
        return "gguf-inspect could not read a record"
    if [h[0] for h in ha] != [h[0] for h in hb]:
        return f"tensor names differ ({len(ha)} vs {len(hb)})"
    for x, y in zip(ha, hb):
        if x != y:
            return f"{x[0]} differs"
    return None


def main():
    mode, build, d = sys.argv[1], sys.argv[2], sys.argv[3]
    os.environ["NCCL_NVLS_ENABLE"] = "0"  # never NVLink multicast on a shared host
    tools = os.path.join(build, "tools")
    gen, refwd, inspect = (os.path.join(tools, t) for t in ("gguf-gen", "ref-forward",
                                                            "gguf-inspect"))
    os.makedirs(os.path.join(d, "models"), exist_ok=True)
    ms = models(gen, os.path.join(d, "models"))
    jobs = int(os.environ.get("GUARD_JOBS", "4"))  # processes sharing the GPU
    bad = guard(mode, d, cases(ms), refwd, lambda a, b: same_record(inspect, a, b), jobs)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
