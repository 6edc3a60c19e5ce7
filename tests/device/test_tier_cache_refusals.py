# Regression tests for what the device-API fuzzer found in the tiered cache (kvedge.tier.cache, issue 14): one test per
# finding, each failing on the code before its fix. T1: a value the write accepted came back from an i8/i4/i2 ring
# a rounding step beyond the cold store's f16 range, and every later demotion of that block failed (the cache was
# stuck: no token could be appended any more). T2: i8 scales whose rows exceed an i2 cold store's range were
# accepted (the same dead end when the block left the ring). T3: bad positions, outputs, layer lists and plans raised
# raw TypeError/AttributeError/IndexError from deep inside. T4: a closed cache accepted appends and failed reads
# with AttributeError.
from kvedge.tier.cache import TieredCache
from kvedge.compat import zeros
from kvedge.config import CacheConfig
from _support import need, raises, message, remove_store

PATH = "_kvedge_findings_tiered"


def _remove():
    remove_store(PATH)


def _tiered(ring, cold, S=2):
    kw = dict(group=4, residual=0) if ring in ("i4", "i2") else {}
    cfg = CacheConfig(1, 2, 1, 4, S + 8, ring, window=8, sinks=S, prefix=S, align=0, **kw)
    return TieredCache(cfg, PATH, block=4, cold=cold, cold_blocks=2, fresh=True)


def test_t1_a_ring_row_rounded_past_the_cold_range_still_leaves_the_ring():
    need("fs")
    for ring, cold in (("i8", "f16"), ("i8", "i4"), ("i4", "f16"), ("i4", "i4"), ("i2", "i2"), ("i8", "i2")):
        _remove()
        tc = _tiered(ring, cold)
        try:
            for p in range(16):  # 65504 fits the f16 range; an i8 ring reads it back as 65532
                assert tc.append([[65504.0 if p & 1 else -65504.0, 1.0, -3.0, 0.5]], [[1.0] * 4]) == p
            assert tc.store.count == 2 and tc.demoted == 8, (ring, cold, tc.store.count)
            out = zeros("f", 4)
            tc.read(0, 0, 3, 0, out)  # position 3 is cold now: saturated at the f16 range, not refused
            assert 60000.0 <= out[0] <= 65536.0, (ring, cold, out[0])
            q = zeros("f", 4 * 2)
            o = zeros("f", 4 * 2)
            tc.step(0, q, o)  # a zero query: the mean of the values, all 1.0
            assert abs(o[0] - 1.0) < 0.1, (ring, cold, o[0])
        finally:
            tc.close()
    _remove()


def test_t2_i8_scales_too_large_for_an_i2_cold_store_are_refused_when_written():
    need("fs")
    _remove()
    tc = _tiered("i8", "i2")
    try:
        tc.append([[0.5] * 4], [[0.5] * 4])
        tc.append([[0.5] * 4], [[0.5] * 4])
        tc.start_token()
        before = bytes(tc.ring.arena)
        e = raises(ValueError, tc.write_q8, 0, [127] * 4, [0x7BFF], [1] * 4, [0x3C00])
        assert "exceeds the f16 range of the i2 cold store" in message(e)
        assert bytes(tc.ring.arena) == before
        for p in range(3, 16):  # scales that fit: the blocks leave the ring as usual
            if p > 3:
                tc.start_token()
            tc.write_q8(0, [127] * 4, [0x2000], [1] * 4, [0x3C00])
        assert tc.store.count == 2
    finally:
        tc.close()
        _remove()


def test_t3_bad_positions_outputs_layers_and_plans_are_refused_precisely():
    need("fs")
    _remove()
    tc = _tiered("f32", "f32")
    try:
        for p in range(12):
            tc.append([[0.5] * 4], [[0.5] * 4])
        reads = tc.store.reads
        e = raises(TypeError, tc.read, 0, 0, 2.5, 0, zeros("f", 4))
        assert "pos must be an int" in message(e)
        e = raises(TypeError, tc.read, 0, 0, "3", 0, zeros("f", 4))
        assert "pos must be an int" in message(e)
        assert tc.store.reads == reads  # nothing was paged in for a refused read
        e = raises(ValueError, tc.positions, [0] * 3)
        assert "out holds 3 values, needs 12" in message(e)
        e = raises(TypeError, tc.append, 5, 5)
        assert "ks must be a sequence" in message(e)
        e = raises(TypeError, TieredCache.from_plan, [], PATH)
        assert "plan must be a dict" in message(e)
    finally:
        tc.close()
        _remove()


def test_t4_a_closed_tiered_cache_refuses_every_call():
    need("fs")
    _remove()
    tc = _tiered("f32", "f32")
    for p in range(12):
        tc.append([[0.5] * 4], [[0.5] * 4])
    tc.close()
    n_seen = tc.ring.n_seen
    for fn, args in ((tc.append, ([[0.5] * 4], [[0.5] * 4])), (tc.start_token, ()),
                     (tc.read, (0, 0, 3, 0, zeros("f", 4))), (tc.step, (0, zeros("f", 8), zeros("f", 8))),
                     (tc.reset, ())):
        e = raises(ValueError, fn, *args)
        assert "is closed" in message(e)
    assert tc.ring.n_seen == n_seen
    _remove()
