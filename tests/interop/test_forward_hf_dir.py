"""ref-forward over a Hugging Face checkpoint (config.json + safetensors) instead of a GGUF.

Oracles, each independent of the code under test:
  - transformers' float32 outputs in ../shared/testdata/hf/{llama,deepseek_v3} (logits.npy,
    hidden_states.npy, layer_outputs.npy, routing.json): the checkpoint's run must reproduce
    them as the GGUF's run does (same tolerance as test_forward_hf.py);
  - the GGUF llama.cpp's converter made from the same checkpoint (model-f32.gguf): records of
    the two runs compare with `ref-forward compare` point by point (bit for bit for llama,
    whose weights and metadata are exact in both; to float32 rounding for deepseek_v3, whose
    GGUF keeps yarn_log_multiplier and rms_norm_eps as float32);
  - a GGUF converted wrongly on purpose with gguf-py (kv_b_proj's rows in another order):
    comparing its record with the checkpoint's names the first MLA layer;
  - FP8 and NVFP4 checkpoints `gguf-gen hf` writes for every architecture: their weights'
    own error against the BF16 checkpoint is measured here with numpy (the decoders of
    test_safetensors_numpy.py, written from the format docs), and the forward's error at the
    first attention output must be of that size, its logits within a few times it;
  - the record's model digest, recomputed with the xxhash package.
"""
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

from conftest import BIN, GEN, SHARED, gen_archs, tool
from test_safetensors_numpy import dequant, read_checkpoint

HF = os.path.join(SHARED, "hf") if SHARED else ""
need_hf = pytest.mark.skipif(not HF or not os.path.isdir(HF),
                             reason="../shared/testdata/hf is absent")
MODELS = ["llama", "deepseek_v3"]
ARCHS = gen_archs()
TOK = "1,5,9,200,33,7,81,4,150,3,60,12"


def refwd(*args, check=True):
    p = subprocess.run([tool("ref-forward"), *map(str, args)], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError(f"ref-forward {args}: exit {p.returncode}: {p.stderr}")
    return p


def tokens_of(model):
    with open(os.path.join(HF, model, "tokens.json")) as f:
        return ",".join(map(str, json.load(f)["token_ids"]))


def rel(a, b):
    return float(np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b))


def read_record(path):
    gguf = pytest.importorskip("gguf")
    r = gguf.GGUFReader(str(path))
    return {t.name: np.array(t.data) for t in r.tensors}, r


def compare_json(a, b, *extra):
    p = refwd("compare", a, b, "--json", *extra, check=False)
    assert p.returncode in (0, 1), p.stderr
    return p.returncode, json.loads(p.stdout)


# ---------------------------------------------------------------- transformers' outputs

@need_hf
@pytest.mark.parametrize("model", MODELS)
def test_checkpoint_logits_match_transformers(tmp_path, model):
    want = np.load(os.path.join(HF, model, "logits.npy"))
    out = tmp_path / "l.npy"
    refwd(os.path.join(HF, model), "--tokens", tokens_of(model), "--logits", out, "-q")
    got = np.load(out)
    assert got.dtype == np.float32 and got.shape == want.shape
    assert rel(got, want) < 1e-5
    for t in range(want.shape[0]):
        assert rel(got[t], want[t]) < 3e-5, t
        assert np.argmax(got[t]) == np.argmax(want[t])
    # the same through the config.json and the .safetensors paths, and in f64 / absorbed MLA
    for path, extra in ((os.path.join(HF, model, "config.json"), []),
                        (os.path.join(HF, model, "model.safetensors"), ["--precision", "f64"]),
                        (os.path.join(HF, model), ["--mla", "absorbed"])):
        refwd(path, "--tokens", tokens_of(model), "--logits", out, "-q", *extra)
        assert rel(np.load(out), want) < 1e-5, (path, extra)


@need_hf
@pytest.mark.parametrize("model", MODELS)
def test_checkpoint_hidden_states_match_transformers(tmp_path, model):
    rec = tmp_path / "r.gguf"
    refwd(os.path.join(HF, model), "--tokens", tokens_of(model), "--record", rec, "-q")
    caps, _ = read_record(rec)
    hidden = np.load(os.path.join(HF, model, "hidden_states.npy"))
    layers = np.load(os.path.join(HF, model, "layer_outputs.npy"))
    for il in range(layers.shape[0]):
        assert rel(caps[f"blk.{il}.residual"].reshape(layers[il].shape), layers[il]) < 1e-5, il
    assert rel(caps["output_norm"].reshape(hidden[2].shape), hidden[2]) < 1e-5
    emb = caps["blk.0.attn_residual"] - caps["blk.0.attn_out"]
    assert rel(emb.reshape(hidden[0].shape), hidden[0]) < 1e-5
    if model == "deepseek_v3":
        with open(os.path.join(HF, model, "routing.json")) as f:
            routing = json.load(f)["layers"]
        for layer, r in routing.items():
            ids = caps[f"blk.{layer}.moe_experts"].reshape(len(r["topk_index"]), -1)
            for t, want_ids in enumerate(r["topk_index"]):
                assert sorted(ids[t].astype(int).tolist()) == sorted(want_ids), (layer, t)


# ---------------------------------------------------------------- against the GGUF conversion

@need_hf
@pytest.mark.parametrize("model", MODELS)
def test_checkpoint_records_compare_with_gguf(tmp_path, model):
    toks = tokens_of(model)
    hf, gg = tmp_path / "hf.gguf", tmp_path / "gg.gguf"
    refwd(os.path.join(HF, model), "--tokens", toks, "--record", hf, "-q")
    refwd(os.path.join(HF, model, "model-f32.gguf"), "--tokens", toks, "--record", gg, "-q")
    # different digests: refused unless asked
    p = refwd("compare", gg, hf, check=False)
    assert p.returncode == 2 and "record.model_digest" in p.stderr and "--any-model" in p.stderr
    rc, res = compare_json(gg, hf, "--any-model")
    assert rc == 0 and res["ok"], res["first_divergence"]
    assert res["a"]["backend"] == "cpu" and res["b"]["backend"] == "cpu-hf"
    assert res["a"]["arch"] == res["b"]["arch"]
    assert res["n_comparisons"] == len(res["entries"]) and not res["missing_in_b"]
    a, _ = read_record(gg)
    b, _ = read_record(hf)
    assert list(a) == list(b)
    for name in a:
        if model == "llama":  # exact weights and metadata on both sides: the same bits
            assert a[name].tobytes() == b[name].tobytes(), name
        else:                 # f32 metadata in the GGUF (yarn_log_multiplier 0.100000001)
            assert rel(b[name], a[name]) < 1e-6 if np.any(a[name]) else True, name
    # the run's own --compare takes the GGUF's record (different models implied)
    p = refwd(os.path.join(HF, model), "--tokens", toks, "--compare", gg)
    assert "result: SAME" in p.stdout


@need_hf
def test_record_digest_is_the_checkpoints(tmp_path):
    xxhash = pytest.importorskip("xxhash")
    rec = tmp_path / "r.gguf"
    refwd(os.path.join(HF, "llama"), "--tokens", "1,2", "--record", rec, "-q")
    _, r = read_record(rec)
    field = r.fields["record.model_digest"]
    got = bytes(field.parts[field.data[0]]).decode()
    t = read_checkpoint_file(os.path.join(HF, "llama", "model.safetensors"))
    dtypes = {"BOOL": 0, "U8": 1, "I8": 2, "I16": 3, "U16": 4, "I32": 5, "U32": 6, "I64": 7,
              "U64": 8, "F16": 9, "BF16": 10, "F32": 11, "F64": 12}
    h = xxhash.xxh3_128()
    for name in sorted(t, key=lambda s: s.encode()):
        dtype, shape, raw = t[name]
        h.update(name.encode() + b"\0")
        h.update(np.array([dtypes[dtype], len(shape)], "<u4").tobytes())
        h.update(np.array(shape, "<i8").tobytes())
        h.update(xxhash.xxh3_128_digest(raw))
    assert got == h.hexdigest()


def read_checkpoint_file(path):
    from test_safetensors_numpy import read_safetensors
    return read_safetensors(path)


@need_hf
def test_wrong_kv_b_conversion_is_caught(tmp_path):
    """A GGUF whose kv_b_proj went in with its rows in another order (all heads' k rows,
    then all heads' v rows: a converter that splits k/v before heads) is caught by comparing
    its record with the checkpoint's, at the first MLA layer; the right order passes."""
    gguf = pytest.importorskip("gguf")
    src = gguf.GGUFReader(os.path.join(HF, "deepseek_v3", "model-f32.gguf"))
    toks = tokens_of("deepseek_v3")
    ref = tmp_path / "hf.gguf"
    refwd(os.path.join(HF, "deepseek_v3"), "--tokens", toks, "--record", ref, "-q")
    for wrong in (False, True):
        out = tmp_path / f"kvb-{wrong}.gguf"
        w = gguf.GGUFWriter(str(out), arch="deepseek2")
        for k, f in src.fields.items():
            if k.startswith("GGUF.") or k == "general.architecture":
                continue
            t = f.types[0]
            if t == gguf.GGUFValueType.ARRAY:
                w.add_key_value(k, f.contents(), t, sub_type=f.types[-1])
            else:
                w.add_key_value(k, f.contents(), t)
        tensors = {t.name: np.array(t.data) for t in src.tensors}
        for name, a in tensors.items():
            if ".attn_v_b." in name:
                continue
            if ".attn_k_b." in name:
                v = tensors[name.replace("attn_k_b", "attn_v_b")]  # [heads, v, kv_lora]
                k = a.transpose(0, 2, 1)                            # [heads, nope, kv_lora]
                if wrong:
                    kv = np.concatenate([k.reshape(-1, k.shape[2]), v.reshape(-1, v.shape[2])])
                else:
                    kv = np.concatenate([k, v], axis=1).reshape(-1, k.shape[2])
                w.add_tensor(name.replace("attn_k_b", "attn_kv_b"), np.ascontiguousarray(kv))
                continue
            w.add_tensor(name, a)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        rec = tmp_path / f"kvb-{wrong}.rec.gguf"
        refwd(out, "--tokens", toks, "--record", rec, "-q")
        rc, res = compare_json(ref, rec, "--any-model")
        if not wrong:
            assert rc == 0, res["first_divergence"]
            continue
        assert rc == 1
        first = res["first_divergence"]
        assert first["point"] == "blk.0.attn_out", first  # layer 0 is the first MLA layer
        e = {x["point"]: x for x in res["entries"]}
        assert e["blk.0.attn_norm"]["ok"] and e["blk.0.attn_out"]["rel_l2"] > 0.1
        p = refwd("compare", ref, rec, "--any-model", check=False)
        assert p.returncode == 1 and "FIRST DIVERGENCE: blk.0.attn_out" in p.stdout


# ---------------------------------------------------------------- FP8 / NVFP4 checkpoints

@pytest.fixture(scope="module")
def gen_ckpts(tmp_path_factory):
    if not GEN or not os.path.exists(GEN):
        pytest.fail(f"gguf-gen is not built (GGUFKIT_GEN={GEN!r})")
    d = tmp_path_factory.mktemp("hfdir")
    out = {}
    for arch in ARCHS:
        g = str(d / f"{arch}.gguf")
        subprocess.run([GEN, "model", "-q", "--no-sync", "--arch", arch, "--type", "BF16", g],
                       check=True)
        out[(arch, "gguf")] = g
        for fmt in ("bf16", "fp8", "nvfp4"):
            c = str(d / f"{arch}-{fmt}")
            subprocess.run([GEN, "hf", "-q", g, c, "--format", fmt], check=True)
            rec = str(d / f"{arch}-{fmt}.rec.gguf")
            refwd(c, "--tokens", TOK, "--record", rec, "-q")
            out[(arch, fmt)] = c
            out[(arch, fmt, "rec")] = rec
    return out


def weight_error(bf16_dir, q_dir):
    """Relative L2 error of the quantized projection weights against the BF16 ones."""
    b, q = read_checkpoint(bf16_dir), read_checkpoint(q_dir)
    num = den = 0.0
    for n in b:
        if n.endswith("_proj.weight"):
            wb = dequant(b, n).astype(np.float64)
            num += float(((dequant(q, n) - wb) ** 2).sum())
            den += float((wb ** 2).sum())
    return (num / den) ** 0.5


@pytest.mark.parametrize("arch", ARCHS)
def test_bf16_checkpoint_matches_its_gguf(tmp_path, gen_ckpts, arch):
    """gguf-gen hf stores norms and biases as BF16 too: the checkpoint's run is the GGUF's to
    BF16 rounding (2^-9), at every point."""
    gg = tmp_path / "gg.gguf"
    refwd(gen_ckpts[(arch, "gguf")], "--tokens", TOK, "--record", gg, "-q")
    rc, res = compare_json(gg, gen_ckpts[(arch, "bf16", "rec")], "--any-model",
                           "--tol", "rel_l2=0.02,cosine=0.9997,kl=1e-3")
    assert rc == 0, res["first_divergence"]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("fmt", ["fp8", "nvfp4"])
def test_quantized_checkpoint_within_format_error(gen_ckpts, arch, fmt):
    eps = weight_error(gen_ckpts[(arch, "bf16")], gen_ckpts[(arch, fmt)])
    assert {"fp8": (0.015, 0.04), "nvfp4": (0.07, 0.14)}[fmt][0] < eps < \
        {"fp8": (0.015, 0.04), "nvfp4": (0.07, 0.14)}[fmt][1], eps
    rc, res = compare_json(gen_ckpts[(arch, "bf16", "rec")], gen_ckpts[(arch, fmt, "rec")],
                           "--any-model")
    e = {x["point"]: x for x in res["entries"]}
    # nothing quantized before the first projection: the same bits
    assert e["blk.0.attn_norm"]["rel_l2"] == 0
    # the first attention output carries the weights' error (two to four quantized
    # matmuls on its path: at most twice it), the logits a few times it
    assert 0.5 * eps < e["blk.0.attn_out"]["rel_l2"] < 2 * eps, (eps, e["blk.0.attn_out"])
    assert e["logits"]["rel_l2"] < 6 * eps, (eps, e["logits"])


def test_fp8_closer_than_nvfp4(gen_ckpts):
    for arch in ARCHS:
        errs = []
        for fmt in ("fp8", "nvfp4"):
            _, res = compare_json(gen_ckpts[(arch, "bf16", "rec")],
                                  gen_ckpts[(arch, fmt, "rec")], "--any-model")
            errs.append({x["point"]: x for x in res["entries"]}["logits"]["rel_l2"])
        assert errs[0] < errs[1], (arch, errs)


# ---------------------------------------------------------------- tokens and text

def test_vocab_from_gguf(tmp_path, gen_ckpts):
    """--vocab takes --prompt, BOS and the text of generated ids from a GGUF of the model."""
    gg, hf = gen_ckpts[("llama", "gguf")], gen_ckpts[("llama", "bf16")]
    a = json.loads(refwd(gg, "--prompt", "Once upon a time", "--bos", "-n", "3", "--json").stdout)
    b = json.loads(refwd(hf, "--prompt", "Once upon a time", "--bos", "-n", "3", "--json",
                         "--vocab", gg).stdout)
    assert a["tokens"] == b["tokens"] and a["tokens"][0] == 1
    assert isinstance(b["text"], str) and len(b["generated"]) == 3
    c = json.loads(refwd(hf, "--tokens", "1,5,9", "-n", "2", "--json").stdout)
    assert c["text"] == "" and len(c["generated"]) == 2  # no vocabulary: ids only
    # without --tokens: config.json's bos_token_id
    d = json.loads(refwd(hf, "--json").stdout)
    assert d["tokens"] == [1]
