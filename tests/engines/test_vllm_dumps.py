"""shard-plan check-dump on the weights a real vLLM holds: the CPU build from the package index
loads small HF checkpoints made by gguf-gen at tp 1 and tp 2, saves every rank's state dict
(`save_sharded_state`, the layout of `--load-format sharded_state`), and check-dump compares each
rank with the shard plan of the GGUF they were made from: clean for every architecture vLLM CPU
serves here, and a real dump broken by hand is named (the rank, the parameter, the catalog fault
when one explains it).

What the CPU build keeps out of its state dict, and the plugin below puts back (a vLLM general
plugin, loaded by vLLM itself in the engine process and in every spawned worker):
- the linear layers' weights: oneDNN packs them and the layer drops its `weight`
  (`dispatch_cpu_unquantized_gemm(layer, remove_weight=True)`, vllm/model_executor/layers/
  linear.py): the plugin keeps them (remove_weight False; the engine still runs on the packed
  copy);
- the experts' w13/w2: `CPUUnquantizedExperts.process_weights_after_loading` replaces them with
  `cpu_prepack_moe_weight`'s blocked layout (same shape, other order): the plugin records the
  tensors it was given and the dump saves those;
- MLA's `W_UK_T`/`W_UV` are transposed views: `ShardedStateLoader._filter_subtensors` fails on
  them (`view(-1)` of a non-contiguous tensor): the plugin passes contiguous copies.

Skips without GGUFKIT_VLLM_PYTHON (scripts/setup_engines.sh; scripts/test.sh sets it). About
four minutes on two cores (twelve engines, loaded one after the other by two vLLM processes).
Also a script: `python3 test_vllm_dumps.py --capture DIR` writes the small BF16 dumps of
tests/data/vllm_dumps (its README.md).
"""
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import engines  # noqa: E402

ARCHS = ["llama", "qwen3", "qwen3moe", "glm4moe", "deepseek2"]

PLUGIN = r'''
"""ggufkit: keep what vLLM's CPU build leaves out of its state dict (tests/engines/
test_vllm_dumps.py says what and why). Loaded by vLLM as a general plugin in every process."""


def register():
    import vllm.model_executor.layers.utils as lu
    if getattr(lu.dispatch_cpu_unquantized_gemm, "_ggufkit", False):
        return
    dispatch = lu.dispatch_cpu_unquantized_gemm

    def keep_weight(layer, remove_weight):
        return dispatch(layer, remove_weight=False)

    keep_weight._ggufkit = True
    lu.dispatch_cpu_unquantized_gemm = keep_weight

    import vllm.model_executor.layers.fused_moe.experts.cpu_moe as cm
    prepack, given = cm.cpu_prepack_moe_weight, []

    def record_prepack(w, isa):
        given.append(w.detach().clone())
        return prepack(w, isa)

    cm.cpu_prepack_moe_weight = record_prepack
    after_loading = cm.CPUUnquantizedExperts.process_weights_after_loading

    def keep_experts(self, layer):
        given.clear()
        after_loading(self, layer)
        if len(given) == 2:
            layer._ggufkit_unpacked = {"w13_weight": given[0], "w2_weight": given[1]}
        given.clear()

    cm.CPUUnquantizedExperts.process_weights_after_loading = keep_experts

    from vllm.model_executor.model_loader.sharded_state_loader import ShardedStateLoader
    filter_subtensors = ShardedStateLoader._filter_subtensors
    save_model = ShardedStateLoader.save_model

    def contiguous(tensors):
        return filter_subtensors({k: t if t.is_contiguous() else t.contiguous()
                                  for k, t in tensors.items()})

    def save_unpacked(model, path, pattern=None, max_size=None):
        sd = model.state_dict()
        for name, mod in model.named_modules():
            for p, t in getattr(mod, "_ggufkit_unpacked", {}).items():
                assert f"{name}.{p}" in sd, f"{name}.{p}"
                sd[f"{name}.{p}"] = t
        model.state_dict = lambda *a, **k: sd
        try:
            save_model(model, path, pattern=pattern, max_size=max_size)
        finally:
            del model.state_dict

    ShardedStateLoader._filter_subtensors = staticmethod(contiguous)
    ShardedStateLoader.save_model = staticmethod(save_unpacked)
'''

# The dumping script: vLLM spawns its workers, so everything runs under __main__; one process
# dumps several checkpoints (one engine after the other) to pay vLLM's import once.
DUMP = r'''
import gc, os, sys
if __name__ == "__main__":
    from vllm import LLM
    tp, dtype, pairs = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    for hf, out in zip(pairs[::2], pairs[1::2]):
        llm = LLM(model=hf, tensor_parallel_size=tp, enforce_eager=True, max_model_len=512,
                  dtype=dtype, distributed_executor_backend="mp" if tp > 1 else None)
        os.makedirs(out, exist_ok=True)
        llm.llm_engine.engine_core.save_sharded_state(path=out)
        llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()
'''


def setup_tools(folder):
    """The plugin (an entry point of group vllm.general_plugins, found on PYTHONPATH) and the
    dumping script; returns (script, the plugin's folder)."""
    plug = os.path.join(folder, "plugin")
    info = os.path.join(plug, "ggufkit_keep_weights-0.1.dist-info")
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(plug, "ggufkit_keep_weights.py"), "w") as f:
        f.write(PLUGIN)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: ggufkit-keep-weights\nVersion: 0.1\n")
    with open(os.path.join(info, "entry_points.txt"), "w") as f:
        f.write("[vllm.general_plugins]\nkeep_weights = ggufkit_keep_weights:register\n")
    script = os.path.join(folder, "dump_vllm.py")
    with open(script, "w") as f:
        f.write(DUMP)
    return script, plug


def make_model(arch, folder, extra=()):
    """A GGUF of arch with every tensor BF16 and its HF checkpoint: the engine then holds
    exactly the GGUF's values (engines.make_model keeps biases and routers F32 in the GGUF,
    which the HF checkpoint rounds to BF16: 2e-3 apart, beyond check-dump's tolerance)."""
    os.makedirs(folder, exist_ok=True)
    gguf = os.path.join(folder, f"{arch}.gguf")
    hf = os.path.join(folder, f"{arch}-hf")
    subprocess.run([engines.GEN, "model", "--arch", arch, "--type", "BF16", "--type-map", ".=BF16",
                    "--seed", "1", "--no-sync", "--force", *engines.ARCH_ARGS[arch], *extra,
                    gguf], check=True, capture_output=True)
    shutil.rmtree(hf, ignore_errors=True)
    subprocess.run([engines.GEN, "hf", gguf, hf], check=True, capture_output=True)
    subprocess.run([sys.executable, os.path.join(engines.HERE, "make_hf_tokenizer.py"), gguf, hf],
                   check=True)
    return gguf, hf


def dump(script, plug, jobs, tp, dtype, log):
    """vLLM's dumps of jobs [(HF folder, output folder)] at tp, in one process."""
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", VLLM_LOGGING_LEVEL="WARNING",
               PYTHONPATH=plug + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if tp == 2:
        env["VLLM_CPU_OMP_THREADS_BIND"] = "0|1"
    with open(log, "w") as f:
        r = subprocess.run([engines.VLLM_PY, script, str(tp), dtype,
                            *[x for job in jobs for x in job]], env=env, stdout=f,
                           stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                           timeout=120 + 120 * len(jobs))
    if r.returncode != 0:
        with open(log, errors="replace") as f:
            raise RuntimeError(f"vLLM's dumps at tp {tp} exited {r.returncode}: "
                               f"{f.read()[-3000:]}")


def check_dump(gguf, d, tp, *args):
    r = subprocess.run([engines.tool("shard-plan"), "check-dump", gguf, d, "--tp", str(tp),
                        "--json", *args], capture_output=True, text=True, timeout=300)
    return r.returncode, (json.loads(r.stdout) if r.stdout.strip() else None), r.stderr


def header(path):
    with open(path, "rb") as f:
        return json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))


def tensor(path, name):
    """Tensor `name` of a safetensors file (F32) as numpy."""
    h = header(path)[name]
    raw = open(path, "rb").read()
    b, e = (8 + struct.unpack("<Q", raw[:8])[0] + o for o in h["data_offsets"])
    return np.frombuffer(raw[b:e], np.float32).reshape(h["shape"])


def edit(path, name, fn):
    """Replace tensor `name` of a safetensors file by fn(array) (same dtype and shape)."""
    raw = bytearray(open(path, "rb").read())
    n = struct.unpack("<Q", raw[:8])[0]
    e = json.loads(raw[8:8 + n])[name]
    assert e["dtype"] == "F32", e
    b, en = (8 + n + o for o in e["data_offsets"])
    a = np.frombuffer(bytes(raw[b:en]), np.float32).reshape(e["shape"])
    out = np.ascontiguousarray(fn(a.copy()), np.float32)
    assert out.shape == a.shape
    raw[b:en] = out.tobytes()
    open(path, "wb").write(raw)


if not engines.VLLM_PY and __name__ != "__main__":
    pytest.skip("no vLLM: run scripts/setup_engines.sh and set GGUFKIT_VLLM_PYTHON "
                "(scripts/test.sh does)", allow_module_level=True)


# Variants beside ARCHS: name -> (architecture, gguf-gen arguments, the tp of its dump)
VARIANTS = {
    # tied embeddings, which vLLM's deepseek2 does not tie
    "deepseek2-tied": ("deepseek2", ["--tied"], 1),
    # an expert intermediate of 48 per rank, which vLLM's CPU MoE pads to 64 with zeros
    "qwen3moe-padded": ("qwen3moe", ["--expert-ff", "96"], 2),
}


class Dumps:
    """The models and vLLM's dumps of them, made once per module: every architecture at tp 1
    and tp 2 and the VARIANTS, one vLLM process per tp."""

    def __init__(self, folder):
        self.folder = folder
        script, plug = setup_tools(folder)
        models = os.path.join(folder, "models")
        self.models = {arch: make_model(arch, models) for arch in ARCHS}
        tps = {arch: (1, 2) for arch in ARCHS}
        for name, (arch, extra, tp) in VARIANTS.items():
            self.models[name] = make_model(arch, os.path.join(models, name), extra)
            tps[name] = (tp,)
        for tp in (1, 2):
            jobs = [(hf, self.path(name, tp)) for name, (gguf, hf) in self.models.items()
                    if tp in tps[name]]
            dump(script, plug, jobs, tp, "float32", os.path.join(folder, f"vllm-tp{tp}.log"))

    def path(self, arch, tp):
        return os.path.join(self.folder, f"{arch}-tp{tp}")

    def get(self, arch, tp):
        return self.models[arch][0], self.path(arch, tp)

    def copy(self, arch, tp, name):
        gguf, d = self.get(arch, tp)
        out = os.path.join(self.folder, name)
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(d, out)
        return gguf, out


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    return Dumps(str(tmp_path_factory.mktemp("vllm-dumps")))


# vLLM 0.32's names that shard-plan does not write (each must be in the dump, and read)
NEW_NAMES = {
    "qwen3moe": ["mlp.experts.routed_experts.w13_weight", "mlp.experts.gate.weight"],
    "glm4moe": ["mlp.experts.routed_experts.w2_weight",
                "mlp.experts.routed_experts.e_score_correction_bias",
                "mlp.experts._shared_experts._layer.gate_up_proj.weight"],
    "deepseek2": ["mlp.experts.gate.e_score_correction_bias", "self_attn.fused_qkv_a_proj.weight",
                  "self_attn.mla_attn.q_b_proj.weight", "self_attn.mla_attn.mla_attn.W_UK_T",
                  "self_attn.mla_attn.mla_attn.W_UV"],
}


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("arch", ARCHS)
def test_real_dump_is_clean(dumps, arch, tp):
    gguf, d = dumps.get(arch, tp)
    files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
    assert files == [f"model-rank-{r}-part-0.safetensors" for r in range(tp)], files
    names = set(header(os.path.join(d, files[-1])))
    for n in NEW_NAMES.get(arch, []):
        assert any(k.endswith(n) for k in names), (n, sorted(names))
    assert any(k.endswith("attn._k_scale") for k in names), sorted(names)
    rc, out, err = check_dump(gguf, d, tp)
    assert rc == 0, (err, json.dumps(out, indent=1)[:4000] if out else None)
    assert out["ok"] and out["failed"] == 0 and out["unknown"] == 0, out
    # glm4moe's NextN block is for speculative decoding: the engine leaves it out
    if arch == "glm4moe":
        assert out["absent"] > 0 and all(f["status"] == "absent" and ".layers.2." in f["param"]
                                         for f in out["findings"]), out
    else:
        assert out["absent"] == 0 and out["findings"] == [], out


def only_finding(out, rank, param_tail):
    bad = [f for f in out["findings"] if f["status"] not in ("absent",)]
    assert len(bad) == 1, json.dumps(out, indent=1)
    f = bad[0]
    assert f["rank"] == rank and f["param"].endswith(param_tail) and f["status"] == "differs", f
    return f


def gguf_rows(a, hd):
    """HF's rows of each head put in the order llama's converter writes (GGUF row 2i+j holds
    HF row j*hd/2+i)."""
    return a.reshape(-1, 2, hd // 2, a.shape[-1]).transpose(0, 2, 1, 3).reshape(a.shape)


def test_llama_rows_left_permuted_are_rope_pairs(dumps):
    # rank 1 holds 2 q heads and 1 kv head of 64: q and k rows as the GGUF keeps them
    gguf, d = dumps.copy("llama", 2, "llama-permuted")
    name = "model.layers.0.self_attn.qkv_proj.weight"

    def permute(a):
        a[:192] = gguf_rows(a[:192], 64)
        return a
    edit(os.path.join(d, "model-rank-1-part-0.safetensors"), name, permute)
    rc, out, err = check_dump(gguf, d, 2)
    assert rc == 1, err
    assert only_finding(out, 1, name)["fault"] == "rope-pairs"


def test_expert_rows_swapped_are_named(dumps):
    gguf, d = dumps.copy("qwen3moe", 2, "qwen3moe-swapped")
    name = "model.layers.1.mlp.experts.routed_experts.w2_weight"

    def swap(a):
        a[3, [5, 9]] = a[3, [9, 5]]
        return a
    edit(os.path.join(d, "model-rank-1-part-0.safetensors"), name, swap)
    rc, out, err = check_dump(gguf, d, 2)
    assert rc == 1, err
    assert only_finding(out, 1, name)["fault"] is None
    text = subprocess.run([engines.tool("shard-plan"), "check-dump", gguf, d, "--tp", "2"],
                          capture_output=True, text=True).stdout
    assert f"rank 1 {name}" in text and "no known fault" in text, text


def test_shared_expert_scaled_is_named(dumps):
    gguf, d = dumps.copy("glm4moe", 2, "glm4moe-scaled")
    name = "model.layers.1.mlp.experts._shared_experts._layer.gate_up_proj.weight"
    edit(os.path.join(d, "model-rank-0-part-0.safetensors"), name, lambda a: a * 1.01)
    rc, out, err = check_dump(gguf, d, 2)
    assert rc == 1, err
    f = only_finding(out, 0, name)
    assert f["fault"] is None and 0.009 < f["rel_l2"] < 0.011, f


def test_mla_absorbed_matrix_of_rank0_is_named(dumps):
    # rank 1's W_UV computed from rank 0's heads: the catalog's rank0-everywhere
    gguf, d = dumps.copy("deepseek2", 2, "deepseek2-rank0")
    name = "model.layers.1.self_attn.mla_attn.mla_attn.W_UV"
    rank0 = tensor(os.path.join(d, "model-rank-0-part-0.safetensors"), name)
    edit(os.path.join(d, "model-rank-1-part-0.safetensors"), name, lambda a: rank0)
    rc, out, err = check_dump(gguf, d, 2)
    assert rc == 1, err
    assert only_finding(out, 1, name)["fault"] == "rank0-everywhere"


def test_kv_b_stacked_is_named(dumps):
    # kv_b_proj reassembled [K all heads; V all heads] before the row cut (a loader bug of the
    # catalog): the whole kv_b from both ranks (2 heads each, per head 32 k rows then 32 v rows)
    gguf, d = dumps.copy("deepseek2", 2, "deepseek2-stacked")
    name = "model.layers.0.self_attn.kv_b_proj.weight"
    paths = [os.path.join(d, f"model-rank-{r}-part-0.safetensors") for r in (0, 1)]
    whole = np.concatenate([tensor(p, name) for p in paths]).reshape(4, 2, 32, -1)
    stacked = np.concatenate([whole[:, 0].reshape(128, -1), whole[:, 1].reshape(128, -1)])
    for r, p in enumerate(paths):
        edit(p, name, lambda a, r=r: stacked[128 * r:128 * (r + 1)])
    rc, out, err = check_dump(gguf, d, 2)
    assert rc == 1, err
    assert [(f["rank"], f["param"], f["fault"]) for f in out["findings"]] == \
        [(0, name, "kv-b-stacked"), (1, name, "kv-b-stacked")], out


def test_lm_head_left_untied_is_named(dumps):
    # vLLM 0.32's DeepseekV2ForCausalLM ignores tie_word_embeddings: its lm_head is never
    # loaded (left as allocated) where the checkpoint says it is the embedding
    gguf, d = dumps.get("deepseek2-tied", 1)
    rc, out, err = check_dump(gguf, d, 1)
    assert rc == 1, err
    f = only_finding(out, 0, "lm_head.weight")
    assert f["param"] == "lm_head.weight" and f["fault"] is None, f


def test_padded_experts_are_clean(dumps):
    gguf, d = dumps.get("qwen3moe-padded", 2)
    assert header(os.path.join(d, "model-rank-1-part-0.safetensors"))[
        "model.layers.0.mlp.experts.routed_experts.w2_weight"]["shape"] == [8, 256, 64]
    rc, out, err = check_dump(gguf, d, 2)
    assert rc == 0 and out["ok"] and out["findings"] == [], (err, out)
    text = subprocess.run([engines.tool("shard-plan"), "check-dump", gguf, d, "--tp", "2", "-v"],
                          capture_output=True, text=True).stdout
    assert text.count("zero padding of the intermediate left out") == 8, text  # 2 layers, 2 ranks


# ---- the committed fixture: tests/data/vllm_dumps (README.md there) ----

# Small enough to commit (BF16, one layer, vocabulary 256; llama's embeddings tied, which vLLM
# saves once, as lm_head), and still what vLLM CPU takes: head sizes of 32 and up, MLA's 576
# (kv_lora 512 + rope 64). glm4moe's experts have an intermediate of 16 per rank, which vLLM pads
# to 32 with zeros. Not tied elsewhere: vLLM's deepseek2 and glm4moe leave such an lm_head unset.
FIXTURE = {
    "llama": (2, ["--layers", "1", "--embd", "64", "--heads", "2", "--kv-heads", "1",
                  "--head-dim", "32", "--ff", "64", "--vocab", "256", "--tied"]),
    "glm4moe": (2, ["--layers", "1", "--dense-layers", "0", "--embd", "32", "--heads", "2",
                    "--kv-heads", "1", "--head-dim", "32", "--vocab", "256", "--experts", "4",
                    "--expert-ff", "32"]),
    "deepseek2": (1, ["--layers", "1", "--dense-layers", "0", "--embd", "32", "--heads", "1",
                      "--kv-lora", "512", "--qk-rope", "64", "--qk-nope", "16", "--v-head", "16",
                      "--q-lora", "32", "--vocab", "256", "--experts", "4", "--expert-ff", "32"]),
}


def capture(out):
    """Write the fixture: per architecture the GGUF's recipe (gguf-gen arguments) and vLLM's
    BF16 dump of its HF checkpoint."""
    import hashlib
    os.makedirs(out, exist_ok=True)
    work = os.path.join(out, ".work")
    script, plug = setup_tools(work)
    recipes = {}
    for arch, (tp, args) in FIXTURE.items():
        gen = ["--arch", arch, "--type", "BF16", "--type-map", ".=BF16", "--seed", "1", *args]
        os.makedirs(os.path.join(work, arch), exist_ok=True)
        gguf = os.path.join(work, arch, f"{arch}.gguf")
        subprocess.run([engines.GEN, "model", *gen, "--no-sync", "--force", gguf], check=True)
        hf = os.path.join(work, arch, "hf")
        shutil.rmtree(hf, ignore_errors=True)
        subprocess.run([engines.GEN, "hf", gguf, hf], check=True)
        subprocess.run([sys.executable, os.path.join(engines.HERE, "make_hf_tokenizer.py"), gguf,
                        hf], check=True)
        d = os.path.join(out, f"{arch}-tp{tp}")
        shutil.rmtree(d, ignore_errors=True)
        dump(script, plug, [(hf, d)], tp, "bfloat16", os.path.join(work, f"{arch}.log"))
        recipes[arch] = {"tp": tp, "gguf_gen": gen,
                         "sha256": hashlib.sha256(open(gguf, "rb").read()).hexdigest()}
    with open(os.path.join(out, "recipes.json"), "w") as f:
        json.dump(recipes, f, indent=1)
        f.write("\n")
    shutil.rmtree(work)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--capture" or not engines.VLLM_PY or not engines.GEN:
        sys.exit("usage: GGUFKIT_VLLM_PYTHON=... GGUFKIT_GEN=... test_vllm_dumps.py --capture DIR")
    capture(sys.argv[2])
