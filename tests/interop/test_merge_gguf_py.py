"""gguf-merge against gguf-py, the format's reference implementation.

1. gguf-py reads our merged files and our split parts: the same metadata (minus split.*
   in a merge; plus split.no u16, split.count u16, split.tensors.count i32 in parts) and
   the same tensors, bytes included.
2. A split set written by gguf-py's own writer merges into a file gguf-py reads back
   with the metadata of its first part and every tensor.
3. A merge with --layout aligned (gaps before each part's data, so that it keeps its offset
   modulo the block) reads in gguf-py as the original does: same metadata, same tensors.
"""
import os
import subprocess
import sys

import numpy as np
import pytest
import gguf

from conftest import tool

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "integration", "merge_fixture.py")
SPLIT_KEYS = {"split.no", "split.count", "split.tensors.count"}
HEADER = {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count"}


def run(*args):
    subprocess.run(args, check=True, capture_output=True)


def fields(reader):
    out = {}
    for name, f in reader.fields.items():
        if name in HEADER:
            continue
        out[name] = (tuple(f.types), f.contents())
    return out


def tensors(reader):
    return [(t.name, int(t.tensor_type), tuple(int(x) for x in t.shape),
             bytes(np.asarray(t.data).tobytes())) for t in reader.tensors]


@pytest.fixture(scope="module", params=[32, 64])
def model(request, tmp_path_factory):
    d = tmp_path_factory.mktemp(f"merge{request.param}")
    path = str(d / "m.gguf")
    # Q8_1: gguf-py's table says 40-byte blocks, ggml's (and ours) 36.
    run(sys.executable, FIXTURE, "types", path, "--skip", "Q8_1", "--align", str(request.param))
    return d, path


def test_split_parts_and_merge_read_by_gguf_py(model):
    d, path = model
    merge = tool("gguf-merge")
    run(merge, "--split", "--split-max-tensors", "7", path, str(d / "p"))
    parts = sorted(str(d / f) for f in os.listdir(d) if f.startswith("p-"))
    assert len(parts) == 6  # 36 tensors, 7 a part
    orig = gguf.GGUFReader(path)
    want_fields, want_tensors = fields(orig), tensors(orig)

    got_tensors = []
    for i, part in enumerate(parts):
        r = gguf.GGUFReader(part)
        f = r.fields
        assert f["split.no"].types == [gguf.GGUFValueType.UINT16]
        assert f["split.count"].types == [gguf.GGUFValueType.UINT16]
        assert f["split.tensors.count"].types == [gguf.GGUFValueType.INT32]
        assert f["split.no"].contents() == i
        assert f["split.count"].contents() == len(parts)
        assert f["split.tensors.count"].contents() == len(want_tensors)
        pf = {k: v for k, v in fields(r).items() if k not in SPLIT_KEYS}
        assert r.alignment == orig.alignment
        if i == 0:
            assert pf == want_fields
        elif orig.alignment != 32:
            assert pf == {"general.alignment": want_fields["general.alignment"]}
        else:
            assert pf == {}
        got_tensors += tensors(r)
    assert got_tensors == want_tensors

    out = str(d / "merged.gguf")
    run(merge, "--merge", "--verify", parts[2], out)
    r = gguf.GGUFReader(out)
    assert fields(r) == want_fields
    assert not SPLIT_KEYS & set(r.fields)
    assert tensors(r) == want_tensors


def test_gguf_py_split_set_merges(tmp_path):
    prefix = str(tmp_path / "gp")
    run(sys.executable, FIXTURE, "gguf-py-split", prefix, "--max-tensors", "6")
    parts = sorted(str(tmp_path / f) for f in os.listdir(tmp_path) if f.startswith("gp-"))
    assert len(parts) == 4
    want_tensors = []
    for p in parts:
        want_tensors += tensors(gguf.GGUFReader(p))
    first = {k: v for k, v in fields(gguf.GGUFReader(parts[0])).items() if k not in SPLIT_KEYS}
    out = str(tmp_path / "merged.gguf")
    run(tool("gguf-merge"), "--merge", "--verify", parts[-1], out)
    r = gguf.GGUFReader(out)
    assert fields(r) == first
    assert tensors(r) == want_tensors


@pytest.mark.parametrize("align", [32, 64])
def test_aligned_layout_read_by_gguf_py(tmp_path, align):
    path = str(tmp_path / "m.gguf")
    run(sys.executable, FIXTURE, "types", path, "--skip", "Q8_1", "--align", str(align))
    merge = tool("gguf-merge")
    run(merge, "--split", "--split-max-tensors", "5", path, str(tmp_path / "p"))
    out = str(tmp_path / "aligned.gguf")
    run(merge, "--merge", "--layout", "aligned", "--verify", str(tmp_path / "p-00003-of-00008.gguf"), out)
    orig, r = gguf.GGUFReader(path), gguf.GGUFReader(out)
    assert fields(r) == fields(orig)
    assert tensors(r) == tensors(orig)
    # the layout really has gaps: some tensor starts later than the padded end of the previous one
    ends = [(t.data_offset, t.data_offset + t.n_bytes) for t in r.tensors]
    assert any(b > -(-e // align) * align for (_, e), (b, _) in zip(ends, ends[1:]))
    assert os.path.getsize(out) > os.path.getsize(path)
