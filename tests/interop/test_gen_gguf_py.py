"""gguf-gen output read by gguf-py (the format's reference implementation).

1. Same sizes as the HF models in ../shared/testdata/hf give the converter's exact
   tensor list (names, order, shapes, types) and metadata (keys in order, value types,
   values; with --tokenizer gpt2 the same tokenizer keys, other tokens of course).
2. Every architecture and every tensor type loads; dequantized weights are finite
   and small (|x| <= 0.07), norms near 1.
3. Split parts carry split.no / split.count (uint16) and split.tensors.count (int32).
4. A replica has its tensor map's exact tensor list.
"""
import os
import subprocess

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from conftest import GEN, SHARED, gen_archs  # noqa: E402

SMALL = ["--embd", "256", "--ff", "256", "--heads", "8", "--kv-heads", "4", "--head-dim", "32",
         "--vocab", "300", "--expert-ff", "256", "--experts", "4", "--kv-lora", "32",
         "--q-lora", "64", "--indexer-heads", "4", "--indexer-head-dim", "16"]
# The converter's sizes for ../shared/testdata/hf/*/config.json.
HF = {
    "llama": ["--arch", "llama", "--embd", "128", "--layers", "2", "--heads", "4",
              "--kv-heads", "2", "--head-dim", "32", "--ff", "256", "--vocab", "1024",
              "--rms-eps", "1e-5", "--type", "F32", "--tokenizer", "gpt2"],
    "deepseek_v3": ["--arch", "deepseek2", "--embd", "128", "--layers", "2", "--heads", "4",
                    "--q-lora", "256", "--kv-lora", "256", "--qk-nope", "64", "--qk-rope", "32",
                    "--v-head", "64", "--ff", "256", "--experts", "8", "--experts-used", "2",
                    "--expert-groups", "2", "--groups-used", "1", "--expert-ff", "64",
                    "--dense-layers", "1", "--shared-experts", "1", "--vocab", "1024",
                    "--rms-eps", "1e-6", "--type", "F32", "--tokenizer", "gpt2"],
}


def gen(tmp_path, name, *args):
    if not GEN or not os.path.exists(GEN):
        pytest.fail(f"gguf-gen is not built (GGUFKIT_GEN={GEN!r})")
    out = str(tmp_path / name)
    subprocess.run([GEN, *args, "--no-sync", "-q", out], check=True)
    return out


def value(field):
    v = field.contents()
    return round(v, 6) if isinstance(v, float) else v


def tensor_list(reader):
    return [(t.name, t.tensor_type.name, [int(x) for x in t.shape]) for t in reader.tensors]


@pytest.mark.parametrize("model", sorted(HF))
def test_same_as_converter(tmp_path, model):
    ref_path = os.path.join(SHARED, "hf", model, "model-f32.gguf")
    if not os.path.exists(ref_path):
        pytest.skip(f"{ref_path} is absent")
    ours = gguf.GGUFReader(gen(tmp_path, "m.gguf", "model", *HF[model]))
    ref = gguf.GGUFReader(ref_path)
    assert tensor_list(ours) == tensor_list(ref)
    # Same keys in the same order (their tokenizer also names a padding token), same value
    # types; same values except the name and the vocabulary itself.
    keys = [k for k in ref.fields if k != "tokenizer.ggml.padding_token_id"]
    assert list(ours.fields) == keys
    for k in keys:
        assert ours.fields[k].types == ref.fields[k].types, k
        if k.startswith("GGUF.") or k == "general.name" or (
                k.startswith("tokenizer.") and k not in ("tokenizer.ggml.model", "tokenizer.ggml.pre")):
            continue
        assert value(ours.fields[k]) == value(ref.fields[k]), k
    assert len(ours.fields["tokenizer.ggml.tokens"].data) == len(ref.fields["tokenizer.ggml.tokens"].data)


def check_values(reader, type_name):
    for t in reader.tensors:
        if t.tensor_type.name in ("F64", "I8", "I16", "I32", "I64", "Q1_0", "Q8_K"):
            continue  # gguf-py has no dequantization for these
        x = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
        assert np.isfinite(x).all(), t.name
        if t.name.endswith("norm.weight"):
            assert np.abs(x - 1).max() <= 0.11, t.name
        else:
            assert np.abs(x).max() <= 0.07, (t.name, type_name, np.abs(x).max())
            assert x.std() > 0.002, (t.name, type_name)


@pytest.mark.parametrize("arch", gen_archs())
def test_every_arch(tmp_path, arch):
    r = gguf.GGUFReader(gen(tmp_path, "m.gguf", "model", "--arch", arch, *SMALL, "--type", "Q8_0"))
    assert value(r.fields["general.architecture"]) == arch
    blocks = value(r.fields[f"{arch}.block_count"])
    assert blocks == (3 if arch in ("glm4moe", "glm-dsa") else 2)
    assert len(r.fields["tokenizer.ggml.tokens"].data) == 300
    assert value(r.fields["tokenizer.ggml.model"]) == "llama"
    names = {t.name for t in r.tensors}
    assert {"token_embd.weight", "output_norm.weight", "output.weight"} <= names
    for b in range(blocks):
        assert f"blk.{b}.attn_norm.weight" in names
    check_values(r, "Q8_0")


TYPES = [t for t in subprocess.run([GEN, "types"], capture_output=True, text=True).stdout.split()
         if t != "Q8_1"] if GEN and os.path.exists(GEN) else []
# Q8_1: gguf-py's size table says 40 bytes a block, ggml writes 36 (see docs/dequant.md).


@pytest.mark.parametrize("type_name", TYPES)
def test_every_type(tmp_path, type_name):
    r = gguf.GGUFReader(gen(tmp_path, "m.gguf", "model", "--arch", "llama", *SMALL, "--layers",
                            "1", "--type", type_name))
    types = {t.name: t.tensor_type.name for t in r.tensors}
    assert types["blk.0.attn_q.weight"] == type_name
    assert types["output_norm.weight"] == "F32"
    check_values(r, type_name)


def test_rope_freqs(tmp_path):
    """--rope-freqs F: Llama 3's rope_freqs.weight, first tensor, as the converter computes it."""
    r = gguf.GGUFReader(gen(tmp_path, "m.gguf", "model", "--arch", "llama", "--head-dim", "64",
                            "--heads", "4", "--kv-heads", "2", "--rope-freqs", "8"))
    t = r.tensors[0]
    assert (t.name, t.tensor_type.name, [int(x) for x in t.shape]) == ("rope_freqs.weight", "F32", [32])
    f32 = np.float32
    freqs = f32(1) / (f32(10000) ** (np.arange(0, 64, 2, dtype=f32) / f32(64)))
    want = []
    for f in freqs:
        w = f32(2 * np.pi) / f
        if w < f32(8192 / 4):
            want.append(1.0)
        elif w > f32(8192):
            want.append(8.0)
        else:
            sm = (f32(8192) / w - f32(1)) / f32(3)
            want.append(f32(1) / ((f32(1) - sm) / f32(8) + sm))
    np.testing.assert_allclose(np.array(t.data), np.array(want, dtype=f32), rtol=1e-6)
    assert np.array(t.data)[0] == 1 and np.array(t.data)[-1] == 8


def test_gpt2_vocab(tmp_path):
    """--tokenizer gpt2: 256 byte tokens in GPT-2's order, merges whose parts and results
    are all tokens, <|endoftext|> last (control, BOS and EOS), no duplicates."""
    r = gguf.GGUFReader(gen(tmp_path, "m.gguf", "model", "--arch", "llama", "--vocab", "1000",
                            "--tokenizer", "gpt2"))
    f = r.fields
    toks = [bytes(f["tokenizer.ggml.tokens"].parts[i]).decode() for i in f["tokenizer.ggml.tokens"].data]
    merges = [bytes(f["tokenizer.ggml.merges"].parts[i]).decode() for i in f["tokenizer.ggml.merges"].data]
    assert len(toks) == 1000 and len(set(toks)) == 1000
    # GPT-2's bytes_to_unicode, in its order
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    assert toks[:256] == [chr(c) for c in cs]
    ts = set(toks)
    assert len(merges) == 1000 - 257
    for m in merges:
        a, b = m.split(" ")
        assert a in ts and b in ts and a + b in ts
    assert toks[-1] == "<|endoftext|>"
    assert list(f["tokenizer.ggml.token_type"].contents())[-1] == 3
    assert value(f["tokenizer.ggml.bos_token_id"]) == value(f["tokenizer.ggml.eos_token_id"]) == 999
    assert "\u0120the" in ts  # "Ġthe": merges build words


def test_split_keys(tmp_path):
    gen(tmp_path, "s.gguf", "model", "--arch", "deepseek2", *SMALL, "--split-max-tensors", "9")
    parts = sorted(p for p in os.listdir(tmp_path) if p.startswith("s-"))
    n = len(parts)
    assert n > 1 and parts[-1] == f"s-{n:05d}-of-{n:05d}.gguf"
    total = 0
    for i, p in enumerate(parts):
        r = gguf.GGUFReader(str(tmp_path / p))
        assert value(r.fields["split.no"]) == i
        assert r.fields["split.no"].types == [gguf.GGUFValueType.UINT16]
        assert value(r.fields["split.count"]) == n
        assert r.fields["split.count"].types == [gguf.GGUFValueType.UINT16]
        assert r.fields["split.tensors.count"].types == [gguf.GGUFValueType.INT32]
        assert ("deepseek2.block_count" in r.fields) == (i == 0)
        total += len(r.tensors)
        assert len(r.tensors) <= 9
    assert value(r.fields["split.tensors.count"]) == total


def test_replica(tmp_path):
    path = os.path.join(SHARED, "tensor-maps", "GLM-5.1-Q4_K.map")
    if not os.path.exists(path):
        pytest.skip(f"{path} is absent")
    r = gguf.GGUFReader(gen(tmp_path, "r.gguf", "replica", path))
    want = []
    for line in open(path):
        f = line.rstrip("\n").split(":")
        shape = [int(x) for x in f[3][len("shape=("):-1].split(",") if x.strip()]
        want.append((f[2], f[4][len("dtype="):].upper(), shape))
    assert tensor_list(r) == want
    assert value(r.fields["glm-dsa.block_count"]) == 79
