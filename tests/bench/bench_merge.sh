#!/usr/bin/env bash
# gguf-merge against cp, paired: each pair times `gguf-merge --merge` of a 4-part split set
# and `cp` of the same 4 parts into a folder, both followed by `sync` of what they wrote (the
# merge also fsyncs and renames on its own), each starting from the same state (no outputs,
# everything synced) and removing its output afterwards, in alternating order, on the same
# file system; it reports the ratio cp time / merge time of every pair (>= 1: the merge is
# as fast as cp) and the new space each merge took.
#
#   tests/bench/bench_merge.sh BUILD_DIR [WORK_DIR] [GIB] [PAIRS]
#       BUILD_DIR  build folder (tools/gguf-merge)
#       WORK_DIR   scratch folder (default BUILD_DIR/bench-work); its file system is the
#                  first one measured (ext4 on the development machines)
#       GIB        size of the set in GiB of real data (default 1)
#       PAIRS      pairs per configuration (default 7)
#
# Configurations: both layouts (contiguous, the default; aligned) on WORK_DIR's file system;
# the same on an XFS image loop-mounted under WORK_DIR (root, mkfs.xfs and a loop device
# needed; skipped with a message otherwise); then --verify, paired against a plain merge.
# With OLD_MERGE=PATH (another build's gguf-merge), also this build's default merge against
# that one, paired, on WORK_DIR's file system.
# With SETTLE=SECONDS, each timed command starts that long after the previous output was
# removed (default 0). On a virtual machine that hands freed memory back to its host (free
# page reporting, as Firecracker guests do) how long ago that was decides how fast new
# page-cache pages come, and the pairs split into fast and slow ones; SETTLE=10 puts every
# command in the same (cold) state. See docs/benchmarks.md, "merge".
# Needs bash, python3 (the fixture), coreutils and awk: nothing else (no bc).
set -euo pipefail
B=$(cd "${1:?usage: bench_merge.sh BUILD_DIR [WORK_DIR] [GIB] [PAIRS]}" && pwd)
W=${2:-$B/bench-work}
GIB=${3:-1}
PAIRS=${4:-7}
SETTLE=${SETTLE:-0}
M=$B/tools/gguf-merge
FX=$(cd "$(dirname "$0")/../integration" && pwd)/merge_fixture.py
if [ ! -x "$M" ]; then
    echo "bench_merge: $M is missing (cmake --build BUILD --target gguf-merge)" >&2
    exit 2
fi
mkdir -p "$W"
W=$(cd "$W" && pwd)
MNT=
cleanup() {
    if [ -n "$MNT" ] && mountpoint -q "$MNT"; then umount "$MNT" || true; fi
    rm -rf "$W/ext" "$W/xfs.img" "$W/xfs"
}
trap cleanup EXIT

now_ns() { date +%s%N; }
# awk does the floating point (a fresh machine has no bc)
calc() { awk "BEGIN { printf \"%s\", $1 }"; }
secs() { calc "sprintf(\"%.3f\", $1 / 1e9)"; }
# (mawk's %d stops at 2^31: big numbers go through %.0f)
free_bytes() { stat -f -c '%a %S' "$1" | awk '{ printf "%.0f", $1 * $2 }'; }

# make_set DIR: DIR/p-0000{1..4}-of-00004.gguf from a dense model of GIB GiB
make_set() {
    local mib
    mib=$(calc "sprintf(\"%d\", $GIB * 1024)")
    python3 "$FX" dense "$1/m.gguf" --mib "$mib" >/dev/null
    "$M" -q --split --split-max-size "$(calc "sprintf(\"%d\", $mib / 4 + 1)")MiB" \
        "$1/m.gguf" "$1/p"
    rm "$1/m.gguf"
    sync
}

# time_ns CMD...: run it, print its wall time in ns
time_ns() {
    local s e
    s=$(now_ns)
    "$@" >/dev/null
    e=$(now_ns)
    echo $((e - s))
}

run_merge() { # DIR LAYOUT [EXTRA...]
    local d=$1 layout=$2
    shift 2
    "$M" -q --merge --layout "$layout" "$@" "$d/p-00001-of-00004.gguf" "$d/out.gguf"
    sync "$d/out.gguf"
}
run_old() { # DIR: the OLD_MERGE binary, its default layout
    "$OLD_MERGE" -q --merge "$1/p-00001-of-00004.gguf" "$1/out.gguf"
    sync "$1/out.gguf"
}
run_cp() { # DIR
    cp "$1"/p-0000?-of-00004.gguf "$1/cp/"
    sync "$1"/cp/*
}
reset() { # DIR: no outputs, everything on disk
    rm -rf "$1/out.gguf" "$1/cp"
    mkdir "$1/cp"
    sync
}
# one DIR merge LAYOUT [EXTRA...] | one DIR cp: time it from the same state (no outputs,
# synced) and remove its output again; prints "NANOSECONDS NEW_SPACE_BYTES"
one() {
    local d=$1 what=$2 before after t
    shift 2
    reset "$d"
    [ "$SETTLE" = 0 ] || sleep "$SETTLE"
    before=$(free_bytes "$d")
    t=$(time_ns "run_$what" "$d" "$@")
    after=$(free_bytes "$d")
    reset "$d"
    echo "$t $((before - after))"
}

# median LABEL FORMAT RATIOS...: median, min and max
median() {
    local label=$1 fmt=$2
    shift 2
    printf '%s\n' "$@" | sort -g | awk -v l="$label" -v f="$fmt" '
        { r[NR] = $1 }
        END { m = (NR % 2) ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2
              printf f, l, m, r[1], r[NR], NR }'
}

# pairs DIR LAYOUT FSLABEL: PAIRS paired runs (order alternating), with the new space taken
pairs() {
    local d=$1 layout=$2 fs=$3 i m c ratios=() used=() bytes med_used
    bytes=$(cat "$d"/p-0000?-of-00004.gguf | wc -c)
    for i in $(seq 1 "$PAIRS"); do
        if [ $((i % 2)) -eq 1 ]; then
            m=$(one "$d" merge "$layout")
            c=$(one "$d" cp)
        else
            c=$(one "$d" cp)
            m=$(one "$d" merge "$layout")
        fi
        ratios+=("$(calc "${c% *} / ${m% *}")")
        used+=("${m#* }")
        printf '    pair %d: merge %s s (new space %s MB), cp %s s (new space %s MB), ratio %.2f\n' \
            "$i" "$(secs "${m% *}")" "$(calc "sprintf(\"%.1f\", ${m#* } / 1e6)")" \
            "$(secs "${c% *}")" "$(calc "sprintf(\"%.1f\", ${c#* } / 1e6)")" "${ratios[-1]}"
    done
    median "$fs --layout $layout" \
        '  %-34s median %.2fx cp  (min %.2fx, max %.2fx, %d pairs)\n' "${ratios[@]}"
    med_used=$(printf '%s\n' "${used[@]}" | sort -n | awk '{ u[NR] = $1 } END { print u[int((NR + 1) / 2)] }')
    printf '  %-34s new space %s MB = %s%% of the %s MB of parts (median)\n' "" \
        "$(calc "sprintf(\"%.1f\", $med_used / 1e6)")" \
        "$(calc "sprintf(\"%.2f\", 100 * $med_used / $bytes)")" "$(calc "sprintf(\"%.0f\", $bytes / 1e6)")"
}

json_num() { sed -n "s/.*\"$1\": \\([0-9.e+-]*\\).*/\\1/p" | awk '{ printf "%.3f", $1 }'; }

# verify_pairs DIR FSLABEL: merge --verify against a plain merge, paired; then the write and
# verification times of one --threads 1 run as --json reports them
verify_pairs() {
    local d=$1 fs=$2 i a b ratios=() js
    for i in $(seq 1 "$PAIRS"); do
        if [ $((i % 2)) -eq 1 ]; then
            a=$(one "$d" merge contiguous)
            b=$(one "$d" merge contiguous --verify)
        else
            b=$(one "$d" merge contiguous --verify)
            a=$(one "$d" merge contiguous)
        fi
        js=$("$M" --merge --verify --json --threads 1 "$d/p-00001-of-00004.gguf" "$d/out.gguf")
        reset "$d"
        ratios+=("$(calc "${b% *} / ${a% *}")")
        printf '    pair %d: merge %s s, merge --verify %s s (x%.2f); --threads 1: seconds_write %s, seconds_verify %s\n' \
            "$i" "$(secs "${a% *}")" "$(secs "${b% *}")" "${ratios[-1]}" \
            "$(echo "$js" | json_num seconds_write)" "$(echo "$js" | json_num seconds_verify)"
    done
    median "$fs --verify / plain merge" \
        '  %-34s median x%.2f (min x%.2f, max x%.2f, %d pairs)\n' "${ratios[@]}"
}

# old_pairs DIR FSLABEL: this build's default merge against OLD_MERGE's, paired
old_pairs() {
    local d=$1 fs=$2 i a b ratios=()
    for i in $(seq 1 "$PAIRS"); do
        if [ $((i % 2)) -eq 1 ]; then
            a=$(one "$d" merge contiguous)
            b=$(one "$d" old)
        else
            b=$(one "$d" old)
            a=$(one "$d" merge contiguous)
        fi
        ratios+=("$(calc "${b% *} / ${a% *}")")
        printf '    pair %d: this merge %s s, old merge %s s, ratio old/this %.2f\n' \
            "$i" "$(secs "${a% *}")" "$(secs "${b% *}")" "${ratios[-1]}"
    done
    median "$fs old/this (contiguous)" \
        '  %-34s median %.2fx  (min %.2fx, max %.2fx, %d pairs)\n' "${ratios[@]}"
}

echo "bench_merge: $(nproc) cores, $(uname -r), set of $GIB GiB in 4 parts, $PAIRS pairs each, settle ${SETTLE} s, $(date -u '+%Y-%m-%d %H:%M UTC')"
fs1=$(df --output=fstype "$W" | tail -1)
d=$W/ext
rm -rf "$d" && mkdir -p "$d"
make_set "$d"
echo "$fs1 ($W):"
pairs "$d" contiguous "$fs1"
pairs "$d" aligned "$fs1"
verify_pairs "$d" "$fs1"
if [ -n "${OLD_MERGE:-}" ]; then
    echo "$fs1: against OLD_MERGE=$OLD_MERGE"
    old_pairs "$d" "$fs1"
fi
rm -rf "$d"

if [ "$(id -u)" -ne 0 ] || ! command -v mkfs.xfs >/dev/null; then
    echo "xfs: skipped (needs root and mkfs.xfs from xfsprogs)"
    exit 0
fi
img=$W/xfs.img
MNT=$W/xfs
mkdir -p "$MNT"
# parts + one merged copy + the log, with room to spare
truncate -s "$(calc "sprintf(\"%.0f\", $GIB * 2.5 * 1073741824 + 1073741824)")" "$img"
if ! mkfs.xfs -q -f "$img" || ! mount -o loop "$img" "$MNT" 2>/dev/null; then
    echo "xfs: skipped (cannot make or loop-mount an XFS image here)"
    MNT=
    exit 0
fi
make_set "$MNT"
echo "xfs (loop image $img):"
pairs "$MNT" aligned xfs
pairs "$MNT" contiguous xfs
