# The tiered cache's cold store and bookkeeping (kvedge.tier.cache, kvedge.tier.store): RAM and flash equal to the
# budget formula, the policies at the cap, reopening after a power-off, damaged stores refused, bad input, and a
# long stream with the heap flat. Every runtime with a filesystem.
import gc

import kvedge.cache  # noqa: F401  compiled first: importing from source peaks lower on a 215 KB heap
from kvedge import budget
from kvedge.attention import quantize_query
from kvedge.compat import zeros
from kvedge.config import CacheConfig
from kvedge.errors import BudgetError, ColdStoreError
from kvedge.tier.cache import TieredCache
from _support import ON_BOARD, Rng, need, raises, message
from _tieredref import (PATH, case, cfg_of, cosine, exact_rows, feed, live_positions, query, reference, rel_err, remove,
                        size, stored_rows, token)


def test_ram_and_flash_equal_the_budget_formula():
    need("fs")
    for dtype, cold, align, pre in (("i8", "i4", 0, 2), ("f32", "i8", 16, 2), ("f16", "f32", 8, 2), ("i4", "i4", 0, 2),
                                    ("i8", "i4", 16, 0), ("f16", "i8", 0, 0)):
        # one layer: arenas of at most 2.3 KB (a 215 KB unix-port heap that compiled the package has no big holes)
        cfg = CacheConfig(1, 4, 2, 8, 18, dtype, window=16, sinks=2, prefix=pre, align=align, group=8)
        tc = TieredCache(cfg, PATH, block=8, cold=cold, cold_blocks=6, cold_align=align, fresh=True)
        try:
            want = budget.tiered_bytes(1, 4, 2, 8, 16, 2, 8, 6, dtype, cold, align, align, 8, f32_sinks=pre == 2)
            assert len(tc.ring.arena) == want["ring"] == cfg.nbytes()
            assert len(tc.stg.arena) == want["staging"]
            assert tc.ram_bytes() == want["ram"] == tc.stats()["total_bytes"]
            assert tc.rb == want["record"] == budget.cold_record_bytes(2, 8, 8, cold, align)
            assert want["flash"] == tc.stats()["flash_capacity"] == 80 + want["sinks"] + 12 * want["block"]
            feed(tc, 5, 2 + 16 + 8 * 12)  # 12 blocks demoted: both segments full, 6 blocks live
            assert size() == want["flash"] and tc.store.used() == 80 + want["sinks"] + 6 * want["block"]
            assert size(files=(".0",)) == size(files=(".1",)) == 6 * want["block"]
            feed(tc, 5, 8 * 6)  # segment 0 restarted for blocks 12-17 and filled again
            assert size() == want["flash"] and tc.store.count == 6
        finally:
            tc.close()
            remove()
        tc = None  # the next case's cache must not meet this one's in the heap
        gc.collect()


def test_cap_policies_drop_oldest_blocks_or_reset():
    need("fs")
    cfg = cfg_of(2, 1, 8, 8, 2, "f32", layers=1)
    tc = TieredCache(cfg, PATH, block=4, cold="i8", cold_blocks=3, at_cap="drop", fresh=True)
    try:
        feed(tc, 1, 2 + 8 + 12)  # sinks, a full ring, 3 blocks demoted: the store is full, nothing dropped
        st = tc.stats()
        assert st["cold_tokens"] == 12 and st["cold_drops"] == 0 and st["evictions"] == 0 and st["demoted"] == 12
        feed(tc, 1, 9)  # 3 more blocks leave the ring (the first at the 1st token): the 3 oldest are dropped
        st = tc.stats()
        assert st["cold_drops"] == 3 and st["evictions"] == 12 and st["demoted"] == 24
        assert st["tokens_seen"] == 31 and st["tokens_cached"] == 2 + 12 + 5 == len(live_positions(tc))
        assert live_positions(tc) == [0, 1] + list(range(14, 31))
    finally:
        tc.close()
    tc = TieredCache(cfg, PATH, block=4, cold="i8", cold_blocks=3, at_cap="reset", fresh=True)
    try:
        feed(tc, 1, 22)
        assert tc.stats()["cold_resets"] == 0 and tc.store.count == 3
        pos = tc.start_token()  # the 4th block would pass the cap: a reset point instead
        assert pos == 0 and tc.store.count == 0 and tc.stats()["cold_resets"] == 1 and live_positions(tc) == [0]
    finally:
        tc.close()
        remove()


def test_cold_store_in_the_rings_dtype_keeps_its_bytes():
    need("fs")
    from kvedge.cache import KVCache
    for dt in ("i8", "f16"):
        tc = TieredCache(cfg_of(2, 1, 8, 8, 2, dt, 1, False), PATH, block=4, cold=dt, cold_blocks=4, fresh=True)
        plain = KVCache(CacheConfig(1, 2, 1, 8, 40, dt, align=0))  # the same writes, all kept in RAM
        try:
            kb, vb = zeros("f", 8), zeros("f", 8)
            for p in range(40):
                token(6, p, 0, kb, vb, 8)
                tc.append([kb], [vb])
                plain.append([kb], [vb])
            assert tc.store.count == 4
            a, b = zeros("f", 8), zeros("f", 8)
            for p in live_positions(tc):
                for kv in (0, 1):
                    tc.read(0, 0, p, kv, a)
                    plain.read(0, 0, p, kv, b)
                    assert list(a) == list(b), (dt, p, kv)  # no second rounding on the way to flash
        finally:
            tc.close()
            remove()
        gc.collect()


def _sink_bytes(tc):
    return b"".join(bytes(run) for run in tc._sink_runs())


def test_reopen_after_power_off_is_whole():
    need("fs")
    for f32_sinks in (True, False):
        _reopen(f32_sinks)
        gc.collect()


def _reopen(f32_sinks):
    shape = (4, 2, 8, 16, 2, 4, 6, 70)
    tc = case(shape, "i8", "i4", 80, f32_sinks=f32_sinks)
    q = query(tc.cfg, 81)
    count, k0, seq = tc.store.count, tc.store.k0, tc.store.seq
    sinks = _sink_bytes(tc)
    assert len(sinks) == tc.store.sinks_bytes == 2 * 2 * 2 * 2 * (32 if f32_sinks else 8 + 2)
    cold_live = live_positions(tc)[:2 + count * 4]
    tc.close()  # power off: RAM is gone, the file stays
    gc.collect()
    tc = TieredCache(cfg_of(4, 2, 8, 16, 2, "i8", f32_sinks=f32_sinks), PATH, block=4, cold="i4", cold_blocks=6)
    try:
        assert (tc.store.count, tc.store.k0, tc.store.seq) == (count, k0, seq)
        assert _sink_bytes(tc) == sinks  # the sinks (f32 rows, or i8 codes and scales) came back verbatim
        assert live_positions(tc) == cold_live and tc.resume_pos == 2 + (k0 + count) * 4
        out = zeros("f", 32)
        tc.step(0, q, out)  # sinks + cold blocks only: the ring is empty
        assert rel_err(out, reference(tc.cfg, stored_rows(tc), cold_live, 0, q)) <= 1e-5
        assert cosine(out, reference(tc.cfg, exact_rows(80, 8, 2), cold_live, 0, q)) >= 0.99
        p = tc.resume_pos
        feed(tc, 80, 30)  # the stream goes on from there
        assert tc.ring.n_seen == p + 30 and live_positions(tc)[-1] == p + 29
    finally:
        tc.close()
        remove()


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
    return TieredCache(cfg_of(2, 1, 8, 8, 2, "f32", layers=1), PATH, block=4, cold="i4", cold_blocks=4, **kw)


def test_damaged_or_foreign_stores_are_refused_never_half_read():
    need("fs")
    remove()
    tc = _open()
    feed(tc, 3, 2 + 8 + 12)  # 3 committed blocks, all in segment 0
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
    e = raises(ColdStoreError, TieredCache, cfg_of(2, 1, 8, 8, 2, "f32", layers=1), PATH, block=4, cold="i8",
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
    remove()


def test_bad_input_changes_nothing():
    need("fs")
    remove()
    cfg = cfg_of(2, 1, 8, 8, 2, "f32", layers=1)
    e = raises(ValueError, TieredCache, cfg_of(2, 1, 8, 12, 2), PATH, block=8)
    assert "multiple of block" in message(e)
    e = raises(ValueError, TieredCache, CacheConfig(1, 2, 1, 8, 10, "f32", window=8, sinks=2, prefix=1, align=0),
               PATH, block=4)
    assert "prefix = sinks" in message(e) and "or in the ring's dtype (prefix 0)" in message(e)
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
        feed(tc, 2, 12)
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
        remove()


def _gc_frees():
    """gc.mem_alloc() is measurable and gc.collect() frees garbage here (not on the wasm port inside one run)."""
    from kvedge.compat import mem_alloc
    gc.collect()
    a = mem_alloc()
    x = [bytearray(100) for _ in range(50)]
    x = None
    gc.collect()
    return a >= 0 and mem_alloc() - a < 2000


LONG = 480 if ON_BOARD else 1200  # tokens of the long stream (ON_BOARD: lean)


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
        quantize_query(query(cfg, 9), qc, qs, 4)
        r = Rng(4)
        flash = tc.size["flash"]
        marks = []
        for t in range(LONG):
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
            if t % (LONG // 6) == LONG // 6 - 1:
                gc.collect()
                marks.append(mem_alloc())
                assert tc.stats()["tokens_cached"] <= tc.size["tokens"] and size() <= flash
        st = tc.stats()
        assert st["tokens_seen"] == LONG and st["cold_tokens"] == 32 and st["cold_drops"] == (LONG - 18 + 7) // 8 - 4
        assert st["demoted"] == 8 * ((LONG - 18 + 7) // 8)  # a block leaves at tokens 18, 26, 34, ...
        if _gc_frees():
            assert max(marks[1:]) - marks[1] <= 64, marks  # flat once warm (a stale stack word may hold 32 bytes)
    finally:
        tc.close()
        remove()
