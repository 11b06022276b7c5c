"""config.json as transformers writes it, read by libgguf as transformers reads it.

Oracle: transformers itself (5.x, configurations only: no torch needed). For every model type
of the model module (llama, qwen2, qwen3, qwen3_moe, deepseek_v2, deepseek_v3, glm4_moe,
glm_moe_dsa), at the class defaults and at a tiny size with scaled RoPE where the type takes
it, the configuration is made with transformers and saved with save_pretrained() (the
transformers 5 spelling: rope_parameters, num_local_experts, ...), and then written again

  - "v4": as transformers 4.x wrote it and published checkpoints still have it: rope_theta,
    partial_rotary_factor and rope_scaling ("type") at the top, Qwen3-MoE's num_experts, none of
    the derived lists (layer_types, mlp_layer_types, indexer_types, DeepSeek's head_dim);
  - each other name transformers accepts: the expert count under the other names of the
    class's attribute_map, hidden_act "swish", rope_scaling with "rope_type".

Every rewrite is first loaded back with transformers and must give the same effective
hyper-parameters as the original (so it is a spelling, not another model); then libgguf's
parse of each file (tests/unit/test_hf_config_spellings --json, the parser behind every tool
that opens an HF folder) must equal the values transformers' configuration object gives the
modeling code: sizes, heads, kv heads, head widths, rotated width, RoPE theta and scaling,
MLA ranks, experts, routing, the DSA indexer, tied embeddings.

End to end: each `gguf-gen hf` checkpoint's config.json is loaded with transformers and saved
again in both spellings, and `ref-forward` over the folder must give the same logits, bit for
bit, as over the generator's own file. Values transformers takes but the forward cannot
compute must be refused naming the key.
"""
import copy
import json
import math
import os
import shutil
import subprocess

import numpy as np
import pytest

from conftest import GEN, tool

# Skipped, not failed, without transformers 5 (pip install transformers; no torch needed). The
# tests are still collected, so pytest exits 0 (a module-level skip would exit 5).
try:
    import transformers
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import yarn_apply_mscale, yarn_get_mscale
    WHY = None if int(transformers.__version__.split(".")[0]) >= 5 else \
        f"transformers {transformers.__version__}: the oracle is transformers 5 (rope_parameters)"
except ImportError as e:
    WHY = f"transformers is not importable ({e}): pip install transformers"
pytestmark = pytest.mark.skipif(WHY is not None, reason=WHY or "")

BUILD = os.environ.get("GGUFKIT_BUILD", "")
HELPER = os.path.join(BUILD, "tests", "test_hf_config_spellings")

CLASSES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM"),
    "deepseek_v2": ("DeepseekV2Config", "DeepseekV2ForCausalLM"),
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM"),
    "glm4_moe": ("Glm4MoeConfig", "Glm4MoeForCausalLM"),
    "glm_moe_dsa": ("GlmMoeDsaConfig", "GlmMoeDsaForCausalLM"),
}
TYPES = list(CLASSES)
MLA = {"deepseek_v2", "deepseek_v3", "glm_moe_dsa"}
ARCH = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "qwen3_moe": "qwen3moe",
        "deepseek_v2": "deepseek2", "deepseek_v3": "deepseek2", "glm4_moe": "glm4moe",
        "glm_moe_dsa": "glm-dsa"}

# The class defaults, but for the one value two classes leave unusable: DeepseekV2Config's
# num_experts_per_tok is None (its router cannot run), Glm4MoeConfig has no head_dim (4096 /
# 96 = 42, half of it rotated is odd); test_pure_defaults_refused checks those two.
DEFAULT_FIX = {"deepseek_v2": dict(num_experts_per_tok=6), "glm4_moe": dict(head_dim=128)}

_DENSE = dict(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
              num_attention_heads=16, num_key_value_heads=8, max_position_embeddings=4096,
              rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)
_MLA = dict(_DENSE, num_hidden_layers=3, num_key_value_heads=16, q_lora_rank=128,
            kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32,
            n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
            moe_intermediate_size=128, first_k_dense_replace=1)
TINY = {
    "llama": dict(_DENSE, head_dim=16, tie_word_embeddings=True, rope_parameters={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 1024, "rope_theta": 500000.0}),
    "qwen2": dict(_DENSE, rope_parameters={"rope_type": "linear", "factor": 2.0,
                                           "rope_theta": 1e6}),
    "qwen3": dict(_DENSE, head_dim=32, rope_parameters={
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024,
        "rope_theta": 1e6}),
    "qwen3_moe": dict(_DENSE, head_dim=16, num_experts=8, num_experts_per_tok=2,
                      moe_intermediate_size=64, norm_topk_prob=True, rope_parameters={
                          "rope_type": "yarn", "factor": 2.0, "attention_factor": 1.25,
                          "beta_fast": 16.0, "original_max_position_embeddings": 2048,
                          "rope_theta": 1e6}),
    "deepseek_v2": dict(_MLA, q_lora_rank=None, n_shared_experts=2, topk_method="greedy",
                        rope_parameters={"rope_type": "yarn", "factor": 40.0, "mscale": 0.707,
                                         "mscale_all_dim": 0.707, "beta_fast": 32.0,
                                         "beta_slow": 1.0,
                                         "original_max_position_embeddings": 4096,
                                         "rope_theta": 10000.0}),
    "deepseek_v3": dict(_MLA, n_group=2, topk_group=1, routed_scaling_factor=2.5,
                        rope_parameters={"rope_type": "yarn", "factor": 40.0, "mscale": 1.0,
                                         "mscale_all_dim": 1.0,
                                         "original_max_position_embeddings": 4096,
                                         "rope_theta": 10000.0}),
    "glm4_moe": dict(_DENSE, head_dim=32, num_key_value_heads=4, attention_bias=True,
                     use_qk_norm=True, n_routed_experts=8, num_experts_per_tok=2,
                     moe_intermediate_size=64, n_group=2, topk_group=1,
                     routed_scaling_factor=2.5, rope_parameters={
                         "rope_type": "default", "rope_theta": 1e6,
                         "partial_rotary_factor": 0.25}),
    "glm_moe_dsa": dict(_MLA, index_n_heads=8, index_head_dim=32, index_topk=64,
                        rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
}
SIZES = ["defaults", "tiny"]


def need_helper():
    if not os.path.exists(HELPER):
        pytest.fail(f"{HELPER} is not built (GGUFKIT_BUILD={BUILD!r})")


def make(model_type, size):
    cls = getattr(transformers, CLASSES[model_type][0])
    kw = DEFAULT_FIX.get(model_type, {}) if size == "defaults" else TINY[model_type]
    c = cls(**copy.deepcopy(kw))
    c.architectures = [CLASSES[model_type][1]]  # as a model's save_pretrained writes it
    return c


def save(config, d):
    os.makedirs(d, exist_ok=True)
    config.save_pretrained(d)
    with open(os.path.join(d, "config.json")) as f:
        return json.load(f)


def write(d, name, obj):
    p = os.path.join(d, name)
    os.makedirs(p, exist_ok=True)
    with open(os.path.join(p, "config.json"), "w") as f:
        json.dump(obj, f, indent=2)
    return p


def load(path):
    return AutoConfig.from_pretrained(path)


def parse(*dirs):
    need_helper()
    out = subprocess.run([HELPER, "--json", *(os.path.join(d, "config.json") for d in dirs)],
                         check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines()]


# ---------------------------------------------------------------- spellings

def as_v4(model_type, v5):
    """The same configuration as transformers 4.x wrote it."""
    d = copy.deepcopy(v5)
    rp = d.pop("rope_parameters")
    d["rope_theta"] = rp.pop("rope_theta")
    prf = rp.pop("partial_rotary_factor", None)
    if prf is not None:
        d["partial_rotary_factor"] = prf
    rtype = rp.pop("rope_type")
    rp.pop("type", None)  # a 4.x file's key, which transformers 5 keeps beside rope_type
    d["rope_scaling"] = None if rtype == "default" else dict(type=rtype, **rp)
    if model_type == "qwen3_moe":
        d["num_experts"] = d.pop("num_local_experts")
    for k in ("layer_types", "mlp_layer_types", "indexer_types"):
        d.pop(k, None)
    if model_type in MLA:
        d.pop("head_dim", None)
        d.pop("qk_head_dim", None)
    d["transformers_version"] = "4.57.1"
    return d


def renamed(d, old, new):
    d = copy.deepcopy(d)
    d[new] = d.pop(old)
    return d


def other_spellings(model_type, v5, v4):
    """(name, config) for every other name of a key that transformers reads."""
    out = [("swish", dict(v5, hidden_act="swish"))]
    if v4["rope_scaling"]:
        rs = dict(v4["rope_scaling"])
        rs["rope_type"] = rs.pop("type")
        out.append(("rope_scaling.rope_type", dict(v4, rope_scaling=rs)))
    if model_type == "qwen3_moe":
        out.append(("both-expert-names", dict(v5, num_experts=v5["num_local_experts"])))
    elif model_type == "deepseek_v2":
        out.append(("num_experts", renamed(v5, "n_routed_experts", "num_experts")))
    elif model_type in ("deepseek_v3", "glm4_moe"):
        out.append(("num_local_experts", renamed(v5, "n_routed_experts", "num_local_experts")))
    elif model_type == "glm_moe_dsa":
        out.append(("num_local_experts", renamed(v5, "n_routed_experts", "num_local_experts")))
        out.append(("num_experts", renamed(v4, "n_routed_experts", "num_experts")))
    return out


# ---------------------------------------------------------------- what transformers computes

def expected(c, model_type):
    """The hyper-parameters transformers' modeling code takes from configuration object c, in
    the units of libgguf's gguf_hparams (GGUF conventions: MLA has one kv head, no groups is
    0/0 for DeepSeek-V2's greedy routing)."""
    c.standardize_rope_params()  # what the rotary embedding does first
    rp = c.rope_parameters
    mla = model_type in MLA
    e = dict(arch=ARCH[model_type], n_vocab=c.vocab_size, n_embd=c.hidden_size,
             n_layer=c.num_hidden_layers, n_head=c.num_attention_heads, rms_eps=c.rms_norm_eps,
             n_ctx_train=c.max_position_embeddings, tied_embeddings=c.tie_word_embeddings,
             rope_freq_base=rp["rope_theta"], n_ff=c.intermediate_size, is_mla=mla)
    if mla:
        # the attention repeats k/v heads / kv_heads times: one per head, one latent for GGUF
        assert c.num_key_value_heads == c.num_attention_heads
        assert c.head_dim == c.qk_rope_head_dim  # the rotary embedding's width
        qk = c.qk_nope_head_dim + c.qk_rope_head_dim
        e.update(n_head_kv=1, n_embd_head_k=qk, n_embd_head_v=c.v_head_dim,
                 n_rot=int(c.head_dim * rp.get("partial_rotary_factor", 1.0)),
                 q_lora_rank=c.q_lora_rank or 0, kv_lora_rank=c.kv_lora_rank,
                 qk_nope=c.qk_nope_head_dim, qk_rope=c.qk_rope_head_dim, v_head=c.v_head_dim,
                 attn_scale=yarn_apply_mscale(rp, qk ** -0.5))
    else:
        hd = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        # only Glm4Moe's rotary embedding and apply_rotary_pos_emb rotate part of the head
        rot = int(hd * rp.get("partial_rotary_factor", 1.0)) if model_type == "glm4_moe" else hd
        e.update(n_head_kv=c.num_key_value_heads, n_embd_head_k=hd, n_embd_head_v=hd,
                 n_rot=rot, attn_scale=hd ** -0.5)
    rtype = rp["rope_type"]
    if rtype == "linear":
        e.update(rope_scaling="linear", rope_factor=rp["factor"])
    elif rtype == "yarn":
        f = rp["factor"]
        e.update(rope_scaling="yarn", rope_factor=f,
                 yarn_orig_ctx=rp["original_max_position_embeddings"],
                 yarn_beta_fast=rp.get("beta_fast") or 32, yarn_beta_slow=rp.get("beta_slow") or 1)
        ms, msa = rp.get("mscale"), rp.get("mscale_all_dim")
        af = rp.get("attention_factor")
        if af is None:
            af = yarn_get_mscale(f, ms) / yarn_get_mscale(f, msa) if ms and msa else \
                yarn_get_mscale(f)
        # cos/sin are scaled by af: libgguf's forward scales them by rope_attn_factor x
        # (1 + 0.1 ln f) outside MLA, by 1 for MLA (whose mscale is in attn_scale)
        e["cos_sin_factor"] = af
        if mla:
            e["yarn_log_mul"] = 0.1 * (msa or 0)
    elif rtype == "llama3":
        e.update(rope_scaling="none", l3_factor=rp["factor"], l3_low=rp["low_freq_factor"],
                 l3_high=rp["high_freq_factor"], l3_orig=rp["original_max_position_embeddings"])
    else:
        assert rtype == "default", rtype
        e.update(rope_scaling="none")
    if model_type == "qwen3_moe":
        assert c.decoder_sparse_step == 1 and not c.mlp_only_layers
        e.update(n_expert=c.num_experts, n_expert_used=c.num_experts_per_tok,
                 n_ff_exp=c.moe_intermediate_size, n_expert_shared=0, n_layer_dense_lead=0,
                 gating="softmax", norm_topk=c.norm_topk_prob, routed_scale=1.0)
    elif model_type in ("deepseek_v2", "deepseek_v3", "glm4_moe", "glm_moe_dsa"):
        # DeepseekV2TopkRouter reads config.num_experts; the others config.num_local_experts
        n = c.num_experts if model_type == "deepseek_v2" else c.num_local_experts
        e.update(n_expert=n, n_expert_used=c.num_experts_per_tok,
                 n_ff_exp=c.moe_intermediate_size, n_expert_shared=c.n_shared_experts,
                 n_ff_shexp=c.moe_intermediate_size * c.n_shared_experts,
                 routed_scale=c.routed_scaling_factor)
        if model_type == "glm_moe_dsa":
            types = c.mlp_layer_types
            lead = next((i for i, t in enumerate(types) if t != "dense"), len(types))
            assert all(t == "sparse" for t in types[lead:])
            assert all(t == "full" for t in c.indexer_types[:c.num_hidden_layers])
            e.update(idx_n_head=c.index_n_heads, idx_head_dim=c.index_head_dim,
                     idx_top_k=c.index_topk)
        else:
            lead = min(c.first_k_dense_replace, c.num_hidden_layers)
        e["n_layer_dense_lead"] = lead
        if model_type == "deepseek_v2":
            # DeepseekV2TopkRouter: softmax, never normalized, greedy ignores the groups
            assert c.topk_method in ("greedy", "group_limited_greedy")
            e.update(gating="softmax", norm_topk=False)
            if c.topk_method == "greedy":
                e.update(n_group=0, topk_group=0)
        else:
            e.update(gating="sigmoid", norm_topk=c.norm_topk_prob, n_group=c.n_group,
                     topk_group=c.topk_group)
    else:
        e.update(n_expert=0, n_expert_used=0)
    tok = lambda t: -1 if t is None else (t[0] if isinstance(t, list) else t)  # noqa: E731
    e.update(bos=tok(c.bos_token_id), eos=tok(c.eos_token_id))
    return e


def compare(got, want, what):
    assert got["status"] == "ok", f"{what}: {got['message']}"
    want = dict(want)
    af = want.pop("cos_sin_factor", None)
    if af is not None:
        f = got["rope_factor"]
        ours = 1.0 if got["is_mla"] else got["rope_attn_factor"] * (1 + 0.1 * math.log(f))
        assert math.isclose(ours, af, rel_tol=1e-12), (what, "cos/sin factor", ours, af)
    bad = {}
    for k, v in want.items():
        g = got[k]
        if isinstance(v, float) or isinstance(g, float):
            ok = math.isclose(g, v, rel_tol=1e-12, abs_tol=0.0)
        else:
            ok = g == v
        if not ok:
            bad[k] = (g, v)
    assert not bad, f"{what}: ours != transformers': {bad}"


# ---------------------------------------------------------------- tests

@pytest.fixture(scope="module")
def spellings(tmp_path_factory):
    """{(model_type, size): [(spelling, dir, transformers' config of that file)]}."""
    root = tmp_path_factory.mktemp("hfcfg")
    out = {}
    for mt in TYPES:
        for size in SIZES:
            base = str(root / f"{mt}-{size}")
            v5 = save(make(mt, size), os.path.join(base, "v5"))
            v4 = as_v4(mt, v5)
            files = [("v5", os.path.join(base, "v5")), ("v4", write(base, "v4", v4))]
            files += [(n, write(base, n, d)) for n, d in other_spellings(mt, v5, v4)]
            out[(mt, size)] = [(n, p, load(p)) for n, p in files]
    return out


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("model_type", TYPES)
def test_spellings_are_one_config_to_transformers(spellings, model_type, size):
    """Each rewrite is a spelling: transformers reads it to the same hyper-parameters."""
    files = spellings[(model_type, size)]
    ref = expected(files[0][2], model_type)
    for name, _, c in files[1:]:
        assert expected(c, model_type) == ref, name


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("model_type", TYPES)
def test_parse_equals_transformers(spellings, model_type, size):
    files = spellings[(model_type, size)]
    got = parse(*(p for _, p, _ in files))
    for (name, _, c), g in zip(files, got):
        compare(g, expected(c, model_type), f"{model_type} {size} {name}")


def test_every_spelling_counted(spellings):
    """The report's count: model types x sizes x spellings parsed and compared."""
    n = sum(len(v) for v in spellings.values())
    assert n >= len(TYPES) * len(SIZES) * 3, n


def test_pure_defaults_refused(tmp_path):
    """The two class defaults transformers' models cannot run either are refused by name."""
    d = str(tmp_path / "v2")
    save(transformers.DeepseekV2Config(), d)
    d2 = str(tmp_path / "glm")
    save(transformers.Glm4MoeConfig(), d2)
    v2, glm = parse(d, d2)
    assert v2["status"] == "GGUF_E_NOT_FOUND" and "num_experts_per_tok" in v2["message"]
    # head_dim 4096 // 96 = 42, rotated 21: transformers computes 11 frequencies over an odd
    # width, which no GGUF RoPE can say
    assert glm["status"] == "GGUF_E_BAD_VALUE" and "partial_rotary_factor" in glm["message"]


REFUSED = [
    # (model type, changes to the tiny config, key the message must name)
    ("qwen2", dict(use_sliding_window=True, sliding_window=128, max_window_layers=1),
     "layer_types"),
    ("qwen3_moe", dict(use_sliding_window=True, sliding_window=128), "use_sliding_window"),
    ("qwen3_moe", dict(decoder_sparse_step=2), "decoder_sparse_step"),
    ("llama", dict(attention_bias=True), "attention_bias"),
    ("llama", dict(mlp_bias=True), "mlp_bias"),
    ("llama", dict(hidden_act="gelu"), "hidden_act"),
    ("qwen3", dict(rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e6}),
     "rope_parameters"),
    ("qwen3", dict(rope_parameters={"rope_type": "yarn", "factor": 4.0, "truncate": False,
                                    "original_max_position_embeddings": 1024,
                                    "rope_theta": 1e6}), "rope_parameters"),
    ("deepseek_v2", dict(norm_topk_prob=True), "norm_topk_prob"),
    ("deepseek_v2", dict(topk_method="group_limited_greedy", n_group=2, topk_group=1),
     "topk_method"),
    ("deepseek_v3", dict(rope_interleave=False), "rope_interleave"),
    ("deepseek_v3", dict(rope_parameters={"rope_type": "yarn", "factor": 40.0, "mscale": 0.707,
                                          "mscale_all_dim": 1.0, "rope_theta": 1e4,
                                          "original_max_position_embeddings": 4096}),
     "rope_parameters"),
    ("glm_moe_dsa", dict(index_topk_freq=2, num_hidden_layers=4), "indexer_types"),
    ("glm_moe_dsa", dict(index_topk_pattern="FFSF"), "indexer_types"),
]


@pytest.mark.parametrize("model_type,change,key", REFUSED,
                         ids=[f"{m}-{k}-{i}" for i, (m, _, k) in enumerate(REFUSED)])
def test_refused_by_name(tmp_path, model_type, change, key):
    """What transformers computes and the forward cannot is an error naming the key."""
    cls = getattr(transformers, CLASSES[model_type][0])
    kw = dict(TINY[model_type])
    kw.update(copy.deepcopy(change))
    d = str(tmp_path / "c")
    save(cls(**kw), d)
    g, = parse(d)
    assert g["status"] in ("GGUF_E_UNSUPPORTED", "GGUF_E_BAD_VALUE"), g
    assert f"config.json: {key}:" in g["message"], g["message"]


# ---------------------------------------------------------------- end to end

GEN_ARCHS = [("llama", []), ("qwen2", []), ("qwen3", []), ("qwen3moe", []),
             ("deepseek2", []), ("deepseek2", ["--gating", "softmax"]), ("glm4moe", []),
             ("glm4moe", ["--qk-norm"]), ("glm-dsa", [])]
TOK = "1,5,9,200,33,7,81,4"


@pytest.mark.parametrize("arch,extra", GEN_ARCHS, ids=[a + "".join(e) for a, e in GEN_ARCHS])
def test_resaved_checkpoint_same_logits(tmp_path, arch, extra):
    """A checkpoint whose config.json transformers re-saved (5.x spelling) or a 4.x tool
    wrote: every tool opens it (ref-forward here), and the logits are the original's."""
    if not GEN or not os.path.exists(GEN):
        pytest.fail(f"gguf-gen is not built (GGUFKIT_GEN={GEN!r})")
    g = str(tmp_path / "m.gguf")
    subprocess.run([GEN, "model", "-q", "--no-sync", "--arch", arch, *extra, g], check=True)
    orig = str(tmp_path / "orig")
    subprocess.run([GEN, "hf", "-q", g, orig], check=True)
    # gguf-gen writes a whole float as "1" (%.17g), which transformers 5's strict
    # dataclasses refuse for a float field (4.x took it): give the loader floats
    with open(os.path.join(orig, "config.json")) as f:
        gen_cfg = json.load(f)
    cls = AutoConfig.for_model(gen_cfg["model_type"]).__class__
    floats = {k for k, t in getattr(cls, "__annotations__", {}).items() if "float" in str(t)}
    fixed = {k: float(v) if k in floats and type(v) is int else v for k, v in gen_cfg.items()}
    fixdir = write(str(tmp_path), "gen-floats", fixed)
    c = load(fixdir)
    mt = c.model_type
    v5 = save(c, str(tmp_path / "resaved"))
    assert expected(load(str(tmp_path / "resaved")), mt) == expected(c, mt)
    runs = {}
    for name, cfg in (("v5", v5), ("v4", as_v4(mt, v5))):
        d = str(tmp_path / name)
        shutil.copytree(orig, d)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        runs[name] = d
    logits = {}
    for name, d in [("orig", orig), *runs.items()]:
        out = str(tmp_path / f"{name}.npy")
        p = subprocess.run([tool("ref-forward"), d, "--tokens", TOK, "--logits", out, "-q"],
                           capture_output=True, text=True)
        assert p.returncode == 0, f"{name}: {p.stderr}"
        logits[name] = np.load(out)
    for name in runs:
        assert np.array_equal(logits[name], logits["orig"]), name
