#!/usr/bin/env python3
"""Small fixtures for gguf-dequant-verify, written with gguf-py and numpy (no ggufkit code), as
shown in docs/gguf-dequant-verify.md.

  dequant_fixture.py reference DIR
      DIR/ref.safetensors: the "original" weights of one MLA layer (kv_b_proj [H*(nope+v),
      kv_lora]), an up projection and three experts (F32); and Q8_0 GGUF files made from them:
      DIR/good.gguf (as the converter stores them: attn_k_b transposed, attn_v_b),
      DIR/bad_up.gguf (ffn_up rows reversed: same shape), DIR/bad_kvb.gguf (two heads of
      attn_k_b swapped), DIR/bad_kb_t.gguf (attn_k_b without its transpose).
      The same construction as tests/integration/test_dequant_verify.sh.
  dequant_fixture.py nvfp4-bad OUT
      OUT: one NVFP4 tensor "w" of 4 blocks [64, 4] with a zero UE4M3 scale in block 0, the
      NaN pattern 0x7F in block 1, a scale byte with bit 7 set (not a UE4M3 encoding) in
      block 2, and a clean block 3.
  dequant_fixture.py from-ckpt CKPT OUT_PREFIX TYPE[,TYPE...] [REGEX]
      OUT_PREFIX-TYPE.gguf (TYPE: F32, Q8_0, Q6_K, Q4_K) for each TYPE: llama GGUF files made from
      the weights of the HF checkpoint CKPT (as `gguf-gen hf` writes it: BF16, block-scaled FP8,
      ModelOpt NVFP4), dequantized here with numpy from the formats' definitions. F32 holds the
      exact dequantized values; the others quantize them (Q6_K and Q4_K by a plain min/max
      quantizer written here, Q8_0 by gguf-py), a tensor whose rows do not divide into the
      type's blocks falling back to Q8_0, then F32. Only the tensors with a llama GGUF name
      without row permutation: the mlp projections, o_proj and v_proj (and of those only the
      HF names REGEX finds, when given).
  dequant_fixture.py corrupt CKPT OUT_DIR HF_NAME (--block I J | --row I)
      OUT_DIR: a copy of CKPT where one scale of the weight HF_NAME is doubled: the FP8 block
      scale weight_scale_inv[I][J] (128 x 128 elements), the NVFP4 group scale weight_scale[I][J]
      (E4M3 exponent + 1: 16 elements; if that scale cannot be doubled in E4M3, 240 and over,
      the first one after it in row-major order that can, wrapping round), or with --row, every
      element of row I of a plain (BF16/F16/F32) weight. Prints what it doubled:
      "NAME_scale[I][J] doubled", "NAME row I doubled".
  dequant_fixture.py synth DIR
      DIR/{gauss,t3,chan}-{bf16,fp8,nvfp4}: checkpoints of one llama weight
      model.layers.0.mlp.down_proj.weight [2048, 2048] whose values (seed 1, times 0.02) are
      normal, Student-t with 3 degrees of freedom (heavy tails: the largest is ~300 times the
      scale), or normal with 1% of the columns 20 times louder; stored in BF16, block-scaled FP8
      (128 x 128, scale = amax / 448) or ModelOpt NVFP4 (scale_2 = amax / (6 * 448)), rounded to
      nearest as `gguf-gen hf` does. For measuring the block statistic on other distributions
      than gguf-gen's uniform weights.
"""
import json
import os
import re
import shutil
import struct
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q, quants


def safetensors(path, tensors):
    hdr, off, blobs = {}, 0, []
    for name, a in tensors.items():
        b = a.astype(np.float32).tobytes()
        hdr[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    hdr["__metadata__"] = {"format": "pt"}
    h = json.dumps(hdr).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        f.write(b"".join(blobs))


def reference(out):
    rng = np.random.default_rng(5)
    H, NOPE, V, LORA, EMB = 4, 32, 32, 64, 64
    kv_b = (rng.standard_normal((H * (NOPE + V), LORA)) * 0.05).astype(np.float32)
    up = (rng.standard_normal((96, EMB)) * 0.05).astype(np.float32)
    experts = (rng.standard_normal((3, 32, EMB)) * 0.05).astype(np.float32)
    ref = {"model.layers.0.self_attn.kv_b_proj.weight": kv_b,
           "model.layers.0.mlp.up_proj.weight": up}
    for e in range(3):
        ref[f"model.layers.0.mlp.experts.{e}.up_proj.weight"] = experts[e]
    safetensors(f"{out}/ref.safetensors", ref)

    kv = kv_b.reshape(H, NOPE + V, LORA)
    k_b = np.ascontiguousarray(kv[:, :NOPE, :].transpose(0, 2, 1))  # ne [NOPE, LORA, H]
    v_b = np.ascontiguousarray(kv[:, NOPE:, :])                      # ne [LORA, V, H]

    def write(path, k_b, v_b, up):
        w = gguf.GGUFWriter(path, "deepseek2")
        for name, a in (("blk.0.attn_k_b.weight", k_b), ("blk.0.attn_v_b.weight", v_b),
                        ("blk.0.ffn_up.weight", up), ("blk.0.ffn_up_exps.weight", experts)):
            q = quants.quantize(a, Q.Q8_0)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=Q.Q8_0)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()

    write(f"{out}/good.gguf", k_b, v_b, up)
    write(f"{out}/bad_up.gguf", k_b, v_b, up[::-1].copy())
    write(f"{out}/bad_kvb.gguf", k_b[[1, 0, 2, 3]].copy(), v_b, up)
    write(f"{out}/bad_kb_t.gguf",
          np.ascontiguousarray(kv[:, :NOPE, :]).reshape(H, LORA, NOPE), v_b, up)


def nvfp4_bad(out):
    rng = np.random.default_rng(3)
    blocks = np.zeros((4, 36), np.uint8)
    blocks[:, :4] = 0x38                 # UE4M3 1.0 for every 16 elements
    blocks[:, 4:] = rng.integers(0, 256, (4, 32), dtype=np.uint8)
    blocks[0, 1] = 0x00                  # zero scale
    blocks[1, 2] = 0x7F                  # E4M3's NaN pattern
    blocks[2, 3] = 0xB8                  # bit 7 set: not a UE4M3 byte
    w = gguf.GGUFWriter(out, "llama")
    w.add_tensor("w", blocks, raw_shape=blocks.shape, raw_dtype=Q.NVFP4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ---- HF checkpoints, read back with numpy from the formats' definitions ----

def st_entries(ckpt):
    """name -> (path, dtype, shape, absolute offset, nbytes) over every .safetensors of CKPT."""
    files = [ckpt] if os.path.isfile(ckpt) else sorted(
        os.path.join(ckpt, f) for f in os.listdir(ckpt) if f.endswith(".safetensors"))
    out = {}
    for path in files:
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            hdr = json.loads(f.read(n))
        for name, e in hdr.items():
            if name != "__metadata__":
                b, end = e["data_offsets"]
                out[name] = (path, e["dtype"], e["shape"], 8 + n + b, end - b)
    return out


NP_DTYPE = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32, "U8": np.uint8,
            "F8_E4M3": np.uint8}


def st_raw(entry):
    path, dtype, shape, off, nbytes = entry
    a = np.fromfile(path, dtype=NP_DTYPE[dtype], count=nbytes // np.dtype(NP_DTYPE[dtype]).itemsize,
                    offset=off)
    return a.reshape(shape)


def e4m3_table():
    """OCP E4M3FN: S.EEEE.MMM, bias 7, subnormals, S.1111.111 NaN."""
    t = np.zeros(256, np.float64)
    for c in range(256):
        e, m = (c >> 3) & 15, c & 7
        v = m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
        t[c] = np.nan if (c & 0x7F) == 0x7F else (-v if c & 0x80 else v)
    return t.astype(np.float32)


E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32)


def hf_weight(ents, name):
    """The float32 values of a weight, by the formulas of gguf/safetensors.h (float32, in order)."""
    raw = st_raw(ents[name])
    dtype = ents[name][1]
    if name + "_scale_inv" in ents:  # block-scaled FP8
        s = st_raw(ents[name + "_scale_inv"]).astype(np.float32)
        R, C = raw.shape
        br, bc = -(-R // s.shape[0]), -(-C // s.shape[1])
        s_full = np.repeat(np.repeat(s, br, axis=0), bc, axis=1)[:R, :C]
        return e4m3_table()[raw] * s_full
    if dtype == "U8" and name + "_scale" in ents and name + "_scale_2" in ents:  # NVFP4
        sc = st_raw(ents[name + "_scale"])
        s2 = np.float32(st_raw(ents[name + "_scale_2"]).reshape(-1)[0])
        b = e4m3_table()[sc] * s2                               # [R, C/16]
        R = raw.shape[0]
        v = np.stack([E2M1[raw & 15], E2M1[raw >> 4]], axis=-1).reshape(R, -1)
        return v * np.repeat(b, 16, axis=1)
    if dtype == "BF16":
        return (raw.astype(np.uint32) << 16).view(np.float32)
    return raw.astype(np.float32)


# ---- Q6_K and Q4_K: plain quantizers for the layouts gguf-py dequantizes ----

def f16r(x):
    return x.astype(np.float16).astype(np.float32)


def q6_k(x):
    """x [n, 256] -> [n, 210]: ql[128] qh[64] scales int8[16] d f16; w = d*sc[j]*(q-32)."""
    n = x.shape[0]
    sub = x.reshape(n, 16, 16)
    amax_i = np.argmax(np.abs(sub), axis=-1)
    mx = np.take_along_axis(sub, amax_i[..., None], axis=-1)[..., 0]   # signed max
    scale = -mx / 32                                                   # max -> -32, as ggml
    m = np.abs(scale).max(axis=-1, keepdims=True)
    d = f16r(m / 127)
    with np.errstate(divide="ignore", invalid="ignore"):
        # rounded away from zero: a scale rounded down would clip the block's largest value
        sc = np.where(d > 0, np.clip(np.sign(scale) * np.ceil(np.abs(scale) / d), -127, 127), 0)
        sc = sc.astype(np.int8)
        step = (d * sc.astype(np.float32))[..., None]
        q = np.where(step != 0, np.clip(np.round(sub / step), -32, 31), 0)
    q = (q.astype(np.int16) + 32).astype(np.uint8).reshape(n, 256)
    lo, hi = q & 15, q >> 4
    lo = lo.reshape(n, 2, 2, 64)
    ql = (lo[:, :, 0] | (lo[:, :, 1] << 4)).reshape(n, 128)
    hi = hi.reshape(n, 2, 4, 32)
    qh = (hi[:, :, 0] | (hi[:, :, 1] << 2) | (hi[:, :, 2] << 4) | (hi[:, :, 3] << 6)).reshape(n, 64)
    return np.concatenate([ql, qh, sc.view(np.uint8), d.astype(np.float16).view(np.uint8)], axis=1)


def q4_k(x):
    """x [n, 256] -> [n, 144]: d f16, dmin f16, scales[12], qs[128]; w = d*sc*q - dmin*m."""
    n = x.shape[0]
    sub = x.reshape(n, 8, 32)
    lo = np.minimum(sub.min(axis=-1), 0)
    hi = sub.max(axis=-1)
    scale, mins = (hi - lo) / 15, -lo
    d = f16r(scale.max(axis=-1, keepdims=True) / 63)
    dmin = f16r(mins.max(axis=-1, keepdims=True) / 63)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d > 0, np.clip(np.ceil(scale / d), 0, 63), 0).astype(np.uint8)  # no clipping
        m = np.where(dmin > 0, np.clip(np.round(mins / dmin), 0, 63), 0).astype(np.uint8)
        step = (d * sc)[..., None]
        q = np.where(step > 0, np.clip(np.round((sub + (dmin * m)[..., None]) / step), 0, 15), 0)
    q = q.astype(np.uint8).reshape(n, 4, 2, 32)
    qs = (q[:, :, 0] | (q[:, :, 1] << 4)).reshape(n, 128)
    scales = np.concatenate([
        (sc[:, :4] & 63) | ((sc[:, 4:] >> 4) << 6),
        (m[:, :4] & 63) | ((m[:, 4:] >> 4) << 6),
        (sc[:, 4:] & 15) | ((m[:, 4:] & 15) << 4)], axis=1)
    return np.concatenate([d.astype(np.float16).view(np.uint8), dmin.astype(np.float16).view(np.uint8),
                           scales, qs], axis=1)


def gguf_name(hf):
    m = re.fullmatch(r"model\.layers\.(\d+)\.(mlp|self_attn)\.(\w+)_proj\.weight", hf)
    names = {"down": "ffn_down", "up": "ffn_up", "gate": "ffn_gate", "o": "attn_output",
             "v": "attn_v"}
    if not m or m.group(3) not in names:
        return None
    return f"blk.{m.group(1)}.{names[m.group(3)]}.weight"


def from_ckpt(ckpt, prefix, types, regex=None):
    ents = st_entries(ckpt)
    weights = [(gguf_name(n), np.ascontiguousarray(hf_weight(ents, n), np.float32))
               for n in sorted(ents) if gguf_name(n) and (regex is None or re.search(regex, n))]
    for typ in types.split(","):
        w = gguf.GGUFWriter(f"{prefix}-{typ}.gguf", "llama")
        for gname, x in weights:
            R, C = x.shape
            t = typ if typ in ("F32", "Q8_0") or C % 256 == 0 else "Q8_0"
            t = t if t == "F32" or C % 32 == 0 else "F32"
            if t == "F32":
                w.add_tensor(gname, x)
                continue
            if t == "Q8_0":
                q, qt = quants.quantize(x, Q.Q8_0), Q.Q8_0
            else:
                f, qt = (q6_k, Q.Q6_K) if t == "Q6_K" else (q4_k, Q.Q4_K)
                q = f(x.reshape(-1, 256)).reshape(R, -1)
            w.add_tensor(gname, q, raw_shape=q.shape, raw_dtype=qt)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()


def own_copy(path):
    """Replace a hard link by a copy of its own, so that writing it leaves the original."""
    tmp = path + ".tmp"
    shutil.copyfile(path, tmp)
    os.replace(tmp, path)


def corrupt(ckpt, out, name, block=None, row=None):
    shutil.copytree(ckpt, out, copy_function=os.link)  # links: only the changed file is copied
    ents = st_entries(out)
    key = name if row is not None else (
        name + "_scale_inv" if name + "_scale_inv" in ents else name + "_scale")
    own_copy(ents[key][0])
    if row is not None:  # a plain weight: double row I
        path, dtype, shape, off, nbytes = ents[name]
        size = nbytes // shape[0]
        with open(path, "r+b") as f:
            f.seek(off + row * size)
            a = np.frombuffer(f.read(size), NP_DTYPE[dtype]).copy()
            if dtype == "BF16":
                a = ((((a.astype(np.uint32) << 16).view(np.float32) * 2).view(np.uint32)) >> 16).astype(np.uint16)
            else:
                a = a * a.dtype.type(2)
            f.seek(off + row * size)
            f.write(a.tobytes())
        print(f"{name} row {row} doubled")
        return
    i, j = block
    path, dtype, shape, off, nbytes = ents[key]
    if dtype == "F8_E4M3":
        # E4M3: exponent field + 1 doubles a normal scale, but not one of 240..448 (its double
        # is past E4M3's 448, 0x77 + 8 is the NaN 0x7F), where ModelOpt's scale_2 = amax /
        # (6 * 448) puts most groups: take the first group at or after [I][J] (row-major)
        # that can be doubled
        sc = st_raw(ents[key]).reshape(-1)
        ok = (((sc >> 3) & 15) > 0) & (sc.astype(np.int32) + 8 < 0x7F)
        k = i * shape[1] + j
        k = (k + int(np.argmax(np.roll(ok, -k)))) % len(ok)  # wrapping round to [0][0]
        assert ok[k], "no scale that can be doubled"
        i, j = divmod(k, shape[1])
        with open(path, "r+b") as f:
            f.seek(off + k)
            f.write(bytes([int(sc[k]) + 8]))
    else:
        pos = off + (i * shape[1] + j) * 4
        with open(path, "r+b") as f:
            f.seek(pos)
            v = struct.unpack("<f", f.read(4))[0] * 2
            f.seek(pos)
            f.write(struct.pack("<f", v))
    print(f"{key}[{i}][{j}] doubled")


# ---- synthetic checkpoints (BF16, FP8, NVFP4 encoders from the formats' definitions) ----

def e4m3_code(x):
    """Nearest E4M3FN code (ties to the lower magnitude), saturating at 448."""
    pos = e4m3_table()[:127].astype(np.float64)
    a = np.abs(x).astype(np.float64)
    i = np.clip(np.searchsorted(pos, a), 1, 126)
    c = np.where(a - pos[i - 1] <= pos[i] - a, i - 1, i)
    return (np.where(a >= 448, 126, c) | np.where(np.signbit(x), 0x80, 0)).astype(np.uint8)


def e2m1_code(x):
    mag = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6])
    i = np.argmin(np.abs(np.abs(x)[..., None] - mag), axis=-1)
    return (i | np.where(np.signbit(x), 8, 0)).astype(np.uint8)


def write_st(path, tensors):
    hdr, off, blobs = {}, 0, []
    for name, (dtype, a) in tensors.items():
        b = np.ascontiguousarray(a).tobytes()
        hdr[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(hdr).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        f.write(b"".join(blobs))


def synth_ckpt(out, x, fmt):
    os.makedirs(out)
    name, (R, C) = "model.layers.0.mlp.down_proj.weight", x.shape
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}
    if fmt == "bf16":
        u = x.view(np.uint32)
        t = {name: ("BF16", ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16))}
    elif fmt == "fp8":
        g = x.reshape(R // 128, 128, C // 128, 128)
        s = (np.abs(g).max(axis=(1, 3)) / 448).astype(np.float32)
        t = {name: ("F8_E4M3", e4m3_code(g / s[:, None, :, None]).reshape(R, C)),
             name + "_scale_inv": ("F32", s)}
        cfg["quantization_config"] = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    else:
        s2 = np.float32(np.abs(x).max() / (6 * 448))
        g = x.reshape(R, C // 16, 16)
        sc = e4m3_code((np.abs(g).max(axis=-1) / 6 / s2).astype(np.float32))
        b = e4m3_table()[sc] * s2
        q = e2m1_code(g / np.where(b > 0, b, 1)[..., None]).reshape(R, C)
        t = {name: ("U8", (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8)),
             name + "_scale": ("F8_E4M3", sc), name + "_scale_2": ("F32", np.array(s2)),
             "model.layers.0.mlp.down_proj.input_scale": ("F32", np.array(1, np.float32))}
        with open(f"{out}/hf_quant_config.json", "w") as f:
            json.dump({"quantization": {"quant_algo": "NVFP4", "group_size": 16}}, f)
    write_st(f"{out}/model.safetensors", t)
    with open(f"{out}/config.json", "w") as f:
        json.dump(cfg, f)


def synth(out, R=2048, C=2048):
    rng = np.random.default_rng(1)
    dists = {"gauss": rng.standard_normal((R, C)), "t3": rng.standard_t(3, (R, C)),
             "chan": rng.standard_normal((R, C)) * np.where(rng.random(C) < 0.01, 20, 1)}
    for dn, a in dists.items():
        for fmt in ("bf16", "fp8", "nvfp4"):
            synth_ckpt(f"{out}/{dn}-{fmt}", (a * 0.02).astype(np.float32), fmt)


def main():
    cmds = ("reference", "nvfp4-bad", "from-ckpt", "corrupt", "synth")
    a = sys.argv[1:]
    if not a or a[0] not in cmds:
        sys.exit(__doc__)
    if a[0] == "reference" and len(a) == 2:
        reference(a[1])
    elif a[0] == "nvfp4-bad" and len(a) == 2:
        nvfp4_bad(a[1])
    elif a[0] == "from-ckpt" and len(a) in (4, 5):
        from_ckpt(a[1], a[2], a[3], a[4] if len(a) == 5 else None)
    elif a[0] == "corrupt" and len(a) == 7 and a[4] == "--block":
        corrupt(a[1], a[2], a[3], block=(int(a[5]), int(a[6])))
    elif a[0] == "corrupt" and len(a) == 6 and a[4] == "--row":
        corrupt(a[1], a[2], a[3], row=int(a[5]))
    elif a[0] == "synth" and len(a) == 2:
        synth(a[1])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
