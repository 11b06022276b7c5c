#!/usr/bin/env bash
# gguf-merge against cp, paired: each pair times `gguf-merge --merge` of a 4-part split set
# and `cp` of the same 4 parts into a folder, both followed by `sync` of what they wrote (the
# merge also fsyncs and renames on its own), in alternating order, on the same file system,
# and reports the ratio cp time / merge time of every pair (>= 1: the merge is as fast as cp).
#
#   tests/bench/bench_merge.sh BUILD_DIR [WORK_DIR] [GIB] [PAIRS]
#       BUILD_DIR  build folder (tools/gguf-merge, tools/gguf-inspect)
#       WORK_DIR   scratch folder (default BUILD_DIR/bench-work); its file system is the
#                  first one measured (ext4 on the development machines)
#       GIB        size of the set in GiB of real data (default 1)
#       PAIRS      pairs per configuration (default 7)
#
# Configurations: both layouts (contiguous, the default; aligned) on WORK_DIR's file system;
# the same on an XFS image loop-mounted under WORK_DIR (root, mkfs.xfs and a loop device
# needed; skipped with a message otherwise), with the new space each merge takes (statfs
# before and after, after sync); then --verify, paired against a plain merge. Needs bash,
# python3 (the fixture), coreutils and awk: nothing else (no bc).
set -euo pipefail
B=$(cd "${1:?usage: bench_merge.sh BUILD_DIR [WORK_DIR] [GIB] [PAIRS]}" && pwd)
W=${2:-$B/bench-work}
GIB=${3:-1}
PAIRS=${4:-7}
M=$B/tools/gguf-merge
FX=$(cd "$(dirname "$0")/../integration" && pwd)/merge_fixture.py
[ -x "$M" ] || { echo "bench_merge: $M is missing (cmake --build BUILD --target gguf-merge)" >&2; exit 2; }
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
run_cp() { # DIR
    cp "$1"/p-0000?-of-00004.gguf "$1/cp/"
    sync "$1"/cp/*
}
reset() { # DIR
    rm -rf "$1/out.gguf" "$1/cp"
    mkdir "$1/cp"
    sync
}

# summary LABEL RATIOS...: median, min and max of the ratios
summary() {
    local label=$1
    shift
    printf '%s\n' "$@" | sort -g | awk -v l="$label" '
        { r[NR] = $1 }
        END { m = (NR % 2) ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2
              printf "  %-34s median %.2fx cp  (min %.2fx, max %.2fx, %d pairs)\n", l, m, r[1], r[NR], NR }'
}

# pairs DIR LAYOUT FSLABEL: PAIRS paired runs, with the space a merge takes
pairs() {
    local d=$1 layout=$2 fs=$3 i tm tc ratios=() used=()
    local bytes
    bytes=$(cat "$d"/p-0000?-of-00004.gguf | wc -c)
    for i in $(seq 1 "$PAIRS"); do
        reset "$d"
        local before after
        before=$(free_bytes "$d")
        if [ $((i % 2)) -eq 1 ]; then
            tm=$(time_ns run_merge "$d" "$layout")
            sync
            after=$(free_bytes "$d")
            tc=$(time_ns run_cp "$d")
        else
            tc=$(time_ns run_cp "$d")
            rm -rf "$d/cp"
            sync
            before=$(free_bytes "$d")
            tm=$(time_ns run_merge "$d" "$layout")
            sync
            after=$(free_bytes "$d")
        fi
        ratios+=("$(calc "$tc / $tm")")
        used+=("$((before - after))")
        printf '    pair %d: merge %s s, cp %s s, ratio %.2f, merge took %s MB of new space\n' \
            "$i" "$(secs "$tm")" "$(secs "$tc")" "${ratios[-1]}" "$(calc "sprintf(\"%.1f\", ($before - $after) / 1e6)")"
    done
    summary "$fs --layout $layout" "${ratios[@]}"
    local med_used
    med_used=$(printf '%s\n' "${used[@]}" | sort -n | awk '{ u[NR] = $1 } END { print u[int((NR + 1) / 2)] }')
    printf '  %-34s new space %s MB = %s%% of the %s MB of parts (median)\n' "" \
        "$(calc "sprintf(\"%.1f\", $med_used / 1e6)")" \
        "$(calc "sprintf(\"%.2f\", 100 * $med_used / $bytes)")" "$(calc "sprintf(\"%.0f\", $bytes / 1e6)")"
}

# verify_pairs DIR FSLABEL: merge --verify against a plain merge, paired
verify_pairs() {
    local d=$1 fs=$2 i a b ratios=() js
    for i in $(seq 1 "$PAIRS"); do
        reset "$d"
        a=$(time_ns run_merge "$d" contiguous)
        reset "$d"
        b=$(time_ns run_merge "$d" contiguous --verify)
        reset "$d"
        js=$("$M" --merge --verify --json --threads 1 "$d/p-00001-of-00004.gguf" "$d/out.gguf")
        ratios+=("$(calc "$b / $a")")
        printf '    pair %d: merge %s s, merge --verify %s s (x%.2f); --threads 1: seconds_write %s, seconds_verify %s\n' \
            "$i" "$(secs "$a")" "$(secs "$b")" "${ratios[-1]}" \
            "$(echo "$js" | sed -n 's/.*"seconds_write": \([0-9.e+-]*\).*/\1/p' | awk '{ printf "%.3f", $1 }')" \
            "$(echo "$js" | sed -n 's/.*"seconds_verify": \([0-9.e+-]*\).*/\1/p' | awk '{ printf "%.3f", $1 }')"
    done
    printf '%s\n' "${ratios[@]}" | sort -g | awk -v l="$fs --verify / plain merge" '
        { r[NR] = $1 } END { m = (NR % 2) ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2
                             printf "  %-34s median x%.2f (min x%.2f, max x%.2f)\n", l, m, r[1], r[NR] }'
}

echo "bench_merge: $(nproc) cores, $(uname -r), set of $GIB GiB in 4 parts, $PAIRS pairs each, $(date -u '+%Y-%m-%d %H:%M UTC')"
fs1=$(df --output=fstype "$W" | tail -1)
d=$W/ext
rm -rf "$d" && mkdir -p "$d"
make_set "$d"
echo "$fs1 ($W):"
pairs "$d" contiguous "$fs1"
pairs "$d" aligned "$fs1"
verify_pairs "$d" "$fs1"
rm -rf "$d"

if [ "$(id -u)" -ne 0 ] || ! command -v mkfs.xfs >/dev/null; then
    echo "xfs: skipped (needs root and mkfs.xfs from xfsprogs)"
    exit 0
fi
img=$W/xfs.img
MNT=$W/xfs
mkdir -p "$MNT"
# parts + one merged copy + cp's copies + the log, with room to spare
truncate -s "$(calc "sprintf(\"%.0f\", $GIB * 3.5 * 1073741824 + 1073741824)")" "$img"
if ! mkfs.xfs -q -f "$img" || ! mount -o loop "$img" "$MNT" 2>/dev/null; then
    echo "xfs: skipped (cannot make or loop-mount an XFS image here)"
    MNT=
    exit 0
fi
make_set "$MNT"
echo "xfs (loop image $img):"
pairs "$MNT" aligned xfs
pairs "$MNT" contiguous xfs
