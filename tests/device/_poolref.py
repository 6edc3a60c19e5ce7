# A plain-Python model of the paged pool (what must be true, nothing about block ids), and the operations
# that drive a real PagedPool and the model side by side, asserting they agree. Used by the seeded random
# driver (tests/device/test_paged.py, every runtime) and the hypothesis state machine (tests/host).
import math

from kvedge.compat import float_array
from kvedge.errors import CacheFullError
from _cacheref import value, f32


def token(seed, pos, layer, kv, i, D):
    return f32(value(seed, pos, layer, kv, i, D))


class PoolModel:
    """Sessions as [seed, length, last use, cold blocks, their indices]; block needs and LRU reclaim derived from
    that alone. A spill (a ColdTier) moves a session's oldest full RAM blocks; a fetch brings them back oldest
    first, and one stopped by pressure leaves the rest cold (so the cold blocks need not be the oldest ones);
    cold blocks hold no RAM.

    Shared prefixes: each session's blocks are keys (plain ints, nothing to do with the pool's block ids), a fork
    copies the list, so a key held by several sessions is one block; a block is free when no session holds its
    key. A write into a block whose key another session holds takes a new key (copy on write). Only sessions
    holding a key alone are offered under pressure; spills skip shared keys. orig[sid][p] is the seed that
    wrote position p (a fork's prefix: its source's)."""

    def __init__(self, n_blocks, block, max_sessions, session_blocks, records=0):
        self.nb, self.B, self.S, self.MB = n_blocks, block, max_sessions, session_blocks
        self.records = records  # cold tier capacity
        self.sess = {}  # sid -> [seed, length, tick, cold, [cold block indices]]
        self.keys = {}  # sid -> block keys
        self.orig = {}  # sid -> seed of each position
        self.next_key = 0
        self.tick = 0
        self.pinned = set()  # sessions the pressure callback refuses
        self.alloc_failures = self.reclaims = self.refusals = self.appends_failed = 0

    def blocks(self, n):
        return (n + self.B - 1) // self.B

    def ram_keys(self, sid):
        cold = self.sess[sid][4]
        return [k for j, k in enumerate(self.keys[sid]) if j not in cold]

    def holders(self, key):
        return sum(1 for sid in self.sess if key in self.ram_keys(sid))

    def sole(self, sid):
        """RAM blocks sid holds alone: what reclaiming it frees."""
        return sum(1 for k in self.ram_keys(sid) if self.holders(k) == 1)

    def free(self):
        held = set()
        for sid in self.sess:
            held.update(self.ram_keys(sid))
        return self.nb - len(held)

    def new_key(self):
        self.next_key += 1
        return self.next_key

    def touch(self, sid):
        self.tick += 1
        self.sess[sid][2] = self.tick

    def open(self, sid, seed):
        self.sess[sid] = [seed, 0, 0, 0, []]
        self.keys[sid] = []
        self.orig[sid] = []
        self.touch(sid)

    def fork(self, new, sid, seed):
        s = self.sess[sid]
        self.sess[new] = [seed, s[1], 0, 0, []]
        self.keys[new] = list(self.keys[sid])
        self.orig[new] = list(self.orig[sid])
        self.touch(new)

    def drop(self, sid):
        del self.sess[sid]
        del self.keys[sid]
        del self.orig[sid]
        self.pinned.discard(sid)

    def pressure(self, sid):
        """No free block for sid: offer LRU sessions holding RAM blocks. Returns (ok, reclaimed sids)."""
        self.alloc_failures += 1
        order = sorted((v[2], k) for k, v in self.sess.items() if k != sid and self.sole(k) > 0)
        for _, k in order:
            if k in self.pinned:
                self.refusals += 1
                continue
            self.drop(k)
            self.reclaims += 1
            return True, [k]
        self.appends_failed += 1
        return False, []

    def append(self, sid):
        """Returns (ok, reclaimed sids) as the pool must behave."""
        s = self.sess[sid]
        if s[1] == self.MB * self.B:
            self.appends_failed += 1
            return False, []
        gone = []
        n, B, keys = s[1], self.B, self.keys[sid]
        new = n % B == 0 or self.holders(keys[n // B]) > 1  # a new block, or a copy of a shared one
        if new and self.free() == 0:
            ok, gone = self.pressure(sid)
            if not ok:
                return False, []
        if n % B == 0:
            keys.append(self.new_key())
        elif new:
            keys[n // B] = self.new_key()
        s[1] += 1
        self.orig[sid].append(s[0])
        self.touch(sid)
        return True, gone

    def spill(self, sid, n):
        s = self.sess[sid]
        room = self.records - sum(v[3] for v in self.sess.values())
        moved = 0
        for j in range(s[1] // self.B):  # the oldest full blocks still in RAM, held by this session alone
            if moved == min(n, room):
                break
            if j in s[4] or self.holders(self.keys[sid][j]) > 1:
                continue
            s[4].append(j)
            moved += 1
        s[3] += moved
        s[4].sort()
        return moved

    def fetch(self, sid):
        """Page-in: one block per cold block, each under the append pressure rules. Returns (ok, gone)."""
        s = self.sess[sid]
        gone = []
        while s[3]:
            if self.free() == 0:
                ok, g = self.pressure(sid)
                gone += g
                if not ok:
                    return False, gone
            s[3] -= 1
            s[4].pop(0)
        return True, gone

    def waste(self):
        """Unfilled slots of the distinct last blocks (forks sharing one have the same length)."""
        last = {}
        for sid, s in self.sess.items():
            if s[1] % self.B:
                last[self.keys[sid][-1]] = self.B - s[1] % self.B
        return sum(last.values())


def check_rows(pool, model, sid, buf):
    """Every row of a session reads back exactly (f32 pool)."""
    cfg = pool.cfg
    D, H = cfg.head_dim, cfg.kv_heads
    seeds, n, cold = model.orig[sid], model.sess[sid][1], model.sess[sid][4]
    assert pool.length(sid) == n, (sid, pool.length(sid), n)
    for p in range(n):
        if p // model.B in cold:
            continue
        for layer in range(cfg.layers):
            for kv in (0, 1):
                for h in range(H):
                    pool.read(sid, layer, h, p, kv, buf)
                    for i in range(D):
                        want = token(seeds[p], p, layer, kv, h * D + i, D)
                        assert buf[i] == want, (sid, p, layer, kv, h, i, buf[i], want)


def check_all(pool, model, buf):
    pool.check()
    open_ids = sorted(k for k in model.sess)
    assert [k for k in open_ids if pool.is_open(k)] == open_ids
    assert pool.sessions_open() == len(open_ids)
    assert pool.nfree == model.free(), (pool.nfree, model.free())
    assert pool.waste_tokens() == model.waste()
    assert (pool.alloc_failures, pool.reclaims, pool.refusals, pool.appends_failed) == (
        model.alloc_failures, model.reclaims, model.refusals, model.appends_failed)
    for sid in open_ids:
        assert pool.scold[pool._handle(sid)] == model.sess[sid][3], sid
        assert pool.sole_blocks(pool._handle(sid)) == model.sole(sid), sid
        check_rows(pool, model, sid, buf)


def rows_for(cfg, seed, pos, ks, vs):
    D = cfg.head_dim
    n = cfg.kv_heads * D
    for layer in range(cfg.layers):
        for i in range(n):
            ks[layer][i] = value(seed, pos, layer, 0, i, D)
            vs[layer][i] = value(seed, pos, layer, 1, i, D)


def op_open(pool, model, seed):
    if len(model.sess) == model.S:
        try:
            pool.open()
        except CacheFullError:
            return None
        raise AssertionError("open() with every handle in use did not raise")
    sid = pool.open()
    assert sid not in model.sess
    model.open(sid, seed)
    return sid


def op_append(pool, model, sid, ks, vs):
    seed, n = model.sess[sid][0], model.sess[sid][1]
    rows_for(pool.cfg, seed, n, ks, vs)
    ok, gone = model.append(sid)
    try:
        pos = pool.append(sid, ks, vs)
    except CacheFullError:
        assert not ok, "pool refused an append the model accepts"
        return
    assert ok, "pool accepted an append the model refuses"
    assert pos == n
    for k in gone:
        assert not pool.is_open(k), k


def op_close(pool, model, sid):
    pool.close(sid)
    model.drop(sid)


def op_fork(pool, model, sid, seed):
    """A fork of sid: refused (nothing changes) with every handle open or blocks of sid on flash."""
    if len(model.sess) == model.S or model.sess[sid][3]:
        before = (list(pool.table), list(pool.refs), pool.nfree, list(pool.sid))
        try:
            pool.fork(sid)
        except (CacheFullError, ValueError):
            assert (list(pool.table), list(pool.refs), pool.nfree, list(pool.sid)) == before
            return None
        raise AssertionError("fork() with every handle in use or a cold source did not raise")
    new = pool.fork(sid)
    assert new not in model.sess and pool.length(new) == model.sess[sid][1]
    model.fork(new, sid, seed)
    return new


def op_reset(pool, model, sid, seed):
    pool.reset(sid)
    model.sess[sid][0] = seed
    model.sess[sid][1] = 0
    model.sess[sid][3] = 0
    model.sess[sid][4] = []
    model.keys[sid] = []
    model.orig[sid] = []
    model.touch(sid)


def reference_attention(cfg, seed, n, layer, q, out):
    """softmax(q.k / sqrt(D)) v over a session's n tokens, plain Python (no tiling). seed: of every position, or
    a list of each one's."""
    if isinstance(seed, int):
        seed = [seed] * n
    D, H = cfg.head_dim, cfg.heads
    group = H // cfg.kv_heads
    w = float_array(n) if n else None
    for h in range(H):
        kvh = h // group
        m = -1e300
        for p in range(n):
            s = 0.0
            for i in range(D):
                s += q[h * D + i] * token(seed[p], p, layer, 0, kvh * D + i, D)
            s /= math.sqrt(D)
            w[p] = s
            if s > m:
                m = s
        l = 0.0
        for p in range(n):
            w[p] = math.exp(w[p] - m)
            l += w[p]
        for i in range(D):
            a = 0.0
            for p in range(n):
                a += w[p] * token(seed[p], p, layer, 1, kvh * D + i, D)
            out[h * D + i] = a / l


def op_spill(tier, model, sid, n):
    assert tier.spill(sid, n) == model.spill(sid, n)


def op_attend(pool, model, sid, q, out, want, tier=None):
    """Attention over a session (through the tier if given: cold blocks are paged in first)."""
    seed, n = model.sess[sid][0], model.sess[sid][1]
    if n == 0:
        try:
            pool.attend(sid, 0, q, out)
        except ValueError:
            return
        raise AssertionError("attending an empty session did not raise")
    if tier is not None:
        ok, gone = model.fetch(sid)
        try:
            tier.fetch(sid)
        except CacheFullError:
            assert not ok, "pool could not page in a session the model can"
            return
        assert ok, "pool paged in a session the model cannot"
        for k in gone:
            assert not pool.is_open(k), k
    pool.attend(sid, 0, q, out)
    model.touch(sid)
    reference_attention(pool.cfg, model.orig[sid], n, 0, q, want)
    for i in range(len(want)):
        assert abs(out[i] - want[i]) <= 1e-4 * (1.0 + abs(want[i])), (sid, i, out[i], want[i])
