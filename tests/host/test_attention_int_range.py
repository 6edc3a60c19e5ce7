"""The integer attention path against numpy on the very inputs it sees (the cache's stored rows, read back,
and the int8 query), so only its fixed-point arithmetic is measured, over a range of query/key magnitudes.

test_large_query_key_scales_do_not_saturate_scores pins a fixed bug: att_scores_i8 used to saturate every
nonzero score when the query and key f16 scale exponents added up to more than 28.
"""
from array import array

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kvedge import quant
from kvedge.attention import Attention, dequantize_output, quantize_query
from kvedge.cache import KVCache
from kvedge.config import CacheConfig
from kvedge_host.ref import numref


def _int_vs_numpy(cache, q, heads, tile=8):
    """(int path output, numpy attention over the stored K/V and the dequantized int8 query)."""
    cfg = cache.cfg
    D, KVH = cfg.head_dim, cfg.kv_heads
    qa = array("f", q)
    qc, qs = array("b", bytes(heads * D)), array("H", bytes(2 * heads))
    quantize_query(qa, qc, qs, heads)
    oq, oe = array("i", bytes(4 * heads * D)), array("i", bytes(4 * heads))
    Attention(cache, tile).q8_step(0, qc, qs, oq, oe, None, None, -1)  # the core: past step_q8's Q8_RANGE too
    out = array("f", bytes(4 * heads * D))
    dequantize_output(oq, oe, out, heads)
    live = array("i", bytes(4 * cfg.slots))
    n = cache.positions(live)
    buf = array("d", [0.0] * D)
    K = np.zeros((n, KVH, D))
    V = np.zeros((n, KVH, D))
    for j in range(n):
        for h in range(KVH):
            cache.read(0, h, live[j], 0, buf)
            K[j, h] = buf
            cache.read(0, h, live[j], 1, buf)
            V[j, h] = buf
    qd = np.array([qc[i] * quant.f16_value(qs[i // D]) for i in range(heads * D)]).reshape(heads, D)
    return np.array(out).reshape(heads, D), numref.attention(qd, K, V, heads, KVH)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(seed=st.integers(0, 10 ** 6), qmag=st.sampled_from([0.01, 0.3, 1.0, 4.0]),
       kmag=st.sampled_from([0.01, 1.0, 8.0, 30.0]), dtype=st.sampled_from(["i8", "i4", "i2"]))
def test_integer_arithmetic_matches_numpy_on_the_stored_rows(seed, qmag, kmag, dtype):
    # q amax x k amax well below 127**2 / 2 (no score saturation); V rows within a factor 10 of each other.
    # i4: logits with a standard deviation up to 8 nats. Its rows reach the kernels as int8 codes with one
    # power-of-two scale per row, about 1% relative error in a score: at logits of hundreds of nats (qmag 4,
    # kmag 30) that moves the softmax by several nats (cosine ~0.99 against numpy on the same rows).
    assume(dtype == "i8" or qmag * kmag <= 8)
    rng = np.random.default_rng(seed)
    H, KVH, D, n = 4, 2, 16, 40
    kw = {"group": 8} if dtype in ("i4", "i2") else {}
    c = KVCache(CacheConfig(1, H, KVH, D, 40, dtype, align=0, **kw))
    for _ in range(n):
        k = rng.normal(size=KVH * D) * kmag
        v = rng.normal(size=KVH * D) * 10 ** rng.uniform(0, 1)
        c.append([k.tolist()], [v.tolist()])
    out, ref = _int_vs_numpy(c, (rng.normal(size=H * D) * qmag).tolist(), H)
    bound = 0.999 if dtype == "i8" else 0.995  # i4/i2 rows are converted to int8 codes with a power-of-two scale
    assert numref.cosine(out, ref) >= bound, (numref.cosine(out, ref), numref.max_rel_err(out, ref))


def test_large_query_key_scales_do_not_saturate_scores():
    c = KVCache(CacheConfig(1, 1, 1, 8, 4, "i8", align=0))
    # channel 1 is a large outlier (sets the key scale); q only reads channel 0: scores 353.6 and 176.8
    c.append([[10.0, 200.0, 0, 0, 0, 0, 0, 0]], [[1.0] * 8])
    c.append([[5.0, 200.0, 0, 0, 0, 0, 0, 0]], [[-1.0] * 8])
    q = [100.0, 0, 0, 0, 0, 0, 0, 0]
    out, ref = _int_vs_numpy(c, q, 1)
    f = array("f", bytes(32))
    Attention(c).step(0, array("f", q), f)
    assert abs(f[0] - 1.0) < 0.01  # the float path is right
    assert np.allclose(ref, 1.0, atol=0.01)
    assert np.allclose(out, ref, atol=0.01), (out, ref)
