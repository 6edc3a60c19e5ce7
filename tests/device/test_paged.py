# The paged multi-session pool against a plain-Python model (every runtime).
import gc
import json

from kvedge.attention import quantize_query
from kvedge.compat import zeros, mem_alloc
from kvedge.config import CacheConfig
from kvedge.errors import CacheFullError
from kvedge.paged import PagedPool
from _support import Rng, need, raises, message, under_heap_lock
from _poolref import (PoolModel, check_all, op_open, op_append, op_close, op_reset, op_attend, op_fork, rows_for,
                      reference_attention)


def _rows(cfg):
    n = cfg.kv_heads * cfg.head_dim
    return [zeros("f", n) for _ in range(cfg.layers)], [zeros("f", n) for _ in range(cfg.layers)]


def _drive(seed, steps, nb=6, B=3, S=4, MB=4):
    """Random open/append/attend/close/reset/pin in the pool and the model; they must never diverge."""
    cfg = CacheConfig(2, 2, 1, 4, nb * B, "f32", align=0)
    rng = Rng(seed)
    model = PoolModel(nb, B, S, MB)
    pool = PagedPool(cfg, B, sessions=S, session_blocks=MB,
                     on_pressure=lambda sid: sid not in model.pinned)
    ks, vs = _rows(cfg)
    buf = zeros("f", cfg.head_dim)
    q = zeros("f", cfg.heads * cfg.head_dim)
    out = zeros("f", cfg.heads * cfg.head_dim)
    want = zeros("f", cfg.heads * cfg.head_dim)
    for step in range(steps):
        op = rng.randint(0, 21)
        ids = sorted(model.sess)
        if op < 3 or not ids:
            op_open(pool, model, rng.randint(1, 10 ** 6))
        elif op > 19:  # a session sharing another's blocks (a common prompt)
            op_fork(pool, model, rng.choice(ids), rng.randint(1, 10 ** 6))
        elif op < 13:
            op_append(pool, model, rng.choice(ids), ks, vs)
        elif op < 15:
            for i in range(len(q)):
                q[i] = rng.uniform(-2.0, 2.0)
            op_attend(pool, model, rng.choice(ids), q, out, want)
        elif op < 17:
            op_close(pool, model, rng.choice(ids))
        elif op < 18:
            op_reset(pool, model, rng.choice(ids), rng.randint(1, 10 ** 6))
        else:
            sid = rng.choice(ids)
            if sid in model.pinned:
                model.pinned.discard(sid)
            else:
                model.pinned.add(sid)
        if step % 5 == 0:
            check_all(pool, model, buf)
    check_all(pool, model, buf)
    return model


def test_random_operations_match_the_model():
    total = [0, 0, 0]
    for seed in (1, 2, 3):
        m = _drive(seed, 150)
        total[0] += m.reclaims
        total[1] += m.refusals
        total[2] += m.appends_failed
        gc.collect()
    # the driver really exercised pressure, refusal and failure
    assert total[0] > 0 and total[1] > 0 and total[2] > 0, total


def _pressure_scenario():
    # 4 blocks of 2 tokens, 6 sessions of 2 tokens each: two full rounds of reclaim, oldest first
    cfg = CacheConfig(1, 4, 2, 4, 8, "f32", align=0)
    asked = []
    pool = PagedPool(cfg, 2, sessions=6, on_pressure=lambda sid: asked.append(sid) or True)
    ks, vs = _rows(cfg)
    seeds = {}
    ids = []
    q = _query(cfg)
    early = {}
    for k in range(6):
        sid = pool.open()
        ids.append(sid)
        seeds[sid] = 100 + k
        for p in range(2):
            rows_for(cfg, seeds[sid], p, ks, vs)
            pool.append(sid, ks, vs)
        if k in (2, 3):  # before the pressure that reclaims sessions 0 and 1
            early[sid] = zeros("f", len(q))
            pool.attend(sid, 0, q, early[sid])
    pool.check()
    return pool, ids, seeds, asked, early


def _query(cfg):
    n = cfg.heads * cfg.head_dim
    q = zeros("f", n)
    rng = Rng(7)
    for i in range(n):
        q[i] = rng.gauss()
    return q


def test_pressure_reclaims_lru_and_survivors_are_unchanged():
    pool, ids, seeds, asked, early = _pressure_scenario()
    assert asked == ids[:2], (asked, ids)
    assert [pool.is_open(s) for s in ids] == [False, False, True, True, True, True]
    st = pool.stats()
    assert (st["alloc_failures"], st["reclaims"], st["refusals"], st["blocks_free"]) == (2, 2, 0, 0)
    cfg = pool.cfg
    n = cfg.heads * cfg.head_dim
    q = _query(cfg)
    out, want = zeros("f", n), zeros("f", n)
    for sid in ids[2:]:
        pool.attend(sid, 0, q, out)
        if sid in early:  # to the bit: the reclaims around it changed nothing
            assert list(out) == list(early[sid]), sid
        reference_attention(cfg, seeds[sid], 2, 0, q, want)
        for i in range(n):
            assert abs(out[i] - want[i]) <= 1e-5 * (1 + abs(want[i])), (sid, i)
    # attending touched ids[2..5] in order: the next pressure reclaims ids[2]
    sid = ids[5]
    ks, vs = _rows(cfg)
    rows_for(cfg, seeds[sid], 2, ks, vs)
    pool.append(sid, ks, vs)
    assert not pool.is_open(ids[2]) and pool.stats()["reclaims"] == 3
    pool.check()


def test_refusal_and_failure_change_nothing():
    cfg = CacheConfig(1, 2, 1, 4, 4, "f32", align=0)
    refuse = [True]
    pool = PagedPool(cfg, 2, sessions=3, on_pressure=lambda sid: not refuse[0])
    ks, vs = _rows(cfg)
    a, b, c = pool.open(), pool.open(), pool.open()
    for sid in (a, a, b, b):
        rows_for(cfg, sid, pool.length(sid), ks, vs)
        pool.append(sid, ks, vs)
    before = bytes(pool.cache.arena)
    e = raises(CacheFullError, pool.append, c, ks, vs)
    assert "no free block" in message(e)
    assert bytes(pool.cache.arena) == before and pool.length(c) == 0
    st = pool.stats()
    assert (st["alloc_failures"], st["refusals"], st["reclaims"], st["appends_failed"]) == (1, 2, 0, 1)
    refuse[0] = False
    pool.append(c, ks, vs)  # now a (least recently used) goes
    assert not pool.is_open(a) and pool.is_open(b)
    pool.check()


def test_waste_is_the_unfilled_last_blocks():
    cfg = CacheConfig(1, 2, 2, 8, 16, "i8", align=16)
    pool = PagedPool(cfg, 4, sessions=3)
    ks, vs = _rows(cfg)
    lens = (5, 4, 1)
    for k in range(3):
        sid = pool.open()
        for p in range(lens[k]):
            rows_for(cfg, k, p, ks, vs)
            pool.append(sid, ks, vs)
    st = json.loads(pool.stats_json())
    per_token = pool.cache.main_slot_bytes
    assert st["waste_bytes"] == (3 + 0 + 3) * per_token
    assert st["used_bytes"] == 10 * per_token
    assert st["used_bytes"] + st["waste_bytes"] == (st["blocks_total"] - st["blocks_free"]) * 4 * per_token
    keys = ["total_bytes", "used_bytes", "peak_bytes", "padding_bytes", "block_tokens", "blocks_total",
            "blocks_free", "sessions_open", "tokens_cached", "waste_bytes", "alloc_failures", "reclaims",
            "refusals", "appends_failed"]
    line = pool.stats_json()
    assert [line.index('"%s"' % k) for k in keys] == sorted(line.index('"%s"' % k) for k in keys)
    assert st == pool.stats()


def test_bad_input_is_refused_precisely():
    e = raises(ValueError, PagedPool, CacheConfig(1, 2, 1, 4, 8, "f32", window=4), 2)
    assert "window=0" in message(e)
    e = raises(ValueError, PagedPool, CacheConfig(1, 2, 1, 4, 8, "i4", group=4), 4)
    assert "KIVI" in message(e)
    e = raises(ValueError, PagedPool, CacheConfig(1, 2, 1, 4, 9, "f32"), 2)
    assert "multiple of block" in message(e)
    cfg = CacheConfig(1, 2, 1, 4, 8, "f32", align=0)
    pool = PagedPool(cfg, 2, sessions=1, session_blocks=1)
    ks, vs = _rows(cfg)
    sid = pool.open()
    raises(CacheFullError, pool.open)
    e = raises(KeyError, pool.append, sid + 1, ks, vs)
    bad = [zeros("f", 3)]
    e = raises(ValueError, pool.append, sid, bad, vs)
    assert "k has 3 values" in message(e)
    ks[0][1] = float("nan")
    raises(ValueError, pool.append, sid, ks, vs)
    assert pool.length(sid) == 0 and pool.nfree == 4
    ks[0][1] = 0.5
    pool.append(sid, ks, vs)
    pool.append(sid, ks, vs)
    e = raises(CacheFullError, pool.append, sid, ks, vs)
    assert "cap of 2 tokens" in message(e)
    e = raises(ValueError, pool.attend, sid, 0, zeros("f", 7), zeros("f", 8))
    pool.close(sid)
    raises(KeyError, pool.close, sid)
    pool.check()


def _q8_session(pool, sid, rng, n, kc, vc, ksc, vsc):
    for p in range(n):
        slot = pool.start_token(sid)
        for i in range(len(kc)):
            kc[i] = rng.randint(-127, 127)
            vc[i] = rng.randint(-127, 127)
        for h in range(len(ksc)):
            ksc[h] = 0x2000 + rng.randint(0, 255)
            vsc[h] = 0x2000 + rng.randint(0, 255)
        pool.write_q8(slot, 0, kc, ksc, vc, vsc)


def _attend_all_q8(pool, ids, n, qc, qs, oq, oe):
    for k in range(n):
        pool.attend_q8(ids[k], 0, qc, qs, oq, oe)


def test_q8_attention_follows_the_block_table_without_allocating():
    cfg = CacheConfig(1, 4, 2, 8, 32, "i8", align=0)
    pool = PagedPool(cfg, 4, sessions=3)
    rng = Rng(5)
    kc, vc = zeros("b", 16), zeros("b", 16)
    ksc, vsc = zeros("H", 2), zeros("H", 2)
    ids = zeros("i", 3)
    for k in range(3):
        ids[k] = pool.open()
    for r in range(3):  # interleaved: blocks of different sessions alternate in the store
        for k in range(3):
            _q8_session(pool, ids[k], rng, 2 + k, kc, vc, ksc, vsc)
    pool.check()
    q = zeros("f", 32)
    for i in range(32):
        q[i] = rng.gauss()
    qc, qs, oq, oe = zeros("b", 32), zeros("H", 4), zeros("i", 32), zeros("i", 4)
    quantize_query(q, qc, qs, 4)
    # each session's output equals the float path over its own slots (same cache, same tokens)
    f, g = zeros("f", 32), zeros("f", 32)
    for k in range(3):
        pool.attend_q8(ids[k], 0, qc, qs, oq, oe)
        pool.attend(ids[k], 0, q, f)
        for i in range(32):
            g[i] = oq[i] * 2.0 ** oe[i // 8]
        err = max(abs(f[i] - g[i]) for i in range(32)) / max(abs(x) for x in f)
        assert err < 0.02, (k, err)
    if need_lock():
        _attend_all_q8(pool, ids, 3, qc, qs, oq, oe)
        under_heap_lock(_attend_all_q8, pool, ids, 3, qc, qs, oq, oe)


def need_lock():
    from kvedge import compat
    return compat.HAS_HEAP_LOCK


def _cycle(pool, kc, vc, ksc, vsc, n):
    sid = pool.open()
    for p in range(n):
        slot = pool.start_token(sid)
        pool.write_q8(slot, 0, kc, ksc, vc, vsc)
    pool.close(sid)


def test_thousand_open_close_cycles_memory_flat():
    cfg = CacheConfig(1, 2, 1, 8, 16, "i8", align=0)
    pool = PagedPool(cfg, 4, sessions=2)
    kc, vc = zeros("b", 8), zeros("b", 8)
    ksc, vsc = zeros("H", 1), zeros("H", 1)
    keep = pool.open()  # a live session the cycles must never touch
    _q8_session(pool, keep, Rng(3), 5, kc, vc, ksc, vsc)
    snap = bytes(pool.cache.arena[:])
    _cycle(pool, kc, vc, ksc, vsc, 3)
    gc.collect()
    before = mem_alloc()
    for k in range(1000):
        _cycle(pool, kc, vc, ksc, vsc, 1 + k % 8)
    gc.collect()
    after = mem_alloc()
    if before >= 0:
        assert after - before <= 64, (before, after)
    assert pool.sessions_open() == 1 and pool.nfree == 2 and pool.length(keep) == 5
    assert pool.opened == 1002 and pool.closed == 1001
    # the survivor's blocks (0 and 1) were never written by the cycles
    blk = pool.cache
    for b in (0, 1):
        for t in range(4 if b == 0 else 1):
            s = b * 4 + t
            for kv in (0, 1):
                off = blk.DATA + (kv * blk.B + s) * blk.prow
                assert blk.arena[off:off + 8] == snap[off:off + 8]
    pool.check()


def test_cycles_allocate_nothing_under_heap_lock():
    need("heap_lock")
    cfg = CacheConfig(1, 2, 1, 8, 16, "i8", align=0)
    pool = PagedPool(cfg, 4, sessions=2)
    kc, vc = zeros("b", 8), zeros("b", 8)
    ksc, vsc = zeros("H", 1), zeros("H", 1)
    _cycle(pool, kc, vc, ksc, vsc, 6)
    under_heap_lock(_cycle, pool, kc, vc, ksc, vsc, 6)
    assert pool.nfree == 4


def test_meta_bytes_counts_the_bookkeeping_arrays():
    pool = PagedPool(CacheConfig(1, 2, 1, 8, 32, "i8", align=0), 4, sessions=3, session_blocks=5)
    arrays = (pool.table, pool.sid, pool.slen, pool.snb, pool.scold, pool.stick, pool.asked, pool.ranked,
              pool.refs, pool.free, pool.slots)
    assert pool.meta_bytes() == sum(len(bytes(a)) for a in arrays) == 4 * (15 + 15 + 20) + 6 + 32
