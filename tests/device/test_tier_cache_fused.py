# The tiered cache's cold i8 blocks through the fused kernels (kernels.viper_head.att_cold_i8: every query head of a
# block in one call, each resuming its own running state), as the integer forward pass runs them (it preloads the
# fused drivers): the same bits as the tile loop a head at a time and as the plain kernels, close to a plain-Python
# full-softmax reference over the live positions, and no allocation. Its own file: the fused kernels' code is
# loaded here only, on a fresh heap.
import gc

import kvedge.cache  # noqa: F401  compiled first: importing from source peaks lower on a 215 KB heap
from kvedge import kernels
from kvedge.tier import cache as tiered
from kvedge.attention import quantize_query
from kvedge.compat import zeros
from _support import need, skip, under_heap_lock
from _tieredref import SHAPES, case, cosine, exact_rows, int_out, live_positions, query, reference, remove


def _fused_kinds():
    """The kinds whose kernel module brings the fused drivers, each with them loaded."""
    out = []
    for kind in kernels.available():
        k = kernels.select(kind)
        pre = getattr(k, "att_preload", None)
        if pre is not None:
            pre(k)
            out.append(kind)
    kernels.select()
    return out


def _bits(tc, kind, fused, layer, q):
    tc.att.k = kernels.select(kind)
    tc.att.fused = fused
    return int_out(tc, layer, q)


def test_fused_cold_blocks_equal_the_tile_loop_and_plain_kernels():
    need("fs")
    fast = _fused_kinds()
    if not fast:
        skip("needs viper or asm kernels (the plain kernels' tier: test_tier_cache)")
    for i, shape in enumerate(SHAPES[:3]):
        tc = case(shape, "i8", "i8", 80 + i)
        try:
            H, KVH, D = shape[:3]
            assert tc.store.count > 0
            live = live_positions(tc)
            for layer in range(tc.L):
                q = query(tc.cfg, 90 + i + layer)
                ref, want = _bits(tc, "plain", False, layer, q)
                for kind in fast:
                    for fused in (False, True):
                        out, bits = _bits(tc, kind, fused, layer, q)
                        assert bits == want, (shape, layer, kind, fused)
                # the path's arithmetic against the exact values (i8 ring, i8 cold, int8 query: three roundings)
                cos = cosine(ref, reference(tc.cfg, exact_rows(80 + i, D, KVH), live, layer, q))
                assert cos >= 0.998, (shape, layer, cos)
        finally:
            tc.att.fused = True
            kernels.select()
            tc.close()
            remove()
        tc = live = q = ref = None
        gc.collect()


def _steps(tc, qc, qs, oq, oe):
    for layer in range(tc.L):
        tc.step_q8(layer, qc, qs, oq, oe)


def test_fused_cold_step_allocates_nothing():
    need("fs", "heap_lock")
    fast = _fused_kinds()
    if not fast:
        skip("needs viper or asm kernels")
    tc = case((8, 2, 16, 16, 2, 8, 4, 80, 2, False), "i8", "i8", 45)
    try:
        n = tc.heads * tc.D
        qc, qs, oq, oe = zeros("b", n), zeros("H", tc.heads), zeros("i", n), zeros("i", tc.heads)
        quantize_query(query(tc.cfg, 46), qc, qs, tc.heads)
        assert tc.store.count == 4
        for kind in fast:
            tc.att.k = kernels.select(kind)
            assert tiered._vcold is not None and getattr(tc.att.k, "att_rows_i8", None), kind  # the fold runs
            _steps(tc, qc, qs, oq, oe)  # warm
            before = list(oq)
            reads = tc.store.reads
            under_heap_lock(_steps, tc, qc, qs, oq, oe)
            assert list(oq) == before and tc.store.reads == reads + tc.L * tc.store.count, kind
    finally:
        kernels.select()
        tc.close()
        remove()


def test_native_adler_equals_the_stores():
    """kernels.viper_tier.adler (viper: the integer pass's tier checksums its blocks with it) gives coldstore.adler's
    sums on every length, across its 2,048-byte reductions, on bytearrays and memoryview slices, chained."""
    need("viper")
    from kvedge.tier import store as coldstore
    import kvedge.kernels.viper_tier as vc
    x = 12345
    buf = bytearray(5000)
    for i in range(len(buf)):
        x = (x * 1103515245 + 12345) & 0x3FFFFFFF
        buf[i] = 255 if i % 7 == 0 else (x >> 12) & 255
    mv = memoryview(buf)
    for lo, n in ((0, 0), (0, 1), (3, 7), (0, 2047), (0, 2048), (1, 2049), (5, 4995), (0, 5000)):
        want = zeros("i", 2)
        got = zeros("i", 2)
        for ab in (want, got):
            ab[0] = 1
        coldstore.adler(mv[lo:lo + n], n, want)
        vc.adler(mv[lo:lo + n], n, got)
        assert list(got) == list(want), (lo, n, list(got), list(want))
        coldstore.adler(buf, 300, want)  # chained onto the state so far
        vc.adler(buf, 300, got)
        assert list(got) == list(want), (lo, n)
