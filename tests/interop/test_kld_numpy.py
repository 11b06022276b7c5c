"""llama.cpp's KL-divergence files against numpy, an independent implementation
of the layout and the statistics (tools/perplexity/perplexity.cpp: the file
written by perplexity() with --kl-divergence-base, the statistics printed by
kl_divergence()), in float64:

- `ref-forward kld-base` writes, for every scored position, the row numpy
  quantizes from the reference's own logits (`ref-forward --logits`), byte
  layout read by numpy alone (header, tokens, rows of scale/min/uint16);
- `ref-forward kld --json` gives the statistics numpy computes from the file
  and the compared model's logits: mean KLD and its uncertainty, max and
  percentiles, same top token, RMS of the change of the next token's
  probability.
"""
import json
import os
import subprocess

import numpy as np
import pytest

BIN = os.environ.get("GGUFKIT_BIN")
GEN = os.environ.get("GGUFKIT_GEN")
N_CTX = 16
N_CHUNK = 3
VOCAB = 300

pytestmark = pytest.mark.skipif(not BIN or not GEN, reason="GGUFKIT_BIN/GGUFKIT_GEN not set")


def run(*args):
    return subprocess.run([str(a) for a in args], check=True, capture_output=True, text=True)


def call(*args):
    """Run without raising: the exit code and stderr matter."""
    return subprocess.run([str(a) for a in args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("kld")
    base, other = d / "base.gguf", d / "other.gguf"
    run(GEN, "model", "--arch", "llama", "--vocab", VOCAB, "--no-sync", "-q", base)
    # the compared model: the same architecture, other weights
    run(GEN, "model", "--arch", "llama", "--vocab", VOCAB, "--seed", "7", "--no-sync", "-q", other)
    rng = np.random.default_rng(5)
    ids = rng.integers(3, VOCAB, size=N_CTX * N_CHUNK + 5)
    (d / "ids.txt").write_text(" ".join(map(str, ids[:20])) + "\n" + ",".join(map(str, ids[20:])))
    out = d / "base.kld"
    r = run(f"{BIN}/ref-forward", "kld-base", base, "--tokens-file", d / "ids.txt", "-c", N_CTX,
            "-o", out, "--json")
    return dict(dir=d, base=base, other=other, ids=ids, kld=out, summary=json.loads(r.stdout))


def read_kld(path):
    """The documented layout, by numpy alone."""
    raw = path.read_bytes()
    assert raw[:8] == b"_logits_"
    n_ctx, n_vocab, n_chunk = np.frombuffer(raw, "<i4", 3, 8)
    tokens = np.frombuffer(raw, "<i4", n_ctx * n_chunk, 20).reshape(n_chunk, n_ctx)
    nv = 2 * ((n_vocab + 1) // 2) + 4
    rows = n_ctx - 1 - n_ctx // 2
    off = 20 + 4 * n_ctx * n_chunk
    assert len(raw) == off + n_chunk * rows * nv * 2
    body = np.frombuffer(raw, "<u2", n_chunk * rows * nv, off).reshape(n_chunk, rows, nv)
    hdr = body[:, :, :4].copy().view("<f4")  # [..., 0] scale, [..., 1] min_log_prob
    q = body[:, :, 4:4 + n_vocab].astype(np.float64)
    logp = q * hdr[:, :, :1].astype(np.float64) + hdr[:, :, 1:2].astype(np.float64)
    return n_ctx, n_vocab, n_chunk, tokens, hdr, body[:, :, 4:4 + n_vocab], logp


def logits_of(model, chunk, d, name):
    """The model's logits of one chunk (BOS first: the vocabulary adds it), by `ref-forward --logits`."""
    t = chunk.copy()
    t[0] = 1  # tokenizer.ggml.bos_token_id of gguf-gen's vocabulary, add_bos_token true
    out = d / f"{name}.npy"
    run(f"{BIN}/ref-forward", model, "--tokens", ",".join(map(str, t[:-1])), "--logits", out)
    return np.load(out).astype(np.float64)


def log_softmax(x):
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def test_layout_and_rows(files):
    n_ctx, n_vocab, n_chunk, tokens, hdr, q, logp = read_kld(files["kld"])
    assert (n_ctx, n_vocab, n_chunk) == (N_CTX, VOCAB, N_CHUNK)
    assert files["summary"]["n_chunk"] == N_CHUNK and files["summary"]["bos"] is True
    # the file keeps the tokens as given (the BOS replacement is not written)
    assert (tokens.reshape(-1) == files["ids"][:N_CTX * N_CHUNK]).all()
    first = N_CTX // 2
    nll = []
    for c in range(N_CHUNK):
        lg = logits_of(files["base"], tokens[c], files["dir"], f"base{c}")
        for j in range(N_CTX - 1 - first):
            row = lg[first + j]
            mx = row.max()
            mn = max(row.min(), mx - 16)
            lse = np.log(np.exp(row - mx).sum())
            scale = (mx - mn) / 65535
            assert abs(hdr[c, j, 0] - scale) <= 1e-6 * scale
            assert abs(hdr[c, j, 1] - (mn - mx - lse)) <= 1e-5
            want = np.where(row > mn, np.rint((row - mn) / scale), 0)
            assert np.abs(q[c, j].astype(np.int64) - want).max() <= 1  # float vs double rounding
            np.testing.assert_allclose(logp[c, j], log_softmax(row), atol=scale)
            nll.append(-log_softmax(row)[tokens[c, first + j + 1]])
    assert abs(files["summary"]["ppl"] - np.exp(np.mean(nll))) <= 1e-4 * np.exp(np.mean(nll))


def numpy_stats(files, model, tag):
    n_ctx, n_vocab, n_chunk, tokens, hdr, q, base_logp = read_kld(files["kld"])
    first = n_ctx // 2
    kld, dp, same, nll, nll_base = [], [], [], [], []
    for c in range(n_chunk):
        lq = log_softmax(logits_of(model, tokens[c], files["dir"], f"{tag}{c}"))
        for j in range(n_ctx - 1 - first):
            lb = base_logp[c, j]
            lm = lq[first + j]
            keep = lb > -16  # llama.cpp skips base log-probabilities at or below -16
            kld.append(np.sum(np.exp(lb[keep]) * (lb[keep] - lm[keep])))
            tok = tokens[c, first + j + 1]
            dp.append(np.exp(lm[tok]) - np.exp(lb[tok]))
            nll.append(-lm[tok])
            nll_base.append(-lb[tok])
            same.append(np.argmax(lm) == np.argmax(lb))
    kld, dp, nll, nll_base = np.array(kld), np.array(dp), np.array(nll), np.array(nll_base)
    n = len(kld)

    def unc(x):  # llama.cpp's mean_and_uncertainty: sqrt(var / (n - 1)), population variance
        return np.sqrt(np.mean(x * x) - np.mean(x) ** 2) / np.sqrt(n - 1) if n > 10 else 0.0

    def pct(x, f):  # linear interpolation between the two nearest ranks
        s = np.sort(x)
        p = f * (n - 1)
        i = int(p)
        return (1 - (p - i)) * s[i] + (p - i) * s[min(i + 1, n - 1)]

    ms = np.mean(dp * dp)
    # perplexities, with llama.cpp's first-order uncertainties
    cov = (np.mean(nll * nll_base) - np.mean(nll) * np.mean(nll_base)) / (n - 1)
    ppl, ppl_base = np.exp(np.mean(nll)), np.exp(np.mean(nll_base))
    ln_ratio_unc = np.sqrt(max(unc(nll) ** 2 + unc(nll_base) ** 2 - 2 * cov, 0))
    ppl_ratio = np.exp(np.mean(nll) - np.mean(nll_base))
    ppl_diff_unc = np.sqrt(max((ppl * unc(nll)) ** 2 + (ppl_base * unc(nll_base)) ** 2
                               - 2 * ppl * ppl_base * cov, 0))
    return dict(ppl=ppl, ppl_base=ppl_base, ln_ppl_ratio=np.mean(nll) - np.mean(nll_base),
                ln_ppl_ratio_uncertainty=ln_ratio_unc, ppl_ratio=ppl_ratio,
                ppl_ratio_uncertainty=ppl_ratio * ln_ratio_unc, ppl_diff=ppl - ppl_base,
                ppl_diff_uncertainty=ppl_diff_unc, count=n, mean_kld=np.mean(kld),
                mean_kld_uncertainty=unc(kld),
                max_kld=kld.max(), p99_kld=pct(kld, 0.99), median_kld=np.median(kld),
                min_kld=kld.min(), same_top_p=np.mean(same), rms_dp=np.sqrt(ms),
                rms_dp_uncertainty=0.5 / np.sqrt(ms) * unc(dp * dp), mean_dp=np.mean(dp))


@pytest.mark.parametrize("which", ["other", "base"])
def test_statistics(files, which):
    model = files[which]
    r = run(f"{BIN}/ref-forward", "kld", model, "--kl-divergence-base", files["kld"], "--json")
    ours = json.loads(r.stdout)
    want = numpy_stats(files, model, which)
    assert ours["count"] == want["count"] == N_CHUNK * (N_CTX - 1 - N_CTX // 2)
    for key in ("mean_kld", "mean_kld_uncertainty", "max_kld", "p99_kld", "median_kld",
                "min_kld", "same_top_p", "rms_dp", "rms_dp_uncertainty", "mean_dp", "ppl",
                "ppl_base", "ln_ppl_ratio", "ln_ppl_ratio_uncertainty", "ppl_ratio",
                "ppl_ratio_uncertainty", "ppl_diff", "ppl_diff_uncertainty"):
        # float per-row arithmetic (as llama.cpp) against float64
        tol = 2e-6 * max(abs(want[key]), 1) if which == "base" else \
            1e-4 * max(abs(want[key]), 1e-3)
        if which == "base" and key in ("ln_ppl_ratio_uncertainty", "ppl_ratio_uncertainty",
                                       "ppl_diff", "ppl_diff_uncertainty"):
            # differences of nearly equal sums: rounding against rounding, bounded only
            # (the "other" model checks these figures)
            tol = 1e-5 * want["ppl"]
        assert abs(ours[key] - want[key]) <= tol, (key, ours[key], want[key])
    if which == "other":
        assert want["mean_kld"] > 1e-3 and ours["same_top_p"] < 1
    else:
        assert ours["same_top_p"] == 1 and ours["mean_kld"] < 1e-5


def test_errors(files, tmp_path):
    # another vocabulary
    small = tmp_path / "small.gguf"
    run(GEN, "model", "--arch", "llama", "--vocab", 200, "--no-sync", "-q", small)
    p = call(f"{BIN}/ref-forward", "kld", small, "--kl-divergence-base", files["kld"])
    assert p.returncode == 2 and "n_vocab 300" in p.stderr
    # a truncated file names the row
    cut = tmp_path / "cut.kld"
    cut.write_bytes(files["kld"].read_bytes()[:-5])
    p = call(f"{BIN}/ref-forward", "kld", files["base"], "--kl-divergence-base", cut)
    assert p.returncode == 2 and "chunk 2, row 6" in p.stderr and "cut.kld" in p.stderr
    # too few tokens for llama-perplexity (2 * n_ctx)
    few = tmp_path / "few.txt"
    few.write_text("1 2 3 4 5")
    p = call(f"{BIN}/ref-forward", "kld-base", files["base"], "--tokens-file", few,
             "-c", 16, "-o", tmp_path / "x.kld")
    assert p.returncode == 2 and "at least 2 * n_ctx = 32" in p.stderr
    assert not (tmp_path / "x.kld").exists()
    # the output exists: refused without --force, replaced with it
    p = call(f"{BIN}/ref-forward", "kld-base", files["base"], "--tokens-file",
             files["dir"] / "ids.txt", "-c", 16, "-o", files["kld"])
    assert p.returncode == 2 and "exists" in p.stderr
    p = call(f"{BIN}/ref-forward", "kld-base", files["base"], "--tokens-file",
             files["dir"] / "ids.txt", "-c", 16, "--chunks", 1, "-o", tmp_path / "z.kld")
    assert p.returncode == 0 and read_kld(tmp_path / "z.kld")[2] == 1
    # a token id outside the vocabulary
    bad = tmp_path / "bad.txt"
    bad.write_text(" ".join(["5"] * 40 + ["300"]))
    p = call(f"{BIN}/ref-forward", "kld-base", files["base"], "--tokens-file", bad,
             "-c", 16, "-o", tmp_path / "y.kld")
    assert p.returncode == 2 and "token 40 (id 300)" in p.stderr
