"""Give an HF checkpoint written by `gguf-gen hf` what a serving engine needs besides weights:
tokenizer.json and tokenizer_config.json made from the GGUF's own vocabulary (read with gguf-py,
built with HF `tokenizers`), a chat template, and generation_config.json.

    python3 make_hf_tokenizer.py MODEL.gguf HF_DIR [--repetition-penalty 1.05]

The vocabularies of gguf-gen are SentencePiece-style (tokenizer.ggml.model "llama": "▁" for a
space, <0xNN> byte fallback, a score per piece). The HF equivalent is what transformers'
SentencePiece converter builds: a BPE with byte fallback whose merges are every split of a
piece into two pieces, ranked by the merged piece's score (llama.cpp merges the best-scoring
pair first; the scores of gguf-gen are distinct). HF's BPE takes merges of pieces only, and
gguf-gen's vocabularies have no "▁" piece of its own, so a word's leading "▁" stays three byte
tokens here where llama.cpp merges it into "▁the": the engine's tokenization is its own, and
check-engine compares on the engine's ids (its tokenization check then says "DIFFERS", a
note, not a verdict).

The generation config sets repetition_penalty (default 1.05, as Qwen's checkpoints do): an
engine that took it for a request that omits it would choose penalized tokens (check-engine
sends the neutral value).
"""
import argparse
import json
import os

import gguf
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers

# A template that spells every role with the vocabulary's own pieces (no special tokens of
# its own): the engine renders it; check-engine reads the ids it ran.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def field(reader, key):
    f = reader.fields.get(key)
    if f is None:
        return None
    if f.types and f.types[0] == gguf.GGUFValueType.ARRAY:
        if f.types[-1] == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
        return [f.parts[i][0].item() for i in f.data]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    return f.parts[f.data[0]][0].item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("hf_dir")
    ap.add_argument("--repetition-penalty", type=float, default=1.05)
    a = ap.parse_args()
    r = gguf.GGUFReader(a.gguf)
    if field(r, "tokenizer.ggml.model") != "llama":
        raise SystemExit(f"{a.gguf}: only SentencePiece-style vocabularies (llama) are built here")
    tokens = field(r, "tokenizer.ggml.tokens")
    scores = field(r, "tokenizer.ggml.scores")
    types = field(r, "tokenizer.ggml.token_type")
    bos = field(r, "tokenizer.ggml.bos_token_id")
    eos = field(r, "tokenizer.ggml.eos_token_id")
    unk = field(r, "tokenizer.ggml.unknown_token_id")
    vocab = {t: i for i, t in enumerate(tokens)}
    # every split of a normal piece into two pieces, best merged score first
    merges = []
    for i, t in enumerate(tokens):
        if types[i] != 1 or len(t) < 2:
            continue
        for k in range(1, len(t)):
            left, right = t[:k], t[k:]
            if left in vocab and right in vocab:
                merges.append((-scores[i], vocab[left], vocab[right], left, right))
    merges.sort(key=lambda m: m[:3])
    bpe = models.BPE(vocab=vocab, merges=[(m[3], m[4]) for m in merges], unk_token=tokens[unk],
                     byte_fallback=True, fuse_unk=True)
    tk = Tokenizer(bpe)
    tk.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tk.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                    decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tk.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                           for i in range(len(tokens)) if types[i] in (2, 3)])
    from tokenizers import processors
    tk.post_processor = processors.TemplateProcessing(
        single=f"{tokens[bos]} $A", pair=f"{tokens[bos]} $A {tokens[bos]} $B",
        special_tokens=[(tokens[bos], bos)])
    tk.save(os.path.join(a.hf_dir, "tokenizer.json"))
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": tokens[bos], "eos_token": tokens[eos], "unk_token": tokens[unk],
        "add_bos_token": True, "add_eos_token": False, "clean_up_tokenization_spaces": False,
        "legacy": False, "model_max_length": 2048, "chat_template": CHAT_TEMPLATE,
    }
    with open(os.path.join(a.hf_dir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    with open(os.path.join(a.hf_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": bos, "eos_token_id": eos, "do_sample": True,
                   "temperature": 0.7, "top_k": 20, "top_p": 0.8,
                   "repetition_penalty": a.repetition_penalty}, f, indent=1)


if __name__ == "__main__":
    main()
