"""libgguf dequantization against gguf-py (gguf.quants.dequantize), bit for bit.

Our code is called through ctypes on the shared library the build made
($GGUFKIT_BUILD/libgguf/libgguf.so), so every path (scalar, portable, AVX2)
is checked directly, with no helper binary. NaN is compared equal to NaN
(payloads may differ: numpy and F16C quiet signalling NaNs differently);
every other value, signed zeros included, must have identical bits.

Covered: random blocks for every type gguf-py dequantizes, all 256 scale
bytes of NVFP4/MXFP4, the quantized tensors of the real files in
../shared/testdata, and round trips through gguf-py's quantizers.
"""
import ctypes
import glob
import os

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T, quants  # noqa: E402

BUILD = os.environ.get("GGUFKIT_BUILD", os.path.join(os.path.dirname(__file__), "../../build"))
SHARED = os.environ.get("GGUFKIT_SHARED", os.path.join(os.path.dirname(__file__), "../../../shared/testdata"))
PATHS = {"scalar": 1, "portable": 2, "avx2": 3}


def _load():
    for name in ("libgguf.so", "libgguf.so.0"):
        p = os.path.join(BUILD, "libgguf", name)
        if os.path.exists(p):
            lib = ctypes.CDLL(p)
            lib.gguf_dequant_row_path.argtypes = [ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p,
                                                  ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
            lib.gguf_dequant_row_path.restype = ctypes.c_int
            lib.gguf_dequant_path_available.argtypes = [ctypes.c_int]
            lib.gguf_dequant_path_available.restype = ctypes.c_bool
            lib.gguf_type_get.argtypes = [ctypes.c_uint32]
            lib.gguf_type_get.restype = ctypes.c_void_p
            return lib
    pytest.skip(f"libgguf.so not found under {BUILD}/libgguf (set GGUFKIT_BUILD)")


LIB = _load()
AVAILABLE = [p for p, i in PATHS.items() if LIB.gguf_dequant_path_available(i)]


def ours(qtype, raw: np.ndarray, n: int, path: str = "scalar") -> np.ndarray:
    raw = np.ascontiguousarray(raw, dtype=np.uint8)
    out = np.empty(n, dtype=np.float32)
    rc = LIB.gguf_dequant_row_path(PATHS[path], int(qtype), raw.ctypes.data, out.ctypes.data, n, None)
    assert rc == 0, f"gguf_dequant_row_path({qtype.name}) = {rc}"
    return out


def theirs(qtype, raw: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(quants.dequantize(raw.reshape(1, -1), qtype), dtype=np.float32).reshape(-1)


def assert_same_bits(a: np.ndarray, b: np.ndarray, what: str):
    assert a.shape == b.shape, what
    same = (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))
    if not same.all():
        i = int(np.argmax(~same))
        raise AssertionError(f"{what}: {np.count_nonzero(~same)} of {a.size} differ; first at {i}: "
                             f"ours {a[i]!r} ({a.view(np.uint32)[i]:08x}) gguf-py {b[i]!r} "
                             f"({b.view(np.uint32)[i]:08x})")


def supported_by_gguf_py():
    out = []
    probe = np.zeros(1, dtype=np.uint8)
    for t in T:
        bs, ts = GGML_QUANT_SIZES[t]
        try:
            theirs(t, np.zeros(ts * 1, dtype=np.uint8))
        except NotImplementedError:
            continue
        except Exception:
            continue
        out.append(t)
    del probe
    return out


GGUF_PY_TYPES = supported_by_gguf_py()


def test_gguf_py_covers_what_we_expect():
    # gguf-py 0.19 dequantizes these; if a new version adds more, this test
    # lists them so they get checked (the parametrized tests pick them up).
    names = {t.name for t in GGUF_PY_TYPES}
    for must in ("Q4_0", "Q8_0", "Q4_K", "Q6_K", "IQ1_M", "IQ2_XXS", "TQ1_0", "MXFP4", "NVFP4", "BF16"):
        assert must in names


@pytest.mark.parametrize("path", AVAILABLE)
@pytest.mark.parametrize("qtype", GGUF_PY_TYPES, ids=lambda t: t.name)
def test_random_blocks(qtype, path):
    bs, ts = GGML_QUANT_SIZES[qtype]
    if qtype == T.F32:
        pytest.skip("F32 is a view in gguf-py")
    n_blocks = 300 if bs > 1 else 3001
    rng = np.random.default_rng(int(qtype) * 7919 + 1)
    raw = rng.integers(0, 256, n_blocks * ts, dtype=np.uint8)
    assert_same_bits(ours(qtype, raw, n_blocks * bs, path), theirs(qtype, raw), f"{qtype.name}/{path}")


@pytest.mark.parametrize("path", AVAILABLE)
def test_fp4_every_scale_byte(path):
    # every UE4M3 / E8M0 scale byte, including 0x7F, 0x80..0xFF (NVFP4's bit 7)
    rng = np.random.default_rng(40)
    nv = rng.integers(0, 256, (256, 36), dtype=np.uint8)
    nv[:, :4] = np.arange(256, dtype=np.uint8)[:, None]
    assert_same_bits(ours(T.NVFP4, nv, 256 * 64, path), theirs(T.NVFP4, nv), f"NVFP4/{path}")
    mx = rng.integers(0, 256, (256, 17), dtype=np.uint8)
    mx[:, 0] = np.arange(256, dtype=np.uint8)
    assert_same_bits(ours(T.MXFP4, mx, 256 * 32, path), theirs(T.MXFP4, mx), f"MXFP4/{path}")


@pytest.mark.parametrize("path", AVAILABLE)
@pytest.mark.parametrize("qtype", [t for t in GGUF_PY_TYPES if GGML_QUANT_SIZES[t][0] > 1], ids=lambda t: t.name)
def test_special_f16_scales(qtype, path):
    # the block's leading/trailing f16 fields set to NaN, Inf, subnormal, zero
    bs, ts = GGML_QUANT_SIZES[qtype]
    specials = np.array([0x7E00, 0x7C01, 0xFC00, 0x7C00, 0x0001, 0x8000, 0x0000, 0x03FF], dtype=np.uint16)
    rng = np.random.default_rng(int(qtype))
    raw = rng.integers(0, 256, (len(specials), ts), dtype=np.uint8)
    raw[:, 0:2] = specials.view(np.uint8).reshape(-1, 2)
    raw[:, ts - 2:ts] = specials[::-1].copy().view(np.uint8).reshape(-1, 2)
    assert_same_bits(ours(qtype, raw, len(specials) * bs, path), theirs(qtype, raw), f"{qtype.name}/{path}")


def test_q8_1_block_size_trap():
    # gguf-py's size table describes an old 40-byte Q8_1 (two float32 + 32 int8);
    # ggml writes 36 bytes (two f16 + 32 int8). We read ggml's layout.
    assert GGML_QUANT_SIZES[T.Q8_1] == (32, 40)

    class TypeInfo(ctypes.Structure):  # gguf_type_info in gguf/types.h
        _fields_ = [("name", ctypes.c_char_p), ("block_size", ctypes.c_uint32),
                    ("type_size", ctypes.c_uint32), ("quantized", ctypes.c_bool),
                    ("removed", ctypes.c_bool), ("valid", ctypes.c_bool)]

    info = ctypes.cast(LIB.gguf_type_get(int(T.Q8_1)), ctypes.POINTER(TypeInfo)).contents
    assert (info.name, info.block_size, info.type_size) == (b"Q8_1", 32, 36)
    block = np.zeros(72, dtype=np.uint8)
    for k, d in enumerate((1.0, -0.5)):
        block[36 * k:36 * k + 2] = np.array([d], dtype=np.float16).view(np.uint8)
        block[36 * k + 2:36 * k + 4] = np.array([np.inf], dtype=np.float16).view(np.uint8)  # s: ignored
        block[36 * k + 4:36 * k + 36] = np.arange(-16, 16, dtype=np.int8).view(np.uint8)
    got = ours(T.Q8_1, block, 64)
    want = np.concatenate([np.arange(-16, 16) * 1.0, np.arange(-16, 16) * -0.5]).astype(np.float32)
    assert_same_bits(got, want, "Q8_1")


def _real_files():
    return sorted(glob.glob(os.path.join(SHARED, "hf", "*", "*.gguf")) +
                  glob.glob(os.path.join(SHARED, "models", "*.gguf")))


def test_real_tensors():
    files = _real_files()
    if not files:
        pytest.skip(f"no GGUF files under {SHARED} (set GGUFKIT_SHARED)")
    checked = 0
    for path in files:
        reader = gguf.GGUFReader(path)
        for t in reader.tensors:
            qtype = T(t.tensor_type)
            if qtype == T.F32 or qtype not in GGUF_PY_TYPES:
                continue
            raw = np.asarray(t.data).view(np.uint8).reshape(-1)
            want = theirs(qtype, raw)
            for p in AVAILABLE:
                assert_same_bits(ours(qtype, raw, int(t.n_elements), p), want, f"{path}:{t.name}/{p}")
            checked += 1
    assert checked > 0, "no quantized tensors found in the shared test data"


ROUND_TRIP = [t for t in (T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.TQ1_0, T.TQ2_0, T.MXFP4, T.BF16)
              if t in GGUF_PY_TYPES]


@pytest.mark.parametrize("qtype", ROUND_TRIP, ids=lambda t: t.name)
def test_round_trip_gguf_py_quantize(qtype):
    # gguf-py quantizes, we dequantize: equal to gguf-py's dequantization and
    # close to the input (a layout error would not be close).
    rng = np.random.default_rng(123)
    x = rng.standard_normal((8, 512)).astype(np.float32)
    if qtype in (T.TQ1_0, T.TQ2_0):
        x = np.sign(x).astype(np.float32) * np.float32(0.75)
    q = quants.quantize(x, qtype)
    raw = np.asarray(q).view(np.uint8).reshape(-1)
    want = theirs(qtype, raw)
    for p in AVAILABLE:
        assert_same_bits(ours(qtype, raw, x.size, p), want, f"{qtype.name}/{p}")
    rel = np.sqrt(np.mean((want - x.reshape(-1)) ** 2) / np.mean(x ** 2))
    assert rel < {T.BF16: 0.01, T.Q8_0: 0.01, T.Q5_0: 0.05, T.Q5_1: 0.05, T.Q4_0: 0.12,
                  T.Q4_1: 0.12, T.MXFP4: 0.2}.get(qtype, 1e-3), rel
