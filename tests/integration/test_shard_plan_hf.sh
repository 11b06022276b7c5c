#!/usr/bin/env bash
# The model module's GGUF <-> HF names and transforms, and the plan's kv_b_proj pieces, checked
# against the original HF checkpoints (transformers' safetensors, an implementation independent
# of ours and of llama.cpp) beside the converter's GGUF files in ../shared/testdata/hf:
#  - every GGUF tensor's hf_name exists in model.safetensors (experts: every index);
#  - its values equal the HF tensor after the documented transform (llama Q/K row permutation,
#    attn_k_b = k part of kv_b per head transposed, attn_v_b = v part, stacked experts);
#  - at tp 1, 2 and 4 the plan's per-rank kv_b_proj, rebuilt from its JSON pieces, equals the HF
#    kv_b_proj rows [range) of the rank's whole heads.
. "$(dirname "$0")/lib.sh"
SP="$GGUFKIT_BIN/shard-plan"
[ -x "$SP" ] || skip "shard-plan is not built"
need_shared
[ -f "$SHARED/hf/deepseek_v3/model.safetensors" ] || skip "hf checkpoints are absent"
python3 -c "import gguf, numpy" 2>/dev/null || skip "gguf-py or numpy is missing"

for m in deepseek_v3 llama; do
    for tp in 1 2 4; do
        expect 0 "$SP" "$SHARED/hf/$m/model-f32.gguf" --tp "$tp" --json
        cp "$T/out" "$T/$m-tp$tp.json"
    done
done

python3 - "$SHARED/hf" "$T" <<'EOF' && pass || fail "HF names, transforms or kv_b pieces (details above)"
import json, struct, sys
import numpy as np
from gguf import GGUFReader

hf_dir, T = sys.argv[1], sys.argv[2]

def safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for k, v in head.items():
            if k == "__metadata__":
                continue
            a, b = v["data_offsets"]
            f.seek(base + a)
            raw = f.read(b - a)
            assert v["dtype"] == "BF16", v["dtype"]
            u = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
            out[k] = u.view(np.float32).reshape(v["shape"])
        return out

def to_hf_row(g, hd):  # docs/models.md: GGUF row h*hd+2i+j holds HF row h*hd+j*hd/2+i
    h, r = divmod(g, hd)
    i, j = divmod(r, 2)
    return h * hd + j * (hd // 2) + i

bad = []
for m in ("deepseek_v3", "llama"):
    hf = safetensors(f"{hf_dir}/{m}/model.safetensors")
    cfg = json.load(open(f"{hf_dir}/{m}/config.json"))
    g = {t.name: np.array(t.data) for t in GGUFReader(f"{hf_dir}/{m}/model-f32.gguf").tensors}
    plan = json.load(open(f"{T}/{m}-tp1.json"))
    used = set()
    for e in plan["tensors"]:
        if e["virtual"]:
            continue
        name, hn = e["name"], e["hf_name"]
        if hn is None:
            bad.append(f"{m}: {name} has no HF name")
            continue
        a = g[name]
        if "*" in hn:  # stacked experts: a[e] is expert e
            for x in range(a.shape[0]):
                k = hn.replace("*", str(x))
                used.add(k)
                if k not in hf or not np.array_equal(a[x], hf[k]):
                    bad.append(f"{m}: {name}[{x}] != {k}")
            continue
        if hn not in hf:
            bad.append(f"{m}: {name}: HF name {hn} not in the checkpoint")
            continue
        used.add(hn)
        w = hf[hn]
        if e["role"] in ("attn_k_b", "attn_v_b"):
            H = cfg["num_attention_heads"]
            nope, v = cfg["qk_nope_head_dim"], cfg["v_head_dim"]
            kv = w.reshape(H, nope + v, -1)
            want = (kv[:, :nope, :].transpose(0, 2, 1) if e["role"] == "attn_k_b"
                    else kv[:, nope:, :])
        elif m == "llama" and e["role"] in ("attn_q", "attn_k"):
            hd = cfg["hidden_size"] // cfg["num_attention_heads"]
            want = w[[to_hf_row(r, hd) for r in range(w.shape[0])]]
        else:
            want = w
        if a.shape != want.shape or not np.array_equal(a, want):
            bad.append(f"{m}: {name} differs from {hn} {a.shape} {want.shape}")
    missing = set(hf) - used
    if missing:
        bad.append(f"{m}: HF tensors no GGUF tensor maps to: {sorted(missing)[:4]}")

    # the plan's kv_b_proj pieces against HF kv_b rows, per rank
    if m != "deepseek_v3":
        continue
    for tp in (1, 2, 4):
        d = json.load(open(f"{T}/{m}-tp{tp}.json"))
        for e in d["tensors"]:
            if not e["virtual"]:
                continue
            il = e["layer"]
            w = hf[f"model.layers.{il}.self_attn.kv_b_proj.weight"]
            for rk in e["ranks"]:
                rows = []
                for p in rk["pieces"]:
                    src = g[p["src"]]  # numpy order: reversed ggml dims
                    lo, hi = p["lo"], p["hi"]
                    box = src[lo[2]:hi[2], lo[1]:hi[1], lo[0]:hi[0]]
                    box = box[0]  # one head
                    rows.append(box.T if p["transpose"] else box.reshape(-1, w.shape[1]))
                got = np.concatenate(rows)
                a, b = rk["range"]
                if not np.array_equal(got, w[a:b]):
                    bad.append(f"tp {tp}: {e['name']} rank {rk['rank']} != kv_b_proj rows [{a}, {b})")
            want_rows = w.shape[0] // tp
            if [r["range"] for r in e["ranks"]] != [[want_rows * r, want_rows * (r + 1)] for r in range(tp)]:
                bad.append(f"tp {tp}: {e['name']} ranges {[r['range'] for r in e['ranks']]}")
print("\n".join(bad) or "names, transforms and kv_b pieces agree with the HF checkpoints",
      file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
finish
