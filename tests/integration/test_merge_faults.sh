#!/usr/bin/env bash
# gguf-merge under faults: disk full (RLIMIT_FSIZE, a small tmpfs), SIGINT and SIGTERM in
# the middle of a merge of a sparse set over 4 GiB, --delete-inputs ordering. Each time:
# a clear error, exit 3, no temporary file, no output, inputs untouched.
source "$(dirname "$0")/lib.sh"
M=$GGUFKIT_BIN/gguf-merge
FX=$GGUFKIT_SRC/tests/integration/merge_fixture.py
command -v python3 >/dev/null || skip "python3 is needed for the fixtures"

no_temp() { # DIR
    if ls -A "$1" | grep -q '\.tmp$'; then fail "temporary file left in $1: $(ls -A "$1")"; else pass; fi
}
absent() { if [ -e "$1" ]; then fail "$1 exists"; else pass; fi; }
sums() { python3 "$FX" digest "$@"; }

# --- disk full through RLIMIT_FSIZE (the tool ignores SIGXFSZ, so writes fail with EFBIG)
d=$T/full
mkdir -p "$d"
python3 "$FX" types "$d/m.gguf"
python3 "$FX" dense "$d/dense.gguf" --mib 8
"$M" -q --split --split-max-tensors 10 "$d/m.gguf" "$d/s"
"$M" -q --split --split-max-tensors 2 "$d/dense.gguf" "$d/big"
rm "$d/m.gguf" "$d/dense.gguf"
before=$(sums "$d"/*.gguf)
# Small output, buffered writes; then 8 MiB of kernel copies (copy_file_range) over a 4 MiB limit.
expect 3 bash -c "ulimit -f 8; exec '$M' --merge '$d/s-00001-of-00004.gguf' '$d/out.gguf'"
contains "$T/err" "out.gguf: disk full while writing"
contains "$T/err" "the partial output was removed"
absent "$d/out.gguf"
no_temp "$d"
expect 3 bash -c "ulimit -f 4096; exec '$M' --merge --delete-inputs '$d/big-00001-of-00002.gguf' '$d/out.gguf'"
contains "$T/err" "disk full while writing"
absent "$d/out.gguf"
no_temp "$d"
# A split fails the same way, and removes the parts it had finished.
expect 3 bash -c "ulimit -f 3000; exec '$M' --split --split-max-size 5M --no-tensor-first-split '$d/big-00001-of-00002.gguf' '$d/re'"
contains "$T/err" "disk full while writing"
if ls "$d" | grep -q '^re-'; then fail "finished parts of a failed split were left"; else pass; fi
no_temp "$d"
after=$(sums "$d"/*.gguf)
[ "$before" = "$after" ] && pass || fail "an input changed after disk-full failures"

# --- a file system too small: refused by the free-space check before writing
if [ "$(id -u)" -eq 0 ] && mkdir -p "$T/small" && mount -t tmpfs -o size=2m tmpfs "$T/small" 2>/dev/null; then
    expect 3 "$M" --merge "$d/big-00002-of-00002.gguf" "$T/small/out.gguf"
    contains "$T/err" "not enough free space"
    [ -z "$(ls -A "$T/small")" ] && pass || fail "files left on the small file system"
    # A small merge fits and works there.
    expect 0 "$M" --merge "$d/s-00001-of-00004.gguf" "$T/small/out.gguf"
    umount "$T/small"
    # A read-only file system: an I/O error (EROFS) when the temporary file is created.
    if mount -t tmpfs -o size=2m,ro tmpfs "$T/small" 2>/dev/null; then
        expect 3 "$M" --merge "$d/s-00001-of-00004.gguf" "$T/small/out.gguf"
        contains "$T/err" "cannot create a temporary file beside the output: Read-only file system"
        umount "$T/small"
    fi
else
    echo "note: cannot mount a tmpfs here; the free-space refusal is not tested"
fi

# --- --delete-inputs: only after the output is complete, synced and verified
d2=$T/del
mkdir -p "$d2"
cp "$d"/s-0000*.gguf "$d2/"
expect 0 "$M" --merge --delete-inputs "$d2/s-00003-of-00004.gguf" "$d2/out.gguf"
contains "$T/out" "verified 37 tensors"
contains "$T/out" "deleted 4 input parts"
[ "$(ls "$d2")" = "out.gguf" ] && pass || fail "after --delete-inputs: $(ls "$d2")"
expect 0 "$M" --merge --verify "$d/s-00001-of-00004.gguf" "$d2/again.gguf"
cp "$d"/s-0000*.gguf "$d2/"
expect 0 "$M" --merge --delete-splits "$d2/s-00001-of-00004.gguf" "$d2/alias.gguf"
contains "$T/out" "deleted 4 input parts"
cmp -s "$d2/alias.gguf" "$d2/again.gguf" && pass || fail "--delete-splits output differs"
rm "$d2/alias.gguf"
cmp -s "$d2/out.gguf" "$d2/again.gguf" && pass || fail "--delete-inputs output differs"
# A split with --delete-inputs removes its source only once the parts are verified.
expect 0 "$M" --split --split-max-tensors 5 --delete-inputs "$d2/out.gguf" "$d2/re"
contains "$T/out" "deleted 1 input part"
absent "$d2/out.gguf"
expect 0 "$M" --merge "$d2/re-00001-of-00008.gguf" "$d2/back.gguf"
cmp -s "$d2/back.gguf" "$d2/again.gguf" && pass || fail "split --delete-inputs lost data"

# --- interrupts in the middle of merging a sparse set over 4 GiB
d=$T/sig
mkdir -p "$d"
python3 "$FX" sparse "$d/m.gguf" --gib 5 --dense-mib 160 >/dev/null
expect 0 "$M" --split --split-max-size 2G --verify --manifest "$d/split.json" "$d/m.gguf" "$d/s"
rm "$d/m.gguf"
parts=$(ls "$d"/s-*.gguf | wc -l)
[ "$parts" -eq 3 ] && pass || fail "wanted 3 parts, got $parts"
first=$d/s-00001-of-00003.gguf
before=$(sums "$d"/s-*.gguf)

# wait_for_temp PID: until the merge's temporary output appears in $d (or PID ends, or
# a minute passes: a deadline in time, not in tries, for a loaded machine).
wait_for_temp() {
    local deadline=$((SECONDS + 60))
    while [ $SECONDS -lt $deadline ] && kill -0 "$1" 2>/dev/null; do
        ls -A "$d" | grep -q '\.tmp$' && return 0
    done
    return 0
}

interrupt() { # SIGNAL
    local rc=0
    "$M" --merge "$first" "$d/out.gguf" >"$T/out" 2>"$T/err" &
    local pid=$!
    wait_for_temp $pid
    kill -"$1" $pid 2>/dev/null || true
    wait $pid || rc=$?
    if [ $rc -eq 0 ]; then
        echo "note: the merge finished before SIG$1 arrived; not counted"
        rm -f "$d/out.gguf"
        return
    fi
    [ $rc -eq 3 ] && pass || fail "SIG$1: exit $rc, wanted 3: $(cat "$T/err")"
    contains "$T/err" "interrupted"
    absent "$d/out.gguf"
    no_temp "$d"
}
interrupt INT
interrupt TERM
interrupt HUP

# SIGINT during --verify (after the rename): the unverified output is removed as well.
rc=0
"$M" --merge --verify --threads 1 "$first" "$d/out.gguf" >"$T/out" 2>"$T/err" &
pid=$!
deadline=$((SECONDS + 120))
while [ ! -e "$d/out.gguf" ] && [ $SECONDS -lt $deadline ] && kill -0 $pid 2>/dev/null; do :; done
renamed=0
[ -e "$d/out.gguf" ] && renamed=1
kill -INT $pid 2>/dev/null || true
wait $pid || rc=$?
if [ $rc -eq 0 ]; then
    echo "note: the verification finished before SIGINT arrived; not counted"
    rm -f "$d/out.gguf"
elif [ $renamed -eq 0 ]; then
    echo "note: SIGINT came before the rename (a slow copy); not counted"
    absent "$d/out.gguf"
    no_temp "$d"
else
    [ $rc -eq 3 ] && pass || fail "SIGINT in --verify: exit $rc: $(cat "$T/err")"
    contains "$T/err" "out.gguf: interrupted while verifying; the output was removed"
    absent "$d/out.gguf"
    no_temp "$d"
fi
after=$(sums "$d"/s-*.gguf)
[ "$before" = "$after" ] && pass || fail "an input changed after interrupts"

# --- an input that shrinks while it is copied (a download rewritten, an NFS hiccup): the
# copy notices the missing bytes instead of writing zeros for them.
cp "$d/s-00003-of-00003.gguf" "$T/keep3"
rc=0
"$M" --merge "$first" "$d/out.gguf" >"$T/out" 2>"$T/err" &
pid=$!
wait_for_temp $pid
truncate -s 1G "$d/s-00003-of-00003.gguf"
wait $pid || rc=$?
if [ $rc -eq 0 ]; then
    # Either the copy of part 3 was over before the truncation (fine), or the missing
    # bytes were silently written as zeros (the bug this guards against): compare with a
    # merge of the intact set.
    cp "$T/keep3" "$d/s-00003-of-00003.gguf"
    "$M" -q --merge "$first" "$d/out2.gguf"
    if [ "$(sums "$d/out.gguf" | cut -d' ' -f1)" = "$(sums "$d/out2.gguf" | cut -d' ' -f1)" ]; then
        echo "note: the merge finished before the input shrank; not counted"
    else
        fail "a truncated input was merged without an error"
    fi
    rm -f "$d/out2.gguf"
else
    [ $rc -eq 2 ] && pass || fail "shrunk input: exit $rc, wanted 2: $(cat "$T/err")"
    contains "$T/err" "input ended while copying"
    absent "$d/out.gguf"
    no_temp "$d"
fi
rm -f "$d/out.gguf"
mv "$T/keep3" "$d/s-00003-of-00003.gguf"

# The full merge of the >4 GiB set: verified, holes kept (little disk), same model digest.
expect 0 "$M" --merge --verify --manifest "$d/merge.json" "$d/s-00002-of-00003.gguf" "$d/out.gguf"
contains "$T/out" "verified"
[ "$(stat -c %s "$d/out.gguf")" -gt 5000000000 ] && pass || fail "merged file is not over 4 GiB"
[ "$(du -k "$d/out.gguf" | cut -f1)" -lt 400000 ] && pass || fail "holes were not kept: $(du -k "$d/out.gguf")"
python3 - "$d/split.json" "$d/merge.json" <<'EOF' && pass || fail "model digests of split and merge differ"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["model_xxh3_128"] == b["model_xxh3_128"]
assert [t["xxh3_128"] for t in a["tensors"]] == [t["xxh3_128"] for t in b["tensors"]]
EOF

finish
