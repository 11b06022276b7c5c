#!/usr/bin/env bash
# gguf-merge refuses every bad set and every dangerous output before writing a byte:
# exit 2, a message naming the part and the problem, nothing written, inputs untouched.
source "$(dirname "$0")/lib.sh"
M=$GGUFKIT_BIN/gguf-merge
FX=$GGUFKIT_SRC/tests/integration/merge_fixture.py
command -v python3 >/dev/null || skip "python3 is needed for the fixtures"

# nothing_written DIR N: DIR holds exactly N entries (no output, no temporary file).
nothing_written() {
    local n
    n=$(ls -A "$1" | wc -l)
    if [ "$n" -eq "$2" ]; then pass; else fail "$1 holds $n entries, wanted $2: $(ls -A "$1")"; fi
}

# A set with one flaw each; merging from any part fails the same way.
check_flaw() { # FLAW PART_NAMED TEXT
    local d=$T/flaw-$1
    mkdir -p "$d"
    python3 "$FX" set "$d/s" --flaw "$1"
    expect 2 "$M" --merge "$d/s-0000$2-of-00003.gguf" "$d/out.gguf"
    contains "$T/err" "$3"
    nothing_written "$d" 3
}
check_flaw dup 1 "s-00002-of-00003.gguf (part 2 of 3): tensor 'blk.0.t0.weight' is also in"
check_flaw total 3 "split.tensors.count says 7 tensors but the 3 part(s) hold 6"
check_flaw no 1 "s-00002-of-00003.gguf (part 2 of 3): split.no is 0 but the file name says part 2"
check_flaw count 2 "s-00003-of-00003.gguf (part 3 of 3): split.count is 4 but the set has 3 parts"
check_flaw version 1 "s-00002-of-00003.gguf (part 2 of 3): GGUF version 2 differs from part 1's 3"
check_flaw align 3 "s-00002-of-00003.gguf (part 2 of 3): alignment 64 differs from part 1's 32"
check_flaw nokeys 1 "s-00002-of-00003.gguf: part 2 of 3 has no split.no/split.count keys"

# A valid set to break one part at a time (restored after each case).
d=$T/set
mkdir -p "$d"
python3 "$FX" set "$d/s"
P2=$d/s-00002-of-00003.gguf
cp "$P2" "$T/keep2"
restore() { rm -rf "$P2"; cp "$T/keep2" "$P2"; }
expect 0 "$M" --merge --dry-run "$d/s-00001-of-00003.gguf" "$d/out.gguf"
nothing_written "$d" 3

rm "$P2"
expect 2 "$M" --merge "$d/s-00003-of-00003.gguf" "$d/out.gguf"
contains "$T/err" "s-00002-of-00003.gguf: part 2 of 3 is missing"
nothing_written "$d" 2
restore

head -c 300 "$T/keep2" >"$P2"
expect 2 "$M" --merge "$d/s-00001-of-00003.gguf" "$d/out.gguf"
contains "$T/err" "s-00002-of-00003.gguf (part 2 of 3): tensor 'blk.1.t1.weight'"
contains "$T/err" "truncated download?"
nothing_written "$d" 3
head -c 20 "$T/keep2" >"$P2"
expect 2 "$M" --merge "$d/s-00001-of-00003.gguf" "$d/out.gguf"
contains "$T/err" "s-00002-of-00003.gguf"
restore

printf 'version https://git-lfs.github.com/spec/v1\noid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 4840\n' >"$P2"
expect 2 "$M" --merge "$d/s-00001-of-00003.gguf" "$d/out.gguf"
contains "$T/err" "s-00002-of-00003.gguf (part 2 of 3): this is a Git LFS pointer file"
nothing_written "$d" 3

printf '<!DOCTYPE html>\n<html><head><title>Access denied</title></head><body>login</body></html>\n' >"$P2"
expect 2 "$M" --merge "$d/s-00001-of-00003.gguf" "$d/out.gguf"
contains "$T/err" "s-00002-of-00003.gguf (part 2 of 3): this is an HTML/XML page"
nothing_written "$d" 3

: >"$P2"
expect 2 "$M" --merge "$d/s-00001-of-00003.gguf" "$d/out.gguf"
contains "$T/err" "s-00002-of-00003.gguf (part 2 of 3): the file is empty"
nothing_written "$d" 3

printf 'PK\003\004 not a gguf at all, a zip file' >"$P2"
expect 2 "$M" --merge "$d/s-00001-of-00003.gguf" "$d/out.gguf"
contains "$T/err" "s-00002-of-00003.gguf"
nothing_written "$d" 3
restore

rm "$P2" && mkdir "$P2"
expect 2 "$M" --merge "$d/s-00001-of-00003.gguf" "$d/out.gguf"
contains "$T/err" "s-00002-of-00003.gguf (part 2 of 3): not a regular file"
nothing_written "$d" 3
restore

# A part of another set: same names, other content.
mkdir -p "$T/other"
python3 "$FX" set "$T/other/s" --flaw total
cp "$T/other/s-00003-of-00003.gguf" "$d/s-00003-of-00003.gguf"
expect 2 "$M" --merge "$d/s-00001-of-00003.gguf" "$d/out.gguf"
contains "$T/err" "split.tensors.count"
nothing_written "$d" 3
python3 "$FX" set "$d/s"

# Outputs: an existing file, an input under any spelling, a glob in the output slot.
sums() { python3 "$FX" digest "$d"/s-*.gguf; }
before=$(sums)
echo "precious" >"$d/out.gguf"
expect 2 "$M" --merge "$d/s-00001-of-00003.gguf" "$d/out.gguf"
contains "$T/err" "out.gguf: the output exists (use --force to replace it)"
contains "$d/out.gguf" "precious"
expect 2 "$M" --merge "$d/s-00001-of-00003.gguf" "$d/s-00002-of-00003.gguf"
contains "$T/err" "the output is the input part 2"
expect 2 "$M" --merge --force "$d/s-00001-of-00003.gguf" "$d/s-00002-of-00003.gguf"
contains "$T/err" "refusing to write over an input"
expect 2 "$M" --merge --force "$d/s-00001-of-00003.gguf" "$d/../set/./s-00003-of-00003.gguf"
contains "$T/err" "the output is the input part 3"
ln -s s-00001-of-00003.gguf "$d/link.gguf"
expect 2 "$M" --merge --force "$d/s-00002-of-00003.gguf" "$d/link.gguf"
contains "$T/err" "the output is the input part 1"
ln "$d/s-00003-of-00003.gguf" "$d/hard.gguf"
expect 2 "$M" --merge --force "$d/s-00002-of-00003.gguf" "$d/hard.gguf"
contains "$T/err" "the output is the input part 3"
ln -s nowhere "$d/dangling.gguf"
expect 2 "$M" --merge "$d/s-00002-of-00003.gguf" "$d/dangling.gguf"
contains "$T/err" "dangling symbolic link"
# The shell glob that once truncated a shard: three names where two belong.
expect 2 "$M" --merge "$d"/s-0000*.gguf
contains "$T/err" "got 3 arguments (a shell glob?"
(cd "$d" && "$M" --merge s-00001-of-00003.gguf ./s-00002-of-00003.gguf >"$T/out" 2>"$T/err") &&
    fail "merge over an input by a relative path" || pass
contains "$T/err" "the output is the input part 2"
# Split outputs that are inputs.
expect 2 "$M" --split --split-max-tensors 2 --force "$d/s-00001-of-00003.gguf" "$d/s"
contains "$T/err" "the output is the input part"
expect 2 "$M" --merge --force "$d/s-00001-of-00003.gguf" "$T/"
contains "$T/err" "the output is a folder"
expect 2 "$M" --merge "$d/s-00001-of-00003.gguf" "$T/no/such/folder/out.gguf"
contains "$T/err" "does not exist"
after=$(sums)
[ "$before" = "$after" ] && pass || fail "an input changed"
nothing_written "$d" 7 # 3 parts, out.gguf, link, hard, dangling

# --force replaces an existing output that is not an input.
expect 0 "$M" --merge --force "$d/s-00001-of-00003.gguf" "$d/out.gguf"
if grep -q precious "$d/out.gguf"; then fail "--force did not replace"; else pass; fi

finish
