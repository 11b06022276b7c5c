#!/usr/bin/env bash
# gguf-merge: round trips split -> merge over every tensor type, alignments, real files,
# gguf-py's own split sets and generated models; limits, dry runs, manifests, verify.
source "$(dirname "$0")/lib.sh"
M=$GGUFKIT_BIN/gguf-merge
I=$GGUFKIT_BIN/gguf-inspect
FX=$GGUFKIT_SRC/tests/integration/merge_fixture.py
command -v python3 >/dev/null || skip "python3 is needed for the fixtures"

same() { if cmp -s "$1" "$2"; then pass; else fail "$1 and $2 differ"; fi; }
size_of() { stat -c %s "$1"; }

# Usage.
expect 0 "$M" --help
contains "$T/out" "--split-max-size"
contains "$T/out" "Examples:"
expect 2 "$M" --merge
contains "$T/err" "expected INPUT and OUTPUT"
expect 2 "$M" --merge --split a b
contains "$T/err" "exclude each other"
expect 2 "$M" --split --split-max-size 12Q a b
contains "$T/err" "is not a size"
expect 2 "$M" --split --split-max-size 0 a b
contains "$T/err" "is not a size"
for bad in 0 -1 1.5Q 5GiBx G 1e400; do
    expect 2 "$M" --split --split-max-size "$bad" a b
done
expect 2 "$M" --split --split-max-tensors 0 a b
expect 2 "$M" --merge --split-max-tensors 3 a b
contains "$T/err" "apply to --split only"
expect 2 "$M" --split --layout aligned a b
contains "$T/err" "--layout applies to --merge only"
expect 2 "$M" --merge --layout packed a b
contains "$T/err" "--layout: 'packed' is not 'contiguous' or 'aligned'"

# Every tensor type, default and 64-byte alignment: split by tensors and by size,
# merge from any part, byte-identical to the original.
for align in 32 64; do
    d=$T/types$align
    mkdir -p "$d"
    python3 "$FX" types "$d/m.gguf" --align $align
    expect 0 "$M" --split --split-max-tensors 5 "$d/m.gguf" "$d/t"
    contains "$T/out" "into 8 parts"
    expect 0 "$M" --merge --verify "$d/t-00004-of-00008.gguf" "$d/back.gguf"
    contains "$T/out" "verified 37 tensors"
    same "$d/m.gguf" "$d/back.gguf"
    # A hard size limit: no part is bigger, headers and padding included. K is 1000
    # (as in llama-gguf-split), KiB 1024.
    expect 0 "$M" --split --split-max-size 3K "$d/m.gguf" "$d/z"
    n=0
    for f in "$d"/z-*.gguf; do
        n=$((n + 1))
        if [ "$(size_of "$f")" -le 3000 ]; then pass; else fail "$f is over 3K"; fi
    done
    expect 0 "$M" --split --split-max-size 3KiB --dry-run --json "$d/m.gguf" "$d/zz"
    python3 -c "import json,sys; j=json.load(open(sys.argv[1])); assert all(o['size'] <= 3072 for o in j['outputs']) and j['tensors'] == 37" "$T/out" && pass || fail "3KiB"
    [ "$n" -gt 3 ] && pass || fail "only $n parts for a 3K limit"
    expect 0 "$M" --merge "$d/z-00002-of-0000$n.gguf" "$d/back2.gguf"
    same "$d/m.gguf" "$d/back2.gguf"
done
# The alignment is kept in every part.
expect 0 "$I" "$T/types64/t-00008-of-00008.gguf"
contains "$T/out" "alignment:   64"

# Size units: K M G T are powers of 1000 (as llama-gguf-split), KiB..TiB of 1024.
d=$T/units
mkdir -p "$d"
python3 "$FX" types "$d/m.gguf"
for spec in 4000:4000 4K:4000 4KB:4000 4KiB:4096 0.004M:4000 4.5k:4500; do
    expect 0 "$M" --split --split-max-size "${spec%%:*}" --dry-run --json "$d/m.gguf" "$d/u"
    python3 -c "
import json, sys
j = json.load(open(sys.argv[1])); lim = int(sys.argv[2])
assert all(o['size'] <= lim for o in j['outputs']), j['outputs']
assert any(o['size'] > lim - 600 for o in j['outputs'])" "$T/out" "${spec##*:}" && pass || fail "size $spec"
done

# A decimal size and a metadata-only first part; the dry run writes nothing.
d=$T/dry
mkdir -p "$d"
python3 "$FX" types "$d/m.gguf"
expect 0 "$M" --split --split-max-size 0.004M --no-tensor-first-split --dry-run "$d/m.gguf" "$d/p"
contains "$T/out" "p-00001-of-"
contains "$T/out" ": 0 tensors,"
[ "$(ls "$d" | wc -l)" -eq 1 ] && pass || fail "--dry-run wrote files: $(ls "$d")"
expect 0 "$M" --split --split-max-size 0.004M --no-tensor-first-split --json --dry-run "$d/m.gguf" "$d/p"
python3 - "$T/out" <<'EOF' && pass || fail "--json dry run"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["dry_run"] and j["operation"] == "split"
assert j["outputs"][0]["tensors"] == 0
assert all(o["size"] <= 4000 for o in j["outputs"])
assert sum(o["tensors"] for o in j["outputs"]) == j["tensors"] == 37
EOF
expect 0 "$M" --split --split-max-size 0.004M --no-tensor-first-split "$d/m.gguf" "$d/p"
expect 0 "$I" "$(ls "$d"/p-00001-of-*.gguf)"
contains "$T/out" "split.count"
expect 0 "$M" --merge "$(ls "$d"/p-00003-of-*.gguf)" "$d/back.gguf"
same "$d/m.gguf" "$d/back.gguf"
# The dry run of a merge reports an existing output like the real run.
expect 2 "$M" --merge --dry-run "$(ls "$d"/p-00001-of-*.gguf)" "$d/back.gguf"
contains "$T/err" "exists"

# A split set written by gguf-py: merged, then split again the same way gives the
# same bytes as gguf-py wrote.
if python3 -c "import gguf, numpy" 2>/dev/null; then
    d=$T/gp
    mkdir -p "$d"
    python3 "$FX" gguf-py-split "$d/gp" --max-tensors 6
    expect 0 "$M" --merge --verify "$d/gp-00002-of-00004.gguf" "$d/merged.gguf"
    expect 0 "$M" --split --split-max-tensors 6 "$d/merged.gguf" "$d/again"
    for i in 1 2 3 4; do same "$d/gp-0000$i-of-00004.gguf" "$d/again-0000$i-of-00004.gguf"; done
    expect 0 "$I" "$d/merged.gguf"
    if grep -q "split\." "$T/out"; then fail "split.* keys left in the merged file"; else pass; fi
fi

# Manifest: the digests are gguf-inspect --hash's.
d=$T/man
mkdir -p "$d"
python3 "$FX" types "$d/m.gguf"
expect 0 "$M" --split --split-max-tensors 10 "$d/m.gguf" "$d/s"
expect 0 "$M" --merge --manifest "$d/man.json" "$d/s-00001-of-00004.gguf" "$d/out.gguf"
expect 2 "$M" --merge --manifest "$d/man.json" "$d/s-00001-of-00004.gguf" "$d/out2.gguf"
contains "$T/err" "man.json: the manifest exists"
[ -e "$d/out2.gguf" ] && fail "an existing manifest was found only after the merge" || pass
expect 2 "$M" --merge --force --manifest "$d/s-00002-of-00004.gguf" "$d/s-00001-of-00004.gguf" "$d/out2.gguf"
contains "$T/err" "the manifest is the input part 2"
expect 2 "$M" --merge --force --manifest "$d/out2.gguf" "$d/s-00001-of-00004.gguf" "$d/out2.gguf"
contains "$T/err" "the manifest would be written over an output"
if [ -x "$I" ]; then
    expect 0 "$I" --hash "$d/out.gguf"
    cp "$T/out" "$d/inspect.txt"
    python3 - "$d/man.json" "$d/inspect.txt" <<'EOF' && pass || fail "manifest and gguf-inspect --hash differ"
import json, sys
m = json.load(open(sys.argv[1]))
text = open(sys.argv[2]).read()
assert m["schema"] == "ggufkit.merge-manifest/1"
assert m["model_xxh3_128"] in text, "model digest"
assert m["outputs"][0]["xxh3_128"] in text, "file digest"
for t in m["tensors"]:
    assert t["xxh3_128"] in text, t["name"]
assert len(m["tensors"]) == 37 and len(m["inputs"]) == 4
EOF
fi

# --json after a run: a manifest without --verify reads the outputs back (seconds_digest)
# but reports no verification time; one copy per part; the layout.
expect 0 "$M" --merge --json --manifest "$d/man2.json" "$d/s-00003-of-00004.gguf" "$d/out3.gguf"
python3 - "$T/out" <<'EOF' && pass || fail "--json after a merge with a manifest"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["verified"] is False and j["seconds_verify"] is None, j
assert isinstance(j["seconds_digest"], float) and j["seconds_digest"] >= 0, j
assert j["copy_ranges"] == 4 and j["layout"] == "contiguous" and j["layout_block"] is None, j
EOF
expect 0 "$M" --merge --json --verify "$d/s-00003-of-00004.gguf" "$d/out4.gguf"
python3 - "$T/out" <<'EOF' && pass || fail "--json after a verified merge"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["verified"] is True and j["seconds_verify"] == j["seconds_digest"] >= 0, j
EOF
expect 0 "$M" --merge --json "$d/s-00003-of-00004.gguf" "$d/out5.gguf"
python3 - "$T/out" <<'EOF' && pass || fail "--json after a plain merge"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["verified"] is False and j["seconds_verify"] is None and j["seconds_digest"] is None, j
EOF

# --layout aligned: each part keeps its data offset modulo the 2 MiB block; the same tensors
# and metadata as the plain merge (gguf-inspect --hash, manifests); the gaps are holes.
expect 0 "$M" --merge --layout aligned --dry-run --json "$d/s-00001-of-00004.gguf" "$d/al.gguf"
contains "$T/out" '"layout": "aligned", "layout_block": 2097152'
expect 0 "$M" -v --merge --layout aligned --verify --manifest "$d/al.json" "$d/s-00001-of-00004.gguf" "$d/al.gguf"
contains "$T/out" "verified 37 tensors"
if [ -x "$I" ]; then
    expect 0 "$I" --hash "$d/al.gguf"
    grep 'model xxh3' "$T/out" >"$d/h-al"
    expect 0 "$I" --hash "$d/out.gguf"
    grep 'model xxh3' "$T/out" >"$d/h-co"
    same "$d/h-al" "$d/h-co"
    python3 - "$d" <<'EOF' && pass || fail "aligned merge: digests or data offsets modulo 2 MiB"
import json, os, subprocess, sys
d = sys.argv[1]
a, b = (json.load(open(os.path.join(d, n))) for n in ("al.json", "man.json"))
assert a["model_xxh3_128"] == b["model_xxh3_128"]
assert [t["xxh3_128"] for t in a["tensors"]] == [t["xxh3_128"] for t in b["tensors"]]
def inspect(name):
    return json.loads(subprocess.run([os.environ["GGUFKIT_BIN"] + "/gguf-inspect", "--json",
                                      os.path.join(d, name)], capture_output=True,
                                     check=True).stdout)
out = inspect("al.gguf")
where = {t["name"]: t["offset"] for t in out["tensors"]}  # file offsets
for k in range(1, 5):
    part = inspect(f"s-0000{k}-of-00004.gguf")
    for t in part["tensors"]:
        want = t["offset"]
        assert where[t["name"]] % (2 << 20) == want % (2 << 20), (t["name"], where[t["name"]], want)
blocks = os.stat(os.path.join(d, "al.gguf")).st_blocks * 512
assert os.path.getsize(os.path.join(d, "al.gguf")) > 3 * (2 << 20) > blocks, "gaps are not holes"
EOF
fi

# Real files from other tools (../shared/testdata), when present.
if have_shared models; then
    d=$T/real
    mkdir -p "$d"
    for f in "$SHARED"/models/*.gguf "$SHARED"/hf/*/model-q8_0.gguf; do
        [ -f "$f" ] || continue
        b=$(basename "$(dirname "$f")")-$(basename "$f" .gguf)
        expect 0 "$M" --split --split-max-size 1M --verify "$f" "$d/$b"
        expect 0 "$M" --merge --verify "$(ls "$d/$b"-00001-of-*.gguf)" "$d/$b.gguf"
        same "$f" "$d/$b.gguf"
    done
fi

# Models from the generator (gguf-gen, our own writer): every tensor type it makes, split
# and merged back byte-identical; its split sets merge into its single file; our split of
# its single file gives its parts byte for byte.
if [ -x "$GEN" ]; then
    d=$T/gen
    mkdir -p "$d"
    for ty in $("$GEN" types); do
        "$GEN" model -q --arch llama --type "$ty" --no-sync "$d/$ty.gguf"
        expect 0 "$M" --split --split-max-tensors 7 --no-sync "$d/$ty.gguf" "$d/$ty-s"
        expect 0 "$M" --merge --verify --no-sync "$d/$ty-s-00002-of-00003.gguf" "$d/$ty-back.gguf"
        same "$d/$ty.gguf" "$d/$ty-back.gguf"
    done
    "$GEN" model -q --arch deepseek2 --type Q4_K --no-sync "$d/ds.gguf"
    "$GEN" model -q --arch deepseek2 --type Q4_K --no-sync --split-max-tensors 9 "$d/dss.gguf"
    n=$(ls "$d"/dss-*.gguf | wc -l)
    expect 0 "$M" --merge --verify "$d/dss-00002-of-0000$n.gguf" "$d/ds-merged.gguf"
    same "$d/ds.gguf" "$d/ds-merged.gguf"
    expect 0 "$M" --split --split-max-tensors 9 "$d/ds.gguf" "$d/ours"
    for i in $(seq 1 "$n"); do same "$d/dss-0000$i-of-0000$n.gguf" "$d/ours-0000$i-of-0000$n.gguf"; done

    # Real scale: a sparse replica of GLM-5.1 (1809 tensors, 425 GiB, 10 parts as
    # downloaded) merges into one 456 GB file in well under a second of copying, on no disk.
    MAP=$SHARED/tensor-maps/GLM-5.1-Q4_K.map
    if have_shared tensor-maps/GLM-5.1-Q4_K.map; then
        d=$T/glm
        mkdir -p "$d"
        "$GEN" replica -q --split-max-size 45GiB "$MAP" "$d/glm51.gguf"  # 10 parts
        expect 0 "$M" --merge --no-sync "$d/glm51-00007-of-00010.gguf" "$d/merged.gguf"
        contains "$T/out" "merged 10 parts (1809 tensors, 425.10 GiB)"
        [ "$(stat -c %s "$d/merged.gguf")" -gt 450000000000 ] && pass || fail "GLM replica size"
        [ "$(du -k "$d/merged.gguf" | cut -f1)" -lt 100000 ] && pass || fail "holes not kept"
        expect 0 "$M" --split --split-max-size 50G --dry-run --json "$d/merged.gguf" "$d/re"
        python3 - "$T/out" <<'EOF' && pass || fail "50G plan of the GLM replica"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["tensors"] == 1809 and len(j["outputs"]) >= 10
assert all(o["size"] <= 50 * 10**9 for o in j["outputs"])
EOF
        rm -rf "$d"
    fi
fi

finish
