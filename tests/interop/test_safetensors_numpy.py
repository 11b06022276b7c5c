"""libgguf's safetensors dequantization against numpy formulas written from the formats' docs.

An independent implementation: the file is parsed here with json + numpy (the layout of
github.com/huggingface/safetensors), and each format is decoded from its definition:
  - F8_E4M3 (OCP E4M3FN): S.EEEE.MMM, bias 7, subnormals m/8 * 2^-6, S.1111.111 NaN;
  - block-scaled FP8 (DeepSeek-V3): w = f8(W) * W_scale_inv[r // 128, c // 128];
  - NVFP4 (NVIDIA ModelOpt): two E2M1 values per byte, low nibble first, one E4M3 scale per
    16 elements and a per-tensor F32 weight_scale_2: w = e2m1 * (f8(scale) * scale_2),
    evaluated in float32 in that order.
Checkpoints come from `gguf-gen hf` over generated models, and from ../shared/testdata/hf when
present. Our side is called through ctypes (libgguf.so): gguf_st_weight_find + _dequant.
"""
import ctypes
import json
import os
import struct
import subprocess

import numpy as np
import pytest

from conftest import GEN, SHARED

BUILD = os.environ.get("GGUFKIT_BUILD", "")
LIB = os.path.join(BUILD, "libgguf", "libgguf.so")


@pytest.fixture(scope="module")
def lib():
    if not os.path.exists(LIB):
        pytest.fail(f"{LIB} is not built")
    return ctypes.CDLL(LIB)


def ours(lib, ckpt, name, n):
    """Dequantize weight `name` of checkpoint `ckpt` with libgguf into n float32 values."""
    err = ctypes.create_string_buffer(1024)
    s = ctypes.c_void_p()
    assert lib.gguf_st_set_open(ctypes.byref(s), ckpt.encode(), err) == 0, err.raw[16:200]
    try:
        w = ctypes.create_string_buffer(4096)  # gguf_st_weight, opaque here
        assert lib.gguf_st_weight_find(s, name.encode(), w, err) == 0, err.raw[16:300]
        out = np.zeros(n, dtype=np.float32)
        assert lib.gguf_st_weight_dequant(w, out.ctypes.data_as(ctypes.c_void_p),
                                          ctypes.c_uint64(n), err) == 0, err.raw[16:300]
        return out
    finally:
        lib.gguf_st_set_free(s)


# ---- an independent reader and the formulas ----

def read_safetensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    hdr = json.loads(raw[8:8 + n])
    hdr.pop("__metadata__", None)
    out = {}
    for name, e in hdr.items():
        b, en = e["data_offsets"]
        out[name] = (e["dtype"], tuple(e["shape"]), raw[8 + n + b:8 + n + en])
    return out


def read_checkpoint(d):
    idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    t = {}
    for f in sorted(set(idx["weight_map"].values())):
        t.update(read_safetensors(os.path.join(d, f)))
    assert set(t) == set(idx["weight_map"])
    return t


def e4m3(b):
    b = b.astype(np.int32)
    s = np.where(b & 0x80, -1.0, 1.0)
    e = (b >> 3) & 15
    m = b & 7
    v = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7.0))
    v = np.where((e == 15) & (m == 7), np.nan, v)
    return (s * v).astype(np.float32)


E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32)


def plain(dtype, shape, raw):
    if dtype == "BF16":
        u = np.frombuffer(raw, "<u2").astype(np.uint32) << 16
        return u.view(np.float32).reshape(shape)
    if dtype == "F32":
        return np.frombuffer(raw, "<f4").reshape(shape)
    if dtype == "F16":
        return np.frombuffer(raw, "<f2").astype(np.float32).reshape(shape)
    if dtype == "F8_E4M3":
        return e4m3(np.frombuffer(raw, np.uint8)).reshape(shape)
    raise AssertionError(dtype)


def dequant(t, name):
    dtype, shape, raw = t[name]
    if dtype == "F8_E4M3" and name + "_scale_inv" in t:
        w = plain(dtype, shape, raw)
        s = plain(*t[name + "_scale_inv"])
        r = np.arange(shape[0]) // 128
        c = np.arange(shape[1]) // 128
        return (w * s[r][:, c]).astype(np.float32)
    if dtype == "U8" and name + "_scale" in t:
        q = np.frombuffer(raw, np.uint8).reshape(shape)
        nib = np.stack([q & 15, q >> 4], axis=-1).reshape(shape[0], shape[1] * 2)
        sc = plain(*t[name + "_scale"])                     # [R, C/16]
        s2 = np.float32(plain(*t[name + "_scale_2"]).reshape(-1)[0])
        block = (sc * s2).astype(np.float32)                 # f8(scale) * scale_2, rounded once
        return (E2M1[nib] * np.repeat(block, 16, axis=1)).astype(np.float32)
    return plain(dtype, shape, raw)


def same_bits(a, b):
    a = np.asarray(a, np.float32).reshape(-1)
    b = np.asarray(b, np.float32).reshape(-1)
    an, bn = np.isnan(a), np.isnan(b)
    return a.shape == b.shape and np.array_equal(an, bn) and \
        np.array_equal(a[~an].view(np.uint32), b[~bn].view(np.uint32))


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    if not GEN or not os.path.exists(GEN):
        pytest.fail(f"gguf-gen is not built (GGUFKIT_GEN={GEN!r})")
    d = tmp_path_factory.mktemp("st")
    out = {}
    for arch in ("deepseek2", "llama"):
        g = str(d / f"{arch}.gguf")
        subprocess.run([GEN, "model", "-q", "--no-sync", "--arch", arch, "--type", "F32", g],
                       check=True)
        for fmt in ("bf16", "fp8", "nvfp4"):
            c = str(d / f"{arch}-{fmt}")
            subprocess.run([GEN, "hf", "-q", g, c, "--format", fmt], check=True)
            out[(arch, fmt)] = c
    return out


@pytest.mark.parametrize("arch", ["deepseek2", "llama"])
@pytest.mark.parametrize("fmt", ["bf16", "fp8", "nvfp4"])
def test_every_weight_bit_exact(lib, ckpts, arch, fmt):
    c = ckpts[(arch, fmt)]
    t = read_checkpoint(c)
    companions = ("_scale_inv", "_scale", "_scale_2", "input_scale")
    names = [n for n in t if not n.endswith(companions)]
    kinds = set()
    for n in names:
        want = dequant(t, n)
        kinds.add(t[n][0])
        got = ours(lib, c, n, want.size)
        assert same_bits(got, want), n
    expect = {"bf16": "BF16", "fp8": "F8_E4M3", "nvfp4": "U8"}[fmt]
    assert expect in kinds, kinds
    if arch == "deepseek2":
        assert any("kv_b_proj" in n for n in names)
        assert t[next(n for n in names if "kv_b_proj" in n)][0] == expect


def test_config_files(ckpts):
    cfg = json.load(open(os.path.join(ckpts[("deepseek2", "fp8")], "config.json")))
    assert cfg["quantization_config"] == {"quant_method": "fp8", "fmt": "e4m3",
                                          "activation_scheme": "dynamic",
                                          "weight_block_size": [128, 128]}
    q = json.load(open(os.path.join(ckpts[("deepseek2", "nvfp4")], "hf_quant_config.json")))
    assert q["quantization"]["quant_algo"] == "NVFP4" and q["quantization"]["group_size"] == 16


def test_e4m3_every_code(lib):
    lib.gguf_fp8_e4m3_to_fp32.restype = ctypes.c_float
    codes = np.arange(256, dtype=np.uint8)
    got = np.array([lib.gguf_fp8_e4m3_to_fp32(ctypes.c_uint8(int(c))) for c in codes], np.float32)
    assert same_bits(got, e4m3(codes))


def test_shared_hf_models(lib):
    if not SHARED or not os.path.isdir(os.path.join(SHARED, "hf")):
        pytest.skip("../shared/testdata is absent")
    for m in ("llama", "deepseek_v3"):
        path = os.path.join(SHARED, "hf", m, "model.safetensors")
        t = read_safetensors(path)
        for n in t:
            want = dequant(t, n)
            assert same_bits(ours(lib, path, n, want.size), want), n
