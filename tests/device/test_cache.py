# The KV cache manager against an independent model of what it must hold. Runs on every runtime.
from array import array
import gc

from kvedge import budget, quant
from kvedge.cache import KVCache
from kvedge.cacheq8 import KVCacheQ8  # noqa: E402 (q8_store_block, write_q8_at, store_q8: the integer pass's cache)
from kvedge.config import CacheConfig
from kvedge.errors import BudgetError, CacheFullError
from kvedge.compat import IS_MICROPYTHON
from _support import ON_BOARD, Rng, need, raises, message, under_heap_lock
from _cacheref import RefCache, f32, kivi_f32, row, tolerance


def _append(c, seed, pos):
    L, n, D = c.cfg.layers, c.cfg.kv_heads * c.cfg.head_dim, c.cfg.head_dim
    ks = [row(seed, pos, l, 0, n, D) for l in range(L)]
    vs = [row(seed, pos, l, 1, n, D) for l in range(L)]
    return c.append(ks, vs)


def _check_all(c, ref, seed):
    """Every live position reads back within its storage type's bound; nothing else is live."""
    cfg = c.cfg
    D = cfg.head_dim
    live = ref.live()
    out = array("i", [0] * cfg.slots)
    n = c.positions(out)
    assert list(out[:n]) == live, (list(out[:n]), live)
    assert c.n_cached == len(live) and c.n_seen == ref.n
    buf = array("f", [0.0] * D)
    for p in live:
        slot = c.slot_of(p)
        for layer in range(cfg.layers):
            for kv in (0, 1):
                x = row(seed, p, layer, kv, cfg.kv_heads * D, D)
                for h in range(cfg.kv_heads):
                    c.read(layer, h, p, kv, buf)
                    for i in range(D):
                        want = f32(x[h * D + i])
                        tol = tolerance(cfg, seed, p, layer, kv, h, i, slot, ref.n)
                        err = abs(buf[i] - want)
                        assert err <= tol, (cfg, p, layer, kv, h, i, buf[i], want, err, tol)


def _run(cfg, seed, steps, rng):
    c = KVCache(cfg)
    ref = RefCache(cfg.max_tokens, cfg.window, cfg.sinks)
    appended = 0
    for _ in range(steps):
        op = rng.randint(0, 19)
        if op == 0:
            c.reset()
            ref.reset()
        elif ref.can_append():
            _append(c, seed, ref.n)
            ref.append()
            appended += 1
        else:
            before = bytes(c.arena)
            raises(CacheFullError, _append, c, seed, ref.n)
            assert bytes(c.arena) == before
        if op == 1 or op == 2:
            _check_all(c, ref, seed)
    _check_all(c, ref, seed)
    return c, ref, appended


CONFIGS = [
    dict(layers=1, heads=2, kv_heads=1, head_dim=8, max_tokens=12, dtype="f32", align=0),
    dict(layers=2, heads=4, kv_heads=2, head_dim=8, max_tokens=16, dtype="f16", window=6, sinks=2),
    dict(layers=2, heads=2, kv_heads=2, head_dim=6, max_tokens=16, dtype="i8", window=5, sinks=1, align=16),
    dict(layers=1, heads=4, kv_heads=1, head_dim=8, max_tokens=20, dtype="i8", prefix=3, align=0),
    dict(layers=1, heads=2, kv_heads=2, head_dim=8, max_tokens=20, dtype="i4", window=8, sinks=2, prefix=2,
         group=4, align=0),
    dict(layers=2, heads=2, kv_heads=1, head_dim=4, max_tokens=17, dtype="i4", prefix=1, group=4, align=8),
    dict(layers=1, heads=1, kv_heads=1, head_dim=8, max_tokens=12, dtype="i4", window=6, residual=0, align=0),
    # KIVI residuals longer than one group: ring with sinks quantized too, and group 2 without a window
    dict(layers=1, heads=2, kv_heads=1, head_dim=4, max_tokens=22, dtype="i4", window=16, sinks=4, group=4,
         residual=8, align=16),
    dict(layers=2, heads=2, kv_heads=2, head_dim=2, max_tokens=26, dtype="i4", prefix=2, group=2, residual=6,
         align=0),
    # fewer slots than R + G: everything stays at f32
    dict(layers=1, heads=1, kv_heads=1, head_dim=4, max_tokens=10, dtype="i4", prefix=2, group=4, residual=8,
         align=4),
    # i2: KIVI with sinks quantized in the ring, a two-group residual without a window, per-token keys
    dict(layers=1, heads=2, kv_heads=1, head_dim=8, max_tokens=24, dtype="i2", window=16, sinks=4, group=4,
         residual=4, align=0),
    dict(layers=2, heads=4, kv_heads=2, head_dim=4, max_tokens=26, dtype="i2", prefix=2, group=4, residual=8,
         align=8),
    dict(layers=1, heads=1, kv_heads=1, head_dim=12, max_tokens=12, dtype="i2", window=6, residual=0, align=0),
]


def _residuals(dt):
    # (group, residual) pairs: KIVI residuals of 1-3 groups and residual 0 (naive keys) for i4 and i2
    if dt in ("i4", "i2"):
        return ((8, 0), (8, 8), (8, 16), (8, 24), (32, 32), (1, 5), (32, 64))
    return ((32, None),)


def test_arena_equals_formula_for_every_dtype_and_alignment():
    for dt in ("f32", "f16", "i8", "i4", "i2"):
        for group, residual in _residuals(dt):
            for align in ((0, 4, 64) if ON_BOARD else (0, 1, 4, 16, 64)):  # lean on a board
                for window, sinks, prefix in ((0, 0, 0), (64, 4, 4), (0, 0, 8), (32, 8, 0)):
                    if residual and window and window < residual + group:
                        continue
                    cfg = CacheConfig(2, 2, 1, 8, 64 + prefix, dt, window=window, sinks=sinks, align=align,
                                      group=group, residual=residual, prefix=prefix)
                    c = KVCache(cfg)
                    assert len(c.arena) == cfg.nbytes() == budget.cache_bytes(cfg)
                    assert c.stats()["total_bytes"] == cfg.nbytes()
                    assert c.stats()["padding_bytes"] == cfg.nbytes(True)["padding"]
                    # the residual's f32 rows are their own region of the layout: R + G - 1 rows per pair, or
                    # every slot after the prefix when there are fewer
                    rows = min(residual + group - 1, cfg.slots - prefix) if (dt in ("i4", "i2") and residual) else 0
                    assert c.DATA - c.RES == 2 * 2 * 1 * rows * budget.align_up(32, align)
                    assert cfg.nbytes(True)["residual"] == c.DATA - c.RES
                    c = None
                    if IS_MICROPYTHON:  # a board-sized heap: the next arena needs this one's block back
                        gc.collect()


def test_random_operations_match_the_reference_model():
    # the seeded driver that runs on every runtime (hypothesis drives more on CPython: tests/host)
    rng = Rng(7)
    for i, kw in enumerate(CONFIGS):
        cfg = CacheConfig(**kw)
        # at least 3x capacity of appends so rings wrap several times (ON_BOARD: lean, at least once)
        c, ref, appended = _run(cfg, 100 + i, (2 if ON_BOARD else 4) * cfg.slots + 10, rng)
        assert appended > cfg.slots
        if cfg.window:
            assert c.evictions >= ref.evictions()
        gc.collect()


def test_window_mapping_at_every_fill_level_and_after_wraps():
    cfg = CacheConfig(1, 1, 1, 8, 8, "f32", window=5, sinks=2, align=0)
    c = KVCache(cfg)
    ref = RefCache(8, 5, 2)
    out = array("i", [0] * cfg.slots)
    for p in range(40):
        _append(c, 3, p)
        ref.append()
        n = c.positions(out)
        assert list(out[:n]) == ref.live()
        assert c.evictions == ref.evictions()
        # each live position maps to its own slot, and the slot holds that position
        slots = [c.slot_of(q) for q in ref.live()]
        assert len(set(slots)) == len(slots)
        assert all(c.slot_pos[s] == q for s, q in zip(slots, ref.live()))
    _check_all(c, ref, 3)
    e = raises(IndexError, c.read, 0, 0, 10, 0, array("f", [0.0] * 8))
    assert "no longer cached" in message(e)


def test_full_cache_without_window_raises_and_changes_nothing():
    cfg = CacheConfig(1, 2, 1, 4, 3, "f16", align=0)
    c = KVCache(cfg)
    for p in range(3):
        _append(c, 1, p)
    before = (bytes(c.arena), list(c.slot_pos), c.n_seen, c.n_cached, c.used_bytes)
    e = raises(CacheFullError, _append, c, 1, 3)
    assert "cache full: 3 of 3 tokens" in message(e)
    assert (bytes(c.arena), list(c.slot_pos), c.n_seen, c.n_cached, c.used_bytes) == before
    assert c.stats()["alloc_failures"] == 1


def test_budget_refusal_before_allocating():
    cfg = CacheConfig(4, 8, 8, 64, 256, "f32")
    e = raises(BudgetError, KVCache, cfg, 100000)
    assert isinstance(e, MemoryError)
    assert e.need == cfg.nbytes() and e.budget == 100000
    assert ("needs %d bytes, budget is 100000 bytes" % cfg.nbytes()) in message(e)
    c = KVCache(CacheConfig(1, 1, 1, 8, 4, "f32", align=0), budget=256)  # exactly enough
    assert len(c.arena) == 256


def _state(c):
    return (bytes(c.arena), list(c.slot_pos), c.n_seen, c.n_cached, c.used_bytes, c.evictions,
            list(c.res_lo), list(c.res_hi))


def test_an_arena_allocated_earlier_is_used_and_checked_first():
    # a board allocates its largest buffer first, while the heap is one free block; the cache takes it as its
    # arena when it is exactly the config's size, and refuses anything else before building any state
    cfg = CacheConfig(2, 4, 2, 8, 16, "i8", window=12, sinks=2)
    buf = bytearray(cfg.nbytes())
    c = KVCache(cfg, arena=buf)
    assert c.arena is buf
    c.start_token()
    c.write(0, [0.5] * 16, [0.25] * 16)
    for bad in (bytearray(cfg.nbytes() - 1), bytes(cfg.nbytes()), memoryview(buf)):
        e = raises(ValueError, KVCache, cfg, arena=bad)
        assert ("exactly %d bytes" % cfg.nbytes()) in message(e)
    raises(BudgetError, KVCache, cfg, cfg.nbytes() - 1, buf)


def test_bad_input_raises_precisely_and_leaves_state_unchanged():
    cfg = CacheConfig(2, 2, 1, 4, 8, "i8", align=0)
    c = KVCache(cfg)
    _append(c, 5, 0)
    c.start_token()
    c.write(0, [0.5] * 4, [0.25] * 4)
    snap = _state(c)
    good = [0.1] * 4
    nan = float("nan")
    inf = float("inf")
    cases = [
        (ValueError, "k has 3 values, expected 4", c.write, 1, [0.1] * 3, good),
        (TypeError, "v must be a sequence", c.write, 1, good, 7),
        (ValueError, "k[2] is not finite: nan", c.write, 1, [0.1, 0.2, nan, 0.3], good),
        (ValueError, "v[0] is not finite: inf", c.write, 1, good, [inf, 0.1, 0.1, 0.1]),
        (TypeError, "k[1] is not a number", c.write, 1, [0.1, "x", 0.1, 0.1], good),
        (IndexError, "layer 2 out of range (0..1)", c.write, 2, good, good),
        (IndexError, "layer -1 out of range", c.write, -1, good, good),
        (ValueError, "outside an i8 row's range", c.write, 1, [1e7, 0.0, 0.0, 0.0], good),
        (IndexError, "kv head 1 out of range (0..0)", c.read, 0, 1, 0, 0, array("f", [0.0] * 4)),
        (IndexError, "position 5 out of range (0..1)", c.read, 0, 0, 5, 0, array("f", [0.0] * 4)),
        (IndexError, "position -1 out of range", c.read, 0, 0, -1, 0, array("f", [0.0] * 4)),
        (ValueError, "out holds 3 values, needs 4", c.read, 0, 0, 0, 0, array("f", [0.0] * 3)),
        (TypeError, "out must be a writable buffer", c.read, 0, 0, 0, 0, None),
        (ValueError, "kv must be 0 (K) or 1 (V)", c.read, 0, 0, 0, 2, array("f", [0.0] * 4)),
        (ValueError, "ks has 1 values, expected 2", c.append, [good], [good]),
        (ValueError, "k[0] is not finite", c.append, [[nan] * 4, good], [good, good]),
        (ValueError, "k_codes has 3 values, expected 4", c.write_q8, 1, array("b", [1] * 3), [0x3C00],
         array("b", [1] * 4), [0x3C00]),
        (ValueError, "k_scales[0] = 31744 is outside 0..31743 (f16 scale bits", c.write_q8, 1,
         array("b", [1] * 4), [0x7C00], array("b", [1] * 4), [0x3C00]),
        (ValueError, "k_codes[0] = 200 is outside -128..127", c.write_q8, 1, [200, 0, 0, 0], [0x3C00], [0] * 4,
         [0x3C00]),
    ]
    for exc, text, fn, *args in cases:
        e = raises(exc, fn, *args)
        assert text in message(e), (text, message(e))
        assert _state(c) == snap, text
    f16 = KVCache(CacheConfig(1, 1, 1, 4, 4, "f16", align=0))
    f16.start_token()
    e = raises(ValueError, f16.write, 0, [70000.0, 0, 0, 0], [0.0] * 4)
    assert "outside the f16 range" in message(e)
    e = raises(TypeError, f16.write_q8, 0, [0] * 4, [0], [0] * 4, [0])
    assert "needs an i8 cache" in message(e)
    fresh = KVCache(CacheConfig(1, 1, 1, 4, 4, "f32", align=0))
    e = raises(ValueError, fresh.write, 0, good, good)
    assert "call start_token() first" in message(e)


def test_f16_storage_is_ieee_half_rounding():
    cfg = CacheConfig(1, 1, 1, 8, 4, "f16", align=0)
    c = KVCache(cfg)
    # ties to even, subnormals, the largest half, a value that rounds up into the next binade
    xs = [1.00048828125, 1.00146484375, 2.0 ** -24 * 1.5, 2.0 ** -24 * 2.5, 65504.0, -0.333251953125,
          0.0999755859375, 2047.5]
    want = [1.0, 1.001953125, 2.0 ** -23, 2.0 ** -23, 65504.0, -0.333251953125, 0.0999755859375, 2048.0]
    c.append([xs], [xs])
    out = array("f", [0.0] * 8)
    c.read(0, 0, 0, 0, out)
    assert list(out) == [f32(w) for w in want], list(out)


def test_i8_error_within_half_a_step_and_prefix_exact():
    cfg = CacheConfig(1, 2, 2, 16, 10, "i8", prefix=2, align=0)
    c = KVCache(cfg)
    for p in range(10):
        _append(c, 9, p)
    codes = array("b", [0] * 16)
    buf = array("f", [0.0] * 16)
    for p in range(10):
        for h in range(2):
            for kv in (0, 1):
                x = row(9, p, 0, kv, 32, 16)[h * 16:(h + 1) * 16]
                c.read(0, h, p, kv, buf)
                if p < 2:
                    assert list(buf) == [f32(e) for e in x]  # the prefix is f32, exact
                    continue
                sb = c.read_codes(0, h, p, kv, codes)
                step = quant.f16_value(sb)
                assert step >= max(abs(e) for e in x) / 127.0
                for i in range(16):
                    assert abs(codes[i]) <= 127
                    assert abs(buf[i] - x[i]) <= step / 2 * (1 + 1e-5), (p, h, kv, i)


def test_i4_kivi_sliding_residual_exact_then_quantized_in_place():
    # the newest R..R+G-1 tokens read back exactly (f32); a group is quantized as it leaves the residual
    buf = array("f", [0.0] * 8)
    for G, R, sinks, window in ((4, 4, 0, 0), (4, 8, 0, 0), (2, 6, 0, 0), (4, 8, 4, 12)):
        cfg = CacheConfig(1, 1, 1, 8, 24 if not window else sinks + window, "i4", group=G, residual=R,
                          window=window, sinks=sinks, align=0)
        c = KVCache(cfg)
        ref = RefCache(cfg.max_tokens, window, sinks)
        for p in range(40 if window else 24):
            _append(c, 4, p)
            ref.append()
            exact = [q for q in ref.live() if kivi_f32(cfg, ref.n, q)]
            assert R <= len(exact) <= R + G - 1 or ref.n < R + G, (G, R, p, exact)
            assert exact == list(range(ref.n - len(exact), ref.n))  # the newest ones
            for q in ref.live():
                c.read(0, 0, q, 0, buf)
                same = list(buf) == [f32(e) for e in row(4, q, 0, 0, 8, 8)]
                # an f32 row is exact; a quantized key row moved (the outlier channel alone forces it)
                assert same == (q in exact), (G, R, p, q)
        _check_all(c, ref, 4)
        c = None
        gc.collect()


def test_quantize_residual_seals_whole_groups():
    # a cache that never holds R + G tokens keeps them at f32 until quantize_residual(), which quantizes the
    # whole groups waiting (keys per channel over each group) and leaves a part-filled group at f32
    cfg = CacheConfig(2, 2, 1, 8, 10, "i4", prefix=2, group=4, residual=8, align=0)
    c = KVCache(cfg)
    buf = array("f", [0.0] * 8)

    def exact(q):
        c.read(1, 0, q, 0, buf)
        return list(buf) == [f32(e) for e in row(6, q, 1, 0, 8, 8)]
    for p in range(8):
        _append(c, 6, p)
    assert all(exact(q) for q in range(8))
    assert c.quantize_residual() == 2  # one group of 4 (positions 2-5) per layer; 6, 7 stay f32
    assert [exact(q) for q in range(8)] == [True, True, False, False, False, False, True, True]
    assert c.quantize_residual() == 0
    for p in range(8, 10):
        _append(c, 6, p)
    assert c.quantize_residual() == 2  # positions 6-9
    assert [exact(q) for q in range(10)] == [True, True] + [False] * 8
    ref = RefCache(10)
    ref.n = 10
    _check_all_quantized(c, ref, 6)
    c.reset()
    assert c.quantize_residual() == 0 and list(c.res_lo) == [0, 0] and list(c.res_hi) == [0, 0]


def _check_all_quantized(c, ref, seed):
    """Every live row within its i4 bound (as if no token were left in the residual)."""
    cfg = c.cfg
    D = cfg.head_dim
    buf = array("f", [0.0] * D)
    for p in ref.live():
        slot = c.slot_of(p)
        for layer in range(cfg.layers):
            for kv in (0, 1):
                x = row(seed, p, layer, kv, cfg.kv_heads * D, D)
                for h in range(cfg.kv_heads):
                    c.read(layer, h, p, kv, buf)
                    for i in range(D):
                        tol = tolerance(cfg, seed, p, layer, kv, h, i, slot)
                        assert abs(buf[i] - f32(x[h * D + i])) <= tol, (p, layer, kv, h, i)


def test_used_and_peak_bytes():
    cfg = CacheConfig(2, 2, 1, 8, 8, "f32", window=4, sinks=1, align=64)
    c = KVCache(cfg)
    per_token = 2 * 2 * 1 * 64  # layers * K,V * kv_heads * padded row
    for p in range(3):
        _append(c, 2, p)
    assert c.stats()["used_bytes"] == 3 * per_token
    for p in range(3, 20):
        _append(c, 2, p)
    s = c.stats()
    assert s["used_bytes"] == 5 * per_token == s["peak_bytes"] == s["total_bytes"]
    assert s["tokens_seen"] == 20 and s["tokens_cached"] == 5 and s["evictions"] == 15
    assert s["padding_bytes"] == 5 * 2 * 2 * 32
    c.reset()
    s = c.stats()
    assert s["used_bytes"] == 0 and s["peak_bytes"] == 5 * per_token and s["tokens_seen"] == 0
    assert c.stats_json() == ('{"total_bytes":1280,"used_bytes":0,"peak_bytes":1280,"padding_bytes":640,'
                              '"tokens_seen":0,"tokens_cached":0,"evictions":15,"alloc_failures":0}')


def test_reset_reuses_the_arena():
    c = KVCache(CacheConfig(1, 1, 1, 8, 4, "i8", align=0))
    arena = c.arena
    for cycle in range(3):
        for p in range(4):
            _append(c, cycle, p)
        c.reset()
        assert c.arena is arena and c.n_cached == 0 and c.n_seen == 0
    _append(c, 8, 0)
    ref = RefCache(4)
    ref.n = 1
    _check_all(c, ref, 8)


def _q8_cycle(c, kc, ks, vc, vs, codes, n):
    for _ in range(n):
        c.start_token()
        for layer in range(c.L):
            c.write_q8(layer, kc, ks, vc, vs)
    return c.read_codes(0, 0, c.n_seen - 1, 1, codes)


def test_prequantized_append_and_read_allocate_nothing():
    need("heap_lock")
    c = KVCache(CacheConfig(2, 4, 2, 8, 40, "i8", window=16, sinks=4))
    kc = array("b", [(i * 7) % 255 - 127 for i in range(16)])
    vc = array("b", [(i * 3) % 200 - 100 for i in range(16)])
    ks = array("H", [0x2C00, 0x3000])
    vs = array("H", [0x3400, 0x3800])
    codes = array("b", [0] * 8)
    _q8_cycle(c, kc, ks, vc, vs, codes, 30)  # warm: the ring has wrapped
    sb = under_heap_lock(_q8_cycle, c, kc, ks, vc, vs, codes, 50)
    assert sb == 0x3400 and list(codes) == list(vc[:8])
    assert c.n_seen == 80 and c.n_cached == 20


def _float_appends(c, k, v, n):
    for _ in range(n):
        c.start_token()
        for layer in range(c.L):
            c.write(layer, k, v)


def test_float_append_allocation_is_bounded_and_does_not_grow():
    need("mem_alloc")
    for dt in ("f32", "f16", "i8"):
        c = KVCache(CacheConfig(1, 2, 2, 8, 64, dt, align=0))
        k = array("f", [0.25 * i for i in range(16)])
        v = array("f", [-0.5 * i for i in range(16)])
        per = []
        for n_before in (1, 40):
            while c.n_seen < n_before:
                _float_appends(c, k, v, 1)
            gc.collect()
            gc.disable()
            a0 = gc.mem_alloc()
            _float_appends(c, k, v, 4)
            per.append((gc.mem_alloc() - a0) // 4)
            gc.enable()
        assert per[0] == per[1], (dt, per)  # same bytes per append with 1 or 40 tokens cached


def test_windowed_soak_and_reset_cycles_keep_memory_flat():
    need("mem_alloc")
    c = KVCache(CacheConfig(1, 1, 1, 8, 20, "i8", window=16, sinks=4, align=0))
    kc = array("b", [1, -2, 3, -4, 5, -6, 7, -8])
    sc = array("H", [0x3C00])
    codes = array("b", [0] * 8)
    _q8_cycle(c, kc, sc, kc, sc, codes, 100)
    gc.collect()
    a0 = gc.mem_alloc()
    thousands = 20 if ON_BOARD else 100  # tokens through the window (ON_BOARD: lean, as test_soak's streams)
    for _ in range(thousands):
        _q8_cycle(c, kc, sc, kc, sc, codes, 1000)
    gc.collect()
    a1 = gc.mem_alloc()
    for _ in range(thousands * 10):
        c.reset()
        _q8_cycle(c, kc, sc, kc, sc, codes, 3)
    gc.collect()
    a2 = gc.mem_alloc()
    assert c.evictions >= thousands * 1000 - 20
    assert a1 - a0 <= 64 and a2 - a1 <= 64, (a0, a1, a2)


def test_layout_accessors_are_the_documented_layout():
    # the offsets from the layout comment at the top of cache.py, computed here from the budget's region sizes:
    # prefix, residual, rows [layer][K|V][kv_head][b], then the metadata
    L, H, D = 2, 3, 8
    for dt, align, prefix in (("i8", 16, 2), ("i8", 0, 0), ("f16", 64, 1), ("i4", 0, 0)):
        cfg = CacheConfig(L, 6, H, D, 12, dt, align=align, prefix=prefix,
                          **({"group": 4, "residual": 4} if dt == "i4" else {}))
        c = KVCache(cfg)
        size = cfg.nbytes(True)
        prow = budget.align_up(budget.row_bytes(D, dt), align)
        frow = budget.align_up(4 * D, align)
        B = 12 - prefix
        data = size["prefix"] + size["residual"]
        meta = data + size["data"]
        assert c.row_pitch() == prow and c.f32_pitch() == frow
        for layer in range(L):
            for kv in (0, 1):
                for h in range(H):
                    i = (layer * 2 + kv) * H + h
                    assert c.base(layer, kv, h) == data + i * B * prow
                    for b in (0, 1, B - 1):
                        assert c.row_at(layer, kv, h, b) == data + (i * B + b) * prow
                        if dt == "i8":
                            assert c.scale_at(layer, kv, h, b) == meta + (i * B + b) * 2
                        elif dt == "i4" and kv == 1:  # values: scale and zero per row, after the keys' groups
                            kmeta = L * H * (B // 4) * D * 4
                            assert c.scale_at(layer, kv, h, b) == meta + kmeta + ((layer * H + h) * B + b) * 4
                        elif dt == "i4":  # KIVI keys: per channel of the row's group
                            assert c.scale_at(layer, kv, h, b) == meta + ((layer * H + h) * (B // 4) + b // 4) * D * 4
                    for p in range(prefix):
                        assert c.prefix_at(layer, kv, h, p) == (i * prefix + p) * frow
                    if dt == "i4":
                        R = c.R
                        assert c.residual_at(layer, kv, h, R - 1) == size["prefix"] + (i * R + R - 1) * frow


def _q8_at_cycle(c, codes, scales, p, store, n):
    for _ in range(n):
        c.start_token()
        for layer in range(c.L):
            c.write_q8_at(layer, codes, scales, -1, p, store)


def test_write_q8_at_stores_what_write_q8_stores_and_refuses_first():
    from kvedge.kernels import q8_plain
    from kvedge.kernels.words import S_WORDS
    rng = Rng(41)
    cfg = CacheConfig(3, 4, 2, 8, 9, "i8", window=6, sinks=1, align=16)  # padded rows, a ring that wraps
    q, kvd = 4 * 8, 2 * 8
    for store in (None, q8_plain.q_store):
        ref = KVCache(cfg)
        c = KVCacheQ8(cfg)
        p = array("i", [0] * S_WORDS)
        codes = array("b", [0] * (q + 2 * kvd))
        scales = array("H", [0] * (4 + 2 * 2))
        c.q8_store_block(p, q, q + kvd, 4, 6, len(codes), len(scales))
        for t in range(11):
            ref.start_token()
            c.start_token()
            for layer in range(3):
                for i in range(len(codes)):
                    codes[i] = rng.randint(-128, 127)
                for i in range(len(scales)):
                    scales[i] = rng.randint(0, 0x7BFF)
                ref.write_q8(layer, codes[q:q + kvd], scales[4:6], codes[q + kvd:], scales[6:8])
                c.write_q8_at(layer, codes, scales, -1, p, store)
            assert bytes(c.arena) == bytes(ref.arena), (store, t)
        # refused before a byte moves: a scale outside f16's finite range, a layer, the caller's buffers
        before = bytes(c.arena)
        scales[5] = 0x7C00
        assert "f16 scale bits" in message(raises(ValueError, c.write_q8_at, 1, codes, scales, -1, p, store))
        scales[5] = 0
        raises(IndexError, c.write_q8_at, 3, codes, scales, -1, p, store)
        raises(ValueError, c.write_q8_at, 0, codes[:q + kvd], scales, -1, p, store)
        assert bytes(c.arena) == before
    raises(TypeError, KVCacheQ8(CacheConfig(1, 2, 1, 8, 4, "f16")).q8_store_block, p, 0, 8, 0, 1, 16, 2)
    raises(ValueError, c.q8_store_block, p, q, q + kvd + 1, 4, 6, len(codes), len(scales))  # V codes pass the end
    pre = KVCacheQ8(CacheConfig(1, 2, 1, 8, 4, "i8", prefix=1))
    pre.q8_store_block(p, 0, 8, 0, 1, 16, 2)
    pre.start_token()
    raises(ValueError, pre.write_q8_at, 0, array("b", [0] * 16), array("H", [0, 0]), -1, p, None)


def test_write_q8_at_allocates_nothing():
    need("heap_lock")
    from kvedge.kernels import q8_plain
    from kvedge.kernels.words import S_WORDS
    c = KVCacheQ8(CacheConfig(2, 4, 2, 8, 40, "i8", window=16, sinks=4))
    p = array("i", [0] * S_WORDS)
    codes = array("b", [(i * 7) % 255 - 127 for i in range(32 + 32)])
    scales = array("H", [0x2C00 + i for i in range(8)])
    c.q8_store_block(p, 32, 48, 4, 6, len(codes), len(scales))
    for store in (None, q8_plain.q_store):
        _q8_at_cycle(c, codes, scales, p, store, 30)  # warm: the ring has wrapped
        under_heap_lock(_q8_at_cycle, c, codes, scales, p, store, 20)
    out = array("b", [0] * 8)
    assert c.read_codes(1, 1, c.n_seen - 1, 1, out) == scales[7] and list(out) == list(codes[56:64])
