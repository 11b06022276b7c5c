"""check-engine against a real vLLM (the CPU build from the package index) serving small HF
checkpoints made by gguf-gen: a correct engine AGREES in every API mode, on the GGUF and on the
HF checkpoint as the reference; a broken checkpoint served by vLLM is DIVERGED.

Skips without GGUFKIT_VLLM_PYTHON (scripts/setup_engines.sh; scripts/test.sh sets it).
The servers are started by PID on 127.0.0.1 and stopped by PID; one at a time (the suite runs
this file alone: ctest RESOURCE_LOCK engine).
"""
import json
import os
import shutil

import pytest

import engines
import hf_faults

if not engines.VLLM_PY:
    pytest.skip("no vLLM: run scripts/setup_engines.sh and set GGUFKIT_VLLM_PYTHON "
                "(scripts/test.sh does)", allow_module_level=True)

ARCHS = ["llama", "qwen3", "qwen3moe", "glm4moe", "deepseek2"]

# Every way of asking: (name, check-engine arguments); the text holds characters of several
# bytes, which byte-fallback vocabularies spell as partial UTF-8 pieces (vLLM writes "").
MODES = [
    ("text", ["--prompt", "Once upon a time there was a little girl é 你"]),
    ("ids", ["--tokens", "1,259,261,300,301,302,310"]),
    ("chat", ["--chat", "Once upon a time"]),
    ("messages", ["--messages", "MESSAGES"]),
    ("prompts", ["--prompts", "PROMPTS"]),
    ("no-echo", ["--prompt", "Once upon a time", "--no-echo"]),
    ("openai", ["--prompt", "Once upon a time é 你", "--api", "openai"]),
    ("openai-no-echo", ["--prompt", "the little girl", "--api", "openai", "--no-echo"]),
    ("top-k-20", ["--prompt", "Once upon a time", "--top-k", "20"]),
]


@pytest.fixture(scope="module", params=ARCHS)
def served(request, tmp_path_factory):
    d = str(tmp_path_factory.mktemp(request.param))
    gguf, hf = engines.make_model(request.param, d)
    with open(os.path.join(d, "messages.json"), "w") as f:
        json.dump([{"role": "system", "content": "You tell stories."},
                   {"role": "user", "content": "Once upon a time"}], f)
    with open(os.path.join(d, "prompts.jsonl"), "w") as f:
        f.write('"Once upon a time"\n{"prompt": "the girl"}\n{"tokens": [1, 300, 301]}\n'
                '{"chat": "a little boy"}\n')
    srv = engines.start_vllm(hf, d)
    yield request.param, d, gguf, hf, srv
    srv.stop()


def args_for(mode, d):
    return [os.path.join(d, "messages.json") if a == "MESSAGES" else
            os.path.join(d, "prompts.jsonl") if a == "PROMPTS" else a for a in mode[1]]


def test_agree_every_mode(served):
    arch, d, gguf, hf, srv = served
    failures = []
    for mode in MODES:
        rc, out, err = engines.check_engine(gguf, srv.url, "-n", "8", *args_for(mode, d))
        if rc != 0:
            failures.append(f"{arch} {mode[0]}: exit {rc}: {err.strip()[-400:]} "
                            f"{json.dumps(out)[:600] if out else ''}")
    assert not failures, "\n".join(failures) + "\n" + srv.tail(1500)


def test_agree_hf_checkpoint_as_model(served):
    arch, d, gguf, hf, srv = served
    rc, out, err = engines.check_engine(hf, srv.url, "-n", "8", "--prompt", "Once upon a time",
                                        "--vocab", gguf)
    assert rc == 0, err
    assert out["ok"] is True
    # the HF checkpoint is the engine's own file: float32 on both sides
    assert out["max_abs_dlogprob"] < 1e-3, out["max_abs_dlogprob"]


# bfloat16 engines: the bf16 preset (calibrated in docs/check-engine.md) over a run of prompts;
# an MoE model's routing flips under bf16 rounding are forgiven in proportion, a dense model has
# none.
BF16_PROMPTS = ['"Once upon a time there was a little girl"',
                '{"prompt": "The big boy went to the park and"}',
                '{"tokens": [1, 300, 301, 302, 303, 304, 305]}',
                '{"chat": "Tell me a story about a little dog"}']


@pytest.mark.parametrize("arch", ["llama", "qwen3moe"])
def test_bf16_engine_agrees_under_bf16_preset(tmp_path, arch):
    d = str(tmp_path)
    gguf, hf = engines.make_model(arch, d, seed=3)
    pf = os.path.join(d, "prompts.jsonl")
    with open(pf, "w") as f:
        f.write("\n".join(BF16_PROMPTS) + "\n")
    srv = engines.start_vllm(hf, d, dtype="bfloat16")
    try:
        rc, out, err = engines.check_engine(gguf, srv.url, "-n", "16", "--prompts", pf,
                                            "--tol", "bf16")
        # and the float32 reference tells it from a float32 engine: the default preset says
        # DIVERGED on bf16 numbers (median |dlogprob| a few 1e-3 against 1e-6)
        rc_strict, _, _ = engines.check_engine(gguf, srv.url, "-n", "4", "--prompt",
                                               "Once upon a time", "--tol", "strict")
    finally:
        srv.stop()
    assert rc == 0, f"{arch} bf16: exit {rc}: {err} {json.dumps(out)[:800] if out else ''}"
    assert out["median_abs_dlogprob"] > 1e-4, out["median_abs_dlogprob"]  # really bf16
    assert rc_strict == 1


# Faults written into the checkpoint vLLM loads: (arch, name, edit, last sequence index by
# which the divergence must show). The weight faults act from the second token on; a wrong rope
# base grows with the distance between tokens, so it shows later, but inside the prompt.
PROMPT = "Once upon a time there was a little girl"
FAULTS = [
    ("llama", "k_proj halves swapped",
     lambda hf: hf_faults.swap_head_halves(hf, "model.layers.0.self_attn.k_proj.weight", 64), 3),
    ("llama", "down_proj x2",
     lambda hf: hf_faults.double(hf, "model.layers.1.mlp.down_proj.weight"), 3),
    ("llama", "wrong rope theta",
     lambda hf: hf_faults.set_config(hf, rope_theta=500000.0), None),
    ("deepseek2", "kv_b_proj heads swapped",
     lambda hf: hf_faults.swap_blocks(hf, "model.layers.0.self_attn.kv_b_proj.weight", 64), 3),
]


@pytest.mark.parametrize("arch,name,edit,by", FAULTS, ids=[f[1] for f in FAULTS])
def test_fault_served_by_vllm_diverges(tmp_path, arch, name, edit, by):
    d = str(tmp_path)
    gguf, hf = engines.make_model(arch, d)
    edit(hf)
    srv = engines.start_vllm(hf, d)
    try:
        # --diagnose: none of these is a fault of the catalog, and none may be named
        rc, out, err = engines.check_engine(gguf, srv.url, "-n", "8", "--prompt", PROMPT,
                                            "--diagnose", "--tp", "1")
    finally:
        srv.stop()
    assert out and out["diagnosis"]["result"] == "none", (name, out and out["diagnosis"])
    assert rc == 1, f"{name}: exit {rc}: {err}"
    assert out["ok"] is False
    first = out["first_divergence"]
    assert first is not None
    n_prompt = len(out["prompts"][0]["prompt_tokens"])
    limit = by if by is not None else n_prompt - 1
    assert first["row"]["seq"] <= limit, (name, first["row"]["seq"], limit)


def permute_every_qk(hf):
    with open(os.path.join(hf, "config.json")) as f:
        c = json.load(f)
    for il in range(c["num_hidden_layers"]):
        for proj in ("q_proj", "k_proj"):
            hf_faults.permute_like_gguf(hf, f"model.layers.{il}.self_attn.{proj}.weight",
                                        c["head_dim"])


# Faults of the catalog served by the real vLLM: --diagnose must name them.
CATALOG_FAULTS = [
    ("llama", "rope-pairs", permute_every_qk),
    ("deepseek2", "routed-scale", lambda hf: hf_faults.set_config(hf, routed_scaling_factor=1.0)),
]


@pytest.mark.parametrize("arch,fault,edit", CATALOG_FAULTS, ids=[f[1] for f in CATALOG_FAULTS])
def test_diagnose_names_the_fault_vllm_serves(tmp_path, arch, fault, edit):
    d = str(tmp_path)
    gguf, hf = engines.make_model(arch, d)
    edit(hf)
    srv = engines.start_vllm(hf, d)
    try:
        rc, out, err = engines.check_engine(gguf, srv.url, "-n", "8", "--prompt", PROMPT,
                                            "--diagnose", "--tp", "1")
    finally:
        srv.stop()
    assert rc == 1, f"{fault}: exit {rc}: {err}"
    g = out["diagnosis"]
    assert g["result"] == "fault", g
    assert g["fault"]["fault"] == fault and g["fault"]["layer"] is None, g["fault"]
    assert g["fault"]["mean_abs_dlogprob"] < 1e-3, g["fault"]
