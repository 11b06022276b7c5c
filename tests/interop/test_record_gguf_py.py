"""Records against gguf-py and numpy: what ref-forward records is what gguf-py reads (and
what --logits writes), and every metric of `ref-forward compare --json` equals an
independent numpy computation over the two records."""
import json
import os
import subprocess

import numpy as np
import pytest

import gguf
from conftest import GEN, tool

SMALL = ["--embd", "64", "--heads", "4", "--kv-heads", "2", "--head-dim", "16", "--ff", "128",
         "--vocab", "128", "--expert-ff", "64", "--no-sync"]
TOKENS = "1,7,19,3,42"


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    if not GEN or not os.path.exists(GEN):
        pytest.skip("gguf-gen is not built")
    d = tmp_path_factory.mktemp("records")
    rf = tool("ref-forward")
    out = {}
    for name, args in (("a", ["--seed", "1"]), ("b", ["--seed", "2"])):
        model = d / f"{name}.gguf"
        subprocess.run([GEN, "model", "--arch", "qwen3moe", *SMALL, *args, str(model)], check=True,
                       capture_output=True)
        rec, npy = d / f"{name}.rec.gguf", d / f"{name}.npy"
        subprocess.run([rf, str(model), "--tokens", TOKENS, "--record", str(rec), "--logits",
                        str(npy), "-q"], check=True, capture_output=True)
        out[name] = (rec, npy)
    return out


def read(path):
    r = gguf.GGUFReader(str(path))
    caps = {}
    for t in r.tensors:
        shape = tuple(int(x) for x in reversed(list(t.shape)))
        caps[t.name] = np.array(t.data, dtype=np.float32).reshape(shape)
    meta = {f.name: f.contents() for f in r.fields.values() if f.name.startswith(("record.", "general."))}
    return meta, caps


def test_record_is_plain_gguf(records):
    rec, npy = records["a"]
    meta, caps = read(rec)
    assert meta["general.type"] == "ggufkit.record"
    assert meta["record.version"] == 1
    assert meta["record.tokens"] == [1, 7, 19, 3, 42]
    assert meta["record.precision"] == "f32" and meta["record.ranks"] == 1
    assert len(meta["record.model_digest"]) == 32
    # the recorded logits are the --logits contract, bit for bit
    assert np.array_equal(caps["logits"], np.load(npy))
    assert caps["blk.0.moe_experts"].shape == (5, 2)
    ids = caps["blk.0.moe_experts"]
    assert np.array_equal(ids, np.round(ids)) and ids.min() >= 0 and ids.max() < 8
    for name, a in caps.items():
        assert a.dtype == np.float32 and a.shape[0] == 5, name


def softmax_log(x):
    x = x.astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))


def test_metrics_match_numpy(records):
    _, ca = read(records["a"][0])
    _, cb = read(records["b"][0])
    out = subprocess.run([tool("ref-forward"), "compare", str(records["a"][0]),
                          str(records["b"][0]), "--json", "--any-model"],
                         capture_output=True, text=True)
    assert out.returncode == 1, out.stderr  # two unrelated models: different everywhere
    d = json.loads(out.stdout)
    seen = 0
    for e in d["entries"]:
        a = ca[e["point"]].astype(np.float64)
        b = cb[e["point"]].astype(np.float64)
        if e["kind"] == "experts":
            same = [set(x) == set(y) for x, y in zip(a.tolist(), b.tolist())]
            assert e["experts"] == pytest.approx(sum(same) / len(same), abs=0)
            continue
        if e["kind"] == "weights":
            continue  # paired by expert id: checked in the unit tests by hand
        diff = b - a
        assert e["rel_l2"] == pytest.approx(np.linalg.norm(diff) / np.linalg.norm(a), rel=1e-12)
        assert e["max_abs"] == pytest.approx(np.abs(diff).max(), rel=1e-12)
        r, c = np.unravel_index(np.abs(diff).argmax(), diff.shape)
        assert e["max_abs_at"] == [int(r), int(c)]
        cos = (a * b).sum() / (np.linalg.norm(a) * np.linalg.norm(b))
        assert e["cosine"] == pytest.approx(cos, rel=1e-12)
        if e["kind"] == "logits":
            la, lb = softmax_log(a), softmax_log(b)
            kl = (np.exp(la) * (la - lb)).sum(axis=1)
            assert e["kl"] == pytest.approx(kl.mean(), rel=1e-9)
            assert e["kl_max"] == pytest.approx(kl.max(), rel=1e-9)
            top1 = (a.argmax(axis=1) == b.argmax(axis=1)).mean()
            assert e["top1"] == pytest.approx(top1, abs=1e-12)
            ta = np.argsort(-a, axis=1, kind="stable")[:, :5]
            tb = np.argsort(-b, axis=1, kind="stable")[:, :5]
            top5 = np.mean([len(set(x) & set(y)) / 5 for x, y in zip(ta, tb)])
            assert e["top5"] == pytest.approx(top5, abs=1e-12)
        seen += 1
    assert seen >= 10


def test_gguf_py_record_is_compared(records, tmp_path):
    """A record written by gguf-py alone (as an engine would) compares against ours."""
    meta, caps = read(records["a"][0])
    path = tmp_path / "engine.gguf"
    w = gguf.GGUFWriter(str(path), "record")
    w.add_type("ggufkit.record")
    w.add_uint32("record.version", 1)
    w.add_string("record.model_digest", meta["record.model_digest"])
    w.add_array("record.tokens", meta["record.tokens"])
    w.add_string("record.backend", "engine")
    w.add_string("record.precision", "bf16")
    w.add_uint32("record.tp", 2)
    w.add_uint32("record.ranks", 2)
    for rank in range(2):
        for name, a in caps.items():
            if name.endswith("moe_experts"):
                w.add_tensor(f"{name}@{rank}", a)
            else:
                w.add_tensor(f"{name}@{rank}", (a * (1 + 1e-3 * (rank + 1))).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    out = subprocess.run([tool("ref-forward"), "compare", str(records["a"][0]), str(path),
                          "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr  # bf16 tolerances: 2e-3 is fine
    d = json.loads(out.stdout)
    assert d["tolerances"]["origin"] == "default f32 vs bf16"
    assert d["ranks"] == 2 and d["b"]["backend"] == "engine"
    logits = [e for e in d["entries"] if e["point"] == "logits"]
    assert [e["rank"] for e in logits] == [0, 1]
    assert logits[1]["rel_l2"] == pytest.approx(2e-3, rel=1e-3)
