"""The --diagnose table of docs/check-engine.md: every fault of the catalog that can occur in a
generated model, served broken by `ref-forward serve --tp N [--ep M] --fault FAULT[@LAYER]`,
diagnosed by `check-engine --diagnose --tp N [--ep M]`; clean engines at each size too.

    GGUFKIT_BIN=build/tools GGUFKIT_GEN=build/tools/gguf-gen \\
    python3 tests/bench/bench_diagnose.py [--archs a,b] [--tp 2,4,8] [--json OUT.json]

A row says what the diagnosis named: the injected fault (right), several candidates that the
outputs cannot tell apart (ambiguous: listed), another fault (wrong), or none.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from serve_process import Serve  # noqa: E402

BIN = os.environ.get("GGUFKIT_BIN", "build/tools")
GEN = os.environ.get("GGUFKIT_GEN", "build/tools/gguf-gen")
R = os.path.join(BIN, "ref-forward")
TOKENS = "1,17,42,99,123,7,250,31"
MOE = {"qwen3moe", "deepseek2", "glm4moe", "glm-dsa"}


def faults():
    out = subprocess.run([os.path.join(BIN, "shard-plan"), "--list-faults", "--json"],
                         capture_output=True, text=True, check=True).stdout
    return [f["name"] for f in json.loads(out)["faults"]]


def diagnose(model, url, tp, ep):
    args = [R, "check-engine", model, "--url", url, "--tokens", TOKENS, "-n", "6", "--json",
            "--diagnose", "--tp", str(tp)]
    if ep:
        args += ["--ep", str(ep)]
    t0 = time.monotonic()
    p = subprocess.run(args, capture_output=True, text=True, timeout=3600)
    secs = time.monotonic() - t0
    if p.returncode not in (0, 1):
        return {"error": p.stderr.strip()[-300:]}, secs
    return json.loads(p.stdout), secs


def named(d):
    g = d.get("diagnosis")
    if g is None:
        return "agree" if d.get("ok") is True else "no diagnosis"
    if g["result"] == "fault":
        f = g["fault"]
        return f["fault"] + ("" if f["layer"] is None else f"@{f['layer']}")
    if g["result"] == "ambiguous":
        names = [c["fault"] + ("" if c["layer"] is None else f"@{c['layer']}")
                 for c in g["candidates"] if c["reproduces"] and c["fault"] != "clean"]
        return "ambiguous: " + " = ".join(names)
    return "none"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--archs", default="llama,qwen3moe,deepseek2,glm-dsa")
    ap.add_argument("--tp", default="2,4,8")
    ap.add_argument("--layer-faults", default="kv-b-rows,qkv-stream,norm-sliced",
                    help="faults also served at one layer (layer 1): the one-layer search")
    ap.add_argument("--json", help="write every run here")
    a = ap.parse_args()
    rows, tmp = [], tempfile.mkdtemp(prefix="bench_diagnose.")
    catalog = faults()
    for arch in a.archs.split(","):
        model = os.path.join(tmp, arch + ".gguf")
        subprocess.run([GEN, "model", "--arch", arch, "--kv-heads", "2", "--vocab", "500",
                        "--type", "Q4_K", "--no-sync", "--force", "-q", model], check=True)
        sizes = [(int(t), 0) for t in a.tp.split(",")]
        if arch in MOE:
            sizes.append((4, 4))  # expert parallel: vLLM's --enable-expert-parallel at tp 4
        for tp, ep in sizes:
            size_args = ["--tp", str(tp)] + (["--ep", str(ep)] if ep else [])
            injected = [None] + catalog + [f + "@1" for f in a.layer_faults.split(",")]
            for fault in injected:
                s = Serve(R, model, *size_args, *(["--fault", fault] if fault else []),
                          must_start=False)
                if not s.url:
                    continue  # not possible in this model at this size
                try:
                    d, secs = diagnose(model, s.url, tp, ep)
                finally:
                    s.close()
                got = named(d) if "error" not in d else "error: " + d["error"]
                want = fault or "agree"
                ok = got == want or (got.startswith("ambiguous") and want in got.split(": ")[1]
                                     .split(" = "))
                g = d.get("diagnosis") or {}
                best = (g.get("fault") or {}).get("mean_abs_dlogprob")
                ru = g.get("runner_up") or {}
                row = {"arch": arch, "tp": tp, "ep": ep, "injected": want, "named": got,
                       "right": ok, "best_mean": best, "runner_up": ru.get("fault"),
                       "runner_up_mean": ru.get("mean_abs_dlogprob"), "runs": g.get("runs"),
                       "seconds": round(secs, 1)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    print("\n| arch | tp | ep | served | diagnosis | runner-up (mean \\|dlogprob\\|) | runs | s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        ru = f"{r['runner_up']} ({r['runner_up_mean']:.3g})" if r["runner_up"] else ""
        mark = ("" if r["right"] else " (the fault moves nothing these prompts reach: no "
                "divergence)" if r["named"] == "agree" else " **(wrong)**")
        print(f"| {r['arch']} | {r['tp']} | {r['ep'] or ''} | {r['injected']} | "
              f"{r['named']}{mark} | {ru} | {r['runs'] or ''} | {r['seconds']} |")
    # the same runs as a matrix: served fault x model, the sizes at which it was named right;
    # (=) no divergence (nothing to diagnose), (X) named wrong
    archs = list(dict.fromkeys(r["arch"] for r in rows))
    served = list(dict.fromkeys(r["injected"] for r in rows))
    cells = {}
    for r in rows:
        size = f"{r['tp']}" + (f"/ep{r['ep']}" if r["ep"] else "")
        mark = "" if r["right"] else "(=)" if r["named"] == "agree" else "(X)"
        cells.setdefault((r["injected"], r["arch"]), []).append(size + mark)
    print("\n| served | " + " | ".join(archs) + " |")
    print("|---|" + "---|" * len(archs))
    for f in served:
        print(f"| `{f}` | " + " | ".join(", ".join(cells.get((f, a), [])) or "-"
                                        for a in archs) + " |")
    faulty = [r for r in rows if r["injected"] != "agree"]
    seen = [r for r in faulty if r["named"] != "agree"]
    clean = [r for r in rows if r["injected"] == "agree"]
    wrong = [r for r in seen if not r["right"]]
    print(f"\nfaulty engines: {len(faulty)}; DIVERGED: {len(seen)} (the others agree with the "
          f"clean reference: the fault moves nothing these prompts reach); of those, named "
          f"right: {len(seen) - len(wrong)} (ambiguous counted right when the served fault is "
          f"among those named); wrong: {len(wrong)}; clean engines agreeing: "
          f"{sum(r['right'] for r in clean)} of {len(clean)}")
    return 0 if not wrong and all(r["right"] for r in clean) else 1


if __name__ == "__main__":
    sys.exit(main())
