"""Our tokenizer against HF `tokenizers` (a Rust implementation independent of ours and of
llama.cpp), on the shared vocabularies.

1. Every byte-level BPE vocabulary of ../shared/testdata/vocab: an HF tokenizer is built from
   the GGUF's own tokens and merges (read with gguf-py), with llama.cpp's pre-tokenizer regexes
   for its tokenizer.ggml.pre as HF Split(isolated) steps, then ByteLevel; user-defined tokens
   are HF added tokens (llama.cpp always matches them in text). Ids must agree on llama.cpp's
   test inputs, on texts of our own and on random strings.
2. The two HF checkpoints of ../shared/testdata/hf: their own tokenizer.json, loaded by HF
   `tokenizers` as is, against our tokenizer on the GGUF llama.cpp's converter made of them
   (special tokens in the text parsed on both sides).

Where llama.cpp's own regex handling departs from a standard engine (docs/tokenize.md), HF
follows the standard. On these vocabularies that never changes ids: of the rules, only V
(non-ASCII whitespace inside deepseek-llm/-coder's CJK class) applies, and it moves a U+3000
into a piece of its own where no merge crosses anyway (searched over CJK and whitespace pairs).
The rules are checked against llama.cpp's splitter in test_tokenize_pre.c and test_tokenize.c.
Our code runs through ctypes on $GGUFKIT_BUILD/libgguf/libgguf.so.
"""
import ctypes
import os
import random

import pytest

tokenizers = pytest.importorskip("tokenizers")
gguf = pytest.importorskip("gguf")
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers  # noqa: E402

BUILD = os.environ.get("GGUFKIT_BUILD", os.path.join(os.path.dirname(__file__), "../../build"))
SHARED = os.environ.get("GGUFKIT_SHARED", os.path.join(os.path.dirname(__file__), "../../../shared/testdata"))
VOCAB = os.path.join(SHARED, "vocab")

# llama.cpp's regexes (src/llama-vocab.cpp) for the pre-tokenizers of the shared vocabularies.
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
REGEXES = {
    "gpt-2": [GPT2],
    "mpt": [GPT2],
    "starcoder": [r"\p{N}", GPT2],
    "refact": [r"\p{N}", GPT2],
    "falcon": [r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"],
    "deepseek-coder": ["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", "[一-龥ࠀ-一가-퟿]+", r"\p{N}"],
    "deepseek-llm": [
        "[\r\n]",
        "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-"
        "\u1f7dᾀ-ᾴᾶ-ᾼ\u1fbeῂ-ῄῆ-ῌῐ-\u1fd3ῖ-\u1fdbῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u2126ℨ\u212a-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-"
        "ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
        "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
        "\\s+$",
        "[一-龥ࠀ-一가-퟿]+",
        "\\p{N}+",
    ],
}

OWN_TEXTS = [
    "def f(x):\n    return x ** 2  # square\n\n\tif a == b:\n\t\tprint('ok')\r\n",
    "int main(void) { for (int i = 0; i < 10; ++i) printf(\"%d\\n\", i); return 0; }",
    "The quick brown fox jumps over the lazy dog. It's 3:45pm; we'll see—won't we?",
    "1 12 123 1234 12345 3.14159 1,234,567 -42 0x1F 1e-9 ١٢٣٤ ²³ Ⅻ ½",
    "中文字符测试，日本語のテキスト、カタカナ。한국어 텍스트!",
    "🚀 launch 😶‍🌫️ ✅ 🦙🦙🦙 👍🏽 🇫🇷 flags",
    "مرحبا بالعالم ١٢٣ — שלום עולם",
    "e\u0301te\u0301 café naïve Ærøskøbing Ǆǅǆ ΆΈΊ ώ",
    "   leading\t\ttabs  and   runs    of      spaces\n\n\n  \n",
    "~~~ a~b !~ (~) ~x $100 +5 <=> ^_^ `code` |pipe| @user #tag",
    "I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea?",
]

class Ours:
    """gguf_tokenize_text / gguf_detokenize through ctypes."""

    class Err(ctypes.Structure):
        _fields_ = [("code", ctypes.c_int), ("sys_errno", ctypes.c_int),
                    ("offset", ctypes.c_uint64), ("message", ctypes.c_char * 768)]

    class Opts(ctypes.Structure):  # gguf_tokenize_opts, GGUF_TOKENIZE_OPTS_VERSION 1
        _fields_ = [("version", ctypes.c_uint), ("add_bos", ctypes.c_int), ("add_eos", ctypes.c_int),
                    ("parse_special", ctypes.c_bool)]

    lib = None

    @classmethod
    def load(cls):
        if cls.lib:
            return cls.lib
        for name in ("libgguf.so", "libgguf.so.0"):
            p = os.path.join(BUILD, "libgguf", name)
            if os.path.exists(p):
                lib = ctypes.CDLL(p)
                P = ctypes.c_void_p
                lib.gguf_set_open.argtypes = [ctypes.POINTER(P), ctypes.c_char_p, P, P]
                lib.gguf_tokenizer_create.argtypes = [ctypes.POINTER(P), P, P]
                lib.gguf_tokenize_text.argtypes = [P, ctypes.c_char_p, ctypes.c_size_t, P,
                                                   ctypes.POINTER(ctypes.POINTER(ctypes.c_int32)),
                                                   ctypes.POINTER(ctypes.c_int64), P]
                lib.gguf_detokenize.argtypes = [P, ctypes.POINTER(ctypes.c_int32), ctypes.c_int64, P,
                                                ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_size_t), P]
                lib.gguf_tokenizer_free.argtypes = [P]
                lib.gguf_set_free.argtypes = [P]
                cls.libc = ctypes.CDLL(None)
                cls.libc.free.argtypes = [P]
                cls.lib = lib
                return lib
        pytest.skip(f"libgguf.so not found under {BUILD}/libgguf (set GGUFKIT_BUILD)")

    def __init__(self, path):
        lib = self.load()
        self.set, self.tok = ctypes.c_void_p(), ctypes.c_void_p()
        err = self.Err()
        assert lib.gguf_set_open(ctypes.byref(self.set), path.encode(), None, ctypes.byref(err)) == 0, err.message
        assert lib.gguf_tokenizer_create(ctypes.byref(self.tok), self.set, ctypes.byref(err)) == 0, err.message

    def ids(self, text, parse_special=False):
        err = self.Err()
        opts = self.Opts(1, 0, 0, parse_special)
        out = ctypes.POINTER(ctypes.c_int32)()
        n = ctypes.c_int64()
        raw = text.encode()
        rc = self.lib.gguf_tokenize_text(self.tok, raw, len(raw), ctypes.byref(opts), ctypes.byref(out),
                                         ctypes.byref(n), ctypes.byref(err))
        assert rc == 0, err.message
        ids = [out[i] for i in range(n.value)]
        self.libc.free(ctypes.cast(out, ctypes.c_void_p))
        return ids

    def text(self, ids):
        err = self.Err()
        arr = (ctypes.c_int32 * len(ids))(*ids)
        out = ctypes.c_char_p()
        n = ctypes.c_size_t()
        rc = self.lib.gguf_detokenize(self.tok, arr, len(ids), None, ctypes.byref(out), ctypes.byref(n),
                                      ctypes.byref(err))
        assert rc == 0, err.message
        b = ctypes.string_at(out, n.value)
        self.libc.free(out)
        return b.decode("utf-8")

    def close(self):
        self.lib.gguf_tokenizer_free(self.tok)
        self.lib.gguf_set_free(self.set)


def read_vocab(path):
    r = gguf.GGUFReader(path)
    f = r.fields
    s = lambda k: bytes(f[k].parts[f[k].data[0]]).decode()  # noqa: E731
    arr = lambda k: [bytes(f[k].parts[i]) for i in f[k].data]  # noqa: E731
    tokens = [t.decode("utf-8") for t in arr("tokenizer.ggml.tokens")]
    types = [int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data]
    merges = [m.decode("utf-8") for m in arr("tokenizer.ggml.merges")]
    return s("tokenizer.ggml.model"), s("tokenizer.ggml.pre"), tokens, types, merges


def hf_from_gguf(vocab_file):
    """HF's byte-level BPE from the GGUF's tokens and merges, with llama.cpp's regexes."""
    model, pre, tokens, types, merges = vocab_file
    assert model == "gpt2"
    vocab = {t: i for i, t in enumerate(tokens)}  # a text given twice keeps its last id, as llama.cpp
    pairs = []
    for m in merges:
        k = m.find(" ", 1)  # llama.cpp splits at the first space after the first byte
        if k > 0:
            pairs.append((m[:k], m[k + 1:]))
    tk = Tokenizer(models.BPE(vocab=vocab, merges=pairs))
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in REGEXES[pre]] +
        [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    # llama.cpp matches user-defined tokens in the text even without parse_special
    tk.add_tokens([AddedToken(t, special=False, normalized=False)
                   for t, ty in zip(tokens, types) if ty == 4])
    return pre, tk


def llama_inputs():
    with open(os.path.join(VOCAB, "ggml-vocab-gpt-2.gguf.inp"), encoding="utf-8") as fp:
        return fp.read().split("\n__ggml_vocab_test__\n")[:-1]


def random_texts(n=300, seed=7):
    pool = list("aAzZ019 \t\n\r'sStTreREvVmMlLdD.,!?-_~$+<=>^`|()[]{}\"#%&*/:;@\\") + list(
        "éÄßøÆ中文字日本語カタ한국ب٣²Ⅻ½ΩΣ∑€£™©→✓🚀😀🦙\u0301\u0308\u200d\ufe0f\u00a0！？：。，、…")
    rng = random.Random(seed)
    return ["".join(rng.choice(pool) for _ in range(rng.randint(1, 48))) for _ in range(n)]


BPE_VOCABS = sorted(p for p in ("gpt-2", "mpt", "starcoder", "refact", "falcon", "deepseek-coder",
                                "deepseek-llm")
                    if os.path.exists(os.path.join(VOCAB, f"ggml-vocab-{p}.gguf")))


@pytest.mark.skipif(not BPE_VOCABS, reason="../shared/testdata/vocab is absent")
@pytest.mark.parametrize("name", BPE_VOCABS)
def test_bpe_vocabulary_against_hf(name):
    path = os.path.join(VOCAB, f"ggml-vocab-{name}.gguf")
    vocab_file = read_vocab(path)
    pre, hf = hf_from_gguf(vocab_file)
    ours = Ours(path)
    try:
        texts = llama_inputs() + OWN_TEXTS + random_texts()
        bad = [(t, ours.ids(t), hf.encode(t, add_special_tokens=False).ids) for t in texts]
        bad = [b for b in bad if b[1] != b[2]]
        assert not bad, f"{name}: {len(bad)} of {len(texts)} differ, first: {bad[0]!r}"
        # round trips; HF's ByteLevel decoder also byte-decodes added tokens (llama.cpp prints
        # their text as is), so it only takes part without user-defined tokens
        plain = not any(ty == 4 for ty in vocab_file[3])
        for t in OWN_TEXTS:
            assert ours.text(ours.ids(t)) == t
            if plain:
                assert hf.decode(ours.ids(t), skip_special_tokens=False) == t
    finally:
        ours.close()


HF_MODELS = [m for m in ("deepseek_v3", "llama")
             if os.path.exists(os.path.join(SHARED, "hf", m, "tokenizer.json"))]


@pytest.mark.skipif(not HF_MODELS, reason="../shared/testdata/hf is absent")
@pytest.mark.parametrize("model", HF_MODELS)
def test_checkpoint_tokenizer_json(model):
    d = os.path.join(SHARED, "hf", model)
    hf = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    ours = Ours(os.path.join(d, "model-f32.gguf"))
    try:
        texts = OWN_TEXTS + random_texts(200, seed=11) + [
            "<|user|>What is 2+2?<|assistant|>", "[gMASK]<sop>Hello<|endoftext|>"]
        for t in texts:
            want = hf.encode(t, add_special_tokens=False).ids
            assert ours.ids(t, parse_special=True) == want, t
    finally:
        ours.close()
