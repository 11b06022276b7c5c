"""Faults written into an HF checkpoint (safetensors edited in place, byte-exact elsewhere), so
that a real engine serves a broken model the way a conversion bug would make one.

Tensors are edited as raw rows: BF16 and F32 alike, without numpy's missing bfloat16.
"""
import json
import os
import struct

DTYPE_SIZE = {"BF16": 2, "F16": 2, "F32": 4}


def _locate(hf, name):
    with open(os.path.join(hf, "model.safetensors.index.json")) as f:
        file = json.load(f)["weight_map"][name]
    path = os.path.join(hf, file)
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    info = header[name]
    return path, 8 + n + info["data_offsets"][0], info["dtype"], info["shape"]


def edit_rows(hf, name, fn):
    """fn(rows) edits rows (a list of bytearrays, one per row) in place."""
    path, start, dtype, shape = _locate(hf, name)
    row_bytes = DTYPE_SIZE[dtype] * (shape[1] if len(shape) > 1 else 1)
    with open(path, "r+b") as f:
        f.seek(start)
        data = bytearray(f.read(row_bytes * shape[0]))
        rows = [data[i * row_bytes:(i + 1) * row_bytes] for i in range(shape[0])]
        fn(rows, dtype)
        f.seek(start)
        f.write(b"".join(rows))


def swap_head_halves(hf, name, head_dim):
    """Each head's first and second half of rows exchanged (a rope layout mistake)."""
    def fn(rows, dtype):
        h = head_dim // 2
        for base in range(0, len(rows), head_dim):
            rows[base:base + h], rows[base + h:base + head_dim] = \
                rows[base + h:base + head_dim], rows[base:base + h]
    edit_rows(hf, name, fn)


def permute_like_gguf(hf, name, head_dim):
    """Each head's rows put in the order llama.cpp's converter stores for its rope (row 2j + k
    of a head <- row k * head_dim / 2 + j): a GGUF -> HF conversion that forgot to undo it. An
    engine rotating HF's half pairs over these rows is the catalog's rope-pairs fault."""
    def fn(rows, dtype):
        h = head_dim // 2
        for base in range(0, len(rows), head_dim):
            head = rows[base:base + head_dim]
            rows[base:base + head_dim] = [head[k * h + j] for j in range(h) for k in range(2)]
    edit_rows(hf, name, fn)


def swap_blocks(hf, name, block, a=0, b=1):
    """Row blocks a and b of `block` rows exchanged (two heads swapped)."""
    def fn(rows, dtype):
        rows[a * block:(a + 1) * block], rows[b * block:(b + 1) * block] = \
            rows[b * block:(b + 1) * block], rows[a * block:(a + 1) * block]
    edit_rows(hf, name, fn)


def double(hf, name):
    """Every value doubled (exponent + 1; zeros stay zero)."""
    def fn(rows, dtype):
        size = DTYPE_SIZE[dtype]
        fmt = {"BF16": "<H", "F16": "<H", "F32": "<I"}[dtype]
        step = {"BF16": 0x80, "F16": 0x400, "F32": 0x800000}[dtype]
        expo = {"BF16": 0x7F80, "F16": 0x7C00, "F32": 0x7F800000}[dtype]
        for r in rows:
            for k in range(0, len(r), size):
                (v,) = struct.unpack_from(fmt, r, k)
                if v & expo and (v & expo) != expo and (v & expo) + step < expo:
                    struct.pack_into(fmt, r, k, v + step)
    edit_rows(hf, name, fn)


def set_config(hf, **kv):
    p = os.path.join(hf, "config.json")
    with open(p) as f:
        c = json.load(f)
    c.update(kv)
    with open(p, "w") as f:
        json.dump(c, f)
