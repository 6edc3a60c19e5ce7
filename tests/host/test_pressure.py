"""Memory pressure with more sessions than blocks: the least-recently-used session is reclaimed (the model in
tests/device/_poolref.py says which), counters are exact, and every survivor's attention output is unchanged
by the reclaims around it and equal to numpy's."""
import numpy as np
import pytest

from kvedge.attention import quantize_query
from kvedge.compat import zeros
from kvedge.config import CacheConfig
from kvedge.paged import PagedPool
from _cacheref import value
from _poolref import PoolModel, op_open, op_append, check_all

NB, B, SESSIONS = 8, 4, 12
L, HEADS, KVH, D = 2, 4, 2, 8


def numpy_attention(seed, n, layer, q):
    """softmax(q.k / sqrt(D)) v over a session's n tokens, float64 over the float32 values stored."""
    kv = KVH * D
    K = np.array([[value(seed, p, layer, 0, i, D) for i in range(kv)] for p in range(n)], np.float32)
    V = np.array([[value(seed, p, layer, 1, i, D) for i in range(kv)] for p in range(n)], np.float32)
    K = K.astype(np.float64).reshape(n, KVH, D)
    V = V.astype(np.float64).reshape(n, KVH, D)
    q = np.asarray(q, np.float64).reshape(HEADS, D)
    out = np.zeros((HEADS, D))
    for h in range(HEADS):
        s = K[:, h // (HEADS // KVH)] @ q[h] / np.sqrt(D)
        w = np.exp(s - s.max())
        out[h] = (w / w.sum()) @ V[:, h // (HEADS // KVH)]
    return out.ravel()


def attend(pool, sid, q, integer):
    if not integer:
        out = zeros("f", HEADS * D)
        pool.attend(sid, 1, q, out)
        return np.array(out, np.float64)
    qc, qs = zeros("b", HEADS * D), zeros("H", HEADS)
    oq, oe = zeros("i", HEADS * D), zeros("i", HEADS)
    quantize_query(q, qc, qs, HEADS)
    pool.attend_q8(sid, 1, qc, qs, oq, oe)
    return np.array(oq, np.float64) * np.repeat(2.0 ** np.array(oe, np.float64), D)


@pytest.mark.parametrize("dtype,pinned", [("f32", ()), ("i8", ()), ("f32", (2, 5)), ("i8", (0,))])
def test_more_sessions_than_blocks(dtype, pinned):
    rng = np.random.default_rng(42)
    targets = rng.integers(3, 10, SESSIONS)  # 1 to 3 blocks each, 12 sessions over 8 blocks
    cfg = CacheConfig(L, HEADS, KVH, D, NB * B, dtype, align=16)
    model = PoolModel(NB, B, SESSIONS, NB)
    asked = []

    def on_pressure(sid):
        asked.append(sid)
        return sid not in model.pinned

    pool = PagedPool(cfg, B, sessions=SESSIONS, on_pressure=on_pressure)
    ks = [zeros("f", KVH * D) for _ in range(L)]
    vs = [zeros("f", KVH * D) for _ in range(L)]
    ids = [op_open(pool, model, 1000 + k) for k in range(SESSIONS)]
    model.pinned.update(ids[k] for k in pinned)
    q = rng.standard_normal(HEADS * D).astype(np.float32)
    qa = zeros("f", HEADS * D)
    for i in range(HEADS * D):
        qa[i] = float(q[i])
    first = {}
    expected_gone = []
    for rnd in range(int(targets.max())):
        for k, sid in enumerate(ids):  # interleaved: every session's blocks sit between the others'
            if sid in model.sess and model.sess[sid][1] < targets[k]:
                before = set(model.sess)
                op_append(pool, model, sid, ks, vs)
                expected_gone += sorted(before - set(model.sess))
                if sid in model.sess and model.sess[sid][1] == targets[k]:
                    first[sid] = attend(pool, sid, qa, dtype == "i8")
                    model.touch(sid)
            if dtype == "f32":
                check_all(pool, model, zeros("f", D))  # every row of every session, exact
            else:
                pool.check()
    survivors = [sid for sid in ids if sid in model.sess]
    gone = [sid for sid in ids if sid not in model.sess]
    assert sorted(expected_gone) == gone and gone, (expected_gone, gone)
    assert all(pool.is_open(s) for s in survivors) and not any(pool.is_open(s) for s in gone)
    # the callback saw exactly the LRU order the model predicts (pinned ones are asked and refuse)
    assert [s for s in asked if s not in model.pinned] == expected_gone
    st = pool.stats()
    assert (st["alloc_failures"], st["reclaims"], st["refusals"], st["appends_failed"]) == (
        model.alloc_failures, model.reclaims, model.refusals, model.appends_failed)
    assert st["reclaims"] == len(gone) and st["sessions_open"] == len(survivors)
    assert len([s for s in survivors if s in first]) >= 2
    if pinned:
        assert st["refusals"] > 0
    assert st["waste_bytes"] == model.waste() * pool.cache.main_slot_bytes
    for s in model.pinned:
        assert pool.is_open(s)
    for sid in survivors:
        n = model.sess[sid][1]
        got = attend(pool, sid, qa, dtype == "i8")
        if sid in first:  # unchanged, to the bit, by everything that happened since
            assert np.array_equal(got, first[sid]), sid
        ref = numpy_attention(model.sess[sid][0], n, 1, q)
        if dtype == "f32":
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
        else:
            cos = got @ ref / np.linalg.norm(got) / np.linalg.norm(ref)
            assert cos > 0.999, (sid, cos)
