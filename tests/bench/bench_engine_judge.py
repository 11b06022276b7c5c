"""Judge the positions recorded by bench_engine_calibrate.py under check-engine's presets, with
the rule of gguf_engine_judge (libgguf/src/engine/engine_compare.c): a position is an outlier
when |dlogprob| of its token or of an engine alternative is over `dlogprob`, its KL over `kl`,
or its top-1 flipped outside a near-tie (reference gap under `tie`); a run agrees when its
outliers are at most `outliers` of its positions, the median |dlogprob| of the chosen tokens is
at most `median`, and the top-1 agreement is at least `top1`.

    python3 tests/bench/bench_engine_judge.py RUNS.jsonl [...]

Prints, per run (every prompt pooled, as check-engine --prompts judges) and per single prompt
(as a one-prompt check would), the verdict under each preset, and a summary: false alarms on
correct engines and missed faults.
"""
import json
import statistics
import sys

PRESETS = {
    #          dlogprob  kl     top1  tie   outliers median
    "default": (0.05, 5e-3, 0.9, 0.02, 0.2, 0.01),
    "bf16": (0.1, 0.05, 0.9, 0.1, 0.2, 0.05),
}


def outlier(r, p):
    dl, kl, _, tie, _, _ = p
    d = max(r["dlogprob"] or 0, r["dlogprob_top"] or 0)
    counted = r["engine_top1"] >= 0 and not (r["ref_gap"] is not None and r["ref_gap"] < tie)
    flip = counted and r["engine_top1"] != r["ref_top1"]
    return d > dl or (r["kl"] is not None and r["kl"] > kl) or flip


def judge(rows, p):
    _, _, top1, tie, outliers, median = p
    n = len(rows)
    over = sum(outlier(r, p) for r in rows)
    dls = [r["dlogprob"] for r in rows if r["dlogprob"] is not None]
    med = statistics.median(dls) if dls else 0.0
    counted = [r for r in rows if r["engine_top1"] >= 0 and
               not (r["ref_gap"] is not None and r["ref_gap"] < tie)]
    agree1 = sum(r["engine_top1"] == r["ref_top1"] for r in counted) / len(counted) if counted else 1
    ok = over <= outliers * n and med <= median and agree1 >= top1
    return ok, over, n, med, agree1


def main():
    runs = {}
    for path in sys.argv[1:]:
        for line in open(path):
            d = json.loads(line)
            if "summary" in d:
                continue
            runs.setdefault((d["arch"], d["dtype"], d["seed"], d["fault"] or "-"), []).append(d)
    print("| architecture | vLLM dtype | seed | fault | positions | preset | run verdict "
          "(outliers, median) | single prompts diverged |")
    print("|---|---|---|---|---|---|---|---|")
    tally = {}
    for (arch, dtype, seed, fault), rows in sorted(runs.items()):
        preset = "bf16" if dtype == "bfloat16" else "default"
        p = PRESETS[preset]
        ok, over, n, med, a1 = judge(rows, p)
        by = {}
        for r in rows:
            by.setdefault(r["prompt"], []).append(r)
        single = [judge(v, p)[0] for v in by.values()]
        bad = sum(not s for s in single)
        print(f"| {arch} | {dtype} | {seed} | {fault} | {n} | {preset} | "
              f"{'agree' if ok else 'DIVERGED'} ({over}, {med:.1e}) | {bad} of {len(single)} |")
        k = "correct" if fault == "-" else "fault"
        t = tally.setdefault((k, seed), [0, 0, 0, 0])
        t[0] += 1
        t[1] += (not ok) if k == "correct" else ok
        t[2] += len(single)
        t[3] += bad if k == "correct" else len(single) - bad
    print()
    for (k, seed), (runs_, wrong, prompts, wrong_p) in sorted(tally.items()):
        what = "false alarms" if k == "correct" else "missed"
        print(f"seed {seed}, {k} engines: {what}: {wrong} of {runs_} runs, "
              f"{wrong_p} of {prompts} single prompts")


if __name__ == "__main__":
    main()
