#!/usr/bin/env python3
"""Rewrite a GGUF whose MLA blocks carry one legacy attn_kv_b into the layout
llama.cpp's converter writes today (attn_k_b transposed, attn_v_b), with numpy
and gguf-py only: an implementation of the kv_b layout independent of ours.

    mla_split.py LEGACY.gguf OUT.gguf
"""
import sys

import gguf
import numpy as np

src, dst = sys.argv[1], sys.argv[2]
r = gguf.GGUFReader(src)
arch = r.fields["general.architecture"].contents()
nh = r.fields[f"{arch}.attention.head_count"].contents()
nope = r.fields[f"{arch}.attention.key_length"].contents() - r.fields[f"{arch}.rope.dimension_count"].contents()
dv = r.fields[f"{arch}.attention.value_length"].contents()
w = gguf.GGUFWriter(dst, arch)
for name, f in r.fields.items():
    if name.startswith("GGUF.") or name == "general.architecture":
        continue
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        w.add_key_value(name, f.contents(), f.types[0], sub_type=f.types[-1])
    else:
        w.add_key_value(name, f.contents(), f.types[0])
for t in r.tensors:
    data = np.array(t.data)
    if t.name.endswith("attn_kv_b.weight"):
        assert t.tensor_type == gguf.GGMLQuantizationType.F32, "F32 models only"
        R = int(t.shape[0])
        kv = data.reshape(nh, nope + dv, R)  # rows h*(nope+dv)+j, kv_lora wide
        k_b = np.ascontiguousarray(kv[:, :nope, :].transpose(0, 2, 1))  # [nh][R][nope]
        v_b = np.ascontiguousarray(kv[:, nope:, :])  # [nh][dv][R]
        base = t.name[: -len("attn_kv_b.weight")]
        w.add_tensor(base + "attn_k_b.weight", k_b)
        w.add_tensor(base + "attn_v_b.weight", v_b)
    else:
        w.add_tensor(t.name, data, raw_dtype=t.tensor_type)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
