#!/usr/bin/env bash
# A model larger than the memory the process may use runs: ref-forward inside a memory
# cgroup whose limit is well under the model's size gives the same logits as an
# unconstrained run. (RLIMIT_AS cannot show this: the whole-file mmap counts against it.
# A cgroup counts the model's page cache too, but that is reclaimable, while the
# resident set - one chunk of dequantized weights, activations, KV cache - must fit.)
source "$(dirname "$0")/lib.sh"
cg_root=/sys/fs/cgroup/memory
[ -w "$cg_root" ] || skip "no writable cgroup v1 memory controller here"
cg=$cg_root/ggufkit-test-$$
mkdir "$cg" 2>/dev/null || skip "cannot create a memory cgroup"
trap 'rmdir "$cg" 2>/dev/null; rm -rf "$T"' EXIT
limit=$((96 << 20))
echo "$limit" >"$cg/memory.limit_in_bytes" || skip "cannot set a memory limit"

# 264 MiB of Q8_0 weights: about 2.8 times the limit.
"$GEN" model --arch llama --type Q8_0 --layers 16 --embd 1024 --ff 4096 --heads 16 \
    --kv-heads 4 --head-dim 64 --vocab 8192 --no-sync "$T/big.gguf" >/dev/null
size=$(stat -c %s "$T/big.gguf")
[ "$size" -gt $((2 * limit)) ] && pass || fail "model ($size bytes) is not larger than twice the limit"

RF=$GGUFKIT_BIN/ref-forward
expect 0 "$RF" "$T/big.gguf" --tokens 1,2,3,4 --logits "$T/free.npy"
# Drop the file from the page cache so the constrained run must stream it again.
python3 -c "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED)" "$T/big.gguf"
expect 0 bash -c "echo \$\$ >'$cg/cgroup.procs' && exec '$RF' '$T/big.gguf' --tokens 1,2,3,4 --logits '$T/capped.npy' --stats"
contains "$T/out" "stats:"
peak=$(cat "$cg/memory.max_usage_in_bytes")
[ "$peak" -le "$limit" ] && pass || fail "cgroup peak $peak over the limit $limit"
fails_oom=$(cat "$cg/memory.failcnt")
echo "cgroup limit $((limit >> 20)) MiB, model $((size >> 20)) MiB, peak charged $((peak >> 20)) MiB, limit hits $fails_oom"
cmp -s "$T/free.npy" "$T/capped.npy" && pass || fail "logits differ under the memory limit"
finish
