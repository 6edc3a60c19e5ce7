# The cold tier: blocks written to flash come back byte for byte, survive reopening the store, and the pool's
# accounting stays whole; the store is kvedge.tier.store's (kind 1): its files stay within
# budget.pool_tier_bytes while one block is spilled again and again (compaction), and a damaged, truncated,
# foreign or other-layout store is refused with ColdStoreError (every runtime with a filesystem).
import gc
import json

from kvedge.budget import pool_tier_bytes
from kvedge.compat import zeros
from kvedge.config import CacheConfig
from kvedge.errors import ColdStoreError
from kvedge.paged import PagedPool
from kvedge.tier.spill import ColdTier
from _support import Rng, need, raises, message

PATH = "_kvedge_tier_test"
FILES = (".h0", ".h1", ".0", ".1")


def _remove(path=PATH):
    import os
    for x in FILES + (".s",):
        try:
            os.remove(path + x)
        except OSError:
            pass


def _file_bytes(path=PATH):
    n = 0
    for x in FILES:
        try:
            f = open(path + x, "rb")
        except OSError:
            continue
        n += f.seek(0, 2)
        f.close()
    return n


def _fill(pool, sid, n, rng):
    kv = pool.cfg.kv_heads * pool.cfg.head_dim
    ks = [zeros("f", kv) for _ in range(pool.cfg.layers)]
    vs = [zeros("f", kv) for _ in range(pool.cfg.layers)]
    for p in range(n):
        for layer in range(pool.cfg.layers):
            for i in range(kv):
                ks[layer][i] = rng.gauss()
                vs[layer][i] = rng.gauss()
        pool.append(sid, ks, vs)


def _block_bytes(tier, b):
    out = b""
    for off, n in tier._segs_of(b):
        out += bytes(tier.pool.cache.arena[off:off + n])
    return out


def _session_blocks(pool, tier, sid):
    i = pool._handle(sid)
    return [_block_bytes(tier, pool.table[i * pool.MB + j]) for j in range(pool.snb[i])]


def _attend(pool, tier, sid, q):
    out = zeros("f", len(q))
    tier.attend(sid, 0, q, out)
    return list(out)


def _query(pool, seed):
    rng = Rng(seed)
    q = zeros("f", pool.cfg.heads * pool.cfg.head_dim)
    for i in range(len(q)):
        q[i] = rng.gauss()
    return q


CFGS = [
    dict(layers=2, heads=4, kv_heads=2, head_dim=8, max_tokens=24, dtype="i8", align=16),
    dict(layers=1, heads=2, kv_heads=1, head_dim=8, max_tokens=24, dtype="i4", residual=0, align=0),
    dict(layers=1, heads=2, kv_heads=1, head_dim=8, max_tokens=24, dtype="i2", residual=0, align=4),
    dict(layers=1, heads=2, kv_heads=2, head_dim=4, max_tokens=24, dtype="f16", align=8),
]


def _round_trip(kw):
    cfg = CacheConfig(**kw)
    pool = PagedPool(cfg, 4, sessions=3)
    tier = ColdTier(pool, PATH, 4)
    try:
        a, b = pool.open(), pool.open()
        _fill(pool, a, 14, Rng(1))  # 3 full blocks + 2 tokens
        _fill(pool, b, 5, Rng(2))
        q = _query(pool, 3)
        want_out = _attend(pool, tier, a, q)
        want_blocks = _session_blocks(pool, tier, a)
        want_b = _session_blocks(pool, tier, b)
        free0 = pool.nfree
        assert tier.spill(a, 2) == 2
        assert pool.nfree == free0 + 2 and tier.writes == 2 and tier.records_used() == 2
        st = tier.stats()
        assert st["flash_bytes"] == 2 * tier.record_bytes and st["ram_bytes"] == pool.cache.used_bytes
        assert st["ram_bytes"] == (14 - 8 + 5) * pool.cache.main_slot_bytes
        e = raises(ValueError, pool.attend, a, 0, q, zeros("f", len(q)))
        assert "on flash" in message(e)
        pool.check()
        got_out = _attend(pool, tier, a, q)  # pages the two blocks back in
        assert tier.reads == 2 and tier.records_used() == 0
        assert _session_blocks(pool, tier, a) == want_blocks
        assert got_out == want_out
        assert _session_blocks(pool, tier, b) == want_b  # the other session was never touched
        pool.check()
        # only full blocks move, the partial last one stays in RAM
        assert tier.spill(a, 10) == 3 and tier.spill(b, 10) == 1
        line = tier.stats_json()
        d = json.loads(line)
        assert line.index('"appends_failed"') < line.index('"ram_bytes"') < line.index('"flash_writes"')
        assert d["flash_writes"] == 6 and d["flash_reads"] == 2 and d == tier.stats()
        pool.close(a)  # closing a session frees its records too
        assert tier.records_used() == 1
        pool.reset(b)
        assert tier.records_used() == 0 and pool.nfree == pool.NB
        pool.check()
    finally:
        tier.close()
        _remove()


def test_round_trip_is_exact_for_every_compressed_dtype():
    need("fs")
    _remove()
    for kw in CFGS:
        _round_trip(kw)
        gc.collect()


def _first_life(cfg):
    pool = PagedPool(cfg, 4, sessions=2)
    tier = ColdTier(pool, PATH, 6)
    sid = pool.open()
    _fill(pool, sid, 12, Rng(7))
    want = _attend(pool, tier, sid, _query(pool, 8))
    blocks = _session_blocks(pool, tier, sid)
    assert tier.spill(sid, 3) == 3
    tier.close()  # power off: the pool is gone, the file stays
    return sid, want, blocks


def test_survives_reopening_the_file():
    need("fs")
    _remove()
    cfg = CacheConfig(**CFGS[0])
    try:
        old_sid, want, blocks = _first_life(cfg)
        gc.collect()
        pool = PagedPool(cfg, 4, sessions=2)
        tier = ColdTier(pool, PATH, 6)
        try:
            saved = tier.saved()
            assert saved == [(1, old_sid, 3)], saved
            other = pool.open()  # a new session of the new generation (may reuse the old id)
            _fill(pool, other, 3, Rng(9))
            sid = tier.adopt(1, old_sid)
            assert pool.length(sid) == 12 and tier.saved() == []
            assert _attend(pool, tier, sid, _query(pool, 8)) == want
            assert _session_blocks(pool, tier, sid) == blocks
            pool.check()
            raises(KeyError, tier.adopt, 1, old_sid)
        finally:
            tier.close()
        # a different layout refuses the store instead of misreading it
        cfg2 = CacheConfig(**dict(CFGS[0], head_dim=4))
        e = raises(ColdStoreError, ColdTier, PagedPool(cfg2, 4), PATH, 6)
        assert "written for another layout" in message(e) and PATH in message(e)
    finally:
        _remove()
    for x in (".h0", ".h1"):
        f = open(PATH + x, "wb")
        f.write(b"not a tier" * 4)
        f.close()
    try:
        e = raises(ColdStoreError, ColdTier, PagedPool(cfg, 4), PATH, 6)
        assert "no valid header" in message(e)
    finally:
        _remove()


def test_pressure_saves_to_flash_instead_of_reclaiming():
    need("fs")
    _remove()
    cfg = CacheConfig(1, 2, 1, 8, 16, "i8", align=0)
    pool = PagedPool(cfg, 4, sessions=4)
    tier = ColdTier(pool, PATH, 8)
    pool.on_pressure = tier.save_instead
    try:
        ids = [pool.open() for _ in range(3)]
        outs = []
        for k in range(3):
            _fill(pool, ids[k], 8, Rng(20 + k))  # 2 full blocks each: 6 blocks > 4
        # the first pressure spills session 0 whole (2 blocks), enough for session 2
        assert pool.reclaims == 0 and pool.refusals == 1 and pool.alloc_failures == 1
        for k in range(3):
            q = _query(pool, 30 + k)
            outs.append(_attend(pool, tier, ids[k], q))
            pool.check()
        # every session is still whole: compare with a pool big enough for all of them
        big = PagedPool(CacheConfig(1, 2, 1, 8, 32, "i8", align=0), 4, sessions=4)
        for k in range(3):
            s = big.open()
            _fill(big, s, 8, Rng(20 + k))
            out = zeros("f", 16)
            big.attend(s, 0, _query(pool, 30 + k), out)
            assert list(out) == outs[k], k
        assert tier.writes >= 4 and tier.reads >= 2
    finally:
        tier.close()
        _remove()


def test_bad_tier_arguments():
    need("fs")
    pool = PagedPool(CacheConfig(1, 2, 1, 8, 16, "i8", align=0), 4)
    e = raises(ValueError, ColdTier, pool, PATH, 0)
    assert "capacity must be an int >= 1" in message(e)
    _remove()
    tier = ColdTier(pool, PATH, 1)
    try:
        sid = pool.open()
        _fill(pool, sid, 9, Rng(1))
        assert tier.spill(sid, 2) == 1  # the file holds one record
        raises(KeyError, tier.spill, sid + 5)
        pool.check()
    finally:
        tier.close()
        _remove()


def _spilled_pool(cfg, capacity, slots=None):
    pool = PagedPool(cfg, 4, sessions=3)
    tier = ColdTier(pool, PATH, capacity, slots)
    keep, hot = pool.open(), pool.open()
    _fill(pool, keep, 8, Rng(41))  # two blocks that stay on flash for ever
    _fill(pool, hot, 8, Rng(42))
    return pool, tier, keep, hot


def test_files_follow_the_formula():
    # budget.pool_tier_bytes against sizes worked out here from the layout: i8, 2 layers, 2 KV heads, head_dim 8,
    # align 16 (a row of 8 codes padded to 16), one f16 scale per row, blocks of 4 tokens
    need("fs")
    _remove()
    cfg = CacheConfig(**CFGS[0])
    z = pool_tier_bytes(2, 2, 8, 4, "i8", 16, 3)
    assert z["record"] == 2 * 2 * 2 * 4 * (16 + 2) == 576
    assert z["slots"] == 6 and z["header"] == 40 + 4 + 6 * 8
    assert z["flash"] == 2 * (40 + 4 + 6 * 8) + 2 * 6 * (16 + 576)
    pool, tier, keep, hot = _spilled_pool(cfg, 3)
    try:
        assert tier.record_bytes == pool.B * pool.cache.main_slot_bytes == z["record"]
        assert tier.ram_bytes() == z["ram"]
        assert _file_bytes() <= z["flash"]
        e = raises(ValueError, ColdTier, PagedPool(cfg, 4), PATH + "x", 3, 3)
        assert "slots must be an int in 4.." in message(e)
    finally:
        tier.close()
        _remove()


def test_a_block_spilled_again_and_again_stays_within_the_formula():
    # a page-in drops the record, a spill appends a new one; when the log comes round to a record that is still
    # live (the session that never comes back), compaction appends it again and the files never pass the bound
    need("fs")
    _remove()
    cfg = CacheConfig(**CFGS[0])
    pool, tier, keep, hot = _spilled_pool(cfg, 3)
    try:
        want_keep = _session_blocks(pool, tier, keep)
        want_hot = _session_blocks(pool, tier, hot)
        assert tier.spill(keep, 2) == 2
        z = tier.size
        most = 0
        for cycle in range(20):
            assert tier.spill(hot, 1) == 1
            assert tier.records_used() == 3
            most = max(most, _file_bytes())
            assert most <= z["flash"], (cycle, most, z["flash"])
            tier.fetch(hot)
            assert _session_blocks(pool, tier, hot) == want_hot
            pool.check()
        assert tier.copies >= 2 * (20 // (tier.slots - 2) - 1), tier.copies  # keep's records went round
        assert tier.writes == 22 and tier.reads == 20
        tier.close()
        gc.collect()
        pool = PagedPool(cfg, 4, sessions=3)
        tier = ColdTier(pool, PATH, 3)
        (g, old, n), = tier.saved()
        assert n == 2 and old == keep
        sid = tier.adopt(g, old)
        tier.fetch(sid)
        assert _session_blocks(pool, tier, sid) == want_keep  # every copy bit-identical
    finally:
        tier.close()
        _remove()


def _spoil(name, at, value=None, cut=None):
    f = open(name, "rb")
    data = bytearray(f.read())
    f.close()
    if cut is not None:
        data = data[:cut]
    else:
        data[at] ^= value
    f = open(name, "wb")
    f.write(data)
    f.close()


def test_a_damaged_truncated_or_foreign_store_is_refused():
    need("fs")
    cfg = CacheConfig(**CFGS[0])
    for how in ("flip", "cut", "tiered"):
        _remove()
        pool, tier, keep, hot = _spilled_pool(cfg, 3)
        assert tier.spill(keep, 2) == 2
        lay = tier.store.layout
        tier.close()
        if how == "flip":
            _spoil(PATH + ".0", tier.size["block"] + 5, 0x40)  # a byte of the second record
            want = "block 1 (positions 4-7) fails its checksum"
        elif how == "cut":
            _spoil(PATH + ".0", 0, cut=tier.size["block"] + 100)
            want = "block 1 (positions 4-7) is truncated"
        else:
            from kvedge.tier.store import ColdStore  # a tiered cache's store (kind 0) of the same shape
            _remove()
            rec = memoryview(bytearray(288))
            ColdStore(PATH, lay, {"flash": 0, "sinks": 0, "block": 2 * 288 + 16}, rec, True).close()
            want = "it is a tiered cache's cold store, not a paged pool's cold tier"
        before = [_file_bytes()]
        gc.collect()
        pool = PagedPool(cfg, 4, sessions=3)
        e = raises(ColdStoreError, ColdTier, pool, PATH, 3)
        assert want in message(e) and "refusing the cold" in message(e), (how, message(e))
        assert pool.tier is None and [_file_bytes()] == before  # nothing repaired or re-created
        ColdTier(pool, PATH, 3, fresh=True).close()  # asked for: an empty tier over it
        tier = ColdTier(pool, PATH, 3)
        assert tier.records_used() == 0 and tier.saved() == []
        tier.close()
    _remove()
