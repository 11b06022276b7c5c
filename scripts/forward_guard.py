#!/usr/bin/env python3
"""Guard for refactors of the forward pass: record every model of the test suite
under every mode, then check that a later build gives the same bits.

    scripts/forward_guard.py save  BUILD DIR    # before: models, records, logits into DIR
    scripts/forward_guard.py check BUILD DIR    # after: same commands, bit-identical results

Covers the CPU reference (f32, f64, threads, MLA plain/absorbed, legacy attn_kv_b,
glm-dsa indexer top-k, KV-cache decoding) and the virtual tensor-parallel path
(tp 2/4/8, ep, sglang, every fault of the catalog on the archs it applies to).
Records are compared tensor by tensor (names, shapes, bytes), logits byte for byte.
"""
import os, subprocess, sys

import numpy as np

ARCHS = ["llama", "qwen2", "qwen3", "qwen3moe", "deepseek2", "glm4moe", "glm-dsa"]
TOK = "1,5,9,200,33,7,81,4,150,3,60,12"
FAULTS = ["kv-b-whole", "kv-b-rows", "kv-b-stacked", "k-b-no-transpose", "qkv-stream",
          "gate-up-stream", "rank0-everywhere", "kv-heads-split", "mla-cache-sharded",
          "no-allreduce", "quant-off-block", "vocab-no-pad", "expert-offset", "norm-sliced",
          "rope-pairs", "yarn-mscale", "routed-scale", "exp-probs-b", "shared-scaled",
          "routed-scale-twice", "shared-double-reduce"]


def models(gen, d):
    out = {}
    def g(name, *args):
        path = os.path.join(d, name + ".gguf")
        if not os.path.exists(path):
            subprocess.run([gen, "model", "--no-sync", "--force", "-q", *args, path], check=True)
        out[name] = path
    for a in ARCHS:
        g(a, "--arch", a, "--type", "Q8_0")
        g(a + "-tp", "--arch", a, "--kv-heads", "2", "--vocab", "500", "--type", "Q4_K")
    for a in ("deepseek2", "glm-dsa"):
        g(a + "-legacy", "--arch", a, "--type", "Q8_0", "--legacy-kv-b")
    g("ds-groups", "--arch", "deepseek2", "--experts", "16", "--experts-used", "4",
      "--expert-groups", "4", "--groups-used", "2", "--tied", "--type", "Q4_K",
      "--type-map", "attn_k_b|attn_v_b=Q8_0")
    g("llama-f16", "--arch", "llama", "--type", "F16", "--rope-freqs", "8")
    g("glm4moe-qk", "--arch", "glm4moe", "--qk-norm", "--type", "Q5_K")
    g("ds-softmax", "--arch", "deepseek2", "--gating", "softmax", "--q-lora", "0", "--type", "Q6_K")
    return out


def cases(ms):
    c = []
    for name, path in ms.items():
        if name.endswith("-tp"):
            continue
        c.append((f"{name}.f32", [path, "--tokens", TOK]))
        c.append((f"{name}.f64", [path, "--tokens", TOK, "--precision", "f64"]))
        c.append((f"{name}.t2", [path, "--tokens", TOK, "--threads", "2"]))
        c.append((f"{name}.dec", [path, "--tokens", "1,5,9", "-n", "4"]))
        if name.split("-")[0] in ("deepseek2", "glm", "ds"):
            c.append((f"{name}.abs", [path, "--tokens", TOK, "--mla", "absorbed"]))
    c.append(("glm-dsa.k4", [ms["glm-dsa"], "--tokens", TOK, "--indexer-top-k", "4"]))
    c.append(("glm-dsa.dense", [ms["glm-dsa"], "--tokens", TOK, "--dense-indexer"]))
    c.append(("glm-dsa.k4dec", [ms["glm-dsa"], "--tokens", "1,5,9,200,33,7", "-n", "3",
                                "--indexer-top-k", "4"]))
    tptok = ",".join(str((i * 37 + 5) % 500) for i in range(16))
    for a in ARCHS:
        p = ms[a + "-tp"]
        for tp in (2, 4, 8):
            c.append((f"{a}.tp{tp}", [p, "--tokens", tptok, "--tp", str(tp)]))
        c.append((f"{a}.tp4f32", [p, "--tokens", tptok, "--tp", "4", "--precision", "f32"]))
        if a in ("qwen3moe", "deepseek2", "glm4moe", "glm-dsa"):
            c.append((f"{a}.tp4ep4", [p, "--tokens", tptok, "--tp", "4", "--ep", "4"]))
            c.append((f"{a}.tp8ep2sg", [p, "--tokens", tptok, "--tp", "8", "--ep", "2",
                                        "--engine", "sglang"]))
        for f in FAULTS:
            c.append((f"{a}.tp4.{f}", [p, "--tokens", tptok, "--tp", "4", "--inject", f + "@1"]))
            c.append((f"{a}.tp2.{f}", [p, "--tokens", tptok, "--tp", "2", "--inject", f]))
    return c


def run_case(refwd, name, args, d):
    rec = os.path.join(d, name + ".rec.gguf")
    npy = os.path.join(d, name + ".npy")
    extra = ["--record", rec]
    if "--tp" not in args:
        extra += ["--logits", npy]
    p = subprocess.run([refwd, *args, *extra, "-q"], capture_output=True, text=True, errors="replace")
    with open(os.path.join(d, name + ".rc"), "w") as f:
        f.write(f"{p.returncode}\n{p.stderr}")
    return p.returncode


def same_record(a, b):
    import gguf
    ra, rb = gguf.GGUFReader(a), gguf.GGUFReader(b)
    ta = {t.name: t for t in ra.tensors}
    tb = {t.name: t for t in rb.tensors}
    if list(ta) != list(tb):
        return f"tensor names differ ({len(ta)} vs {len(tb)})"
    for n, t in ta.items():
        u = tb[n]
        if list(t.shape) != list(u.shape) or t.data.tobytes() != u.data.tobytes():
            return f"{n} differs"
    return None


def diff_case(d, out, name, rc, same):
    """Why case `name` of the new run (in out, exit rc) differs from the saved one (in d),
    or None; same(a, b) compares two records."""
    why = None
    old = open(os.path.join(d, name + ".rc")).read().split("\n")
    if str(rc) != old[0]:
        why = f"exit {rc}, was {old[0]} ({' '.join(old[1:])[:200]})"
    for ext in (".rec.gguf", ".npy"):
        a, b = os.path.join(d, name + ext), os.path.join(out, name + ext)
        if os.path.exists(a) != os.path.exists(b):
            why = why or f"{ext} present on one side only"
        elif os.path.exists(a):
            if ext == ".npy":
                if open(a, "rb").read() != open(b, "rb").read():
                    why = why or "logits differ"
            else:
                why = why or same(a, b)
    return why


def guard(mode, d, cs, refwd, same, jobs=1):
    """Run the cases cs: save (mode "save") into d, or check against d (into d/new),
    jobs at a time. Returns the number of cases that differ."""
    from concurrent.futures import ThreadPoolExecutor
    out = d if mode == "save" else os.path.join(d, "new")
    os.makedirs(out, exist_ok=True)
    bad = 0
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        rcs = pool.map(lambda c: run_case(refwd, c[0], c[1], out), cs)
        for i, ((name, _), rc) in enumerate(zip(cs, rcs)):
            if mode == "check":
                why = diff_case(d, out, name, rc, same)
                if why:
                    bad += 1
                    print(f"DIFF {name}: {why}", flush=True)
            elif rc not in (0, 1):
                err = open(os.path.join(out, name + ".rc")).read().splitlines()[1:2]
                print(f"note {name}: exit {rc}: {err}", flush=True)
            if i % 50 == 0:
                print(f"{i}/{len(cs)}", file=sys.stderr, flush=True)
    print(f"{len(cs)} cases, {bad} differ")
    return bad


def main():
    mode, build, d = sys.argv[1], sys.argv[2], sys.argv[3]
    gen = os.path.join(build, "tools", "gguf-gen")
    refwd = os.path.join(build, "tools", "ref-forward")
    os.makedirs(os.path.join(d, "models"), exist_ok=True)
    ms = models(gen, os.path.join(d, "models"))
    jobs = int(os.environ.get("GUARD_JOBS", "1"))
    sys.exit(1 if guard(mode, d, cases(ms), refwd, same_record, jobs) else 0)


if __name__ == "__main__":
    main()
