#!/usr/bin/env bash
# Benchmark of the tokenizer against HF tokenizers, one thread each, in the same run.
#   tests/bench/bench_tokenize.sh [BUILD_DIR] [MB]
# Writes a mixed text of MB megabytes (default 4: prose with Zipf word frequencies, code, CJK,
# emoji, numbers; from a fixed seed), then for each byte-level BPE vocabulary of ../shared/testdata/vocab
# in VOCABS (default gpt-2 deepseek-llm falcon): our bench_tokenize (best of 5) and HF
# tokenizers built from the same GGUF's tokens and merges with the same regexes
# (tests/interop/test_tokenize_hf.py), encode() on the same text (best of 5,
# RAYON_NUM_THREADS=1). Both must give the same ids. Prints tokens/s of each and the ratio.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$here/build}
mb=${2:-4}
shared=${GGUFKIT_SHARED:-$here/../shared/testdata}
vocabs=${VOCABS:-gpt-2 deepseek-llm falcon}
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-tok-XXXXXX")
trap 'rm -rf "$work"' EXIT
export RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
export GGUFKIT_BUILD=$(cd "$build" && pwd)

python3 - "$work/text.txt" "$mb" <<'PY'
# Prose draws words from a lexicon of 50000 pseudo-words (syllables, some capitalised) with
# Zipf frequencies, as natural text does, so that word caches hit as often as they would on
# real text; the rest is code, CJK, numbers and emoji.
import bisect, itertools, random, sys
rng = random.Random(20261201)
syl = ["ka", "to", "ri", "an", "el", "mo", "su", "ver", "tion", "al", "in", "re", "ex", "str",
       "pro", "com", "de", "ly", "ing", "ed", "ou", "ph", "qu", "th", "sch", "ne", "ba", "zi"]
lex = sorted({"".join(rng.choice(syl) for _ in range(rng.randint(1, 4))) for _ in range(60000)})
rng.shuffle(lex)
lex = lex[:50000]
cum = list(itertools.accumulate(1.0 / (r + 1) for r in range(len(lex))))
def word():
    w = lex[bisect.bisect(cum, rng.random() * cum[-1])]
    return w.capitalize() if rng.random() < 0.08 else w
code = ["def f(x):\n    return x ** 2  # square\n", "for (int i = 0; i < n; ++i) sum += a[i];\n",
        "    if err != nil {\n\t\treturn fmt.Errorf(\"open %s: %w\", path, err)\n\t}\n",
        "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;\n", "x = {'a': 1, 'b': [2, 3]}\n"]
cjk = "中文分词是自然语言处理的基础日本語のテキストをトークンに分割します한국어문장도처리합니다"
emoji = ["🚀", "😀", "🦙", "👍🏽", "✅", "🇫🇷", "😶‍🌫️"]
out, size = [], 0
while size < int(sys.argv[2]) * 1_000_000:
    k = rng.random()
    if k < 0.6:
        s = " ".join(word() for _ in range(rng.randint(4, 18))) + rng.choice([". ", ", ", "; ", "? ", ".\n\n"])
    elif k < 0.75:
        s = rng.choice(code)
    elif k < 0.87:
        s = "".join(rng.choice(cjk) for _ in range(rng.randint(4, 20))) + "。"
    elif k < 0.95:
        s = " ".join(str(rng.randint(0, 10 ** rng.randint(1, 9))) for _ in range(4)) + " "
    else:
        s = rng.choice(emoji) + " "
    out.append(s)
    size += len(s.encode())
open(sys.argv[1], "w", encoding="utf-8").write("".join(out))
PY
echo "text: $(stat -c %s "$work/text.txt") bytes; one thread; best of 5"
for v in $vocabs; do
    f=$shared/vocab/ggml-vocab-$v.gguf
    [ -f "$f" ] || { echo "$v: $f is absent"; continue; }
    ours=$("$build/tests/bench_tokenize" "$f" "$work/text.txt" 5)
    echo "ours: $ours"
    python3 - "$here" "$f" "$work/text.txt" "$ours" <<'PY'
import re, sys, time
sys.path.insert(0, sys.argv[1] + "/tests/interop")
from test_tokenize_hf import hf_from_gguf, read_vocab, Ours  # noqa: E402
path, text = sys.argv[2], open(sys.argv[3], encoding="utf-8").read()
pre, hf = hf_from_gguf(read_vocab(path))
best = 1e30
for _ in range(5):
    t0 = time.perf_counter()
    ids = hf.encode(text, add_special_tokens=False).ids
    best = min(best, time.perf_counter() - t0)
ours = Ours(path)
same = ours.ids(text) == ids
ours.close()
m = re.search(r"-> (\d+) tokens, tokenize ([0-9.]+) s", sys.argv[4])
n_ours, t_ours = int(m.group(1)), float(m.group(2))
print(f"hf:   {len(ids)} tokens, encode {best:.4f} s: {len(ids) / best:.0f} tokens/s"
      f"{'' if same else ' (IDS DIFFER)'}")
print(f"{pre}: ours {n_ours / t_ours:.0f} tokens/s, hf {len(ids) / best:.0f} tokens/s, "
      f"ours/hf = {best / t_ours:.2f}x")
PY
done
