"""Measure check-engine's per-position numbers against a real vLLM, to calibrate and to check
the tolerance presets (docs/check-engine.md, "Calibration"). Not a test: it starts a vLLM per
(architecture, dtype, seed, fault) and writes every compared position as a JSON line.

    GGUFKIT_BIN=build/tools GGUFKIT_GEN=build/tools/gguf-gen \\
    GGUFKIT_VLLM_PYTHON=$(scripts/setup_engines.sh vllm | sed -n 's/^vllm=//p') \\
    python3 tests/bench/bench_engine_calibrate.py OUT.jsonl [--seeds 1] [--archs a,b] \\
        [--dtypes float32,bfloat16] [--faults] [-n 16]

Each line: {arch, dtype, seed, fault, prompt, index, seq, prompt_pos, dlogprob, dlogprob_top,
kl, top1_agree, tie, ref_gap, engine_top1, ref_top1, engine_in_ref_top, ref_in_engine_top},
then one {"summary": ...} line per run with check-engine's verdict under the preset given by
--tol (default: each preset is judged afterwards by bench_engine_judge.py).
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "engines"))
import engines  # noqa: E402
import hf_faults  # noqa: E402

PROMPTS = [
    '"Once upon a time there was a little girl"',
    '{"prompt": "The big boy went to the park and"}',
    '{"tokens": [1, 300, 301, 302, 303, 304, 305]}',
    '{"tokens": [1, 259, 261, 263, 265, 267, 269, 271, 273]}',
    '{"chat": "Tell me a story about a little dog"}',
    '"she was happy and they played all day"',
    '{"tokens": [1, 400, 401, 402, 403, 404, 405, 406, 407, 408, 409]}',
    '{"prompt": "One day a girl named Lily found a"}',
]

FAULTS = {
    "k_proj halves swapped": ("llama", lambda hf: hf_faults.swap_head_halves(
        hf, "model.layers.0.self_attn.k_proj.weight", 64)),
    "down_proj x2": ("llama", lambda hf: hf_faults.double(
        hf, "model.layers.1.mlp.down_proj.weight")),
    "wrong rope theta": ("llama", lambda hf: hf_faults.set_config(hf, rope_theta=500000.0)),
    "kv_b_proj heads swapped": ("deepseek2", lambda hf: hf_faults.swap_blocks(
        hf, "model.layers.0.self_attn.kv_b_proj.weight", 64)),
    "qwen3moe down_proj x2": ("qwen3moe", lambda hf: hf_faults.double(
        hf, "model.layers.1.mlp.experts.0.down_proj.weight")),
}


def run(out, arch, dtype, seed, fault, edit, n, top_k):
    with tempfile.TemporaryDirectory() as d:
        # the routers and biases rounded to bf16 in the checkpoint the engine serves: the
        # near-ties that the presets must forgive (docs/check-engine.md, "Calibration")
        gguf, hf = engines.make_model(arch, d, seed=seed, exact=False)
        if edit:
            edit(hf)
        pf = os.path.join(d, "prompts.jsonl")
        with open(pf, "w") as f:
            f.write("\n".join(PROMPTS) + "\n")
        srv = engines.start_vllm(hf, d, dtype=dtype)
        try:
            rc, res, err = engines.check_engine(gguf, srv.url, "--prompts", pf, "-n", str(n),
                                                "--top-k", str(top_k), "--tol", "strict")
        finally:
            srv.stop()
    if res is None:
        print(f"{arch} {dtype} seed {seed} {fault}: exit {rc}: {err}", file=sys.stderr)
        out.write(json.dumps({"summary": {"arch": arch, "dtype": dtype, "seed": seed,
                                          "fault": fault, "exit": rc, "error": err[-300:]}}) + "\n")
        return
    for p in res["prompts"]:
        for row in p["positions"]:
            et = [t["id"] for t in row.get("engine_top", [])]
            rt = [t["id"] for t in row.get("reference_top", [])]
            out.write(json.dumps({
                "arch": arch, "dtype": dtype, "seed": seed, "fault": fault,
                "prompt": p["index"], "index": row["index"], "seq": row["seq"],
                "prompt_pos": row["prompt"], "dlogprob": row["dlogprob"],
                "dlogprob_top": row["dlogprob_top"], "kl": row["kl"],
                "top1_agree": row["top1_agree"], "tie": row["tie"], "ref_gap": row["ref_gap"],
                "engine_top1": row["engine_top1"], "ref_top1": row["ref_top1"],
                "engine_in_ref_top": row["engine_top1"] in rt,
                "ref_in_engine_top": row["ref_top1"] in et}) + "\n")
    out.write(json.dumps({"summary": {"arch": arch, "dtype": dtype, "seed": seed, "fault": fault,
                                      "exit": rc, "max_abs_dlogprob": res["max_abs_dlogprob"],
                                      "top1_agreement": res["top1_agreement"]}}) + "\n")
    out.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seeds", default="1")
    ap.add_argument("--archs", default="llama,qwen3,qwen3moe,glm4moe,deepseek2")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--faults", action="store_true", help="the fault runs too (float32)")
    ap.add_argument("--fault-dtypes", default="float32,bfloat16")
    ap.add_argument("-n", type=int, default=16)
    ap.add_argument("--top-k", type=int, default=5)
    a = ap.parse_args()
    with open(a.out, "a") as out:
        for seed in [int(s) for s in a.seeds.split(",")]:
            for arch in a.archs.split(","):
                for dtype in a.dtypes.split(","):
                    run(out, arch, dtype, seed, None, None, a.n, a.top_k)
            if a.faults:
                for name, (arch, edit) in FAULTS.items():
                    for dtype in a.fault_dtypes.split(","):
                        run(out, arch, dtype, seed, name, edit, a.n, a.top_k)


if __name__ == "__main__":
    main()
