"""The float attention over K/V split caches (kvedge.kvsplit) against numpy: numref.attention (float64 softmax) over
the rows as each half stores them (read back through the cache) agrees with the tiled online softmax to float32
rounding (relative error <= 2e-6 of the largest output), and over the true rows to each format's quantization
(cosine >= 0.999 with 8-bit keys per channel, >= 0.985 with a 4-bit half, >= 0.95 with 2-bit values and >= 0.85 with
2-bit keys: the worst of 40 seeds was 0.991, 0.961 and 0.862; each case's seed is fixed). The stored rows
themselves against numpy's quantizers: i8 values within half a step of their row's scale."""
import numpy as np
import pytest

from kvedge.compat import zeros
from kvedge.floatatt import FloatAttention
from kvedge.kvsplit import SplitCache, SplitConfig
from kvedge_host.ref import numref

L, H, KVH, D, G = 2, 8, 4, 8, 8
PAIRS = [("i8", "i8", G), ("i8", "i4", G), ("i8", "i4", 0), ("i4", "i8", G), ("f16", "i4", 0), ("f16", "i8", 0),
         ("i2", "f32", G), ("f32", "i2", 0)]


def _cos_floor(kd, vd, res):
    if kd == "i2":
        return 0.85
    if vd == "i2":
        return 0.95
    if "i4" in (kd, vd):
        return 0.985
    if kd == "i8" and not res:
        return 0.99
    return 0.999


@pytest.mark.parametrize("kd,vd,res", PAIRS)
def test_float_attention_over_a_split_cache_against_numpy(kd, vd, res):
    rng = np.random.default_rng(PAIRS.index((kd, vd, res)))  # not hash(): str hashes change from run to run
    n = 5 * G + 3
    cfg = SplitConfig(L, H, KVH, D, 6 * G, k_dtype=kd, v_dtype=vd, group=G, residual=res, align=0)
    c = SplitCache(cfg)
    K = rng.standard_normal((n, L, KVH, D)).astype(np.float32) * 2
    K[:, :, :, 3] += 4.0  # an outlier channel: what keys per channel are for
    V = rng.standard_normal((n, L, KVH, D)).astype(np.float32)
    for p in range(n):
        c.append([K[p, l].ravel().tolist() for l in range(L)], [V[p, l].ravel().tolist() for l in range(L)])
    att = FloatAttention(c, tile=8)
    row = zeros("f", D)
    for layer in range(L):
        SK = np.zeros((n, KVH, D))
        SV = np.zeros((n, KVH, D))
        for p in range(n):
            for h in range(KVH):
                c.read(layer, h, p, 0, row)
                SK[p, h] = row
                c.read(layer, h, p, 1, row)
                SV[p, h] = row
        q = rng.standard_normal((H, D)).astype(np.float32)
        out = zeros("f", H * D)
        att.step(layer, q.ravel().tolist(), out)
        got = np.asarray(out, np.float64).reshape(H, D)
        assert numref.max_rel_err(got, numref.attention(q, SK, SV, H, KVH)) <= 2e-6, (kd, vd, res, layer)
        true = numref.attention(q, K[:, layer].astype(np.float64), V[:, layer].astype(np.float64), H, KVH)
        assert numref.cosine(got, true) >= _cos_floor(kd, vd, res), (kd, vd, res, layer)
        if vd == "i8":  # symmetric per token: |stored - true| <= scale / 2, scale = amax / 127 (as an f16, rounded up)
            amax = np.abs(V[:, layer]).max(axis=2, keepdims=True)
            assert np.all(np.abs(SV - V[:, layer]) <= amax / 127 * (1 + 2 ** -10) / 2 + 1e-6)


def test_the_integer_pass_refuses_a_split_cache_when_built():
    from kvedge.model import pass_int  # too large for the capped unix heap beside a cache: on CPython here
    cfg = SplitConfig(L, H, KVH, D, 8, k_dtype="i8", v_dtype="i4", align=0)
    with pytest.raises(ValueError, match="the integer forward pass needs an i8 cache, not i8/i4"):
        pass_int.check("i8", cfg, None)
