#!/usr/bin/env bash
# ref-forward compare --html: a self-contained page (no script, no network) that a real
# browser renders: headless Chromium takes a screenshot, and the pixels show the plot -
# every rank's line, the red tolerance line across the plot, the faulty rank's line
# above it and the healthy ranks below it, and the red or green verdict banner.
source "$(dirname "$0")/lib.sh"
R=$GGUFKIT_BIN/ref-forward
FX="python3 $GGUFKIT_SRC/tests/integration/record_fixture.py"
PNGPY=$GGUFKIT_SRC/tests/integration
[ -x "$R" ] || skip "ref-forward is not built"
[ -x "$GEN" ] || skip "gguf-gen is not built"
command -v chromium >/dev/null || skip "chromium is not installed"
python3 -c "import gguf, numpy" 2>/dev/null || skip "gguf-py or numpy missing"

SMALL="--embd 64 --heads 4 --kv-heads 2 --head-dim 16 --ff 128 --vocab 128 --expert-ff 64 --no-sync"
"$GEN" model --arch qwen3moe $SMALL "$T/m.gguf" >/dev/null
expect 0 "$R" "$T/m.gguf" --tokens 1,2,3 --record "$T/ref.gguf" -q
$FX ranks "$T/ref.gguf" "$T/tp4.gguf" 4 --fault 2:blk.1.attn_out:0.01 --backend cpu-tp
$FX ranks "$T/ref.gguf" "$T/ok4.gguf" 4

expect 1 "$R" compare "$T/ref.gguf" "$T/tp4.gguf" --html "$T/fail.html" -q
expect 0 "$R" compare "$T/ref.gguf" "$T/ok4.gguf" --html "$T/pass.html" -q
# The report replaces an older one, atomically (no temporary files left).
expect 1 "$R" compare "$T/ref.gguf" "$T/tp4.gguf" --html "$T/fail.html" -q
if [ -z "$(find "$T" -name '.*.html.*')" ]; then pass; else fail "temporary files left"; fi

# Self-contained: nothing to fetch, nothing to run.
for h in fail pass; do
    if sed 's|xmlns="http://www.w3.org/2000/svg"||g' "$T/$h.html" |
        grep -Eiq '<script|<link|<img|src=|href=|url\(|@import|https?://'; then
        fail "$h.html refers to something outside itself"
    else pass; fi
done
contains "$T/fail.html" "<svg"
contains "$T/fail.html" "first divergence: blk.1.attn_out, rank 2"
contains "$T/fail.html" "FIRST DIVERGENCE"
contains "$T/pass.html" "SAME within tolerance"
# What the report names: the model's digest, the command line, the version; what the
# first divergent point is and which tensors feed it; never a deleted temporary file.
DIG=$(python3 -c "import gguf,sys; r=gguf.GGUFReader(sys.argv[1]); f=r.fields['record.model_digest']; print(bytes(f.parts[f.data[0]]).decode())" "$T/ref.gguf")
contains "$T/fail.html" "digest <code>$DIG</code>"
contains "$T/fail.html" "<code>ref-forward compare $T/ref.gguf $T/tp4.gguf --html $T/fail.html -q</code>"
contains "$T/fail.html" "ggufkit $("$R" --version | awk '{print $NF}')"
contains "$T/fail.html" "First divergence at <b>blk.1.attn_out</b>: the attention output"
contains "$T/fail.html" "What the capture points are"
contains "$T/fail.html" "ffn_gate_inp (router)"
expect 1 "$R" "$T/m.gguf" --tokens 1,2,3 --tp 2 --fault qkv-stream@1 --html "$T/tp.html" -q
contains "$T/tp.html" "<code>$T/m.gguf</code>, digest <code>$DIG</code>"
contains "$T/tp.html" "<code>ref-forward $T/m.gguf --tokens 1,2,3 --tp 2 --fault qkv-stream@1 --html $T/tp.html -q</code>"
contains "$T/tp.html" "<b>qkv-stream@1</b>: "
contains "$T/tp.html" "(block 1 only)"
contains "$T/tp.html" "made by this run (a temporary file, deleted after it)"
if grep -q "ref-forward-" "$T/tp.html"; then fail "tp.html names a temporary file"; else pass; fi
# The rank column: the worst rank where ranks differ (the fixture's rank 2), "all ranks"
# where every rank holds the same values (virtual tp: the residual stream after the
# all-reduce), never "rank 0 (worst)" on rows whose ranks agree.
python3 - "$T/fail.html" "$T/tp.html" <<'EOF' && pass || fail "rank column of the table"
import re, sys
def ranks(path):
    return dict(re.findall(r'<tr[^>]*><td[^>]*>(blk\.[0-9]+\.[a-z_]+|output_norm|logits)</td>'
                           r'<td>[^<]*</td><td>[^<]*</td><td>([^<]*)</td>', open(path).read()))
d = ranks(sys.argv[1])
assert d["blk.1.attn_out"] == "2 (worst)", d
t = ranks(sys.argv[2])
assert len(t) > 10 and set(t.values()) == {"all ranks"}, t
EOF

shot() {
    # A private profile in $T: nothing touches the user's home.
    timeout 90 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars \
        --user-data-dir="$T/chrome" --force-device-scale-factor=1 --window-size=1200,720 \
        --screenshot="$2" "file://$1" >/dev/null 2>&1 || true
    [ -s "$2" ] || { fail "chromium wrote no screenshot of $1"; return 1; }
    pass
}
shot "$T/fail.html" "$T/fail.png" || finish
shot "$T/pass.html" "$T/pass.png" || finish

python3 - "$T/fail.png" "$T/pass.png" "$PNGPY" <<'EOF' && pass || fail "the plot did not render as expected"
import sys
sys.path.insert(0, sys.argv[3])
from png_colours import decode, pixels

w, h, bpp, rows = decode(sys.argv[1])
assert (w, h) == (1200, 720), (w, h)
# The red banner: whole rows of red near the top.
red = pixels(rows, bpp, w, "red")
per_row = {}
for x, y in red:
    per_row[y] = per_row.get(y, 0) + 1
banner = [y for y, n in per_row.items() if n > 1000]
assert banner and max(banner) < 200, "no red verdict banner"
# The tolerance line: a dashed red line across the plot, below the banner.
line = [y for y, n in per_row.items() if 300 <= n <= 1000 and y > max(banner)]
assert line, sorted(per_row.items())[-10:]
y_tol = min(line)
# The plot area (left of the legend): every rank has its line; the faulty rank 2
# rises above the tolerance line, the healthy ranks stay below it.
def in_plot(colour):
    return [(x, y) for x, y in pixels(rows, bpp, w, colour) if 110 <= x <= 960 and y > max(banner)]
for r in range(4):
    p = in_plot(f"rank{r}")
    assert len(p) > 200, (r, len(p))
    above = [q for q in p if q[1] < y_tol - 6]
    if r == 2:
        assert len(above) > 20, ("rank 2 should rise above the tolerance", len(above))
    else:
        assert not above, (f"rank {r} above the tolerance line", above[:5])
# Red markers over tolerance sit above the line.
dots = [q for q in red if 110 <= q[0] <= 960 and max(banner) < q[1] < y_tol - 6]
assert len(dots) > 50, len(dots)

w, h, bpp, rows = decode(sys.argv[2])
green = pixels(rows, bpp, w, "pass")
assert len(green) > 20000, len(green)
assert len(pixels(rows, bpp, w, "rank3")) > 200
print("plot ok: tolerance at y", y_tol)
EOF
finish
