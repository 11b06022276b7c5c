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
"""
import json
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


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("reference", "nvfp4-bad"):
        sys.exit(__doc__)
    if sys.argv[1] == "reference":
        reference(sys.argv[2])
    else:
        nvfp4_bad(sys.argv[2])


if __name__ == "__main__":
    main()
