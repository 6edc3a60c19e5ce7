# The tiered cache (kvedge.tier.cache): hot ring + sinks in RAM, older tokens in blocks on flash, attended in one
# online-softmax pass. Checked against a plain-Python full-softmax reference over the positions that must be
# live, on every runtime with a filesystem. (The store itself: test_tier_store.py.)
import gc

import kvedge.cache  # noqa: F401  compiled first: importing from source peaks lower on a 215 KB heap
from kvedge import kernels
from kvedge.attention import quantize_query
from kvedge.compat import zeros
from _support import need, under_heap_lock
from _tieredref import (SHAPES, case, cosine, exact_rows, int_out, live_positions, query, reference, rel_err, remove,
                        stored_rows)


def test_f32_hot_and_cold_equal_the_full_cache_reference():
    need("fs")
    for i, shape in enumerate(SHAPES):
        tc = case(shape, "f32", "f32", 10 + i)
        try:
            live = live_positions(tc)
            H, KVH, D, W, S, B, C, n = shape[:8]
            # sinks, the last C blocks before the ring, and the ring (W - B + 1 .. W tokens)
            assert tc.store.count == C and tc.drops > 0 and live[:S] == list(range(S))
            assert live[S:] == list(range(S + tc.store.k0 * B, n)) and W - B < tc.ring.n_cached - S <= W
            for layer in range(tc.L):
                q = query(tc.cfg, 50 + layer)
                out = zeros("f", H * D)
                tc.step(layer, q, out)
                err = rel_err(out, reference(tc.cfg, exact_rows(10 + i, D, KVH), live, layer, q))
                assert err <= 1e-5, (shape, layer, err)
        finally:
            tc.close()
            remove()
        tc = live = q = out = None  # the next shape's cache must not meet this one's in the heap
        gc.collect()


def test_i4_and_i8_cold_stores_attend_what_they_hold():
    need("fs")
    for cold, bound in (("i4", 0.99), ("i8", 0.999)):
        for i, shape in enumerate(SHAPES[:3]):
            tc = case(shape, "f32", cold, 20 + i)
            try:
                H, KVH, D = shape[:3]
                live = live_positions(tc)
                q = query(tc.cfg, 60 + i)
                out = zeros("f", H * D)
                last = tc.L - 1
                tc.step(last, q, out)
                # equal to attention over the concatenated cache as stored (cold rows dequantized) ...
                assert rel_err(out, reference(tc.cfg, stored_rows(tc), live, last, q)) <= 1e-5, (cold, shape)
                # ... which is close to attention over the exact values
                cos = cosine(out, reference(tc.cfg, exact_rows(20 + i, D, KVH), live, last, q))
                assert cos >= bound, (cold, shape, cos)
            finally:
                tc.close()
                remove()
            tc = live = q = out = None
            gc.collect()


def test_integer_path_on_i8_ring_with_i4_and_i8_cold():
    need("fs")
    # against the exact values: i4 as the acceptance asks; i8 ring + i8 cold + int8 query: three roundings
    for cold, bound in (("i4", 0.99), ("i8", 0.998)):
        for i, shape in enumerate(SHAPES[:3]):
            tc = case(shape, "i8", cold, 30 + i)
            try:
                H, KVH, D = shape[:3]
                live = live_positions(tc)
                q = query(tc.cfg, 70 + i)
                first = None
                for kind in kernels.available():
                    kernels.select(kind)
                    tc.att.k = kernels.get()
                    out, bits = int_out(tc, tc.L - 1, q)
                    if first is None:
                        first = bits
                        cos = cosine(out, reference(tc.cfg, exact_rows(30 + i, D, KVH), live, tc.L - 1, q))
                        assert cos >= bound, (cold, shape, cos)
                        # against the stored rows: the path's own arithmetic (i4 rows become int8 codes with
                        # one power-of-two scale per row: ~1e-2 of a score)
                        cos = cosine(out, reference(tc.cfg, stored_rows(tc), live, tc.L - 1, q))
                        assert cos >= (0.999 if cold == "i8" else 0.995), (cold, shape, cos)
                    assert bits == first, (cold, shape, kind)  # every kernel kind gives the same bits
            finally:
                kernels.select()
                tc.close()
                remove()
            tc = live = q = out = None
            gc.collect()


def _steps(tc, qc, qs, oq, oe, layers):
    for layer in range(layers):
        tc.step_q8(layer, qc, qs, oq, oe)
    return oe[0]


def test_integer_step_over_cold_blocks_allocates_nothing():
    need("fs", "heap_lock")
    for cold in ("i4", "i8"):
        tc = case((8, 2, 16, 16, 2, 8, 4, 80, 2, cold == "i8"), "i8", cold, 40)
        try:
            n = tc.heads * tc.D
            qc, qs, oq, oe = zeros("b", n), zeros("H", tc.heads), zeros("i", n), zeros("i", tc.heads)
            quantize_query(query(tc.cfg, 41), qc, qs, tc.heads)
            assert tc.store.count == 4
            for kind in kernels.available():
                tc.att.k = kernels.select(kind)
                _steps(tc, qc, qs, oq, oe, 2)  # warm
                before = list(oq)
                reads = tc.store.reads
                under_heap_lock(_steps, tc, qc, qs, oq, oe, 2)
                assert list(oq) == before and tc.store.reads == reads + 2 * tc.store.count, kind
        finally:
            kernels.select()
            tc.close()
            remove()
        tc = qc = qs = oq = oe = None
        gc.collect()
