#!/usr/bin/env bash
# Merge benchmark, library and command line, against cp and cat in the same run.
#   tests/bench/bench_merge.sh BUILD_DIR [WORK_DIR] [GIB]
# 1. BUILD_DIR/tests/bench_merge WORK_DIR GIB 3 (library merge vs cp vs read/write loop,
#    verify speed; see bench_merge.c);
# 2. the gguf-merge binary on a set of GIB GiB made by the tool itself, against `cp` and
#    `cat` of the same parts (each followed by sync of the output), best of 3.
set -euo pipefail
B=${1:?usage: bench_merge.sh BUILD_DIR [WORK_DIR] [GIB]}
W=${2:-$B/bench-work}
GIB=${3:-2.25}
mkdir -p "$W"
"$B/tests/bench_merge" "$W" "$GIB" 3

M=$B/tools/gguf-merge
FX=$(dirname "$0")/../integration/merge_fixture.py
d=$W/cli
rm -rf "$d" && mkdir -p "$d"
mib=$(python3 -c "print(int($GIB * 1024))")
python3 "$FX" dense "$d/m.gguf" --mib "$mib"
"$M" -q --split --split-max-size "$(python3 -c "print(int($mib / 4) + 1)")MiB" "$d/m.gguf" "$d/p"
rm "$d/m.gguf"
sync
bytes=$(cat "$d"/p-*.gguf | wc -c)
best() { sort -n | head -1; }
t() { local s e; s=$(date +%s.%N); "$@" >/dev/null; e=$(date +%s.%N); echo "$e - $s" | bc; }
tm=() tc=() tk=()
for r in 1 2 3; do
    rm -f "$d/out.gguf" "$d/cat.gguf"; rm -rf "$d/cp"; mkdir "$d/cp"; sync
    tm+=("$(t "$M" -q --merge "$d/p-00001-of-00004.gguf" "$d/out.gguf")")
    rm -f "$d/out.gguf"; sync
    tc+=("$(t sh -c "cp '$d'/p-*.gguf '$d/cp/' && sync '$d'/cp/*")")
    rm -rf "$d/cp"; mkdir "$d/cp"; sync
    tk+=("$(t sh -c "cat '$d'/p-*.gguf > '$d/cat.gguf' && sync '$d/cat.gguf'")")
done
m=$(printf '%s\n' "${tm[@]}" | best)
c=$(printf '%s\n' "${tc[@]}" | best)
k=$(printf '%s\n' "${tk[@]}" | best)
gb=$(echo "scale=3; $bytes / 1000000000" | bc)
printf 'command line, %s GB in 4 parts, best of 3, fsync/sync included\n' "$gb"
printf '  %-22s %6.2f s  %5.2f GB/s  %.2fx cp\n' "gguf-merge --merge" "$m" "$(echo "$gb / $m" | bc -l)" "$(echo "$c / $m" | bc -l)"
printf '  %-22s %6.2f s  %5.2f GB/s  1.00x cp\n' "cp + sync" "$c" "$(echo "$gb / $c" | bc -l)"
printf '  %-22s %6.2f s  %5.2f GB/s  %.2fx cp\n' "cat > out + sync" "$k" "$(echo "$gb / $k" | bc -l)" "$(echo "$c / $k" | bc -l)"
t0=$(date +%s.%N)
"$M" -q --merge --verify --threads 1 "$d/p-00001-of-00004.gguf" "$d/v.gguf"
printf '  %-22s %6.2f s  (merge + verify of inputs and output on 1 thread)\n' "--verify --threads 1" "$(echo "$(date +%s.%N) - $t0" | bc)"
rm -rf "$d"
