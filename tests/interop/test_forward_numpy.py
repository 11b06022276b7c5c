"""A second, independent implementation of the forward pass in numpy (float64,
weights read with gguf-py), written from the architectures' definitions, for
the architectures the HuggingFace oracle (test_forward_hf.py) does not cover:
qwen2 (q/k/v biases), qwen3 (per-head q/k norms, half-split RoPE), qwen3moe
(softmax routing, no shared expert), glm4moe (partial half-split RoPE, the
post-attention norm as the FFN norm, sigmoid routing with selection bias,
shared expert, leading dense block, NextN block skipped) and glm-dsa (MLA and
the DSA indexer, sparse past its top-k). ref-forward --precision f64 must agree
to float32 resolution (the logits file is float32) on models made by gguf-gen with F32
weights.
"""
import os
import subprocess

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

BIN = os.environ.get("GGUFKIT_BIN", "")
GEN = os.environ.get("GGUFKIT_GEN", "")
pytestmark = pytest.mark.skipif(not GEN or not os.path.exists(GEN),
                                reason="gguf-gen is not built (GGUFKIT_GEN)")

TOKENS = [1, 5, 9, 200, 33, 7, 81, 4, 150, 3, 60, 12]


class Model:
    def __init__(self, path):
        r = gguf.GGUFReader(path)
        self.kv = {k: f.contents() for k, f in r.fields.items()
                   if not k.startswith("tokenizer.")}
        self.arch = self.kv["general.architecture"]
        self.w = {t.name: np.array(t.data, dtype=np.float64).reshape(
            [int(x) for x in reversed(t.shape)]) for t in r.tensors}

    def k(self, key, default=None):
        return self.kv.get(f"{self.arch}.{key}", default)

    def get(self, name):
        return self.w.get(name)


def rms(x, w, eps):
    y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return y * w if w is not None else y


FREQ_FACTORS = None  # llama 3.x rope_freqs: divisors of the frequencies


def rope(x, pos, n_rot, base, half):
    """x [..., n_tok, dim]: rotate the first n_rot dims of the last axis."""
    x = x.copy()
    inv = base ** (-np.arange(0, n_rot, 2) / n_rot)
    if FREQ_FACTORS is not None:
        inv = inv / FREQ_FACTORS
    ang = np.asarray(pos)[:, None] * inv[None, :]          # [n_tok, n_rot/2]
    c, s = np.cos(ang), np.sin(ang)
    if half:
        a, b = x[..., : n_rot // 2].copy(), x[..., n_rot // 2: n_rot].copy()
        x[..., : n_rot // 2] = a * c - b * s
        x[..., n_rot // 2: n_rot] = a * s + b * c
    else:
        a, b = x[..., 0:n_rot:2].copy(), x[..., 1:n_rot:2].copy()
        x[..., 0:n_rot:2] = a * c - b * s
        x[..., 1:n_rot:2] = a * s + b * c
    return x


def attend(q, k, v, scale, keep=None):
    """q [h, n, dk], k [h, n, dk], v [h, n, dv], causal (and keep [n, n])."""
    n = q.shape[1]
    s = np.einsum("hid,hjd->hij", q, k) * scale
    mask = np.tril(np.ones((n, n), bool))
    if keep is not None:
        mask &= keep
    s = np.where(mask[None], s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("hij,hjd->hid", p, v)


def swiglu(x, g, u, d):
    a = x @ g.T
    return ((a / (1 + np.exp(-a))) * (x @ u.T)) @ d.T


def topk(scores, k, allowed=None):
    s = np.where(allowed, scores, -np.inf) if allowed is not None else scores
    return list(np.argsort(-s, kind="stable")[:k])


def moe(m, il, x):
    p = f"blk.{il}."
    n_exp, n_used = m.k("expert_count"), m.k("expert_used_count")
    gating = m.k("expert_gating_func", 2 if m.arch in ("glm4moe", "glm-dsa") else 1)
    norm = m.k("expert_weights_norm", m.arch == "qwen3moe")
    scale = m.k("expert_weights_scale", 1.0)
    groups, groups_used = m.k("expert_group_count", 1), m.k("expert_group_used_count", 1)
    logits = x @ m.get(p + "ffn_gate_inp.weight").T
    bias = m.get(p + "exp_probs_b.bias")
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        if gating == 2:
            prob = 1 / (1 + np.exp(-logits[t]))
        else:
            prob = np.exp(logits[t] - logits[t].max())
            prob /= prob.sum()
        sel = prob + bias if bias is not None else prob
        allowed = None
        if groups > 1 and groups_used < groups:
            per = n_exp // groups
            gs = [np.sort(sel[g * per:(g + 1) * per])[::-1][:2].sum() for g in range(groups)]
            allowed = np.zeros(n_exp, bool)
            for g in topk(np.array(gs), groups_used):
                allowed[g * per:(g + 1) * per] = True
        ids = topk(sel, n_used, allowed)
        w = prob[ids]
        if norm:
            w = w / w.sum()
        w = w * scale
        for e, we in zip(ids, w):
            out[t] += we * swiglu(x[t:t + 1], m.get(p + "ffn_gate_exps.weight")[e],
                                  m.get(p + "ffn_up_exps.weight")[e],
                                  m.get(p + "ffn_down_exps.weight")[e])[0]
    if m.get(p + "ffn_gate_shexp.weight") is not None:
        out += swiglu(x, m.get(p + "ffn_gate_shexp.weight"), m.get(p + "ffn_up_shexp.weight"),
                      m.get(p + "ffn_down_shexp.weight"))
    return out


def attn_gqa(m, il, h, pos):
    p = f"blk.{il}."
    nh, nkv = m.k("attention.head_count"), m.k("attention.head_count_kv")
    dk = m.k("attention.key_length", h.shape[1] // nh)
    dv = m.k("attention.value_length", dk)
    n_rot = m.k("rope.dimension_count", dk)
    half = m.arch != "llama"
    eps = m.k("attention.layer_norm_rms_epsilon")
    n = h.shape[0]

    def proj(name, heads, d):
        y = h @ m.get(p + name + ".weight").T
        if m.get(p + name + ".bias") is not None:
            y = y + m.get(p + name + ".bias")
        return y.reshape(n, heads, d).transpose(1, 0, 2)

    q, k, v = proj("attn_q", nh, dk), proj("attn_k", nkv, dk), proj("attn_v", nkv, dv)
    if m.get(p + "attn_q_norm.weight") is not None:
        q = rms(q, m.get(p + "attn_q_norm.weight"), eps)
        k = rms(k, m.get(p + "attn_k_norm.weight"), eps)
    base = m.k("rope.freq_base", 10000.0)
    q, k = rope(q, pos, n_rot, base, half), rope(k, pos, n_rot, base, half)
    rep = nh // nkv
    o = attend(q, np.repeat(k, rep, 0), np.repeat(v, rep, 0), 1 / np.sqrt(dk))
    return o.transpose(1, 0, 2).reshape(n, nh * dv) @ m.get(p + "attn_output.weight").T


def attn_mla(m, il, h, pos, top_k):
    p = f"blk.{il}."
    nh = m.k("attention.head_count")
    n_rot = m.k("rope.dimension_count")
    dk = m.k("attention.key_length_mla")
    nope, dv = dk - n_rot, m.k("attention.value_length_mla")
    R = m.k("attention.kv_lora_rank")
    eps = m.k("attention.layer_norm_rms_epsilon")
    base = m.k("rope.freq_base", 10000.0)
    n = h.shape[0]
    qr = rms(h @ m.get(p + "attn_q_a.weight").T, m.get(p + "attn_q_a_norm.weight"), eps)
    q = (qr @ m.get(p + "attn_q_b.weight").T).reshape(n, nh, dk).transpose(1, 0, 2)
    q[..., nope:] = rope(q[..., nope:], pos, n_rot, base, False)
    kv = h @ m.get(p + "attn_kv_a_mqa.weight").T
    lat = rms(kv[:, :R], m.get(p + "attn_kv_a_norm.weight"), eps)
    kpe = rope(kv[:, R:], pos, n_rot, base, False)
    kb = m.get(p + "attn_k_b.weight")  # numpy [nh, R, nope]
    vb = m.get(p + "attn_v_b.weight")  # numpy [nh, dv, R]
    k = np.concatenate([np.einsum("jr,hrn->hjn", lat, kb),
                        np.broadcast_to(kpe, (nh, n, n_rot))], -1)
    v = np.einsum("jr,hdr->hjd", lat, vb)
    keep = None
    if m.get(p + "indexer.attn_k.weight") is not None:
        ih, hd = m.k("attention.indexer.head_count"), m.k("attention.indexer.key_length")
        iq = (qr @ m.get(p + "indexer.attn_q_b.weight").T).reshape(n, ih, hd)
        iq = rope(iq.transpose(1, 0, 2), pos, n_rot, base, False).transpose(1, 0, 2)
        ik = h @ m.get(p + "indexer.attn_k.weight").T
        ik = (ik - ik.mean(-1, keepdims=True)) / np.sqrt(ik.var(-1, keepdims=True) + 1e-6)
        ik = ik * m.get(p + "indexer.k_norm.weight") + m.get(p + "indexer.k_norm.bias")
        ik = rope(ik, pos, n_rot, base, False)
        w = (h @ m.get(p + "indexer.proj.weight").T) / np.sqrt(hd * ih)
        score = np.einsum("th,thj->tj", w, np.maximum(np.einsum("thd,jd->thj", iq, ik), 0))
        keep = np.zeros((n, n), bool)
        for t in range(n):
            if t + 1 <= top_k:
                keep[t, : t + 1] = True
            else:
                keep[t, topk(score[t, : t + 1], top_k)] = True
    o = attend(q, k, v, 1 / np.sqrt(dk), keep)
    return o.transpose(1, 0, 2).reshape(n, nh * dv) @ m.get(p + "attn_output.weight").T


def forward(m, tokens, top_k=None):
    eps = m.k("attention.layer_norm_rms_epsilon")
    n_layer = m.k("block_count") - m.k("nextn_predict_layers", 0)
    pos = np.arange(len(tokens))
    x = m.get("token_embd.weight")[tokens]
    for il in range(n_layer):
        p = f"blk.{il}."
        h = rms(x, m.get(p + "attn_norm.weight"), eps)
        if m.arch == "glm-dsa":
            x = x + attn_mla(m, il, h, pos, top_k or m.k("attention.indexer.top_k"))
        else:
            x = x + attn_gqa(m, il, h, pos)
        fn = m.get(p + "ffn_norm.weight")
        h = rms(x, fn if fn is not None else m.get(p + "post_attention_norm.weight"), eps)
        if m.get(p + "ffn_gate_inp.weight") is not None:
            x = x + moe(m, il, h)
        else:
            x = x + swiglu(h, m.get(p + "ffn_gate.weight"), m.get(p + "ffn_up.weight"),
                           m.get(p + "ffn_down.weight"))
    x = rms(x, m.get("output_norm.weight"), eps)
    out = m.get("output.weight")
    return x @ (out if out is not None else m.get("token_embd.weight")).T


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "qwen3moe", "glm4moe", "glm-dsa"])
def test_numpy_matches(tmp_path, arch):
    path = str(tmp_path / f"{arch}.gguf")
    subprocess.run([GEN, "model", "--arch", arch, "--type", "F32", "--no-sync", "--force", "-q",
                    path], check=True)
    m = Model(path)
    extra = []
    top_k = None
    if arch == "glm-dsa":
        top_k = 5  # 12 tokens: positions past 5 attend to the indexer's choice
        extra = ["--indexer-top-k", str(top_k)]
    want = forward(m, TOKENS, top_k)
    out = tmp_path / "l.npy"
    subprocess.run([os.path.join(BIN, "ref-forward"), path, "--tokens",
                    ",".join(map(str, TOKENS)), "--precision", "f64", "--logits", str(out),
                    "-q", *extra], check=True)
    got = np.load(out).astype(np.float64)
    # logits are written as float32: compare at float32 resolution
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-6
    assert (got.argmax(-1) == want.argmax(-1)).all()


def test_rope_freqs(tmp_path):
    """llama 3.x files carry rope_freqs.weight: each RoPE frequency is divided
    by its factor. Add one to a generated llama and check both sides."""
    global FREQ_FACTORS
    src = str(tmp_path / "llama.gguf")
    subprocess.run([GEN, "model", "--arch", "llama", "--type", "F32", "--no-sync", "--force",
                    "-q", src], check=True)
    r = gguf.GGUFReader(src)
    path = str(tmp_path / "llama-rope-freqs.gguf")
    w = gguf.GGUFWriter(path, arch="llama")
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        t = f.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            w.add_key_value(k, f.contents(), t, sub_type=f.types[-1])
        else:
            w.add_key_value(k, f.contents(), t)
    n_rot = r.fields["llama.rope.dimension_count"].contents()
    ff = np.linspace(1.0, 8.0, n_rot // 2).astype(np.float32)
    for t in r.tensors:
        w.add_tensor(t.name, np.array(t.data))
    w.add_tensor("rope_freqs.weight", ff)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    m = Model(path)
    FREQ_FACTORS = ff.astype(np.float64)
    try:
        want = forward(m, TOKENS)
    finally:
        FREQ_FACTORS = None
    plain = forward(m, TOKENS)
    assert np.linalg.norm(plain - want) / np.linalg.norm(want) > 1e-3  # the factors matter
    out = tmp_path / "l.npy"
    subprocess.run([os.path.join(BIN, "ref-forward"), path, "--tokens",
                    ",".join(map(str, TOKENS)), "--precision", "f64", "--logits", str(out),
                    "-q"], check=True)
    got = np.load(out).astype(np.float64)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-6
