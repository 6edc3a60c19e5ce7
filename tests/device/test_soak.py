# Soak (traps 2 and 8): 100,000 tokens (20,000 on a board: ON_BOARD) through endless streams over a windowed and an
# H2O cache, on the integer write path, with gc.mem_alloc() flat and the steady state allocation-free under
# heap_lock.
# (1,000 session open/close cycles of the paged pool are in test_paged.py.)
import gc

from kvedge.cache import KVCache
from kvedge.compat import zeros, mem_alloc
from kvedge.config import CacheConfig
from kvedge.evict import H2O
from kvedge.stream import Stream
from _support import ON_BOARD, under_heap_lock

TOKENS = 20000 if ON_BOARD else 100000
CHUNK = (TOKENS - 1000) // (2 if ON_BOARD else 11)  # tokens between two heap readings


class _Soak:
    def __init__(self, st, pol, kc, vc, ks, vs):
        self.st, self.pol = st, pol
        self.kc, self.vc, self.ks, self.vs = kc, vc, ks, vs


def _soak_tokens(r, n, g0):
    st = r.st
    pol = r.pol
    for t in range(n):
        g = g0 + t
        r.kc[0] = (g & 127) - 64
        st.start_token(g % 10007 == 0)
        st.write_q8(0, r.kc, r.ks, r.vc, r.vs)
        if pol is not None:
            sc = pol.scores
            sp = pol.cache.slot_pos
            for s in range(len(sp)):
                if sp[s] >= 0:
                    sc[s] = ((g + sp[s] * 31) & 1023) * 64
            pol.observe()


def _soak(kind):
    if kind == "window":
        cfg = CacheConfig(1, 2, 1, 8, 16, "i8", window=8, sinks=2, align=0)
        c = KVCache(cfg)
        pol = None
    else:
        cfg = CacheConfig(1, 2, 1, 8, 10, "i8", align=0)
        c = KVCache(cfg)
        pol = H2O(c, recent=3, sinks=1)
    st = Stream(c)
    kc, vc = zeros("b", 8), zeros("b", 8)
    ks, vs = zeros("H", 1), zeros("H", 1)
    ks[0] = vs[0] = 0x2000
    for i in range(8):
        vc[i] = i - 4
    r = _Soak(st, pol, kc, vc, ks, vs)
    _soak_tokens(r, 1000, 0)
    gc.collect()
    before = mem_alloc()
    g = 1000
    while g < TOKENS:
        _soak_tokens(r, CHUNK, g)
        g += CHUNK
        assert c.n_cached <= cfg.max_tokens
    gc.collect()
    after = mem_alloc()
    if before >= 0:
        assert after - before <= 64, (kind, before, after)
    assert st.tokens_total() == TOKENS and st.resets_marker == (TOKENS - 1) // 10007
    assert c.n_cached == 10 and c.n_seen == st.seg
    if need_lock():
        under_heap_lock(_soak_tokens, r, 500, g)
    return st


def need_lock():
    from kvedge import compat
    return compat.HAS_HEAP_LOCK


def test_soak_windowed():
    st = _soak("window")
    assert st.cache.evictions > TOKENS - 1000


def test_soak_h2o():
    st = _soak("h2o")
    assert st.cache.evictions > TOKENS - 1000 and st.cache.policy.observed > TOKENS - 1
