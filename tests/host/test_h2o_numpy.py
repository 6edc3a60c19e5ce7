"""H2O heavy-hitter eviction on seeded attention data: the device policy's accumulated scores and eviction
choices equal a numpy reference (softmax in float64 over float32 tile scores, as Attention.step computes it;
Q16 per head; saturating / decaying sums)."""
from array import array
import math

import numpy as np
import pytest

from kvedge.attention import Attention
from kvedge.cache import KVCache
from kvedge.config import CacheConfig
from kvedge.evict import H2O, CAP

L, HEADS, KVH, D, SLOTS = 2, 4, 2, 8, 12


def reference(K, V, Q, budget, recent, sinks, decay):
    """Per token: place (evict argmin (acc, pos) outside sinks and the recent window), attend each layer,
    add round(p * 65536) per query head, fold with decay and saturation. Returns (evicted, acc dict)."""
    acc = {}
    evicted = []
    group = HEADS // KVH
    for t in range(len(K)):
        if len(acc) >= budget:
            cand = [(a, p) for p, a in acc.items() if sinks <= p < t - recent]
            a, p = min(cand)
            del acc[p]
            evicted.append(p)
        acc[t] = 0
        live = np.array(sorted(acc))
        add = np.zeros(len(live), dtype=np.int64)
        for layer in range(L):
            for h in range(HEADS):
                kvh = h // group
                k = K[live, layer, kvh].astype(np.float64)
                q = Q[t, layer, h].astype(np.float64)
                s = (k @ q) * (1.0 / math.sqrt(D))
                # the attention step keeps a tile's scores in float32 (its max and sum come from those) and
                # reports each probability from that float32 score (so no weight passes 1): mirror both
                s32 = s.astype(np.float32).astype(np.float64)
                m = s32.max()
                p = np.exp(s32 - m) * (1.0 / np.exp(s32 - m).sum())
                add += np.floor(p * 65536 + 0.5).astype(np.int64)
        for j, pos in enumerate(live):
            a = acc[pos]
            if decay:
                a -= a >> decay
            acc[pos] = int(min(CAP, a + add[j]))
    return evicted, acc


def device(K, V, Q, budget, recent, sinks, decay):
    c = KVCache(CacheConfig(L, HEADS, KVH, D, SLOTS, "f32", align=0))
    pol = H2O(c, budget=budget, recent=recent, sinks=sinks, decay=decay)
    att = Attention(c, tile=5)
    out = array("f", [0.0] * (HEADS * D))
    evicted = []
    for t in range(len(K)):
        c.append([array("f", K[t, l].ravel()) for l in range(L)], [array("f", V[t, l].ravel()) for l in range(L)])
        if pol.last_victim >= 0:
            evicted.append(pol.last_victim)
        for layer in range(L):
            att.step(layer, array("f", Q[t, layer].ravel()), out, pol.scores)
        pol.observe()
    live = array("i", [0] * SLOTS)
    n = c.positions(live)
    return evicted, {p: pol.score_of(p) for p in live[:n]}


@pytest.mark.parametrize("seed,budget,recent,sinks,decay", [
    (1, 10, 3, 0, 0), (2, 12, 2, 1, 0), (3, 8, 4, 2, 3), (4, 9, 1, 0, 1),
])
def test_h2o_matches_numpy(seed, budget, recent, sinks, decay):
    rng = np.random.default_rng(seed)
    T = 70
    K = rng.standard_normal((T, L, KVH, D)).astype(np.float32)
    K[:, :, :, 1] *= 5.0  # an outlier channel makes attention peaky: real heavy hitters
    V = rng.standard_normal((T, L, KVH, D)).astype(np.float32)
    Q = rng.standard_normal((T, L, HEADS, D)).astype(np.float32)
    ev_ref, acc_ref = reference(K, V, Q, budget, recent, sinks, decay)
    ev_dev, acc_dev = device(K, V, Q, budget, recent, sinks, decay)
    assert ev_dev == ev_ref
    assert acc_dev == acc_ref
    assert len(ev_dev) == T - budget
    # not a window: some old tokens outlived younger ones
    kept_old = [p for p in acc_dev if sinks <= p < T - budget]
    assert kept_old, sorted(acc_dev)
