#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_tokenize (tests/fuzz/corpus/tokenize).

Each seed: byte 0 picks the vocabulary (0..22 byte-level BPE with one pre-tokenizer
family each, in fuzz_tokenize.c's order; 23 SPM; 24 WPM), byte 1 the switches
(1 parse_special, 2 BOS, 4 EOS), then the text. Invalid UTF-8 seeds are named invalid-*.
Run: python3 tests/fuzz/make_tokenize_corpus.py
"""
import os

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "tokenize")
PRES = ["default", "gpt-2", "llama3", "dbrx", "glm4", "jais-2", "deepseek-llm", "deepseek-v3",
        "deepseek-coder", "falcon", "starcoder", "qwen2", "qwen35", "bloom", "viking", "tekken",
        "gpt-4o", "kimi-k2", "seed-coder", "bailingmoe", "exaone-moe", "youtu", "chameleon"]
TEXTS = {
    "prose": "Hello world, the quick brown fox; don't stop! We'Ve a'lL 's 'RE",
    "code": "def f(x):\n    return x**2  # 123\n\n\tif a==b: print('ok')\r\n",
    "numbers": "3 33 333 3333 1,234,567.89 ١٢٣ ²³ Ⅻ",
    "cjk": "中文字符测试 日本語のテキスト カタカナ 한국어",
    "emoji": "🚀 (normal) 😶‍🌫️ ✅ 🦙🦙 👍🏽",
    "arabic": "مرحبا بالعالم 123",
    "marks": "e\u0301te\u0301 café naïve Ærøskøbing",
    "spaces": "   a  \n\n  b\t\t \u00a0\u3000\u2003x \u0085y\u180ez",
    "special": "hello<|endoftext|>world<tool> <s>x</s> [CLS]",
    "tilde": "~~~ a~b !~ ~é x~Y (~)",
    "empty": "",
}
INVALID = {
    "stray": b"ab\x80cd",
    "truncated": b"ok \xe4\xb8",
    "overlong": b"\xc0\xaf \xe0\x80\xaf",
    "surrogate": b"\xed\xa0\x80",
    "too-big": b"\xf4\x90\x80\x80",
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        os.unlink(os.path.join(OUT, f))
    n_vocab = len(PRES) + 2
    names = PRES + ["spm", "wpm"]
    i = 0
    for name, text in TEXTS.items():
        for k in range(n_vocab):
            # spread texts and switches over the vocabularies without a full product
            if (k + i) % 3:
                continue
            sw = (k + i) % 8
            with open(os.path.join(OUT, f"{names[k]}--{name}"), "wb") as f:
                f.write(bytes([k, sw]) + text.encode())
        i += 1
    for j, (name, raw) in enumerate(INVALID.items()):
        for k in (1, 23, 24):
            with open(os.path.join(OUT, f"invalid-{name}--{names[k]}"), "wb") as f:
                f.write(bytes([k, j % 8]) + raw)


if __name__ == "__main__":
    main()
