"""ref-forward import-dump against dumps written by other libraries.

Every supported format and layout is written here by numpy (np.save / np.lib.format,
ml_dtypes for bfloat16) and the safetensors package, the way the engines' own tooling writes
them, from random arrays; the record import-dump writes is read back with gguf-py and every
capture point must equal the source array converted to float32 (bit for bit: f16, bf16 and
big-endian values are exact in float32, f64 rounds as numpy's astype does). The shipped maps
(hf, vllm, sglang, hf-layer-outputs) are used where a layout has one. Malformed dumps and maps
must exit 2 with a message naming the file and the field.
"""
import os
import subprocess

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
ml_dtypes = pytest.importorskip("ml_dtypes")
st_numpy = pytest.importorskip("safetensors.numpy")

BIN = os.environ.get("GGUFKIT_BIN", "")
RF = os.path.join(BIN, "ref-forward")
if not os.access(RF, os.X_OK):
    pytest.skip("ref-forward is not built (GGUFKIT_BIN)", allow_module_level=True)

T, H, L = 7, 24, 4  # tokens, hidden, blocks
rng = np.random.default_rng(1234)


def run(*args):
    return subprocess.run([RF, "import-dump", *map(str, args)], capture_output=True, text=True)


def record(path):
    r = gguf.GGUFReader(str(path))
    caps = {t.name: np.array(t.data).reshape(int(t.shape[1]), int(t.shape[0])) for t in r.tensors}
    meta = {}
    for k, f in r.fields.items():
        if k.startswith("record."):
            v = f.contents()
            meta[k[7:]] = v
    return caps, meta


def imported(tmp_path, dump, *args):
    out = tmp_path / "rec.gguf"
    p = run(dump, "-o", out, *args)
    assert p.returncode == 0, p.stderr
    return record(out), p.stdout


def check(caps, want):
    assert sorted(caps) == sorted(want), (sorted(caps), sorted(want))
    for k, v in want.items():
        exp = np.asarray(v, dtype=np.float32) if v.dtype != np.float32 else v
        assert caps[k].shape == exp.shape, (k, caps[k].shape, exp.shape)
        assert np.array_equal(caps[k].view(np.uint32), exp.view(np.uint32)), k


def hf_states():
    return rng.standard_normal((L + 1, T, H)).astype(np.float32)


def test_hf_stacked_npy(tmp_path):
    d = tmp_path / "hf"
    d.mkdir()
    hs = hf_states()
    logits = rng.standard_normal((T, 50)).astype(np.float32)
    np.save(d / "hidden_states.npy", hs)
    np.save(d / "logits.npy", logits)
    (caps, meta), out = imported(tmp_path, d, "--map", "hf", "--tokens", "1,2,3,4,5,6,7")
    want = {"token_embd": hs[0], "output_norm": hs[-1], "logits": logits}
    want.update({f"blk.{i}.residual": hs[i + 1] for i in range(L - 1)})
    check(caps, want)
    assert meta["backend"] == "hf-transformers" and meta["precision"] == "f32"
    assert list(meta["tokens"]) == [1, 2, 3, 4, 5, 6, 7] and meta["model_digest"] == ""
    # forward order in the file: token_embd, blocks, output_norm, logits
    names = [t.name for t in gguf.GGUFReader(str(tmp_path / "rec.gguf")).tensors]
    assert names[0] == "token_embd" and names[-2:] == ["output_norm", "logits"]
    assert "blk.0.residual           <- hidden_states.npy[1]  f32 [7, 24]" in out


def test_hf_with_batch_axis(tmp_path):
    d = tmp_path / "hf"
    d.mkdir()
    hs = hf_states()
    np.save(d / "hidden_states.npy", hs[:, None])  # [L+1, 1, T, H]
    (caps, _), _ = imported(tmp_path, d, "--map", "hf", "--layout", "layer,batch,seq,hidden")
    assert np.array_equal(caps["blk.2.residual"], hs[3]) and np.array_equal(caps["token_embd"], hs[0])


def test_hf_layer_outputs(tmp_path):
    d = tmp_path / "hf"
    d.mkdir()
    lo = rng.standard_normal((L, T, H)).astype(np.float32)
    np.save(d / "layer_outputs.npy", lo)
    (caps, _), _ = imported(tmp_path, d, "--map", "hf-layer-outputs")
    check(caps, {f"blk.{i}.residual": lo[i] for i in range(L)})


def test_vllm_safetensors_bf16(tmp_path):
    d = tmp_path / "vllm"
    d.mkdir()
    hs = rng.standard_normal((T, L + 1, H)).astype(ml_dtypes.bfloat16)
    ids = rng.integers(0, 150000, T).astype(np.int64)
    st_numpy.save_file({"hidden_states": hs, "token_ids": ids}, str(d / "a1b2c3.safetensors"))
    (d / "a1b2c3.safetensors.lock").write_bytes(b"")  # the connector's lock file is ignored
    (caps, meta), _ = imported(tmp_path, d, "--map", "vllm")
    want = {"token_embd": hs[:, 0]}
    want.update({f"blk.{i}.residual": hs[:, i + 1] for i in range(L)})
    check(caps, want)
    assert list(meta["tokens"]) == ids.tolist()
    assert meta["backend"] == "vllm" and meta["precision"] == "bf16"


def test_vllm_two_requests_is_an_error(tmp_path):
    d = tmp_path / "vllm"
    d.mkdir()
    for r in ("r1", "r2"):
        st_numpy.save_file({"hidden_states": rng.standard_normal((T, 2, H)).astype(np.float16),
                            "token_ids": np.arange(T, dtype=np.int64)}, str(d / f"{r}.safetensors"))
    p = run(d, "--map", "vllm", "-o", tmp_path / "x.gguf")
    assert p.returncode == 2 and "both give token_embd" in p.stderr, p.stderr
    assert "r1.safetensors" in p.stderr and "r2.safetensors" in p.stderr


def test_sglang_converted_dump(tmp_path):
    """SGLang's --debug-tensor-dump-output-folder layout after the .pt -> safetensors conversion
    (tuple outputs flattened to NAME.0 / NAME.1), rank 0's folder; other ranks are ignored."""
    d = tmp_path / "sglang"
    bf = ml_dtypes.bfloat16
    a = lambda: rng.standard_normal((T, H)).astype(bf)  # noqa: E731
    t, want = {}, {}
    t["model.embed_tokens"] = want["token_embd"] = a()
    for i in range(L):
        ln = f"model.layers.{i}.input_layernorm"
        if i == 0:
            t[ln] = want["blk.0.attn_norm"] = a()
        else:
            t[ln + ".0"] = want[f"blk.{i}.attn_norm"] = a()
            t[ln + ".1"] = want[f"blk.{i - 1}.residual"] = a()
        t[f"model.layers.{i}.self_attn.qkv_proj"] = rng.standard_normal((T, 3 * H)).astype(bf)
        t[f"model.layers.{i}.self_attn.o_proj"] = want[f"blk.{i}.attn_out"] = a()
        t[f"model.layers.{i}.post_attention_layernorm.0"] = want[f"blk.{i}.ffn_norm"] = a()
        t[f"model.layers.{i}.post_attention_layernorm.1"] = want[f"blk.{i}.attn_residual"] = a()
        if i != 2:  # a MoE layer has no mlp.down_proj
            t[f"model.layers.{i}.mlp.down_proj"] = want[f"blk.{i}.ffn_out"] = a()
    t["model.norm.0"] = want["output_norm"] = a()
    t["model.norm.1"] = a()
    ids = np.arange(100, 100 + T, dtype=np.int64)
    t["model.forward_batch_info.input_ids"] = ids
    for rank in (0, 1):
        f = d / f"TP{rank}_PP0_Rank{rank}_pid{4242 + rank}"
        f.mkdir(parents=True)
        st_numpy.save_file(t, str(f / "Pass00003.safetensors"))
    (caps, meta), _ = imported(tmp_path, d, "--map", "sglang")
    check(caps, want)
    assert list(meta["tokens"]) == ids.tolist() and meta["backend"] == "sglang"


MAP_LAYERS = "layout seq,hidden\nlayer_{i}.npy -> blk.{i}.ffn_out\n"


@pytest.mark.parametrize("dtype", ["<f2", "<f4", "<f8", ">f4", ">f8"])
def test_per_layer_npy_dtypes(tmp_path, dtype):
    d = tmp_path / "d"
    d.mkdir()
    want = {}
    for i in range(L):
        a = (rng.standard_normal((T, H)) * 3).astype(dtype)
        np.save(d / f"layer_{i}.npy", a)
        want[f"blk.{i}.ffn_out"] = a.astype(np.float32)
    (tmp_path / "m.map").write_text(MAP_LAYERS)
    (caps, meta), _ = imported(tmp_path, d, "--map", tmp_path / "m.map")
    check(caps, want)
    assert meta["precision"] == {"<f2": "f16", "<f8": "f64", ">f8": "f64"}.get(dtype, "f32")
    assert meta["backend"] == "import"


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_npy_format_versions(tmp_path, version):
    d = tmp_path / "d"
    d.mkdir()
    a = rng.standard_normal((T, H)).astype(np.float32)
    with open(d / "layer_0.npy", "wb") as f:
        np.lib.format.write_array(f, a, version=version)
    (tmp_path / "m.map").write_text(MAP_LAYERS)
    (caps, _), _ = imported(tmp_path, d, "--map", tmp_path / "m.map")
    check(caps, {"blk.0.ffn_out": a})


@pytest.mark.parametrize("order", ["C", "F"])
def test_hidden_seq_layout(tmp_path, order):
    """[hidden, seq] files, stored C-contiguous or as numpy saves a transposed view (Fortran)."""
    d = tmp_path / "d"
    d.mkdir()
    want = {}
    for i in range(2):
        a = rng.standard_normal((T, H)).astype(np.float32)
        np.save(d / f"layer_{i}.npy", np.ascontiguousarray(a.T) if order == "C" else a.T)
        want[f"blk.{i}.ffn_out"] = a
    hdr = open(d / "layer_0.npy", "rb").read(128)
    assert (b"'fortran_order': True" in hdr) == (order == "F")
    (tmp_path / "m.map").write_text(MAP_LAYERS)
    (caps, _), _ = imported(tmp_path, d, "--map", tmp_path / "m.map", "--layout", "hidden,seq")
    check(caps, want)


def test_bf16_npy_needs_npy_v2(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    a = rng.standard_normal((T, H)).astype(ml_dtypes.bfloat16)
    np.save(d / "layer_0.npy", a)
    assert b"'descr': '<V2'" in open(d / "layer_0.npy", "rb").read(128)
    (tmp_path / "m.map").write_text(MAP_LAYERS)
    p = run(d, "--map", tmp_path / "m.map", "-o", tmp_path / "x.gguf")
    assert p.returncode == 2, p.stderr
    assert "layer_0.npy: header 'descr': '<V2'" in p.stderr and "(offset 20)" in p.stderr
    (caps, meta), _ = imported(tmp_path, d, "--map", tmp_path / "m.map", "--npy-v2", "bf16")
    check(caps, {"blk.0.ffn_out": a})
    assert meta["precision"] == "bf16"
    (tmp_path / "m2.map").write_text("npy-v2 bf16\n" + MAP_LAYERS)
    (caps, _), _ = imported(tmp_path, d, "--map", tmp_path / "m2.map")
    check(caps, {"blk.0.ffn_out": a})


def test_per_tensor_safetensors_and_tokens_npy(tmp_path):
    """One safetensors file per layer holding one tensor (no TENSOR needed), ids from a .npy."""
    d = tmp_path / "d"
    (d / "layers").mkdir(parents=True)
    want = {}
    for i in range(3):
        a = rng.standard_normal((T, H)).astype(np.float16)
        st_numpy.save_file({f"whatever.{i}": a}, str(d / "layers" / f"blk{i}.safetensors"))
        want[f"blk.{i}.attn_out"] = a
    np.save(d / "ids.npy", np.arange(T, dtype=np.int32)[None])  # [1, T]
    (tmp_path / "m.map").write_text("tokens ids.npy\nbackend my-engine\n"
                                    "layers/blk{n}.safetensors -> blk.{n}.attn_out\n")
    (caps, meta), _ = imported(tmp_path, d, "--map", tmp_path / "m.map", "--backend", "x")
    check(caps, want)
    assert list(meta["tokens"]) == list(range(T)) and meta["backend"] == "x"


# ---- malformed dumps and maps: exit 2, the file and the field named ----

def bad_case(tmp_path, files, map_text, *extra):
    d = tmp_path / "d"
    d.mkdir(exist_ok=True)
    for name, data in files.items():
        (d / name).write_bytes(data)
    (tmp_path / "m.map").write_text(map_text)
    p = run(d, "--map", tmp_path / "m.map", "-o", tmp_path / "x.gguf", *extra)
    assert not (tmp_path / "x.gguf").exists()
    return p


def npy_bytes(a):
    import io
    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()


GOOD = npy_bytes(np.zeros((T, H), np.float32))


@pytest.mark.parametrize("files,map_text,needles", [
    ({"layer_0.npy": GOOD[:-4]}, MAP_LAYERS, ["layer_0.npy: data: shape and '<f4' need", "(offset 128)"]),
    ({"layer_0.npy": GOOD.replace(b"'shape': (7, 24)", b"'shape': [7, 24]")}, MAP_LAYERS,
     ["layer_0.npy: header 'shape': expected a tuple '('"]),
    ({"layer_0.npy": GOOD.replace(b"<f4", b"<c8")}, MAP_LAYERS,
     ["layer_0.npy: header 'descr': '<c8' is not a dtype"]),
    ({"layer_0.npy": b"PK\x03\x04 an npz?"}, MAP_LAYERS, ["layer_0.npy: not a .npy file"]),
    ({"layer_0.npy": GOOD + GOOD}, MAP_LAYERS, ["layer_0.npy: data:", "bytes after the array"]),
    ({"x.safetensors": b"\x10\x00\x00\x00\x00\x00\x00\x00{\"a\": 3}        "}, "x.safetensors -> logits\n",
     ["x.safetensors: "]),
    ({"layer_0.npy": npy_bytes(np.zeros((T, H, 2), np.float32))}, MAP_LAYERS,
     ["layer_0.npy: shape [7, 24, 2] has 3 dimensions, layout seq,hidden has 2"]),
    ({"layer_0.npy": GOOD, "layer_1.npy": npy_bytes(np.zeros((T + 1, H), np.float32))}, MAP_LAYERS,
     ["blk.1.ffn_out has 8 tokens", "layer_1.npy"]),
    ({"layer_0.npy": GOOD}, "layout seq,hidden\nlayer_{i}.npy -> blk.{i}.ffn_out\nmissing.npy -> logits\n",
     ["m.map: line 3: 'missing.npy' matches nothing in"]),
    ({"layer_0.npy": GOOD}, "layout seq,hidden\nlayer_{i}.npy => blk.{i}.ffn_out\n",
     ["m.map: line 2: 'layer_{i}.npy': not a statement"]),
    ({"layer_0.npy": GOOD}, "layout seq,hidden,layer\nlayer_{i}.npy -> blk.{i}.ffn_out\n",
     ["m.map: line 2:", "has a layer axis: give an index"]),
    ({"layer_0.npy": GOOD}, "layer_{i}.npy -> blk.{i}.ffn-out\n",
     ["m.map: line 1: point 'blk.{i}.ffn-out': '-' is not a capture name character"]),
])
def test_malformed(tmp_path, files, map_text, needles):
    p = bad_case(tmp_path, files, map_text)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert p.stderr.startswith("ref-forward import-dump: error: "), p.stderr
    for n in needles:
        assert n in p.stderr, (n, p.stderr)


def test_usage_errors(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    np.save(d / "layer_0.npy", np.zeros((T, H), np.float32))
    (tmp_path / "m.map").write_text(MAP_LAYERS)
    for args, needle in [
        ((d, "-o", tmp_path / "x.gguf"), "--map is required"),
        ((d, "--map", tmp_path / "m.map"), "-o RECORD.gguf is required"),
        ((d, "--map", tmp_path / "nope.map", "-o", tmp_path / "x.gguf"), "nope.map"),
        ((tmp_path / "nodir", "--map", tmp_path / "m.map", "-o", tmp_path / "x.gguf"), "no such folder"),
        ((d, "--map", tmp_path / "m.map", "-o", tmp_path / "x.gguf", "--layout", "seq,width"), "'width' is not an axis"),
        ((d, "--map", tmp_path / "m.map", "-o", tmp_path / "x.gguf", "--tokens", "1,2"), "2 token ids given, the captures hold 7"),
        ((d, "--map", tmp_path / "m.map", "-o", d / "layer_0.npy"), "one of the dump's files"),
    ]:
        p = run(*args)
        assert p.returncode == 2, (args, p.returncode, p.stderr)
        assert needle in p.stderr, (needle, p.stderr)
    assert np.load(d / "layer_0.npy").shape == (T, H)  # the input is untouched
