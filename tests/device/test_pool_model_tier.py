# A conversation reclaimed under pressure is dropped by default (test_pool_model.py); with a ColdTier's
# save_instead as the pool's on_pressure its full blocks go to flash instead, and its next token (PoolSession's
# start_token) brings them back: both conversations then attend exactly as caches of their own (a KVCache each,
# the same rows, the same tiles), through the decode interface the passes call.
import gc
from kvedge.paged import PagedPool  # the pool's modules first, while the heap is compact
gc.collect()
from kvedge.tier.spill import ColdTier  # noqa: E402
gc.collect()
from kvedge.pooled import PoolSession  # noqa: E402
from kvedge.attention import Attention  # noqa: E402
from kvedge.cache import KVCache  # noqa: E402
from kvedge.compat import zeros  # noqa: E402
from kvedge.config import CacheConfig  # noqa: E402
from _support import need, tmp_path  # noqa: E402

L, H, KVH, D = 2, 4, 2, 4


def _feed(cache, seed, count, ks, vs):
    """count tokens of rows made from seed and position, through the decode interface (start_token, write)."""
    for _ in range(count):
        pos = cache.start_token()
        for layer in range(L):
            for i in range(KVH * D):
                ks[layer][i] = ((seed * 13 + pos * 7 + layer * 5 + i * 3) % 29 - 14) / 7.0
                vs[layer][i] = ((seed * 11 + pos * 3 + layer * 7 + i) % 23 - 11) / 5.0
            cache.write(layer, ks[layer], vs[layer])


def _attended(cache, q, out):
    res = []
    for layer in range(L):
        cache.attend(layer, q, out)
        res.append(list(out))
    return res


def _own(seed, count, q, out, ks, vs):
    """The same conversation in a KVCache of its own."""
    c = KVCache(CacheConfig(L, H, KVH, D, 32, "i8", align=0))
    c.attach(Attention(c, tile=8))
    _feed(c, seed, count, ks, vs)
    return _attended(c, q, out)


def _remove(path):
    import os
    for x in ("", ".h0", ".h1", ".s", ".0", ".1"):
        try:
            os.remove(path + x)
        except OSError:
            pass


def test_a_conversation_saved_by_a_cold_tier_goes_on_bit_for_bit():
    need("fs")
    ks = [zeros("f", KVH * D) for _ in range(L)]
    vs = [zeros("f", KVH * D) for _ in range(L)]
    q = zeros("f", H * D)
    for i in range(H * D):
        q[i] = (i % 7 - 3) / 3.0
    out = zeros("f", H * D)
    path = tmp_path("_kvedge_pool_tier.bin")
    tier = []
    pool = PagedPool(CacheConfig(L, H, KVH, D, 24, "i8", align=0), 4, sessions=2, tile=8,
                     on_pressure=lambda sid: tier[0].save_instead(sid))
    tier.append(ColdTier(pool, path, 8, fresh=True))
    try:
        a, b = PoolSession(pool), PoolSession(pool)
        _feed(a, 1, 8, ks, vs)
        _feed(b, 2, 17, ks, vs)  # its 5th block: a's two full blocks go to flash
        assert a.alive() and pool.scold[pool._handle(a.sid)] == 2 and pool.reclaims == 0  # saved, not dropped
        _feed(a, 1, 3, ks, vs)  # its blocks back from flash first (b's full ones go there)
        assert pool.scold[pool._handle(a.sid)] == 0 and pool.scold[pool._handle(b.sid)] > 0
        got_a = _attended(a, q, out)
        _feed(b, 2, 2, ks, vs)
        got_b = _attended(b, q, out)
        pool.check()
        assert pool.reclaims == 0 and pool.refusals >= 2 and pool.length(a.sid) == 11 and pool.length(b.sid) == 19
        a.close()
        b.close()
    finally:
        tier[0].close()
        _remove(path)
    assert got_a == _own(1, 11, q, out, ks, vs)
    assert got_b == _own(2, 19, q, out, ks, vs)
