#!/usr/bin/env python3
"""Seed corpus of fuzz_kld: small llama.cpp KL-divergence files laid out as
tools/perplexity/perplexity.cpp writes them (see libgguf/include/gguf/kld.h),
valid ones (ok--*) and one per error of the reader, named after the code it must
produce (GGUF_E_CODE--what.kld; tests/unit/test_kld.c checks every name).
Run: python3 tests/fuzz/make_kld_corpus.py tests/fuzz/corpus/kld"""
import math
import os
import struct
import sys


def kld_file(n_ctx, n_vocab, n_chunk, magic=b"_logits_", bad_token=-1, scale=None, minlp=None):
    out = bytearray(magic)
    out += struct.pack("<iii", n_ctx, n_vocab, n_chunk)
    for i in range(n_ctx * n_chunk):
        out += struct.pack("<i", n_vocab if i == bad_token else i % max(n_vocab, 1))
    nv = 2 * ((n_vocab + 1) // 2) + 4
    rows = n_chunk * (n_ctx - 1 - n_ctx // 2)
    for r in range(rows):
        logits = [math.sin(r + v) * 4 for v in range(n_vocab)]
        mx = max(logits)
        mn = max(min(logits), mx - 16)
        lse = math.log(sum(math.exp(x - mx) for x in logits))
        s = (mx - mn) / 65535 if scale is None else scale
        m = (mn - mx - lse) if minlp is None else minlp
        out += struct.pack("<ff", s, m)
        qs = (mx - mn) / 65535  # the quantization itself uses the true scale
        q = [min(65535, round((x - mn) / qs)) if qs and x > mn else 0 for x in logits]
        q += [0] * (nv - 4 - n_vocab)
        out += struct.pack("<%dH" % (nv - 4), *q)
    return bytes(out)


def main(folder):
    os.makedirs(folder, exist_ok=True)
    ok = kld_file(8, 5, 2)
    seeds = {
        "ok--v5_ctx8.kld": ok,
        "ok--v6_ctx16.kld": kld_file(16, 6, 1),
        "ok--flat_rows.kld": kld_file(6, 3, 1, scale=0.0, minlp=-math.log(3)),
        "GGUF_E_BAD_MAGIC--magic.kld": kld_file(8, 5, 1, magic=b"_logitz_"),
        "GGUF_E_TRUNCATED--header.kld": ok[:14],
        "GGUF_E_TRUNCATED--tokens.kld": ok[:40],
        "GGUF_E_TRUNCATED--row.kld": ok[:-3],
        "GGUF_E_BAD_VALUE--trailing.kld": ok + b"\0\0",
        "GGUF_E_BAD_VALUE--token.kld": kld_file(8, 5, 1, bad_token=3),
        "GGUF_E_BAD_VALUE--scale_nan.kld": kld_file(8, 5, 1, scale=float("nan")),
        "GGUF_E_BAD_VALUE--min_positive.kld": kld_file(8, 5, 1, minlp=0.25),
        "GGUF_E_BAD_VALUE--n_ctx.kld": b"_logits_" + struct.pack("<iii", 1, 5, 1),
        "GGUF_E_LIMIT--n_vocab.kld": b"_logits_" + struct.pack("<iii", 8, (1 << 24) + 1, 1),
        "GGUF_E_OVERFLOW--sizes.kld": b"_logits_" + struct.pack("<iii", 1 << 24, 1 << 24, 2**31 - 1),
    }
    for name, data in seeds.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "kld"))
