#!/usr/bin/env python3
"""Fixtures for the gguf-merge tests, written byte by byte (no gguf-py needed).

  merge_fixture.py types OUT.gguf [--align N] [--seed S]
      a model with one tensor of every ggml type our table knows (random bytes),
      plus metadata of every value type (nested arrays included)
  merge_fixture.py sparse OUT.gguf --gib G
      a model over G GiB whose big tensors are holes (costs no disk), with a few
      real bytes past 4 GiB so 64-bit offsets are exercised
  merge_fixture.py dense OUT.gguf --mib M
      a model of M MiB of real (non-hole) data in 4 tensors, for interrupt tests
  merge_fixture.py gguf-py-split OUT_PREFIX --max-tensors N
      a split set written by gguf-py's own writer (another implementation)
  merge_fixture.py set PREFIX --flaw ok|dup|total|no|count|version|align|nokeys
      a 3-part split set written by hand, valid or with one flaw
  merge_fixture.py digest FILE...
      a digest of each file's size, hole layout and data (fast on sparse files)
"""
import hashlib
import argparse
import os
import random
import struct
import sys

# ggml type id -> (name, block elements, bytes per block), as libgguf/src/format/types.c
TYPES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17), 40: ("NVFP4", 64, 36), 41: ("Q1_0", 128, 18),
}

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
          BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}


def enc_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def enc_value(vtype, v):
    if vtype == STR:
        return enc_str(v)
    if vtype == ARR:
        etype, items = v
        out = struct.pack("<IQ", etype, len(items))
        for it in items:
            out += enc_value(etype, it)
        return out
    return struct.pack(SCALAR[vtype], v)


def pad(x, a):
    return (a - x % a) % a


def write_gguf(path, kvs, tensors, align=32, version=3, total_extra=0):
    """kvs: [(key, vtype, value)]; tensors: [(name, type, ne, data bytes | None | callable)].
    None data leaves a hole; a callable gets (file, offset, nbytes) and writes what it likes."""
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        head += enc_str(k) + struct.pack("<I", t) + enc_value(t, v)
    off = 0
    layout = []
    for name, ttype, ne, data in tensors:
        _, bs, ts = TYPES[ttype]
        n = 1
        for d in ne:
            n *= d
        assert ne[0] % bs == 0, (name, ne)
        nbytes = n // bs * ts
        head += enc_str(name) + struct.pack("<I", len(ne))
        head += b"".join(struct.pack("<Q", d) for d in ne)
        head += struct.pack("<IQ", ttype, off)
        layout.append((off, nbytes, data))
        off += nbytes + pad(nbytes, align)
    data_start = len(head) + pad(len(head), align)
    with open(path, "wb") as f:
        f.write(head)
        f.write(b"\0" * pad(len(head), align))
        for o, nbytes, data in layout:
            if data is None:
                continue
            if callable(data):
                data(f, data_start + o, nbytes)
                continue
            assert len(data) == nbytes
            f.seek(data_start + o)
            f.write(data)
        f.truncate(data_start + off + total_extra)
    return data_start + off


def metadata(rng, arch="llama"):
    return [
        ("general.architecture", STR, arch),
        ("general.name", STR, "merge fixture"),
        ("general.alignment_hint_u8", U8, 7),
        ("test.i8", I8, -3), ("test.u16", U16, 65535), ("test.i16", I16, -300),
        ("test.u32", U32, 4000000000), ("test.i32", I32, -7), ("test.f32", F32, 0.5),
        ("test.bool", BOOL, True), ("test.u64", U64, 2**63 + 5), ("test.i64", I64, -2**40),
        ("test.f64", F64, 3.25),
        ("test.arr_i32", ARR, (I32, [1, -2, 3])),
        ("test.arr_str", ARR, (STR, ["a", "bé", ""])),
        ("test.arr_arr", ARR, (ARR, [(U8, [1, 2]), (U8, [])])),
        ("test.empty_str", STR, ""),
    ]


def cmd_types(a):
    rng = random.Random(a.seed)
    kvs = metadata(rng)
    if a.align != 32:
        kvs.append(("general.alignment", U32, a.align))
    tensors = []
    for tid, (name, bs, ts) in sorted(TYPES.items()):
        if name in a.skip.split(","):
            continue
        ne0 = bs if bs > 1 else 33  # an odd width for plain types: padding is exercised
        ne = [ne0, 3]
        nbytes = 3 * (ne0 // bs) * ts
        data = bytes(rng.getrandbits(8) for _ in range(nbytes))
        tensors.append((f"blk.{len(tensors)}.{name.lower()}.weight", tid, ne, data))
    tensors.append(("scalar_like.weight", 0, [1], struct.pack("<f", 1.5)))
    tensors.append(("empty.weight", 0, [0, 4], b""))
    tensors.append(("four_d.weight", 1, [2, 3, 2, 2], bytes(range(48))))
    write_gguf(a.out, kvs, tensors, align=a.align)


def cmd_sparse(a):
    gib = a.gib
    dense = a.dense_mib << 20
    big = (gib << 30) // 3 // 4096 * 4096  # F32 bytes per big tensor, whole rows of 1024

    def tail(f, off, nbytes):  # real bytes at the very end of the tensor
        f.seek(off + nbytes - 16)
        f.write(bytes(range(1, 17)))

    tensors = [("token_embd.weight", 0, [64, 4], bytes(range(256)) * 4)]
    if dense:
        rng = random.Random(9)
        chunk = bytes(rng.getrandbits(8) for _ in range(1 << 16))

        def fill(f, off, nbytes):
            f.seek(off)
            for _ in range(nbytes // len(chunk)):
                f.write(chunk)
        tensors.append(("dense.weight", 0, [16384, dense // 65536], fill))
    for i in range(3):
        tensors.append((f"blk.{i}.ffn_up.weight", 0, [1024, big // 4096], tail))
    tensors.append(("output_norm.weight", 0, [64], bytes(range(256))))
    size = write_gguf(a.out, metadata(random.Random(1)), tensors)
    print(size)


def cmd_dense(a):
    per = (a.mib << 20) // 4 // 4096 * 4096
    rng = random.Random(5)
    chunk = bytes(rng.getrandbits(8) for _ in range(1 << 16))

    def fill(f, off, nbytes):
        f.seek(off)
        for _ in range(nbytes // len(chunk)):
            f.write(chunk)
        f.write(chunk[: nbytes % len(chunk)])

    tensors = [(f"blk.{i}.ffn_down.weight", 0, [1024, per // 4096], fill) for i in range(4)]
    write_gguf(a.out, metadata(random.Random(2)), tensors)


def cmd_gguf_py_split(a):
    import numpy as np
    import gguf

    w = gguf.GGUFWriter(a.out + ".gguf", "llama", split_max_tensors=a.max_tensors)
    w.add_name("gguf-py split fixture")
    w.add_uint32("test.u32", 7)
    w.add_array("test.arr", ["x", "y"])
    rng = np.random.default_rng(3)
    for i in range(10):
        w.add_tensor(f"blk.{i}.attn_q.weight", rng.standard_normal((4, 32), dtype=np.float32))
        q = rng.integers(0, 255, size=(2, 34), dtype=np.uint8)
        w.add_tensor(f"blk.{i}.attn_k.weight", q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def cmd_set(a):
    flaw = a.flaw
    n = 3
    meta = metadata(random.Random(4))
    for i in range(n):
        kvs = list(meta) if i == 0 else []
        version = 2 if (flaw == "version" and i == 1) else 3
        align = 64 if (flaw == "align" and i == 1) else 32
        if align != 32:
            kvs.append(("general.alignment", U32, align))
        if not (flaw == "nokeys" and i == 1):
            no = 0 if (flaw == "no" and i == 1) else i
            count = 4 if (flaw == "count" and i == 2) else n
            total = 7 if flaw == "total" else 2 * n
            kvs += [("split.no", U16, no), ("split.count", U16, count),
                    ("split.tensors.count", I32, total)]
        tensors = []
        for j in range(2):
            name = f"blk.{i}.t{j}.weight"
            if flaw == "dup" and i == 1 and j == 1:
                name = "blk.0.t0.weight"
            tensors.append((name, 0, [8, 2], bytes((i * 16 + j + k) % 256 for k in range(64))))
        write_gguf(f"{a.prefix}-{i + 1:05d}-of-{n:05d}.gguf", kvs, tensors, align=align,
                   version=version)


def cmd_digest(a):
    for path in a.files:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            fd = f.fileno()
            size = os.fstat(fd).st_size
            h.update(str(size).encode())
            off = 0
            while off < size:
                try:
                    d = os.lseek(fd, off, os.SEEK_DATA)
                except OSError:
                    break
                e = os.lseek(fd, d, os.SEEK_HOLE)
                h.update(f"[{d},{e})".encode())
                f.seek(d)
                left = e - d
                while left:
                    b = f.read(min(left, 1 << 22))
                    h.update(b)
                    left -= len(b)
                off = e
        print(h.hexdigest(), path)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("types")
    s.add_argument("out")
    s.add_argument("--align", type=int, default=32)
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--skip", default="", help="type names to leave out, comma-separated")
    s = sub.add_parser("sparse")
    s.add_argument("out")
    s.add_argument("--gib", type=int, default=5)
    s.add_argument("--dense-mib", type=int, default=0)
    s = sub.add_parser("dense")
    s.add_argument("out")
    s.add_argument("--mib", type=int, default=256)
    s = sub.add_parser("gguf-py-split")
    s.add_argument("out")
    s.add_argument("--max-tensors", type=int, default=6)
    s = sub.add_parser("set")
    s.add_argument("prefix")
    s.add_argument("--flaw", default="ok")
    s = sub.add_parser("digest")
    s.add_argument("files", nargs="+")
    a = p.parse_args()
    {"types": cmd_types, "sparse": cmd_sparse, "dense": cmd_dense,
     "gguf-py-split": cmd_gguf_py_split, "set": cmd_set, "digest": cmd_digest}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
