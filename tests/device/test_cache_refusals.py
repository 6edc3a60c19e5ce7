# Regression tests for the device-API faults of issue 14 (D1-D7), one per finding, named after it. Each failed
# on main before the fix (bef8954): a refused call changed the cache, the pool, the scores or the LRU order, or
# a bad value was accepted. Every runtime.
from array import array

from kvedge.attention import Attention, quantize_query
from kvedge.cache import KVCache
from kvedge.compat import zeros
from kvedge.config import CacheConfig
from kvedge.evict import H2O
from kvedge.paged import PagedPool
from _support import raises, message

HUGE = 3.5e38  # beyond float32 (inf where floats are float32: refused as not finite there)


def _cache_state(c):
    """Every array and number the cache holds: the arena, the slot table, the counters, the residual state."""
    out = []
    d = c.__dict__
    for k in sorted(d):
        v = d[k]
        if type(v) is bytearray or type(v) is array:
            out.append((k, bytes(v)))
        elif type(v) is int or type(v) is bool:
            out.append((k, v))
    return out


def _pool_state(p):
    return (_cache_state(p.cache), list(p.table), list(p.sid), list(p.slen), list(p.snb), list(p.scold),
            list(p.stick), list(p.refs), list(p.free), p.nfree, p.tick, p.next_id, p.alloc_failures,
            p.reclaims, p.refusals, p.appends_failed, p.opened, p.closed)


def _rows(n, x=0.25):
    return [x] * n


def test_d1_f32_value_beyond_float32_is_refused_and_changes_nothing():
    c = KVCache(CacheConfig(1, 2, 2, 4, 4, "f32", align=0))
    c.append([_rows(8, 0.5)], [_rows(8, 0.5)])
    c.start_token()
    before = _cache_state(c)
    v = _rows(4, 0.5) + [HUGE, 0.0, 0.0, 0.0]  # V of head 1
    e = raises(ValueError, c.write, 0, _rows(8), v)
    assert "v[4]" in message(e), message(e)
    assert _cache_state(c) == before
    e = raises(ValueError, c.append, [[-HUGE] + _rows(7)], [_rows(8)])
    assert "k[0]" in message(e), message(e)
    assert _cache_state(c) == before
    # the largest float32 itself is stored exactly; a later step over the cache stays finite
    big = 3.4028234663852886e38
    c.write(0, _rows(8), [big] + _rows(7))
    out = zeros("f", 4)
    c.read(0, 0, 1, 1, out)
    assert out[0] == big
    att = Attention(c)
    o = zeros("f", 8)
    att.step(0, _rows(8, 0.1), o)
    assert all(x - x == 0 for x in o), list(o)


def test_d2_pool_append_beyond_float32_leaves_the_pool_whole():
    cfg = CacheConfig(1, 2, 1, 4, 8, "f32", align=0)
    pool = PagedPool(cfg, 2, sessions=2)
    sid = pool.open()
    before = _pool_state(pool)
    e = raises(ValueError, pool.append, sid, [[HUGE] * 4], [[0.0] * 4])
    assert "k[0]" in message(e), message(e)
    assert _pool_state(pool) == before
    pool.check()
    for p in range(3):  # later valid appends land in order, the first at position 0
        assert pool.append(sid, [[0.5 * p] * 4], [[0.25] * 4]) == p
    pool.check()
    out = array("f", [0.0] * 4)
    pool.read(sid, 0, 0, 2, 0, out)
    assert list(out) == [1.0] * 4


def test_d3_write_q8_float_or_nan_code_is_refused_before_a_byte_moves():
    c = KVCache(CacheConfig(1, 1, 1, 4, 4, "i8", align=0))
    c.start_token()
    c.write_q8(0, array("b", [1, 2, 3, 4]), [0x3C00], array("b", [5, 6, 7, 8]), [0x3C00])
    before = _cache_state(c)
    for bad in (0.5, float("nan"), 2.0, "1", None, 1j):
        e = raises(TypeError, c.write_q8, 0, [9, 9, bad, 9], [0x3C00], [0] * 4, [0x3C00])
        assert "k_codes[2]" in message(e), message(e)
        assert _cache_state(c) == before, bad
        e = raises(TypeError, c.write_q8, 0, [9] * 4, [0x3C00], [9] * 4, [bad])
        assert "v_scales[0]" in message(e), message(e)
        assert _cache_state(c) == before, bad


def test_d4_nan_or_inf_query_is_refused_and_scores_untouched():
    c = KVCache(CacheConfig(1, 2, 1, 4, 8, "f32", align=0))
    pol = H2O(c, recent=1)
    for i in range(3):
        c.append([[0.1 * i] * 4], [[0.2] * 4])
    att = Attention(c)
    out = [0.0] * 8
    for bad in (float("nan"), float("inf"), -float("inf")):
        q = [0.1] * 4 + [bad] * 4  # head 1: head 0 would already have added its scores before the fix
        e = raises(ValueError, att.step, 0, q, out, pol.scores)
        assert "q[4]" in message(e), message(e)
        assert list(pol.scores) == [0] * 8
        e = raises(ValueError, att.step, 0, q, out)  # without scores: NaN output was returned silently
        assert "q[4]" in message(e), message(e)
    att.step(0, [0.1] * 8, out, pol.scores)
    assert abs(sum(pol.scores) - 2 * 65536) <= 8, list(pol.scores)  # two heads' probabilities, Q16


def _attended(pool, sid, n):
    for p in range(n):
        pool.append(sid, [[0.25 * p] * 4], [[0.5] * 4])


def test_d5_refused_attend_does_not_count_as_use():
    cfg = CacheConfig(1, 2, 1, 4, 8, "f32", align=0)
    pool = PagedPool(cfg, 2, sessions=3)  # 4 blocks of 2 tokens
    a = pool.open()
    _attended(pool, a, 2)
    b = pool.open()
    _attended(pool, b, 2)  # a is now the least recently used
    before = _pool_state(pool)
    q, out = [0.1] * 8, [0.0] * 8
    e = raises(IndexError, pool.attend, a, 5, q, out)
    assert "layer 5" in message(e), message(e)
    e = raises(ValueError, pool.attend, a, 0, [0.1] * 7, out)
    assert "q has 7 values" in message(e), message(e)
    assert _pool_state(pool) == before
    c = pool.open()
    _attended(pool, c, 6)  # needs 3 blocks, 2 free: pressure reclaims the LRU session, which is still a
    assert not pool.is_open(a) and pool.is_open(b) and pool.reclaims == 1
    pool.check()


def test_d6_complex_values_are_refused_before_writing():
    for dt in ("f32", "f16", "i8", "i4"):
        c = KVCache(CacheConfig(1, 2, 2, 4, 4, dt, align=0, residual=0 if dt == "i4" else None))
        c.start_token()
        before = _cache_state(c)
        v = _rows(4) + [0.5, 1j, 0.5, 0.5]
        e = raises(TypeError, c.write, 0, _rows(8), v)
        assert "v[5] is not a number" in message(e), (dt, message(e))
        assert _cache_state(c) == before, dt
        e = raises(TypeError, c.append, [[1 + 2j] * 8], [_rows(8)])
        assert "k[0]" in message(e), (dt, message(e))
        assert _cache_state(c) == before, dt


def test_d7_step_q8_refuses_inf_and_nan_scale_bits():
    c = KVCache(CacheConfig(1, 2, 1, 4, 8, "i8", align=0))
    c.append([[0.1, 0.2, 0.3, 0.4]], [[0.2] * 4])
    pol = H2O(c, recent=1)
    att = Attention(c)
    qc, qs = zeros("b", 8), zeros("H", 2)
    quantize_query([0.1] * 8, qc, qs, 2)
    oq, oe = zeros("i", 8), zeros("i", 2)
    for bits in (0x7C00, 0x7E00, 0xFC00, 0x7FFF, 0x8001):
        bad = array("H", [qs[0], bits])
        e = raises(ValueError, att.step_q8, 0, qc, bad, oq, oe, pol.scores)
        assert "qs[1]" in message(e) and "f16 scale bits" in message(e), message(e)
        assert list(pol.scores) == [0] * 8
    # write_q8 refuses them too (a K scale of inf would poison every later step)
    c.start_token()
    before = _cache_state(c)
    e = raises(ValueError, c.write_q8, 0, zeros("b", 4), array("H", [0x7C00]), zeros("b", 4), [0x3C00])
    assert "k_scales[0]" in message(e), message(e)
    assert _cache_state(c) == before
    att.step_q8(0, qc, qs, oq, oe, pol.scores)
    assert sum(pol.scores) > 0
