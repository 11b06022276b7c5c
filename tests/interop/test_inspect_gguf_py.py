"""gguf-inspect --json against gguf-py's GGUFReader: same metadata and tensor table.

1. gguf-py writes files with every metadata value type (arrays of arrays too); we read
   them back identically.
2. For the real files in ../shared/testdata (written by llama.cpp's converter and other
   tools), our JSON view equals gguf-py's.
3. gguf-py reads the files our writer produces (through gguf-gen) identically.
"""
import math
import os
import subprocess

import numpy as np
import pytest
import gguf

from conftest import GEN, inspect_json, shared_files

SKIP_FIELDS = {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count"}


def py_value(field):
    """The field's value as plain Python (gguf-py decodes nested arrays too)."""
    return field.contents()


def flatten(v):
    if isinstance(v, list):
        return [y for x in v for y in flatten(x)]
    return [v]


def same(a, b):
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is None and b is None or (isinstance(b, float) and not math.isfinite(b))
        return np.float32(a) == np.float32(b) or float(a) == float(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def compare_with_gguf_py(path):
    ours = inspect_json(path)
    r = gguf.GGUFReader(path)
    theirs = {k: v for k, v in r.fields.items() if k not in SKIP_FIELDS}
    assert ours["gguf_version"] == int(r.fields["GGUF.version"].parts[0][0])
    assert list(ours["metadata"].keys()) == list(theirs.keys())
    for k, field in theirs.items():
        v = py_value(field)
        if isinstance(v, float) and not math.isfinite(v):
            assert ours["metadata"][k] is None, k
            continue
        mine = ours["metadata"][k]
        if field.types[:2] == [gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.ARRAY]:
            # gguf-py's contents() flattens arrays of arrays; compare the leaves.
            mine = flatten(mine)
        assert same(mine, v), f"{path}: {k}: ours {ours['metadata'][k]!r:.200} gguf-py {v!r:.200}"
    assert len(ours["tensors"]) == len(r.tensors)
    for t_ours, t in zip(ours["tensors"], r.tensors):
        assert t_ours["name"] == t.name
        assert t_ours["type"] == t.tensor_type.name
        assert t_ours["shape"] == [int(x) for x in t.shape]
        assert t_ours["offset"] == int(t.data_offset)
        assert t_ours["nbytes"] == int(t.n_bytes)
    align = r.fields.get("general.alignment")
    assert ours["alignment"] == (int(align.parts[-1][0]) if align else 32)


def test_every_value_type(tmp_path):
    path = str(tmp_path / "types.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_uint8("t.u8", 250)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 65000)
    w.add_int16("t.i16", -32000)
    w.add_uint32("t.u32", 4_000_000_000)
    w.add_int32("t.i32", -2_000_000_000)
    w.add_float32("t.f32", 0.1)
    w.add_uint64("t.u64", 2**64 - 1)
    w.add_int64("t.i64", -(2**63))
    w.add_float64("t.f64", 1e-300)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "ünïcödé ✓ \n\t\"quoted\"")
    w.add_array("t.arr.i32", [1, -2, 3])
    w.add_array("t.arr.f32", [0.5, -1.25])
    w.add_array("t.arr.str", ["a", "", "ccc"])
    w.add_array("t.arr.bool", [True, False])
    w.add_array("t.arr.nested", [[1, 2], [3]])
    w.add_array("t.arr.empty", [])
    w.add_tensor("w", np.arange(64, dtype=np.float32).reshape(8, 8))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    compare_with_gguf_py(path)
    ours = inspect_json(path)["metadata"]
    assert ours["t.u64"] == 2**64 - 1 and ours["t.i64"] == -(2**63)
    assert ours["t.arr.nested"] == [[1, 2], [3]]
    assert ours["t.str"] == "ünïcödé ✓ \n\t\"quoted\""


@pytest.mark.parametrize("path", shared_files() or [None])
def test_real_files(path):
    if path is None:
        pytest.skip("../shared/testdata is absent")
    compare_with_gguf_py(path)


@pytest.mark.parametrize("arch", ["llama", "deepseek2"])
def test_our_writer_read_by_gguf_py(tmp_path, arch):
    if not GEN or not os.path.exists(GEN):
        pytest.fail(f"gguf-gen is not built (GGUFKIT_GEN={GEN!r})")
    path = str(tmp_path / f"{arch}.gguf")
    subprocess.run([GEN, "model", "--arch", arch, "--type", "Q8_0", path], check=True)
    compare_with_gguf_py(path)
    r = gguf.GGUFReader(path)
    for t in r.tensors:  # gguf-py can reach every tensor's bytes
        assert t.data.nbytes > 0 or t.n_elements == 0
