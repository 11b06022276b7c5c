#!/usr/bin/env python3
"""Writes the parser's seed corpus: small valid GGUF files and malformed ones.

Malformed inputs are named after the error they must produce, GGUF_E_<CODE>--what.gguf;
tests/unit/test_corpus.c opens each and checks the code. Valid seeds start with ok--.
Run from anywhere: python3 tests/fuzz/make_corpus.py (rewrites tests/fuzz/corpus/parser).
"""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "parser")


def s(x: bytes) -> bytes:
    return struct.pack("<Q", len(x)) + x


def hdr(version=3, nt=0, nkv=0) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, nt, nkv)


def kv_u32(key: bytes, v: int) -> bytes:
    return s(key) + struct.pack("<II", 4, v)


def kv_str(key: bytes, v: bytes) -> bytes:
    return s(key) + struct.pack("<I", 8) + s(v)


def tinfo(name: bytes, ne, typ: int, off: int) -> bytes:
    return s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<q", n) for n in ne) + \
        struct.pack("<IQ", typ, off)


def pad(b: bytes, a=32) -> bytes:
    return b + b"\0" * ((a - len(b) % a) % a)


def valid_small() -> bytes:
    h = hdr(3, 2, 3) + kv_str(b"general.architecture", b"llama") + kv_u32(b"llama.block_count", 1)
    h += s(b"tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 2) + s(b"a") + s(b"bc")
    h += tinfo(b"a.weight", [4, 2], 0, 0) + tinfo(b"b.weight", [32], 8, 32)
    h = pad(h)
    data = pad(struct.pack("<8f", *range(8))) + pad(b"\x00\x3c" + bytes(range(32)))
    return h + data


def cases():
    v = valid_small()
    yield "ok--small-llama.gguf", v
    yield "ok--v2.gguf", hdr(2, 0, 1) + kv_u32(b"x", 1)
    yield "ok--nested-arrays.gguf", hdr(3, 0, 1) + s(b"n") + struct.pack("<IIQ", 9, 9, 2) + \
        struct.pack("<IQ", 4, 1) + struct.pack("<I", 7) + struct.pack("<IQ", 8, 1) + s(b"z")
    yield "ok--alignment-64.gguf", pad(hdr(3, 1, 1) + kv_u32(b"general.alignment", 64) +
                                       tinfo(b"t", [16], 0, 0), 64) + bytes(64)
    yield "GGUF_E_NOT_GGUF--empty.gguf", b""
    yield "GGUF_E_NOT_GGUF--lfs-pointer.gguf", (
        b"version https://git-lfs.github.com/spec/v1\n"
        b"oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
        b"size 402000000000\n")
    yield "GGUF_E_NOT_GGUF--html-page.gguf", b"<!DOCTYPE html>\n<html><head><title>404</title></head></html>\n"
    yield "GGUF_E_BAD_MAGIC--ggml.gguf", b"GGML" + bytes(28)
    yield "GGUF_E_BAD_VERSION--v1.gguf", hdr(1)
    yield "GGUF_E_BAD_VERSION--big-endian.gguf", b"GGUF" + struct.pack(">IQQ", 3, 0, 0)
    yield "GGUF_E_TRUNCATED--half-header.gguf", v[:13]
    yield "GGUF_E_TRUNCATED--in-tensor-infos.gguf", v[:150]
    yield "GGUF_E_TRUNCATED--data-cut.gguf", v[:-40]
    yield "GGUF_E_TRUNCATED--huge-n_kv.gguf", hdr(3, 0, 2**62) + bytes(16)
    yield "GGUF_E_TRUNCATED--huge-n_tensors.gguf", hdr(3, 2**63, 0) + bytes(16)
    yield "GGUF_E_TRUNCATED--string-past-end.gguf", hdr(3, 0, 1) + struct.pack("<Q", 2**40) + bytes(20)
    yield "GGUF_E_TRUNCATED--array-past-end.gguf", hdr(3, 0, 1) + s(b"a") + struct.pack("<IIQ", 9, 6, 2**50) + bytes(8)
    yield "GGUF_E_LIMIT--nesting.gguf", hdr(3, 0, 1) + s(b"d") + struct.pack("<I", 9) + \
        struct.pack("<IQ", 9, 1) * 12 + struct.pack("<IQ", 4, 0)
    yield "GGUF_E_BAD_SHAPE--n_dims-5.gguf", pad(hdr(3, 1, 0) + tinfo(b"t", [1, 1, 1, 1, 1], 0, 0)) + bytes(32)
    yield "GGUF_E_BAD_SHAPE--negative-ne.gguf", pad(hdr(3, 1, 0) + tinfo(b"t", [4, -1], 0, 0)) + bytes(32)
    yield "GGUF_E_BAD_SHAPE--block-size.gguf", pad(hdr(3, 1, 0) + tinfo(b"t", [33], 8, 0)) + bytes(64)
    yield "GGUF_E_OVERFLOW--ne-product.gguf", pad(hdr(3, 1, 0) + tinfo(b"t", [2**62, 4], 0, 0))
    yield "GGUF_E_OVERFLOW--byte-size.gguf", pad(hdr(3, 1, 0) + tinfo(b"t", [2**63 - 1], 0, 0))
    yield "GGUF_E_OVERFLOW--offset-plus-size.gguf", pad(hdr(3, 1, 0) + tinfo(b"t", [8], 0, 2**64 - 32))
    yield "GGUF_E_BAD_TYPE--unknown-tensor-type.gguf", pad(hdr(3, 1, 0) + tinfo(b"t", [32], 200, 0)) + bytes(64)
    yield "GGUF_E_BAD_TYPE--removed-q4_2.gguf", pad(hdr(3, 1, 0) + tinfo(b"t", [32], 4, 0)) + bytes(64)
    yield "GGUF_E_BAD_TYPE--unknown-value-type.gguf", hdr(3, 0, 1) + s(b"k") + struct.pack("<I", 13) + bytes(8)
    yield "GGUF_E_BAD_ALIGNMENT--zero.gguf", hdr(3, 0, 1) + kv_u32(b"general.alignment", 0)
    yield "GGUF_E_BAD_ALIGNMENT--not-power-of-two.gguf", hdr(3, 0, 1) + kv_u32(b"general.alignment", 24)
    yield "GGUF_E_BAD_ALIGNMENT--huge.gguf", hdr(3, 0, 1) + kv_u32(b"general.alignment", 2**31)
    yield "GGUF_E_BAD_OFFSET--misaligned.gguf", pad(hdr(3, 1, 0) + tinfo(b"t", [8], 0, 8)) + bytes(64)
    yield "GGUF_E_BAD_OFFSET--overlap.gguf", pad(hdr(3, 2, 0) + tinfo(b"a", [16], 0, 0) +
                                                 tinfo(b"b", [16], 0, 32)) + bytes(128)
    yield "GGUF_E_TRUNCATED--data-past-eof.gguf", pad(hdr(3, 1, 0) + tinfo(b"t", [64], 0, 0)) + bytes(32)
    yield "GGUF_E_DUPLICATE--key.gguf", hdr(3, 0, 2) + kv_u32(b"k", 1) + kv_u32(b"k", 2)
    yield "GGUF_E_DUPLICATE--tensor-name.gguf", pad(hdr(3, 2, 0) + tinfo(b"w", [8], 0, 0) +
                                                    tinfo(b"w", [8], 0, 32)) + bytes(64)
    yield "GGUF_E_BAD_UTF8--key.gguf", hdr(3, 0, 1) + s(b"k\xff") + struct.pack("<II", 4, 1)
    yield "GGUF_E_BAD_UTF8--tensor-name.gguf", pad(hdr(3, 1, 0) + tinfo(b"\xed\xa0\x80", [8], 0, 0)) + bytes(32)
    yield "GGUF_E_BAD_VALUE--bool-2.gguf", hdr(3, 0, 1) + s(b"b") + struct.pack("<IB", 7, 2)


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        os.unlink(os.path.join(OUT, f))
    for name, data in cases():
        with open(os.path.join(OUT, name), "wb") as fh:
            fh.write(data)


if __name__ == "__main__":
    main()
