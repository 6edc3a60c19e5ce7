# Device-API fuzzer, family 3: a paged pool of f32 sessions and its cold tier on flash, driven with _poolref's
# model (pressure, LRU reclaim, spill and page-in, forks sharing blocks); refused calls of the pool and the tier,
# the tier's files included in the snapshot. See _fuzzkit.py.
import gc

from kvedge.paged import PagedPool  # the largest modules first, while the heap is compact
from kvedge.compat import zeros
from kvedge.config import CacheConfig
from kvedge.tier.spill import ColdTier
from _fuzzkit import Fuzz, SEED, _scale, BAD_TYPE, TIER_PATH, bad_index, bad_row, bad_out, _remove, _fs
from _poolref import PoolModel, check_all, op_open, op_append, op_close, op_reset, op_attend, op_spill, op_fork

class PoolState:
    def __init__(self, rng, with_tier):
        L, kvh = 1 + rng.below(2), 1 + rng.below(2)
        B = 2 + rng.below(3)
        nb = 3 + rng.below(4)
        S = 2 + rng.below(3)
        MB = 2 + rng.below(nb - 1)
        self.cfg = cfg = CacheConfig(L, kvh * (1 + rng.below(2)), kvh, 2 * (1 + rng.below(2)), nb * B, "f32",
                                     align=rng.pick((0, 8)))
        self.records = 2 + rng.below(4) if with_tier else 0
        self.model = PoolModel(nb, B, S, MB, self.records)
        model = self.model
        self.pool = PagedPool(cfg, B, sessions=S, session_blocks=MB,
                              on_pressure=lambda sid: sid not in model.pinned)
        self.tier = None
        if with_tier:
            _remove(TIER_PATH)
            self.tier = ColdTier(self.pool, TIER_PATH, self.records)
        n = cfg.kv_heads * cfg.head_dim
        self.ks = [zeros("f", n) for _ in range(L)]
        self.vs = [zeros("f", n) for _ in range(L)]
        self.n = n
        self.hd = cfg.heads * cfg.head_dim
        self.buf = zeros("f", cfg.head_dim)

    def close(self):
        if self.tier is not None:
            self.tier.close()
            _remove(TIER_PATH)


def pool_valid(fz, ps):
    rng, pool, model = fz.rng, ps.pool, ps.model
    ids = sorted(model.sess)
    op = rng.below(14)
    if op < 2 or not ids:
        op_open(pool, model, rng.below(10000) + 1)
    elif op > 11:  # shared blocks: forks (spills skip a shared block; a cold session is refused a fork)
        op_fork(pool, model, rng.pick(ids), rng.below(10000) + 1)
    elif op < 6:
        op_append(pool, model, rng.pick(ids), ps.ks, ps.vs)
    elif op < 7:
        q = [rng.real() for _ in range(ps.hd)]
        out, want = zeros("f", ps.hd), zeros("f", ps.hd)
        op_attend(pool, model, rng.pick(ids), q, out, want, ps.tier)
    elif op < 8:
        op_close(pool, model, rng.pick(ids))
    elif op < 9:
        op_reset(pool, model, rng.pick(ids), rng.below(10000) + 1)
    elif op < 10 and ps.tier is not None:
        op_spill(ps.tier, model, rng.pick(ids), 1 + rng.below(2))
    elif op < 11:
        sid = rng.pick(ids)
        if sid in model.pinned:
            model.pinned.discard(sid)
        else:
            model.pinned.add(sid)
    else:
        check_all(pool, model, ps.buf)
    fz.settle()


def _bad_sid(rng, pool):
    if rng.below(2):
        return rng.pick(BAD_TYPE)
    return rng.pick((0, -1, pool.next_id + 5, 1 << 40))


def pool_refuse(fz, ps):
    rng, pool, model, cfg = fz.rng, ps.pool, ps.model, ps.cfg
    ids = sorted(model.sess)
    sid = rng.pick(ids) if ids else 1
    L, H, D, hd, n = cfg.layers, cfg.kv_heads, cfg.head_dim, ps.hd, ps.n
    ok = [0.5] * n
    m = rng.below(16)
    if m == 0:
        bad = _bad_sid(rng, pool)
        calls = (pool.length, pool.close, pool.reset, pool.start_token, pool.expand, pool.fork, pool.needs_block)
        fz.refuse(rng.pick(calls + (pool.is_open,) if type(bad) is not int else calls), (bad,), "session call")
    elif m == 1:
        args = [sid, [ok] * L, [ok] * L]
        i = rng.below(3)
        if i == 0 or not ids:
            args[0] = _bad_sid(rng, pool)
        elif rng.below(2):
            args[i] = rng.pick((None, [ok] * (L + 1), 5))
        else:
            rows = list(args[i])
            rows[rng.below(L)] = bad_row(rng, n, 3.4028234663852886e38)
            args[i] = rows
        fz.refuse(pool.append, args, "append")
    elif m == 2:
        args = [sid, 0, 0, 0, 0, zeros("f", D)]
        i = rng.below(6)
        if i == 0 or not ids:
            args[0] = _bad_sid(rng, pool)
        else:
            args[i] = (None, bad_index(rng, L), bad_index(rng, H), bad_index(rng, pool.length(sid)),
                       bad_index(rng, 2), bad_out(rng, D, True))[i]
        fz.refuse(pool.read, args, "read")
    elif m == 3:
        fz.refuse(pool.slot_of, (sid, bad_index(rng, pool.length(sid) if ids else 0)) if ids
                  else (_bad_sid(rng, pool), 0), "slot_of")
    elif m < 6:  # D5: a refused attend must not count as use
        args = [sid, 0, [0.25] * hd, zeros("f", hd), None]
        i = rng.below(5)
        if i == 0 or not ids:
            args[0] = _bad_sid(rng, pool)
        elif i == 1:
            args[1] = bad_index(rng, L)
        elif i == 2:
            args[2] = bad_row(rng, hd, 3.4028234663852886e38)
        elif i == 3:
            args[3] = bad_out(rng, hd, True)
        else:
            args[4] = rng.pick(([0] * (cfg.max_tokens - 1), tuple([0] * cfg.max_tokens), [-5] * cfg.max_tokens))
        target = ps.tier if ps.tier is not None and rng.below(2) else pool
        fz.refuse(target.attend, args, "attend")
    elif m == 6:
        target = ps.tier if ps.tier is not None and rng.below(2) else pool
        fz.refuse(target.attend_q8, (sid, 0, zeros("b", hd), zeros("H", cfg.heads), zeros("i", hd),
                                     zeros("i", cfg.heads)), "attend_q8 on f32")
    elif m == 7:
        fz.refuse(pool.write_q8, (rng.pick((0, -1, 1.5)), 0, zeros("b", n), [0x3C00] * H, zeros("b", n),
                                  [0x3C00] * H), "write_q8 on f32")
    elif m == 8:
        free = [i for i in range(pool.S) if not pool.sid[i]]
        fz.refuse(pool.take_block, (rng.pick(free) if free and rng.below(2) else bad_index(rng, pool.S),),
                  "take_block")
    elif m == 9:
        if len(ids) == pool.S:
            fz.refuse(pool.open, (), "open with every handle in use")
        else:
            empty = [k for k in ids if not model.sess[k][1]]
            cold = [k for k in ids if model.sess[k][3]]
            if empty or cold:
                fz.refuse(pool.expand, (rng.pick(empty or cold),), "expand of an empty or cold session")
    elif m == 10:
        k = rng.below(5)
        fz.refuse(PagedPool, ((None, 2), (cfg, 0), (cfg, 5 if cfg.max_tokens % 5 else 7), (cfg, 2, 0),
                              (cfg, 2, 2, -1))[k], "PagedPool")
    elif ps.tier is not None:
        _refuse_tier(fz, ps, ids, sid)
    else:
        fz.refuse(pool.close, (_bad_sid(rng, pool),), "close")


def _refuse_tier(fz, ps, ids, sid):
    rng, tier, pool = fz.rng, ps.tier, ps.pool
    m = rng.below(7)
    if m == 0:
        fz.refuse(tier.spill, (_bad_sid(rng, pool), 1) if rng.below(2) or not ids
                  else (sid, rng.pick((-1, 1.5, None, "2"))), "spill")
    elif m == 1:
        fz.refuse(rng.pick((tier.fetch, tier.save_instead)), (_bad_sid(rng, pool),), "fetch")
    elif m == 2:
        used = [r for r in range(tier.slots) if tier.rec_sid[r]]
        fz.refuse(tier.drop, (rng.pick(used) if used and rng.below(2) else bad_index(rng, tier.slots),),
                  "drop")
    elif m == 3:
        fz.refuse(tier.adopt, rng.pick(((0, 0), (tier.gen, sid), (1.5, 1), (1, None), (7, 3))), "adopt")
    elif m == 4:
        fz.refuse(ColdTier, rng.pick(((pool, TIER_PATH + "2", 1), (None, TIER_PATH, 1), (pool, 5, 1))),
                  "ColdTier")
    else:
        fz.refuse(ColdTier, (PagedPool(ps.cfg, pool.B), TIER_PATH + "2", rng.pick((0, -1, 1.5, True))),
                  "ColdTier")


def test_fuzz_pool_and_tier():
    with_tier = _fs()
    fz = Fuzz("pool+tier" if with_tier else "pool (no filesystem: no tier)", SEED + 2)
    budget = _scale()
    rng = fz.rng
    try:
        while fz.refused + fz.valid < budget:
            ps = None
            gc.collect()
            ps = PoolState(rng, with_tier)
            fz.roots = [ps.pool]
            fz.tier = ps.tier
            fz.settle()
            try:
                for _ in range(80):
                    if rng.below(2):
                        pool_valid(fz, ps)
                    else:
                        pool_refuse(fz, ps)
                check_all(ps.pool, ps.model, ps.buf)
            finally:
                ps.close()
    finally:
        _remove(TIER_PATH)
        _remove(TIER_PATH + "2")
    fz.done()
