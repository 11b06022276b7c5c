#!/usr/bin/env python3
"""Writes the import-map seed corpus: the shipped maps, a few valid ones, and one malformed map
per error class, named GGUF_E_<CODE>--what.map; tests/unit/test_import.c (corpus_named_errors)
parses each and checks the code, and fuzz_import_map replays them all.
Run from anywhere: python3 tests/fuzz/make_import_map_corpus.py (rewrites
tests/fuzz/corpus/import_map).
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "import_map")
MAPS = os.path.join(HERE, "..", "..", "tools", "ref-forward", "maps")

E = "layout layer,seq,hidden\n"
CASES = {
    "ok--empty": "",
    "ok--comments-only": "# nothing\n   \n\t# still nothing\n",
    "ok--per-layer-files": "layout hidden,seq\nlayers/layer_{i}.npy -> blk.{i}.residual\n",
    "ok--optional-and-tokens": "backend x\ntokens dump.safetensors:ids\n"
                               "optional dump.safetensors:h.{l}.out -> blk.{l+1}.ffn_out\n",
    "ok--crlf": "layout seq,hidden\r\na.npy -> logits\r\n",
    "ok--globs": "d?/*_{n}/f*.npy -> blk.{n}.attn_out # trailing comment\n",
    "GGUF_E_BAD_VALUE--unknown-statement": "frobnicate now\n",
    "GGUF_E_BAD_VALUE--word-alone": "hidden_states.npy\n",
    "GGUF_E_BAD_VALUE--bad-axis": "layout seq,width\n",
    "GGUF_E_BAD_VALUE--layout-no-hidden": "layout seq,layer\n",
    "GGUF_E_BAD_VALUE--index-without-layer": "x.npy[0] -> token_embd\n",
    "GGUF_E_BAD_VALUE--layer-without-index": E + "x.npy -> token_embd\n",
    "GGUF_E_BAD_VALUE--bad-index": E + "x.npy[i=1-3] -> blk.{i}.residual\n",
    "GGUF_E_BAD_VALUE--index-too-long": E + "x.npy[1234567890] -> token_embd\n",
    "GGUF_E_BAD_VALUE--unbound-variable": "x_{i}.npy -> blk.{j}.residual\n",
    "GGUF_E_BAD_VALUE--unused-variable": "x_{i}.npy -> logits\n",
    "GGUF_E_BAD_VALUE--bad-brace": "x_{I}.npy -> logits\n",
    "GGUF_E_BAD_VALUE--stray-brace": "x}.npy -> logits\n",
    "GGUF_E_BAD_VALUE--absolute": "/etc/x.npy -> logits\n",
    "GGUF_E_BAD_VALUE--dotdot": "../x.npy -> logits\n",
    "GGUF_E_BAD_VALUE--empty-component": "a//x.npy -> logits\n",
    "GGUF_E_BAD_VALUE--space-in-source": "a b.npy -> logits\n",
    "GGUF_E_BAD_VALUE--two-points": "a.npy -> logits output_norm\n",
    "GGUF_E_BAD_VALUE--bad-point-char": "a.npy -> blk.0.ffn-out\n",
    "GGUF_E_BAD_VALUE--rank-suffix": "a.npy -> logits@1\n",
    "GGUF_E_BAD_VALUE--point-too-long": "a.npy -> " + "x" * 80 + "\n",
    "GGUF_E_BAD_VALUE--bad-offset-expr": "a_{i}.npy -> blk.{i*2}.residual\n",
    "GGUF_E_BAD_VALUE--empty-tensor": "a.safetensors: -> logits\n",
    "GGUF_E_BAD_VALUE--tokens-with-variable": "tokens t_{i}.npy\n",
    "GGUF_E_BAD_VALUE--tokens-with-index": "tokens t.npy[0]\n",
    "GGUF_E_BAD_VALUE--backend-spaces": "backend a b\n",
    "GGUF_E_BAD_VALUE--npy-v2-f16": "npy-v2 f16\n",
    "GGUF_E_DUPLICATE--backend": "backend a\nbackend b\n",
    "GGUF_E_DUPLICATE--variable": E + "x_{i}.npy[i=0..1] -> blk.{i}.residual\n",
    "GGUF_E_LIMIT--variables": "{a}/{b}/{c}/{d}/{e}.npy -> blk.{a}.{b}{c}{d}{e}\n",
    "GGUF_E_LIMIT--long-line": "# " + "x" * 5000 + "\n",
    "GGUF_E_BAD_UTF8--nul": "a.npy -> logits\0\n",
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        os.remove(os.path.join(OUT, f))
    for name, text in CASES.items():
        with open(os.path.join(OUT, name + ".map"), "wb") as f:
            f.write(text.encode())
    n = len(CASES)
    for m in sorted(os.listdir(MAPS)):
        with open(os.path.join(MAPS, m), "rb") as src, open(os.path.join(OUT, "ok--shipped-" + m), "wb") as f:
            f.write(src.read())
        n += 1
    print(f"wrote {n} files to {OUT}")


if __name__ == "__main__":
    main()
