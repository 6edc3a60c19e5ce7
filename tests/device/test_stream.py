# Endless streams: the hard cap is never exceeded, a reset point leaves exactly a fresh session's state, and
# the soak (test_soak.py) runs 100,000 tokens through streams (every runtime).
import gc

from kvedge.cache import KVCache
from kvedge.compat import zeros
from kvedge.config import CacheConfig
from kvedge.errors import CacheFullError
from kvedge.evict import H2O
from kvedge.paged import PagedPool
from kvedge.stream import Stream
from _support import Rng, raises, message, under_heap_lock
from _cacheref import value, f32


def _rows(cfg, g, ks, vs):
    """Token number g of the stream (values depend on g only, not on the segment)."""
    D = cfg.head_dim
    for layer in range(cfg.layers):
        for i in range(cfg.kv_heads * D):
            ks[layer][i] = value(5, g, layer, 0, i, D)
            vs[layer][i] = value(5, g, layer, 1, i, D)


def _bufs(cfg):
    n = cfg.kv_heads * cfg.head_dim
    return [zeros("f", n) for _ in range(cfg.layers)], [zeros("f", n) for _ in range(cfg.layers)]


def _synthetic_scores(pol, g):
    """H2O input that depends on the token number and the positions held (the same in a fresh cache)."""
    sp = pol.cache.slot_pos
    for s in range(len(sp)):
        p = sp[s]
        if p >= 0:
            pol.scores[s] = ((g * 7 + p * 13) % 97) * (500 if p % 5 == 1 else 10)
    pol.observe()


def test_hard_cap_is_never_exceeded():
    cfg = CacheConfig(1, 2, 1, 4, 6, "f32", align=0)
    c = KVCache(cfg)
    st = Stream(c)
    ks, vs = _bufs(cfg)
    for g in range(50):
        _rows(cfg, g, ks, vs)
        st.append(ks, vs)
        assert c.n_cached <= 6 and st.cached() <= 6
    assert st.resets_forced == 8 and st.seg == 2 and st.tokens_total() == 50
    strict = Stream(KVCache(cfg), force="error")
    for g in range(6):
        strict.append(ks, vs)
    e = raises(CacheFullError, strict.append, ks, vs)
    assert "hard cap of 6 tokens" in message(e)
    assert strict.cached() == 6 and strict.tokens_total() == 6
    # a pool session: cap = its block limit
    pool = PagedPool(CacheConfig(1, 2, 1, 4, 8, "f32", align=0), 2, sessions=2, session_blocks=2)
    ps = Stream(pool, session=pool.open())
    for g in range(11):
        ps.append(ks, vs)
        assert ps.cached() <= 4
    assert ps.resets_forced == 2 and ps.cached() == 3
    pool.check()


def _state(c, pol=None):
    """Everything observable about a cache's content (not lifetime counters)."""
    rows = []
    buf = zeros("f", c.D)
    for s in range(c.N):
        if c.slot_pos[s] >= 0:
            for layer in range(c.L):
                for kv in (0, 1):
                    for h in range(c.H):
                        c.read_slot(layer, h, s, kv, buf)
                        rows.append((s, layer, kv, h, tuple(buf)))
    acc = [pol.acc[s] for s in range(c.N) if c.slot_pos[s] >= 0] if pol else None
    return list(c.slot_pos), c.n_seen, c.n_cached, c.used_bytes, rows, acc


def _cache_case(kind, every, seed):
    if kind == "window":
        cfg = CacheConfig(2, 2, 1, 4, 8, "i8", window=5, sinks=2, align=0)
    elif kind == "h2o":
        cfg = CacheConfig(1, 2, 1, 4, 8, "f16", align=0)
    else:
        cfg = CacheConfig(1, 2, 2, 4, 10, "f32", align=0)
    c = KVCache(cfg)
    pol = H2O(c, budget=7, recent=2, sinks=1) if kind == "h2o" else None
    st = Stream(c, every=every)
    rng = Rng(seed)
    ks, vs = _bufs(cfg)
    start = 0
    for g in range(90):
        marker = rng.randint(0, 24) == 0
        _rows(cfg, g, ks, vs)
        before = st.resets_every + st.resets_marker + st.resets_forced
        st.append(ks, vs, marker)
        if st.resets_every + st.resets_marker + st.resets_forced != before:
            start = g
        if pol:
            _synthetic_scores(pol, g)
        assert c.n_cached <= cfg.max_tokens
    # a fresh cache fed only the tokens since the last reset point is in exactly the same state
    fresh = KVCache(cfg)
    fpol = H2O(fresh, budget=7, recent=2, sinks=1) if kind == "h2o" else None
    for g in range(start, 90):
        _rows(cfg, g, ks, vs)
        fresh.append(ks, vs)
        if fpol:
            _synthetic_scores(fpol, g)
    assert _state(c, pol) == _state(fresh, fpol), kind
    assert st.seg == 90 - start
    return st


def test_state_after_a_reset_point_is_a_fresh_sessions():
    for kind, every in (("window", 0), ("window", 17), ("h2o", 23), ("h2o", 0), ("plain", 7)):
        st = _cache_case(kind, every, 3 + every)
        assert st.resets_marker > 0
        if every:
            assert st.resets_every > 0
        gc.collect()


def test_pool_session_stream_resets_like_a_fresh_session():
    cfg = CacheConfig(1, 2, 1, 4, 12, "f32", align=0)
    pool = PagedPool(cfg, 3, sessions=2)
    other = pool.open()
    ks, vs = _bufs(cfg)
    _rows(cfg, 999, ks, vs)
    pool.append(other, ks, vs)
    st = Stream(pool, every=5, session=pool.open())
    for g in range(23):
        _rows(cfg, g, ks, vs)
        st.append(ks, vs)
    assert st.resets_every == 4 and pool.length(st.sid) == 3
    buf = zeros("f", 4)
    for p in range(3):
        pool.read(st.sid, 0, 0, p, 0, buf)
        assert buf[0] == f32(value(5, 20 + p, 0, 0, 0, 4))
    pool.read(other, 0, 0, 0, 0, buf)
    assert buf[1] == f32(value(5, 999, 0, 0, 1, 4))
    assert pool.nfree == 4 - 1 - 1
    pool.check()
    line = st.stats_json()
    assert line.endswith(',"stream_tokens":23,"stream_segment":3,"stream_cap":12,"resets_every":4,'
                         '"resets_marker":0,"resets_forced":0}')


def _q8_stream(st, n, kc, vc, ks, vs):
    for g in range(n):
        kc[0] = g % 100
        st.start_token(g % 11 == 10)
        st.write_q8(0, kc, ks, vc, vs)


def test_pool_session_stream_on_the_integer_path():
    cfg = CacheConfig(1, 2, 1, 8, 16, "i8", align=0)
    pool = PagedPool(cfg, 4, sessions=2, session_blocks=3)
    st = Stream(pool, session=pool.open())
    kc, vc = zeros("b", 8), zeros("b", 8)
    ks, vs = zeros("H", 1), zeros("H", 1)
    ks[0] = vs[0] = 0x2000
    _q8_stream(st, 100, kc, vc, ks, vs)
    # a marker every 11 tokens comes before the 12-token cap: never forced; the last segment starts at 98
    assert st.resets_marker == 9 and st.resets_forced == 0 and st.cached() == 2
    for p in range(st.cached()):
        slot = pool.slot_of(st.sid, p)
        assert pool.cache.arena[pool.cache.DATA + slot * pool.cache.prow] == 98 + p
    pool.check()
    if need_lock():
        under_heap_lock(_q8_stream, st, 200, kc, vc, ks, vs)
        pool.check()


def need_lock():
    from kvedge import compat
    return compat.HAS_HEAP_LOCK


def test_bad_stream_config():
    c = KVCache(CacheConfig(1, 2, 1, 4, 6, "f32", align=0))
    e = raises(ValueError, Stream, c, -1)
    assert "every must be an int >= 0" in message(e)
    e = raises(ValueError, Stream, c, 0, 0, "drop")
    assert "force must be" in message(e)
    pool = PagedPool(CacheConfig(1, 2, 1, 4, 8, "f32", align=0), 2)
    raises(KeyError, Stream, pool, 0, 7)
