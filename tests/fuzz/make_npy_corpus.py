#!/usr/bin/env python3
"""Writes the .npy seed corpus: files numpy writes, and one malformed file per error class.

Valid seeds (ok--*) are written by numpy itself (np.lib.format), so they are the grammar the
reader must accept; malformed inputs are named after the error they must produce,
GGUF_E_<CODE>--what.npy, and tests/unit/test_npy.c (corpus_named_errors) opens each and checks
the code; fuzz_npy replays them all.
Run from anywhere: python3 tests/fuzz/make_npy_corpus.py (rewrites tests/fuzz/corpus/npy).
"""
import io
import os
import struct

import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "npy")


def saved(a, version=None):
    b = io.BytesIO()
    np.lib.format.write_array(b, a, version=version, allow_pickle=False)
    return b.getvalue()


def raw(header, data=b"", version=(1, 0)):
    """A file with a hand-written header dict, padded as numpy pads it."""
    h = header.encode("latin1")
    pre = 10 if version[0] == 1 else 12
    h += b" " * ((64 - (pre + len(h) + 1) % 64) % 64) + b"\n"
    ln = struct.pack("<H", len(h)) if version[0] == 1 else struct.pack("<I", len(h))
    return b"\x93NUMPY" + bytes(version) + ln + h + data


F4 = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }"
ar = np.arange(6, dtype=np.float32).reshape(2, 3)
CASES = {
    "ok--f4": saved(ar),
    "ok--f2": saved(ar.astype(np.float16)),
    "ok--f8-big-endian": saved(ar.astype(">f8")),
    "ok--fortran": saved(np.asfortranarray(np.arange(24, dtype=np.float32).reshape(2, 3, 4))),
    "ok--v2": saved(np.frombuffer(np.arange(6, dtype=np.uint16).tobytes(), dtype="V2")),
    "ok--i8": saved(np.array([1, 17, 42], dtype=np.int64)),
    "ok--u1": saved(np.array([1, 2, 255], dtype=np.uint8)),
    "ok--bool": saved(np.array([True, False])),
    "ok--scalar": saved(np.float32(3.5).reshape(())),
    "ok--empty": saved(np.zeros((0, 4), dtype=np.float32)),
    "ok--version-2": saved(ar, version=(2, 0)),
    "ok--version-3": saved(ar, version=(3, 0)),
    "ok--keys-reordered": raw("{'shape': (2,), 'fortran_order': False, 'descr': '<f4'}", bytes(8)),
    "GGUF_E_BAD_MAGIC--empty": b"",
    "GGUF_E_BAD_MAGIC--gguf": b"GGUF\x03\x00\x00\x00" + bytes(16),
    "GGUF_E_BAD_VERSION--4-0": raw(F4, bytes(8), version=(4, 0)),
    "GGUF_E_TRUNCATED--header-length": b"\x93NUMPY\x01\x00\xff\x00{'descr'",
    "GGUF_E_TRUNCATED--length-field": b"\x93NUMPY\x02\x00\x10\x00",
    "GGUF_E_TRUNCATED--data": raw(F4, bytes(7)),
    "GGUF_E_LIMIT--header-size": b"\x93NUMPY\x02\x00" + struct.pack("<I", 70000) + b" " * 70000,
    "GGUF_E_LIMIT--dims": raw("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", bytes(4)),
    "GGUF_E_LIMIT--digits": raw("{'descr': '<f4', 'fortran_order': False, 'shape': (10000000000000000000,), }"),
    "GGUF_E_BAD_VALUE--json": raw('{"descr": "<f4", "fortran_order": false, "shape": [2]}', bytes(8)),
    "GGUF_E_BAD_VALUE--not-a-dict": raw("('<f4', False, (2,))", bytes(8)),
    "GGUF_E_BAD_VALUE--unknown-key": raw("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", bytes(8)),
    "GGUF_E_BAD_VALUE--missing-shape": raw("{'descr': '<f4', 'fortran_order': False, }", bytes(4)),
    "GGUF_E_BAD_VALUE--shape-not-tuple": raw("{'descr': '<f4', 'fortran_order': False, 'shape': (2), }", bytes(8)),
    "GGUF_E_BAD_VALUE--negative-dim": raw("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", bytes(8)),
    "GGUF_E_BAD_VALUE--leading-zero": raw("{'descr': '<f4', 'fortran_order': False, 'shape': (02,), }", bytes(8)),
    "GGUF_E_BAD_VALUE--fortran-1": raw("{'descr': '<f4', 'fortran_order': 1, 'shape': (2,), }", bytes(8)),
    "GGUF_E_BAD_VALUE--escape": raw("{'descr': '<f\\x34', 'fortran_order': False, 'shape': (2,), }", bytes(8)),
    "GGUF_E_BAD_VALUE--no-comma": raw("{'descr': '<f4' 'fortran_order': False, 'shape': (2,), }", bytes(8)),
    "GGUF_E_BAD_VALUE--unterminated": raw("{'descr': '<f4', 'fortran_order': False, 'shape': (2,", bytes(8)),
    "GGUF_E_BAD_VALUE--trailing-text": raw(F4 + " x", bytes(8)),
    "GGUF_E_DUPLICATE--descr": raw("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", bytes(8)),
    "GGUF_E_BAD_TYPE--complex": raw("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", bytes(16)),
    "GGUF_E_BAD_TYPE--object": raw("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", bytes(16)),
    "GGUF_E_BAD_TYPE--native-order": raw("{'descr': '=f4', 'fortran_order': False, 'shape': (2,), }", bytes(8)),
    "GGUF_E_UNSUPPORTED--structured": raw("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", bytes(8)),
    "GGUF_E_OVERFLOW--elements": raw("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }"),
    "GGUF_E_BAD_OFFSET--two-arrays": saved(ar) + saved(ar),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        os.remove(os.path.join(OUT, f))
    for name, data in CASES.items():
        with open(os.path.join(OUT, name + ".npy"), "wb") as f:
            f.write(data)
    print(f"wrote {len(CASES)} files to {OUT}")


if __name__ == "__main__":
    main()
