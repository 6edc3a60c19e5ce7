# att_head_i8 (one kernel call per query head) against the same tiles driven from Python one kernel at a time
# (Attention.fused = False): identical bits on every kernel kind, through ring wraps, explicit slot tables,
# V scales that grow along the sequence, a sharp softmax and the overflow guard.
import gc

from _support import Rng
from kvedge import kernels
from kvedge.attention import Attention, quantize_query
from kvedge.cache import KVCache
from kvedge.compat import zeros
from kvedge.config import CacheConfig


def _rows(rng, n, scale):
    r = zeros("f", n)
    for i in range(n):
        r[i] = (rng.bits() % 2001 - 1000) / 1000.0 * scale
    return r


def _steps(att, cfg, q, slots=None, nslots=-1):
    n = cfg.heads * cfg.head_dim
    qc, qs = zeros("b", n), zeros("H", cfg.heads)
    quantize_query(q, qc, qs, cfg.heads)
    out = []
    for report in (False, True):  # without scores: the fast path; with them: q8_rows around att_head_i8
        for fused in (True, False):
            att.fused = fused
            oq, oe = zeros("i", n), zeros("i", cfg.heads)
            sc = zeros("i", att.cache.N) if report else None
            for layer in range(cfg.layers):
                # the core without step_q8's range check: a sharp softmax runs past Q8_RANGE
                att.q8_step(layer, qc, qs, oq, oe, sc, slots, nslots)
            out.append((list(oq), list(oe), att.ws, list(sc) if report else None))
    assert out[0] == out[1] and out[2] == out[3]
    assert out[0][:3] == out[2][:3]
    return out[0][:3]


def _check(cfg, n_tokens, seed, tile, kscale=1.0, vgrow=1.0, qscale=1.0, slots=None):
    c = KVCache(cfg)
    rng = Rng(seed)
    kv = cfg.kv_heads * cfg.head_dim
    for p in range(n_tokens):
        vs = min(1000.0, vgrow ** p)  # V rows whose scales grow along the sequence: evmax keeps rising
        c.append([_rows(rng, kv, kscale) for _ in range(cfg.layers)],
                 [_rows(rng, kv, vs) for _ in range(cfg.layers)])
    att = Attention(c, tile=tile)
    q = _rows(rng, cfg.heads * cfg.head_dim, qscale)
    first = None
    for kind in kernels.available():
        att.k = kernels.select(kind)
        if hasattr(att.k, "att_preload"):
            att.k.att_preload(att.k)  # the fused kernels, loaded on request
        got = _steps(att, cfg, q, slots, len(slots) if slots else -1)
        if first is None:
            first = got
        assert got == first, kind
    kernels.select()
    gc.collect()
    return first


def test_fused_head_equals_the_tile_loop():
    _check(CacheConfig(2, 4, 2, 8, 40, "i8", align=0), 37, 1, 8)
    _check(CacheConfig(1, 8, 2, 16, 24, "i8", window=20, sinks=4, align=0), 70, 2, 8)  # wrapped ring
    _check(CacheConfig(1, 2, 1, 64, 20, "i8", align=64), 20, 3, 64)  # padded rows, one tile
    _check(CacheConfig(1, 4, 4, 8, 30, "i8", align=0), 30, 4, 3)  # tiles of 3
    _check(CacheConfig(1, 4, 2, 12, 30, "i8", align=0), 30, 8, 8)  # head_dim not a multiple of 8
    _check(CacheConfig(1, 2, 1, 6, 10, "i8", align=0), 10, 9, 4)


def test_fused_head_with_explicit_slots_growing_v_scales_and_a_sharp_softmax():
    slots = zeros("i", 9)  # a block table's order, not the slot order
    for i, s in enumerate((5, 2, 17, 3, 11, 12, 0, 29, 8)):
        slots[i] = s
    _check(CacheConfig(1, 4, 2, 8, 30, "i8", align=0), 30, 5, 4, slots=slots)
    _check(CacheConfig(1, 4, 2, 8, 48, "i8", align=0), 48, 6, 8, vgrow=1.25)
    _check(CacheConfig(1, 4, 1, 16, 40, "i8", align=0), 40, 7, 8, kscale=30.0, qscale=40.0)


def test_fused_head_through_the_overflow_guard():
    # equal scores and V codes of 127: each tile of 64 adds ~2**28 to the accumulators; the guard halves them
    cfg = CacheConfig(1, 2, 1, 8, 128, "i8", align=0)
    c = KVCache(cfg)
    one = zeros("f", 8)
    for i in range(8):
        one[i] = 1.0
    big = zeros("f", 8)
    for i in range(8):
        big[i] = 500.0
    for p in range(128):
        c.append([one], [big])
    att = Attention(c, tile=64)
    q = zeros("f", 16)
    for kind in kernels.available():
        att.k = kernels.select(kind)
        if hasattr(att.k, "att_preload"):
            att.k.att_preload(att.k)
        oq, oe, ws = _steps(att, cfg, q)
        assert ws > 0, kind  # the guard fired
        for i in range(16):  # all weights equal: the output is V itself
            assert abs(oq[i] * 2.0 ** oe[i // 8] - 500.0) < 2.0, (kind, i)
    kernels.select()
