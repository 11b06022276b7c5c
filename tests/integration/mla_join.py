#!/usr/bin/env python3
"""Rewrite an F32 GGUF whose MLA blocks carry attn_k_b (transposed) and attn_v_b into one
legacy attn_kv_b per block, with numpy and gguf-py only: the inverse of mla_split.py.

    mla_join.py MODEL.gguf OUT.gguf [--stacked]

Rows of attn_kv_b are per head [k rows (nope); v rows (v)], as HF's kv_b_proj. --stacked
writes them in another order on purpose, all heads' k rows then all heads' v rows (a converter
that split k from v before the heads): the shapes stay right, the model is wrong. The docs
(ref-forward.md, Hugging Face checkpoints) use it to show the comparison catching that.
"""
import sys

import gguf
import numpy as np

args = [a for a in sys.argv[1:] if a != "--stacked"]
if len(args) != 2:
    sys.exit(__doc__.strip().splitlines()[3].strip())
src, dst = args
stacked = "--stacked" in sys.argv[1:]
r = gguf.GGUFReader(src)
arch = r.fields["general.architecture"].contents()
w = gguf.GGUFWriter(dst, arch)
for name, f in r.fields.items():
    if name.startswith("GGUF.") or name == "general.architecture":
        continue
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        w.add_key_value(name, f.contents(), f.types[0], sub_type=f.types[-1])
    else:
        w.add_key_value(name, f.contents(), f.types[0])
tensors = {t.name: t for t in r.tensors}
for t in r.tensors:
    if ".attn_v_b." in t.name:
        continue
    data = np.array(t.data)
    if ".attn_k_b." in t.name:
        v_t = tensors[t.name.replace("attn_k_b", "attn_v_b")]
        assert t.tensor_type == v_t.tensor_type == gguf.GGMLQuantizationType.F32, "F32 models only"
        k = data.transpose(0, 2, 1)  # numpy [heads][kv_lora][nope] -> [heads][nope][kv_lora]
        v = np.array(v_t.data)       # [heads][v][kv_lora]
        if stacked:
            kv = np.concatenate([k.reshape(-1, k.shape[2]), v.reshape(-1, v.shape[2])])
        else:
            kv = np.concatenate([k, v], axis=1).reshape(-1, k.shape[2])
        w.add_tensor(t.name.replace("attn_k_b", "attn_kv_b"), np.ascontiguousarray(kv))
    else:
        w.add_tensor(t.name, data, raw_dtype=t.tensor_type)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
