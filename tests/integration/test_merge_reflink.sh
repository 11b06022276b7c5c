#!/usr/bin/env bash
# gguf-merge --layout aligned on XFS, which shares extents: the merge clones the parts'
# blocks instead of copying them. On a loop-mounted XFS image: the new space a merge takes
# (statfs before and after, after sync) is under 1% of the data for the aligned layout and
# the whole data for the contiguous one (so the measure can fail); the blocks are shared
# (FIEMAP's shared flag, through filefrag); the output holds the tensors and metadata of a
# plain merge (gguf-inspect --hash, manifests) and gguf-py reads it. Skipped with a message
# where an XFS image cannot be made or mounted (not root, no xfsprogs, no loop device).
source "$(dirname "$0")/lib.sh"
M=$GGUFKIT_BIN/gguf-merge
I=$GGUFKIT_BIN/gguf-inspect
FX=$GGUFKIT_SRC/tests/integration/merge_fixture.py
command -v python3 >/dev/null || skip "python3 is needed for the fixtures"
[ "$(id -u)" -eq 0 ] || skip "mounting an XFS image needs root"
command -v mkfs.xfs >/dev/null || skip "mkfs.xfs is absent (Debian package xfsprogs)"

img=$T/xfs.img
X=$T/xfs
mkdir -p "$X"
truncate -s 1G "$img"
mkfs.xfs -q -f -m reflink=1 "$img" >/dev/null 2>&1 || skip "mkfs.xfs cannot make a reflink file system here"
mount -o loop "$img" "$X" 2>/dev/null || skip "cannot loop-mount an XFS image here (no loop device or not allowed)"
trap 'umount "$X" 2>/dev/null; rm -rf "$T"' EXIT

avail() { sync; stat -f -c '%a %S' "$X" | awk '{ printf "%.0f", $1 * $2 }'; }

# 4 parts of 24 MiB of real data each; a tensor's padding and the parts' headers make the
# data offsets of the parts differ modulo 4096 (part 1 has the metadata).
python3 "$FX" dense "$X/m.gguf" --mib 96 >/dev/null
"$M" -q --split --split-max-size 26MiB "$X/m.gguf" "$X/p"
rm "$X/m.gguf"
parts=$(ls "$X"/p-*.gguf | wc -l)
[ "$parts" -eq 4 ] && pass || fail "wanted 4 parts, got $parts"
data=$(cat "$X"/p-*.gguf | wc -c)

before=$(avail)
expect 0 "$M" --merge --layout aligned --json --manifest "$X/al.json" "$X/p-00002-of-00004.gguf" "$X/al.gguf"
after=$(avail)
contains "$T/out" '"layout": "aligned"'
contains "$T/out" '"copy_ranges": 4'
used=$((before - after))
if [ "$used" -lt $((data / 100)) ]; then
    pass
else
    fail "the aligned merge took $used bytes of new space (data: $data bytes; want < 1%)"
fi
echo "aligned merge on XFS: $used bytes of new space for $data bytes of parts"

# The extents are shared with the parts (filefrag prints FIEMAP's flags).
if command -v filefrag >/dev/null; then
    filefrag -v "$X/al.gguf" >"$T/frag" 2>&1
    shared=$(grep -c shared "$T/frag" || true)
    [ "$shared" -ge 4 ] && pass || fail "only $shared shared extents: $(cat "$T/frag")"
fi

# The contiguous merge cannot share (the parts move by a few bytes): it takes the data.
before=$(avail)
expect 0 "$M" --merge --manifest "$X/co.json" "$X/p-00001-of-00004.gguf" "$X/co.gguf"
after=$(avail)
used=$((before - after))
if [ "$used" -gt $((data * 9 / 10)) ]; then pass; else fail "the contiguous merge took only $used bytes"; fi

# Same tensors and metadata as the plain merge: digests of gguf-inspect and of the manifests.
"$I" --hash "$X/al.gguf" | grep 'model xxh3' >"$T/h1"
"$I" --hash "$X/co.gguf" | grep 'model xxh3' >"$T/h2"
cmp -s "$T/h1" "$T/h2" && pass || fail "model digests differ: $(cat "$T/h1" "$T/h2")"
python3 - "$X/al.json" "$X/co.json" "$X/al.gguf" "$X/co.gguf" <<'EOF' && pass || fail "aligned and contiguous merges differ"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["model_xxh3_128"] == b["model_xxh3_128"]
assert [(t["name"], t["type"], t["shape"], t["xxh3_128"]) for t in a["tensors"]] == \
       [(t["name"], t["type"], t["shape"], t["xxh3_128"]) for t in b["tensors"]]
try:
    import gguf
except ImportError:
    sys.exit(0)
ra, rb = gguf.GGUFReader(sys.argv[3]), gguf.GGUFReader(sys.argv[4])
fa = {k: (tuple(f.types), f.contents()) for k, f in ra.fields.items()}
fb = {k: (tuple(f.types), f.contents()) for k, f in rb.fields.items()}
assert fa == fb
for x, y in zip(ra.tensors, rb.tensors, strict=True):
    # bytes, not values: random F32 data holds NaNs
    assert x.name == y.name and x.data.tobytes() == y.data.tobytes()
EOF
# A verified aligned merge, and the parts untouched by the clones.
expect 0 "$M" --merge --layout aligned --verify "$X/p-00004-of-00004.gguf" "$X/al2.gguf"
contains "$T/out" "verified 4 tensors"
expect 0 "$M" --merge --verify "$X/p-00001-of-00004.gguf" "$X/back.gguf"

# Nearly full: less free space than the data. The contiguous merge is refused before it
# writes; the aligned one fits (the free-space check knows the blocks will be shared).
rm -f "$X"/al*.gguf "$X/co.gguf" "$X/back.gguf"
# A remount ends XFS's freeing in the background (deleted inodes, preallocation past the
# parts' ends), so the free space measured next does not grow behind the fill.
{ umount "$X" && mount -o loop "$img" "$X"; } || { fail "remounting the XFS image"; finish; exit 1; }
fill=$(( $(avail) - 40 * 1024 * 1024 ))
fallocate -l "$fill" "$X/filler" || fail "fallocate"
# XFS gives back the speculative preallocation past the end of recently written files (the
# parts) when space runs short, so more can be free after the fill than before it: top up.
for k in 1 2 3; do
    left=$(avail)
    [ "$left" -gt $((48 * 1024 * 1024)) ] || break
    fallocate -l $((left - 40 * 1024 * 1024)) "$X/filler$k" || fail "fallocate"
done
expect 3 "$M" --merge "$X/p-00001-of-00004.gguf" "$X/co.gguf"
contains "$T/err" "not enough free space"
expect 0 "$M" --merge --layout aligned --verify "$X/p-00001-of-00004.gguf" "$X/al.gguf"
contains "$T/out" "verified 4 tensors"

finish
