#!/usr/bin/env python3
"""Writes the safetensors seed corpus: valid files and one malformed file per error class.

Malformed inputs are named after the error they must produce, GGUF_E_<CODE>--what.safetensors;
tests/unit/test_safetensors.c (corpus_named_errors) opens each and checks the code, and
fuzz_safetensors replays them all. Valid seeds start with ok--.
Run from anywhere: python3 tests/fuzz/make_st_corpus.py (rewrites tests/fuzz/corpus/safetensors).
"""
import json
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "safetensors")


def st(header, data=b"", raw=None):
    h = raw if raw is not None else json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(h)) + h + data


def ent(dtype, shape, b, e):
    return {"dtype": dtype, "shape": shape, "data_offsets": [b, e]}


F = ent("F32", [2], 0, 8)
CASES = {
    "ok--two-tensors": st({"a": F, "b": ent("BF16", [2, 2], 8, 16),
                           "__metadata__": {"format": "pt"}}, bytes(range(16))),
    "ok--empty": st({}),
    "ok--padded-header": st(None, bytes(4), raw=b'{"a":{"dtype":"F32","shape":[],'
                            b'"data_offsets":[0,4]}}      '),
    "ok--fp8-block": st({"w": ent("F8_E4M3", [3, 8], 0, 24),
                         "w_scale_inv": ent("F32", [2, 2], 24, 40)}, bytes(range(40))),
    "ok--nvfp4": st({"w": ent("U8", [2, 16], 0, 32), "w_scale": ent("F8_E4M3", [2, 2], 32, 36),
                     "w_scale_2": ent("F32", [], 36, 40)}, bytes(range(40))),
    "ok--nvfp4-ct": st({"w_packed": ent("U8", [1, 8], 0, 8),
                        "w_scale": ent("F8_E4M3", [1, 1], 8, 9),
                        "w_global_scale": ent("F32", [1], 9, 13)}, bytes(range(13))),
    "GGUF_E_NOT_GGUF--tiny": b"\x02\x00",
    "GGUF_E_TRUNCATED--header-length": struct.pack("<Q", 100) + b"{}",
    "GGUF_E_LIMIT--header-length": struct.pack("<Q", 100_000_001) + b"{}",
    "GGUF_E_BAD_MAGIC--array": st(None, raw=b"[1,2]"),
    "GGUF_E_NOT_GGUF--gguf": b"GGUF\x03\x00\x00\x00" + bytes(16),
    "GGUF_E_BAD_VALUE--json-syntax": st(None, raw=b'{"a": }'),
    "GGUF_E_BAD_VALUE--entry-not-object": st({"a": 3}),
    "GGUF_E_BAD_VALUE--dtype-missing": st({"a": {"shape": [1], "data_offsets": [0, 4]}}, bytes(4)),
    "GGUF_E_BAD_VALUE--shape-not-integer": st(None, bytes(4), raw=b'{"a":{"dtype":"F32",'
                                              b'"shape":[1.5],"data_offsets":[0,4]}}'),
    "GGUF_E_BAD_VALUE--offsets-one": st({"a": {"dtype": "F32", "shape": [1],
                                               "data_offsets": [0]}}, bytes(4)),
    "GGUF_E_BAD_VALUE--metadata-not-string": st({"__metadata__": {"k": 1}}),
    "GGUF_E_BAD_UTF8--name": st(None, bytes(4), raw=b'{"a\xff":{"dtype":"F32","shape":[],'
                                b'"data_offsets":[0,4]}}'),
    "GGUF_E_BAD_UTF8--nul-in-name": st(None, bytes(4), raw=b'{"a\\u0000":{"dtype":"F32",'
                                       b'"shape":[],"data_offsets":[0,4]}}'),
    "GGUF_E_LIMIT--deep-json": st(None, raw=b'{"__metadata__":' + b"[" * 64 + b"]" * 64 + b"}"),
    "GGUF_E_LIMIT--dims": st({"a": ent("F32", [1] * 9, 0, 4)}, bytes(4)),
    "GGUF_E_DUPLICATE--name": st(None, bytes(8), raw=b'{"a":{"dtype":"F32","shape":[1],'
                                 b'"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],'
                                 b'"data_offsets":[4,8]}}'),
    "GGUF_E_BAD_TYPE--dtype": st({"a": ent("Q4_K", [1], 0, 4)}, bytes(4)),
    "GGUF_E_BAD_SHAPE--negative": st({"a": ent("F32", [-1], 0, 4)}, bytes(4)),
    "GGUF_E_BAD_SHAPE--byte-count": st({"a": ent("F32", [2], 0, 4)}, bytes(4)),
    "GGUF_E_OVERFLOW--elements": st({"a": ent("F32", [1 << 32, 1 << 32], 0, 4)}, bytes(4)),
    "GGUF_E_BAD_OFFSET--end-before-begin": st({"a": ent("F32", [0], 4, 0)}, bytes(4)),
    "GGUF_E_TRUNCATED--past-data": st({"a": ent("F32", [2], 0, 8)}, bytes(4)),
    "GGUF_E_BAD_OFFSET--overlap": st({"a": ent("F32", [2], 0, 8), "b": ent("F32", [1], 4, 8)},
                                     bytes(8)),
    "GGUF_E_BAD_OFFSET--gap": st({"a": ent("F32", [1], 0, 4), "b": ent("F32", [1], 8, 12)},
                                 bytes(12)),
    "GGUF_E_BAD_OFFSET--trailing": st({"a": ent("F32", [1], 0, 4)}, bytes(6)),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        os.remove(os.path.join(OUT, f))
    for name, data in CASES.items():
        with open(os.path.join(OUT, name + ".safetensors"), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
