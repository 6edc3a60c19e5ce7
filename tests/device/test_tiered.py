# The tiered cache (kvedge.tiered): hot ring + sinks in RAM, older tokens in blocks on flash, attended in one
# online-softmax pass. Checked against a plain-Python full-softmax reference over the positions that must be
# live, on every runtime with a filesystem.
import gc
import math

import kvedge.cache  # noqa: F401  compiled first: importing from source peaks lower on a 215 KB heap
from kvedge import budget, kernels
from kvedge.attention import quantize_query, dequantize_output
from kvedge.compat import zeros
from kvedge.config import CacheConfig
from kvedge.errors import BudgetError, ColdStoreError
from kvedge.tiered import TieredCache
from _support import Rng, need, raises, message, under_heap_lock

PATH = "_kvedge_tiered_test"
FILES = (".h0", ".h1", ".s", ".0", ".1")  # the store's files: two headers, the sinks, two segments


def _remove(path=PATH):
    import os
    for x in FILES:
        try:
            os.remove(path + x)
        except OSError:
            pass


def _size(path=PATH, files=FILES):
    """Bytes of the store's files."""
    import os
    n = 0
    for x in files:
        try:
            n += os.stat(path + x)[6]
        except OSError:
            pass
    return n


def _token(seed, pos, layer, kb, vb, D):
    """K and V of (pos, layer), regenerated on demand so the reference stores nothing; key channel 1 of every
    head is an x8 outlier, as real keys have."""
    r = Rng(seed * 100003 + pos * 17 + layer)
    for i in range(len(kb)):
        kb[i] = r.gauss() * (8.0 if i % D == 1 else 1.0)
        vb[i] = r.gauss()


def _feed(tc, seed, n):
    cfg = tc.cfg
    kv = cfg.kv_heads * cfg.head_dim
    ks = [zeros("f", kv) for _ in range(cfg.layers)]
    vs = [zeros("f", kv) for _ in range(cfg.layers)]
    for _ in range(n):
        pos = tc.ring.n_seen
        for layer in range(cfg.layers):
            _token(seed, pos, layer, ks[layer], vs[layer], cfg.head_dim)
        assert tc.append(ks, vs) == pos


def _live(tc):
    out = zeros("i", tc.size["tokens"])
    n = tc.positions(out)
    return [out[i] for i in range(n)]


def _exact_rows(seed, D, kvh):
    """rows(pos, layer, h, kv, out) of the exact inputs; each token is generated once per reference."""
    memo = {}

    def rows(pos, layer, h, kv, out):
        t = memo.get((pos, layer))
        if t is None:
            t = memo[(pos, layer)] = (zeros("f", kvh * D), zeros("f", kvh * D))
            _token(seed, pos, layer, t[0], t[1], D)
        src = t[kv]
        for i in range(D):
            out[i] = src[h * D + i]
    return rows


def _stored_rows(tc):
    return lambda pos, layer, h, kv, out: tc.read(layer, h, pos, kv, out)


def reference(cfg, rows, live, layer, q):
    """softmax(q_h . k / sqrt(D)) v over `live`, with the full score vector; rows(pos, layer, h, kv, out)."""
    D, H = cfg.head_dim, cfg.heads
    g = H // cfg.kv_heads
    out = zeros("d", H * D)
    w = zeros("d", len(live))
    row = zeros("f", D)
    for h in range(H):
        m = -1e300
        for j in range(len(live)):
            rows(live[j], layer, h // g, 0, row)
            s = 0.0
            for i in range(D):
                s += q[h * D + i] * row[i]
            s /= math.sqrt(D)
            w[j] = s
            if s > m:
                m = s
        lsum = 0.0
        for j in range(len(live)):
            w[j] = math.exp(w[j] - m)
            lsum += w[j]
        for j in range(len(live)):
            rows(live[j], layer, h // g, 1, row)
            for i in range(D):
                out[h * D + i] += w[j] * row[i]
        for i in range(D):
            out[h * D + i] /= lsum
    return out


def rel_err(a, b):
    return max(abs(a[i] - b[i]) for i in range(len(b))) / max(abs(x) for x in b)


def cosine(a, b):
    dot = sum(a[i] * b[i] for i in range(len(b)))
    return dot / math.sqrt(sum(x * x for x in a) * sum(x * x for x in b))


def _query(cfg, seed):
    r = Rng(seed)
    q = zeros("f", cfg.heads * cfg.head_dim)
    for i in range(len(q)):
        q[i] = r.gauss()
    return q


def _int_out(tc, layer, q):
    n = tc.heads * tc.D
    qc, qs, oq, oe = zeros("b", n), zeros("H", tc.heads), zeros("i", n), zeros("i", tc.heads)
    quantize_query(q, qc, qs, tc.heads)
    tc.step_q8(layer, qc, qs, oq, oe)
    out = zeros("f", n)
    dequantize_output(oq, oe, out, tc.heads)
    return out, list(oq) + list(oe)


def _cfg(heads, kvh, D, W, S, dtype="f32", layers=2):
    return CacheConfig(layers, heads, kvh, D, S + W, dtype, window=W, sinks=S, prefix=S, align=0, group=8)


# heads, kv_heads, head_dim, window, sinks, block, cold blocks, tokens: MHA, GQA 2 and 4, MQA; the streams wrap
# the ring many times and pass the cold cap (oldest blocks dropped)
SHAPES = [
    (2, 2, 8, 16, 2, 4, 5, 90),
    (4, 2, 16, 8, 0, 4, 4, 60),
    (8, 2, 8, 16, 4, 8, 4, 100),
    (4, 1, 32, 8, 1, 4, 4, 50),
]


def _case(shape, dtype, cold, seed, tile=8):
    H, KVH, D, W, S, B, C, n = shape
    tc = TieredCache(_cfg(H, KVH, D, W, S, dtype), PATH, block=B, cold=cold, cold_blocks=C, tile=tile, fresh=True)
    _feed(tc, seed, n)
    return tc


def test_f32_hot_and_cold_equal_the_full_cache_reference():
    need("fs")
    for i, shape in enumerate(SHAPES):
        tc = _case(shape, "f32", "f32", 10 + i)
        try:
            live = _live(tc)
            H, KVH, D, W, S, B, C, n = shape
            # sinks, the last C blocks before the ring, and the ring (W - B + 1 .. W tokens)
            assert tc.store.count == C and tc.drops > 0 and live[:S] == list(range(S))
            assert live[S:] == list(range(S + tc.store.k0 * B, n)) and W - B < tc.ring.n_cached - S <= W
            for layer in range(2):
                q = _query(tc.cfg, 50 + layer)
                out = zeros("f", H * D)
                tc.step(layer, q, out)
                err = rel_err(out, reference(tc.cfg, _exact_rows(10 + i, D, KVH), live, layer, q))
                assert err <= 1e-5, (shape, layer, err)
        finally:
            tc.close()
            _remove()
        tc = live = q = out = None  # the next shape's cache must not meet this one's in the heap
        gc.collect()


def test_i4_and_i8_cold_stores_attend_what_they_hold():
    need("fs")
    for cold, bound in (("i4", 0.99), ("i8", 0.999)):
        for i, shape in enumerate(SHAPES[:3]):
            tc = _case(shape, "f32", cold, 20 + i)
            try:
                H, KVH, D = shape[:3]
                live = _live(tc)
                q = _query(tc.cfg, 60 + i)
                out = zeros("f", H * D)
                tc.step(1, q, out)
                # equal to attention over the concatenated cache as stored (cold rows dequantized) ...
                assert rel_err(out, reference(tc.cfg, _stored_rows(tc), live, 1, q)) <= 1e-5, (cold, shape)
                # ... which is close to attention over the exact values
                cos = cosine(out, reference(tc.cfg, _exact_rows(20 + i, D, KVH), live, 1, q))
                assert cos >= bound, (cold, shape, cos)
            finally:
                tc.close()
                _remove()
            tc = live = q = out = None
            gc.collect()


def test_integer_path_on_i8_ring_with_i4_and_i8_cold():
    need("fs")
    for cold, bound in (("i4", 0.99), ("i8", 0.999)):
        for i, shape in enumerate(SHAPES[:3]):
            tc = _case(shape, "i8", cold, 30 + i)
            try:
                H, KVH, D = shape[:3]
                live = _live(tc)
                q = _query(tc.cfg, 70 + i)
                first = None
                for kind in kernels.available():
                    kernels.select(kind)
                    tc.att.k = kernels.get()
                    out, bits = _int_out(tc, 1, q)
                    if first is None:
                        first = bits
                        cos = cosine(out, reference(tc.cfg, _exact_rows(30 + i, D, KVH), live, 1, q))
                        assert cos >= bound, (cold, shape, cos)
                        cos = cosine(out, reference(tc.cfg, _stored_rows(tc), live, 1, q))
                        assert cos >= 0.999, (cold, shape, cos)
                    assert bits == first, (cold, shape, kind)  # every kernel kind gives the same bits
            finally:
                kernels.select()
                tc.close()
                _remove()
            tc = live = q = out = None
            gc.collect()


def _steps(tc, qc, qs, oq, oe, layers):
    for layer in range(layers):
        tc.step_q8(layer, qc, qs, oq, oe)
    return oe[0]


def test_integer_step_over_cold_blocks_allocates_nothing():
    need("fs", "heap_lock")
    for cold in ("i4", "i8"):
        tc = _case((8, 2, 16, 16, 2, 8, 4, 80), "i8", cold, 40)
        try:
            n = tc.heads * tc.D
            qc, qs, oq, oe = zeros("b", n), zeros("H", tc.heads), zeros("i", n), zeros("i", tc.heads)
            quantize_query(_query(tc.cfg, 41), qc, qs, tc.heads)
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
            _remove()
        gc.collect()


def test_ram_and_flash_equal_the_budget_formula():
    need("fs")
    for dtype, cold, align in (("i8", "i4", 0), ("f32", "i8", 16), ("f16", "f32", 8), ("i4", "i4", 0)):
        cfg = CacheConfig(2, 4, 2, 8, 18, dtype, window=16, sinks=2, prefix=2, align=align, group=8)
        tc = TieredCache(cfg, PATH, block=8, cold=cold, cold_blocks=6, cold_align=align, fresh=True)
        try:
            want = budget.tiered_bytes(2, 4, 2, 8, 16, 2, 8, 6, dtype, cold, align, align, 8)
            assert len(tc.ring.arena) == want["ring"] == cfg.nbytes()
            assert len(tc.stg.arena) == want["staging"]
            assert tc.ram_bytes() == want["ram"] == tc.stats()["total_bytes"]
            assert tc.rb == want["record"] == budget.cold_record_bytes(2, 8, 8, cold, align)
            assert want["flash"] == tc.stats()["flash_capacity"] == 80 + want["sinks"] + 12 * want["block"]
            _feed(tc, 5, 2 + 16 + 8 * 12)  # 12 blocks demoted: both segments full, 6 blocks live
            assert _size() == want["flash"] and tc.store.used() == 80 + want["sinks"] + 6 * want["block"]
            assert _size(files=(".0",)) == _size(files=(".1",)) == 6 * want["block"]
            _feed(tc, 5, 8 * 6)  # segment 0 restarted for blocks 12-17 and filled again
            assert _size() == want["flash"] and tc.store.count == 6
        finally:
            tc.close()
            _remove()
        gc.collect()


def test_cap_policies_drop_oldest_blocks_or_reset():
    need("fs")
    cfg = _cfg(2, 1, 8, 8, 2, "f32", layers=1)
    tc = TieredCache(cfg, PATH, block=4, cold="i8", cold_blocks=3, at_cap="drop", fresh=True)
    try:
        _feed(tc, 1, 2 + 8 + 12)  # sinks, a full ring, 3 blocks demoted: the store is full, nothing dropped
        st = tc.stats()
        assert st["cold_tokens"] == 12 and st["cold_drops"] == 0 and st["evictions"] == 0 and st["demoted"] == 12
        _feed(tc, 1, 9)  # 3 more blocks leave the ring (the first at the 1st token): the 3 oldest are dropped
        st = tc.stats()
        assert st["cold_drops"] == 3 and st["evictions"] == 12 and st["demoted"] == 24
        assert st["tokens_seen"] == 31 and st["tokens_cached"] == 2 + 12 + 5 == len(_live(tc))
        assert _live(tc) == [0, 1] + list(range(14, 31))
    finally:
        tc.close()
    tc = TieredCache(cfg, PATH, block=4, cold="i8", cold_blocks=3, at_cap="reset", fresh=True)
    try:
        _feed(tc, 1, 22)
        assert tc.stats()["cold_resets"] == 0 and tc.store.count == 3
        pos = tc.start_token()  # the 4th block would pass the cap: a reset point instead
        assert pos == 0 and tc.store.count == 0 and tc.stats()["cold_resets"] == 1 and _live(tc) == [0]
    finally:
        tc.close()
        _remove()


def test_reopen_after_power_off_is_whole():
    need("fs")
    shape = (4, 2, 8, 16, 2, 4, 6, 70)
    tc = _case(shape, "i8", "i4", 80)
    q = _query(tc.cfg, 81)
    count, k0, seq = tc.store.count, tc.store.k0, tc.store.seq
    sinks = bytes(tc.ring.arena[:tc.store.sinks_bytes])
    cold_live = _live(tc)[:2 + count * 4]
    tc.close()  # power off: RAM is gone, the file stays
    gc.collect()
    tc = TieredCache(_cfg(4, 2, 8, 16, 2, "i8"), PATH, block=4, cold="i4", cold_blocks=6)
    try:
        assert (tc.store.count, tc.store.k0, tc.store.seq) == (count, k0, seq)
        assert bytes(tc.ring.arena[:tc.store.sinks_bytes]) == sinks  # the f32 sinks came back verbatim
        assert _live(tc) == cold_live and tc.resume_pos == 2 + (k0 + count) * 4
        out = zeros("f", 32)
        tc.step(0, q, out)  # sinks + cold blocks only: the ring is empty
        assert rel_err(out, reference(tc.cfg, _stored_rows(tc), cold_live, 0, q)) <= 1e-5
        assert cosine(out, reference(tc.cfg, _exact_rows(80, 8, 2), cold_live, 0, q)) >= 0.99
        p = tc.resume_pos
        _feed(tc, 80, 30)  # the stream goes on from there
        assert tc.ring.n_seen == p + 30 and _live(tc)[-1] == p + 29
    finally:
        tc.close()
        _remove()


def _flip(name, off):
    f = open(PATH + name, "r+b")
    f.seek(off)
    b = f.read(1)[0]
    f.seek(off)
    f.write(bytes([b ^ 0x5A]))
    f.close()


def _write(name, data):
    f = open(PATH + name, "wb")
    f.write(data)
    f.close()


def _read(name):
    f = open(PATH + name, "rb")
    data = f.read()
    f.close()
    return data


def _open(**kw):
    return TieredCache(_cfg(2, 1, 8, 8, 2, "f32", layers=1), PATH, block=4, cold="i4", cold_blocks=4, **kw)


def test_damaged_or_foreign_stores_are_refused_never_half_read():
    need("fs")
    _remove()
    tc = _open()
    _feed(tc, 3, 2 + 8 + 12)  # 3 committed blocks, all in segment 0
    stride, seq = tc.store.stride, tc.store.seq
    tc.close()
    # a byte of block 1 damaged: refused, naming the block
    _flip(".0", 1 * stride + 20)
    e = raises(ColdStoreError, _open)
    assert "block 1 (positions 6-9)" in message(e) and "checksum" in message(e) and PATH in message(e)
    _flip(".0", 1 * stride + 20)  # repaired: whole again
    _open().close()
    # the sinks damaged
    _flip(".s", 7)
    e = raises(ColdStoreError, _open)
    assert "sinks' record fails its checksum" in message(e)
    _flip(".s", 7)
    # the newest header torn mid-write: the other copy (one commit older) is the state, and it is whole
    good = _read(".h%d" % (seq & 1))
    _write(".h%d" % (seq & 1), good[:30])
    tc = _open()
    assert tc.store.seq == seq - 1 and tc.store.count == 2
    tc.close()
    # both headers damaged
    _flip(".h%d" % ((seq + 1) & 1), 5)
    e = raises(ColdStoreError, _open)
    assert "no valid header" in message(e)
    _write(".h%d" % (seq & 1), good)
    # a block cut short (its tag never landed)
    data = _read(".0")
    _write(".0", data[:3 * stride - 3])
    e = raises(ColdStoreError, _open)
    assert "block 2 (positions 10-13) is truncated" in message(e)
    _write(".0", data)
    _open().close()
    # another layout, a foreign file
    e = raises(ColdStoreError, TieredCache, _cfg(2, 1, 8, 8, 2, "f32", layers=1), PATH, block=4, cold="i8",
               cold_blocks=4)
    assert "another layout (cold i4" in message(e)
    ring64 = CacheConfig(1, 2, 1, 8, 10, "f32", window=8, sinks=2, prefix=2, align=64)
    e = raises(ColdStoreError, TieredCache, ring64, PATH, block=4, cold="i4", cold_blocks=4)
    assert "sink row 32)" in message(e)  # the sinks' rows on flash are the ring's padded f32 rows
    _write(".h0", b"hello, not a store" * 10)
    _write(".h1", b"")
    e = raises(ColdStoreError, _open)
    assert "not a kvedge cold store" in message(e)
    tc = _open(fresh=True)  # fresh=True starts over
    assert tc.store.count == 0 and tc.resume_pos == 0
    tc.close()
    _open().close()
    _remove()


def test_bad_input_changes_nothing():
    need("fs")
    _remove()
    cfg = _cfg(2, 1, 8, 8, 2, "f32", layers=1)
    e = raises(ValueError, TieredCache, _cfg(2, 1, 8, 12, 2), PATH, block=8)
    assert "multiple of block" in message(e)
    e = raises(ValueError, TieredCache, CacheConfig(1, 2, 1, 8, 10, "f32", window=8, sinks=2, align=0), PATH,
               block=4)
    assert "prefix = sinks" in message(e)
    e = raises(ValueError, TieredCache, cfg, PATH, block=4, cold="q4_0")
    assert "cold dtype" in message(e)
    e = raises(ValueError, TieredCache, cfg, PATH, block=4, at_cap="never")
    assert "at_cap" in message(e)
    e = raises(BudgetError, TieredCache, cfg, PATH, block=4, budget=100)
    assert "tiered cache" in message(e)
    import os
    assert not [n for n in os.listdir(".") if n.startswith(PATH)]  # refused before anything was created
    tc = TieredCache(cfg, PATH, block=4, cold="i4", cold_blocks=2, fresh=True)
    try:
        _feed(tc, 2, 12)
        before = (bytes(tc.ring.arena), tc.stats_json())
        big = zeros("f", 8)
        big[3] = 70000.0  # fits f32 (the ring) but not the i4 cold store's f16 range
        e = raises(ValueError, tc.append, [big], [zeros("f", 8)])
        assert "f16" in message(e)
        assert (bytes(tc.ring.arena), tc.stats_json()) == before
        e = raises(IndexError, tc.step, 1, zeros("f", 16), zeros("f", 16))
        e = raises(ValueError, tc.step_q8, 0, zeros("b", 16), zeros("H", 2), zeros("i", 16), zeros("i", 2))
        assert "i8, i4 or i2 ring" in message(e)
    finally:
        tc.close()
        _remove()


def _gc_frees():
    """gc.mem_alloc() is measurable and gc.collect() frees garbage here (not on the wasm port inside one run)."""
    from kvedge.compat import mem_alloc
    gc.collect()
    a = mem_alloc()
    x = [bytearray(100) for _ in range(50)]
    x = None
    gc.collect()
    return a >= 0 and mem_alloc() - a < 2000


def test_long_stream_keeps_ram_flat_and_the_store_bounded():
    need("fs")
    from kvedge.compat import mem_alloc
    cfg = CacheConfig(1, 4, 2, 8, 18, "i8", window=16, sinks=2, prefix=2, align=0)
    tc = TieredCache(cfg, PATH, block=8, cold="i4", cold_blocks=4, fresh=True)
    try:
        n = 16
        kc, vc = zeros("b", n), zeros("b", n)
        ks, vs = zeros("H", 2), zeros("H", 2)
        qc, qs, oq, oe = zeros("b", 32), zeros("H", 4), zeros("i", 32), zeros("i", 4)
        quantize_query(_query(cfg, 9), qc, qs, 4)
        r = Rng(4)
        flash = tc.size["flash"]
        marks = []
        for t in range(1200):
            tc.start_token()
            for i in range(n):
                kc[i] = r.randint(-127, 127)
                vc[i] = r.randint(-127, 127)
            ks[0] = ks[1] = vs[0] = vs[1] = 0x2C00 + (t & 255)  # f16 scales around 0.06
            if t < 2:  # the sinks are f32 rows: floats
                tc.write(0, [c / 16.0 for c in kc], [c / 16.0 for c in vc])
            else:
                tc.write_q8(0, kc, ks, vc, vs)
            tc.step_q8(0, qc, qs, oq, oe)
            if t % 200 == 199:
                gc.collect()
                marks.append(mem_alloc())
                assert tc.stats()["tokens_cached"] <= tc.size["tokens"] and _size() <= flash
        st = tc.stats()
        assert st["tokens_seen"] == 1200 and st["cold_tokens"] == 32 and st["cold_drops"] == (1200 - 18 + 7) // 8 - 4
        assert st["demoted"] == 8 * ((1200 - 18 + 7) // 8)  # a block leaves at tokens 18, 26, 34, ...
        if _gc_frees():
            assert max(marks[1:]) - marks[1] <= 64, marks  # flat once warm (a stale stack word may hold 32 bytes)
    finally:
        tc.close()
        _remove()
