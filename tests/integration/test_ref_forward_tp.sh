#!/usr/bin/env bash
# Virtual tensor parallel on the CPU (ref-forward --tp): on generated models
# of every architecture,
#  - correct plans show no divergence beyond tolerance at tp 1, 2, 4, 8, and
#    with expert parallelism (vllm ep = tp; sglang ep dividing tp);
#  - every fault of the shard-plan catalog is detected (exit 1) and the first
#    divergence names the right layer and op, for every architecture it
#    applies to (the others refuse it with exit 2 and say why); each fault
#    applies to at least one architecture.
source "$(dirname "$0")/lib.sh"
R=$GGUFKIT_BIN/ref-forward
[ -x "$GEN" ] || skip "gguf-gen is not built"
# Q4_K (inner cuts off block boundaries exist), 2 kv heads (tp 4, 8 > n_kv),
# vocab 500 (the engine pads it to 512: padding matters).
export GEN_ARCHS=$(gen_archs)
for a in $GEN_ARCHS; do
    "$GEN" model --arch "$a" --kv-heads 2 --vocab 500 --type Q4_K --no-sync --force -q \
        "$T/$a.gguf" || fail "gguf-gen $a"
done

python3 - "$R" "$T" <<'EOF' && pass || fail "virtual tp checks (details above)"
import json, os, subprocess, sys
R, T = sys.argv[1], sys.argv[2]
TOK = ",".join(str((i * 37 + 5) % 500) for i in range(32))
ARCHS = os.environ["GEN_ARCHS"].split()
MOE = {"qwen3moe": 0, "deepseek2": 1, "glm4moe": 1, "glm-dsa": 1}  # first MoE block
bad = []

def run(arch, *args):
    p = subprocess.run([R, f"{T}/{arch}.gguf", "--tokens", TOK, "--json", *args],
                       capture_output=True, text=True)
    d = json.loads(p.stdout) if p.returncode in (0, 1) and p.stdout.strip() else None
    return p.returncode, d, p.stderr

# 1. no false alarms
for arch in ARCHS:
    cases = [["--tp", str(tp)] for tp in (1, 2, 4, 8)]      # f64 by default with --tp
    cases += [["--tp", "4", "--precision", "f32"]]          # and in f32, f32 tolerances
    if arch in MOE:
        cases += [["--tp", str(tp), "--ep", str(tp)] for tp in (2, 4, 8)]
        cases += [["--tp", "8", "--ep", "2", "--engine", "sglang"],
                  ["--tp", "4", "--ep", "4", "--engine", "sglang"]]
    for c in cases:
        rc, d, err = run(arch, *c)
        if rc != 0:
            fd = d and d.get("first_divergence")
            bad.append(f"false alarm: {arch} {' '.join(c)}: exit {rc} {fd or err.strip()}")

# 2. faults: (op, where) with where "L" = the layer asked for, "moe" = the
# first MoE block (config faults act on every block)
EXPECT = {
    "kv-b-whole": ("attn_out", "L"), "kv-b-rows": ("attn_out", "L"),
    "kv-b-stacked": ("attn_out", "L"), "k-b-no-transpose": ("attn_out", "L"),
    "qkv-stream": ("attn_out", "L"), "gate-up-stream": ("ffn_out", "L"),
    "rank0-everywhere": ("attn_out", "L"), "kv-heads-split": ("attn_out", "L"),
    "mla-cache-sharded": ("attn_out", "L"), "no-allreduce": ("attn_out", "L"),
    "quant-off-block": ("attn_out", "L"), "expert-offset": ("ffn_out", "moe"),
    "norm-sliced": ("attn_norm", "L"), "rope-pairs": ("attn_out", 0),
    "yarn-mscale": ("attn_out", 0), "routed-scale": ("moe_weights", "moe"),
    "exp-probs-b": ("moe_experts", "moe"), "shared-scaled": ("ffn_out", "moe"),
    # vocab faults act on the embedding: the first capture after it
    "vocab-no-pad": ("attn_norm", 0),
    "routed-scale-twice": ("moe_weights", "moe"), "shared-double-reduce": ("ffn_out", "moe"),
}
# every fault of the catalog must be checked here
listing = subprocess.run([os.path.join(os.environ["GGUFKIT_BIN"], "shard-plan"), "--list-faults"],
                         check=True, capture_output=True, text=True).stdout
catalog = [line.split()[0] for line in listing.splitlines() if line.strip()]
missing = sorted(set(catalog) - set(EXPECT))
if missing:
    bad.append(f"faults of the catalog not checked here: {missing}")
import gguf
def first_off_block(arch, tp):
    """The first row-parallel tensor whose per-rank cut is off its type's block
    boundary: where quant-off-block must show first (layer, op)."""
    r = gguf.GGUFReader(f"{T}/{arch}.gguf")
    hits = []
    for t in r.tensors:
        name = t.name
        if not name.startswith("blk."):
            continue
        il = int(name.split(".")[1])
        op = ("attn_out" if ".attn_output." in name else
              "ffn_out" if any(k in name for k in (".ffn_down.", ".ffn_down_shexp.", ".ffn_down_exps.")) else None)
        if op is None:
            continue
        blk = gguf.GGML_QUANT_SIZES[t.tensor_type][0]
        cut = int(t.shape[0]) // tp
        if blk > 1 and cut % blk:
            hits.append((il, 0 if op == "attn_out" else 1, op))
    il, _, op = min(hits)
    return il, op

# on every layer at once (tp 2 and 8), the first layer shows it; rank 0's
# vocab slice everywhere breaks the embedding first
GLOBAL = {"rank0-everywhere": ("attn_norm", 0)}
applied = {f: [] for f in EXPECT}
for arch in ARCHS:
    for f, (op, where) in EXPECT.items():
        # tp 4: the fault in block 1 only (where it can be placed); tp 2, 8: in every block
        for tp, layer in ((4, 1), (2, None), (8, None)):
            if where != "L" or f == "expert-offset":
                if tp != 4:
                    continue
                layer = None
            extra = ["--tp", str(tp)]
            if f == "expert-offset":
                extra += ["--ep", str(tp)]
            inj = f if layer is None else f"{f}@{layer}"
            rc, d, err = run(arch, *extra, "--inject", inj)
            if rc == 2 and f"fault {f}:" in err:
                continue  # does not apply to this model at this tp; the reason is in err
            if arch not in applied[f]:
                applied[f].append(arch)
            if f == "quant-off-block" and layer is None:
                want_layer, op = first_off_block(arch, tp)
            elif layer is None and where == "L":
                op, want_layer = GLOBAL.get(f, (EXPECT[f][0], 0))
            else:
                op = EXPECT[f][0]
                want_layer = layer if where == "L" else MOE.get(arch, 0) if where == "moe" else where
            fd = (d or {}).get("first_divergence") or {}
            got = (fd.get("layer"), fd.get("op"))
            if rc != 1 or got != (want_layer, op):
                bad.append(f"{arch} --tp {tp} --inject {inj}: exit {rc}, first divergence {got}, "
                           f"wanted ({want_layer}, {op!r}) {err.strip()[:200]}")
for f, archs in applied.items():
    if not archs:
        bad.append(f"fault {f} applied to no architecture")
print("\n".join(f"  {a}" for a in bad) or "all virtual tp checks passed", file=sys.stderr)
print({f: len(a) for f, a in applied.items()})
sys.exit(1 if bad else 0)
EOF

# the table names the first divergence, with layer, op and rank
expect 1 "$R" "$T/deepseek2.gguf" --tokens 1,2,3,4 --tp 2 --inject kv-b-rows@1
contains "$T/out" "blk.1.attn_out"
expect 0 "$R" "$T/deepseek2.gguf" --tokens 1,2,3,4 --tp 2
# usage errors
expect 2 "$R" "$T/llama.gguf" --tokens 1,2 --ep 2
contains "$T/err" "--ep needs --tp"
expect 2 "$R" "$T/llama.gguf" --tokens 1,2 --tp 2 --inject no-such-fault
contains "$T/err" "unknown fault 'no-such-fault'"
expect 2 "$R" "$T/llama.gguf" --tokens 1,2 --tp 2 --inject no-allreduce@x
expect 2 "$R" "$T/llama.gguf" --tokens 1,2 --tp 0
expect 2 "$R" "$T/llama.gguf" --tokens 1,2 --tp 2 --engine trt
expect 2 "$R" "$T/llama.gguf" --tokens 1,2 --tp 2 --inject kv-b-whole
contains "$T/err" "the model has no MLA kv_b_proj"
# -n with --tp: what each side generates. The trained stories260K model says
# the same on 2 ranks, and garbage with a broken fused qkv cut.
S=$SHARED/models/stories260K.gguf
if have_shared models/stories260K.gguf; then
    expect 0 "$R" "$S" --tp 2 -n 12
    contains "$T/out" "reference text:  Once upon a time, there was a little girl"
    contains "$T/out" "tp text:  Once upon a time, there was a little girl"
    expect 1 "$R" "$S" --tp 4 -n 12 --inject qkv-stream
    contains "$T/out" "FIRST DIVERGENCE: blk.0.attn_out (layer 0, op attn_out, rank 0)"
    contains "$T/out" "reference text:  Once upon a time"
    if grep -q "tp text:  Once upon a time," "$T/out"; then fail "broken plan still fluent"; else pass; fi
fi
expect 2 "$R" "$T/llama.gguf" --tokens 1,2 --tp 2 -n 3 --json
expect 2 "$R" "$T/llama.gguf" --tokens 1,2 --tp 2 --logits "$T/x.npy"
# --compare REF: a run checked against a stored record
expect 0 "$R" "$T/qwen3.gguf" --tokens 1,2,3 --record "$T/ref.gguf" -q
expect 0 "$R" "$T/qwen3.gguf" --tokens 1,2,3 --compare "$T/ref.gguf" -q
expect 1 "$R" "$T/qwen3.gguf" --tokens 1,2,3 --tp 2 --inject qkv-stream --compare "$T/ref.gguf"
contains "$T/out" "blk.0.attn_out"
finish
