#!/usr/bin/env python3
"""Real tensor parallel against the fault catalog (issue 9): on a generated
deepseek2-style model whose head, expert and width counts divide by 8, run

  ref-forward --backend cuda --tp N                 (NCCL ranks, one GPU each)
  ref-forward --backend cuda --tp N --inject FAULT  for every fault of the catalog

and the CPU's virtual ranks on the same plan (ref-forward --tp N [--inject F]).
A correct plan must agree with the single-GPU reference (exit 0); each fault
must give what the CPU gives: the same exit code (1: detected; 2: the fault
does not apply to this model at this tp) and the same first divergence (layer,
op, rank). Writes OUT/tp_faults.json and a table on stdout; exit 1 on any
mismatch.

  tp_faults.py BUILD_DIR OUT_DIR TP
"""
import json
import os
import subprocess
import sys
import time


def main():
    build, out, tp = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rf = os.path.join(build, "tools", "ref-forward")  # the binary
    gen = os.path.join(build, "tools", "gguf-gen")
    plan = os.path.join(build, "tools", "shard-plan")
    os.makedirs(out, exist_ok=True)
    model = os.path.join(out, "tp-faults-deepseek2.gguf")
    # 16 heads, 16 experts (4 used), widths 512/1024/256: all divide by 8;
    # Q4_K so that off-block cuts exist; vocab 500 so that padding matters
    subprocess.run([gen, "model", "--arch", "deepseek2", "--layers", "3", "--embd", "512",
                    "--heads", "16", "--kv-heads", "16", "--ff", "1024", "--experts", "16",
                    "--experts-used", "4", "--expert-ff", "256", "--vocab", "500",
                    "--type", "Q4_K", "--no-sync", "--force", "-q", model], check=True)
    tokens = ",".join(str((i * 37 + 5) % 500) for i in range(32))
    listing = subprocess.run([plan, "--list-faults"], check=True, capture_output=True,
                             text=True).stdout
    faults = [line.split()[0] for line in listing.splitlines() if line.strip()]

    def run(*args):
        t0 = time.time()
        p = subprocess.run([rf, model, "--tokens", tokens, "--json", *args],
                           capture_output=True, text=True)
        dt = time.time() - t0
        d = None
        if p.returncode in (0, 1) and p.stdout.strip():
            try:
                d = json.loads(p.stdout)
            except ValueError:
                d = None
        return p.returncode, d, p.stderr.strip(), dt

    def first(d):
        fd = (d or {}).get("first_divergence") or {}
        return (fd.get("layer"), fd.get("op"), fd.get("rank")) if fd else None

    def worst(d):
        w = 0.0
        for e in (d or {}).get("entries", []):
            v = e.get("rel_l2")
            if isinstance(v, (int, float)):
                w = max(w, v)
        return w

    rows, bad = [], []
    ep = ["--ep", str(tp)]
    for name, extra in [("(none)", []), ("(none), ep", ep)] + \
            [(f, ["--inject", f] + (ep if f == "expert-offset" else [])) for f in faults]:
        grc, gd, gerr, gdt = run("--backend", "cuda", "--tp", str(tp), *extra)
        crc, cd, cerr, cdt = run("--tp", str(tp), "--precision", "f32", *extra)
        row = {"fault": name, "gpu_exit": grc, "cpu_exit": crc, "gpu_first": first(gd),
               "cpu_first": first(cd), "gpu_worst_rel_l2": worst(gd), "gpu_seconds": round(gdt, 2),
               "cpu_seconds": round(cdt, 2)}
        if grc == 2 or crc == 2:
            row["why"] = (gerr or cerr).splitlines()[-1][:160] if (gerr or cerr) else ""
        rows.append(row)
        if name.startswith("(none)"):
            if grc != 0:
                bad.append(f"{name}: GPU tp {tp} exit {grc}: {first(gd)} {gerr[:200]}")
        elif grc != crc or (grc == 1 and first(gd) != first(cd)):
            bad.append(f"{name}: GPU exit {grc} first {first(gd)}, CPU exit {crc} first "
                       f"{first(cd)} {gerr[:200]}")
        elif grc not in (1, 2):
            bad.append(f"{name}: exit {grc} (a fault must be detected or refused) {gerr[:200]}")
    with open(os.path.join(out, "tp_faults.json"), "w") as f:
        json.dump({"tp": tp, "model": "deepseek2 3 layers, 16 heads, 16 experts, Q4_K",
                   "rows": rows, "problems": bad}, f, indent=1)
    print(f"tp {tp}: fault, GPU exit, CPU exit, GPU first divergence (layer, op, rank), GPU s")
    for r in rows:
        print(f"  {r['fault']:22s} {r['gpu_exit']} {r['cpu_exit']} {str(r['gpu_first']):28s} "
              f"{r['gpu_seconds']:6.1f}  worst rel L2 {r['gpu_worst_rel_l2']:.2e} "
              f"{r.get('why', '')}")
    n_det = sum(1 for r in rows if r["gpu_exit"] == 1)
    n_na = sum(1 for r in rows if r["gpu_exit"] == 2)
    print(f"tp {tp}: {n_det} faults detected, {n_na} not applicable, {len(bad)} problems")
    for b in bad:
        print("  PROBLEM " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
