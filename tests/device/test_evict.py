# Heavy-hitter (H2O) eviction against a plain-Python model of its choices (every runtime).
import gc

from kvedge.attention import Attention, quantize_query
from kvedge.cache import KVCache
from kvedge.compat import zeros
from kvedge.config import CacheConfig
from kvedge.evict import H2O, CAP
from _support import Rng, need, raises, message, under_heap_lock

RESULT = 1 << 30


class RefH2O:
    """Live positions with their accumulated score; the same rules, written the obvious way."""

    def __init__(self, budget, recent, protect, decay):
        self.budget, self.recent, self.protect, self.decay = budget, recent, protect, decay
        self.live = {}  # pos -> acc
        self.evicted = []

    def place(self, pos):
        if len(self.live) >= self.budget:
            cand = [(a, p) for p, a in self.live.items() if self.protect <= p < pos - self.recent]
            a, p = min(cand)
            del self.live[p]
            self.evicted.append(p)
        self.live[pos] = 0

    def observe(self, add):
        for p in self.live:
            a = self.live[p]
            if self.decay:
                a -= a >> self.decay
            self.live[p] = min(CAP, a + add.get(p, 0))


def _feed(cache, rng, kc, vc, ks, vs):
    for i in range(len(kc)):
        kc[i] = rng.randint(-127, 127)
        vc[i] = rng.randint(-127, 127)
    for h in range(len(ks)):
        ks[h] = 0x2400 + rng.randint(0, 255)
        vs[h] = 0x2400 + rng.randint(0, 255)
    cache.start_token()
    for layer in range(cache.L):
        cache.write_q8(layer, kc, ks, vc, vs)


def _synthetic_case(decay, sinks, prefix_dtype, steps, seed):
    """Scores from the Rng (heavy for a few positions): the policy's accumulators and victims equal the model's."""
    dt, prefix = prefix_dtype
    kw = dict(residual=0) if dt in ("i4", "i2") else {}
    cfg = CacheConfig(1, 2, 1, 4, 12, dt, align=0, prefix=prefix, **kw)
    c = KVCache(cfg)
    pol = H2O(c, budget=10, recent=3, sinks=sinks, decay=decay)
    ref = RefH2O(10, 3, max(sinks, prefix), decay)
    rng = Rng(seed)
    k = zeros("f", 4)
    for pos in range(steps):
        for i in range(4):
            k[i] = rng.uniform(-1, 1)
        c.append([k], [k])
        was = len(ref.evicted)
        ref.place(pos)
        assert pol.last_victim == (ref.evicted[-1] if len(ref.evicted) > was else -1)
        add = {}
        for s in range(c.N):
            p = c.slot_pos[s]
            if p >= 0:
                x = rng.randint(0, 65536 * 2) if p % 7 == 3 else rng.randint(0, 4000)
                pol.scores[s] = x
                add[p] = x
        pol.observe()
        ref.observe(add)
    live = zeros("i", c.N)
    n = c.positions(live)
    assert sorted(ref.live) == list(live[:n])
    for p in ref.live:
        assert pol.score_of(p) == ref.live[p], (p, pol.score_of(p), ref.live[p])
    assert c.evictions == len(ref.evicted) == steps - 10
    return ref.evicted, list(live[:n])


def test_choices_and_scores_match_the_model():
    for decay in (0, 3):
        for sinks in (0, 2):
            for pd in (("f32", 0), ("i8", 0), ("f16", 1), ("i4", 0), ("i2", 0)):
                ev = _synthetic_case(decay, sinks, pd, 60, 11 + decay + sinks)[0]
                assert any(p % 7 != 3 for p in ev)
                gc.collect()


def test_heavy_hitters_survive_beyond_the_recent_window():
    ev, live = _synthetic_case(0, 0, ("f32", 0), 80, 4)
    # positions scored heavily (p % 7 == 3) outlive the window: a ring of 10 would hold at most 2 of them
    heavy = [p for p in live if p % 7 == 3]
    assert 3 in heavy and 10 in heavy and len(heavy) >= 6, live


def _attended_run(dtype, steps, seed, integer):
    cfg = CacheConfig(2, 4, 2, 8, 10, dtype, align=0)
    c = KVCache(cfg)
    pol = H2O(c, budget=8, recent=2, sinks=1)
    att = Attention(c, tile=4)
    rng = Rng(seed)
    kc, vc = zeros("b", 16), zeros("b", 16)
    ks, vs = zeros("H", 2), zeros("H", 2)
    q = zeros("f", 32)
    out = zeros("f", 32)
    qc, qs, oq, oe = zeros("b", 32), zeros("H", 4), zeros("i", 32), zeros("i", 4)
    kf, vf = zeros("f", 16), zeros("f", 16)
    for pos in range(steps):
        if dtype == "i8":
            _feed(c, rng, kc, vc, ks, vs)
        else:
            for i in range(16):
                kf[i] = rng.gauss()
                vf[i] = rng.gauss()
            c.append([kf, kf], [vf, vf])
        for i in range(32):
            q[i] = 0.5 * rng.gauss()  # |q| x |k| x sqrt(8) within step_q8's Q8_RANGE (16) for unit-normal keys
        quantize_query(q, qc, qs, 4)
        for layer in range(2):
            if integer:
                att.step_q8(layer, qc, qs, oq, oe, pol.scores)
            else:
                att.step(layer, q, out, pol.scores)
        total = 0
        for s in range(c.N):
            total += pol.scores[s]
        # two layers x four query heads, each a probability distribution in Q16
        assert abs(total - 8 * 65536) <= 8 * 65536 // 100, total
        pol.observe()
        assert c.n_cached == min(pos + 1, 8)
    assert c.evictions == steps - 8
    assert c.slot_of(0) >= 0 and c.slot_of(steps - 1) >= 0 and c.slot_of(steps - 2) >= 0
    return c


def test_driven_by_attention_on_every_dtype():
    for dtype in ("f32", "f16", "i8"):
        _attended_run(dtype, 20, 3, False)
        gc.collect()
    _attended_run("i8", 20, 3, True)


class _Q8Run:
    """Everything one integer step needs, in one object (under_heap_lock passes at most 8 arguments)."""

    def __init__(self, c, pol, att, kc, vc, ks, vs, qc, qs, oq, oe):
        self.c, self.pol, self.att = c, pol, att
        self.kc, self.vc, self.ks, self.vs = kc, vc, ks, vs
        self.qc, self.qs, self.oq, self.oe = qc, qs, oq, oe


def _q8_tokens(r, n):
    for t in range(n):
        r.c.start_token()
        r.c.write_q8(0, r.kc, r.ks, r.vc, r.vs)
        r.att.step_q8(0, r.qc, r.qs, r.oq, r.oe, r.pol.scores)
        r.pol.observe()


def test_eviction_and_accumulation_allocate_nothing():
    need("heap_lock")
    cfg = CacheConfig(1, 2, 1, 8, 12, "i8", align=0)
    c = KVCache(cfg)
    pol = H2O(c, budget=10, recent=3)
    att = Attention(c, tile=4)
    rng = Rng(9)
    kc, vc = zeros("b", 8), zeros("b", 8)
    ks, vs = zeros("H", 1), zeros("H", 1)
    for t in range(12):
        _feed(c, rng, kc, vc, ks, vs)
    qc, qs, oq, oe = zeros("b", 16), zeros("H", 2), zeros("i", 16), zeros("i", 2)
    for i in range(16):
        qc[i] = rng.randint(-100, 100)
    qs[0] = qs[1] = 0x2400  # 2**-6: |q| x |k| x sqrt(8) <= 14.1, within step_q8's Q8_RANGE (16)
    r = _Q8Run(c, pol, att, kc, vc, ks, vs, qc, qs, oq, oe)
    _q8_tokens(r, 30)
    before = c.evictions
    under_heap_lock(_q8_tokens, r, 30)
    assert c.evictions == before + 30


def test_saturation_and_decay_keep_ints_small():
    cfg = CacheConfig(1, 2, 1, 4, 6, "f32", align=0)
    c = KVCache(cfg)
    pol = H2O(c, budget=6, recent=1)
    k = zeros("f", 4)
    for t in range(3):
        c.append([k], [k])
    pol.acc[0] = CAP - 5
    pol.scores[0] = 131072
    pol.scores[1] = 7
    pol.observe()
    assert pol.acc[0] == CAP and pol.acc[1] == 7 and pol.saturations == 1
    pol.scores[0] = 131072
    pol.observe()
    assert pol.acc[0] == CAP and pol.saturations == 1 and pol.scores[0] == 0
    # decay d: a constant score s settles below s * 2**d
    c2 = KVCache(cfg)
    pol2 = H2O(c2, budget=6, recent=1, decay=4)
    c2.append([k], [k])
    for t in range(400):
        pol2.scores[0] = 2 * 65536
        pol2.observe()
    assert 2 * 65536 * 15 <= pol2.acc[0] <= 2 * 65536 * 16, pol2.acc[0]
    assert pol2.saturations == 0


def test_refuses_what_it_cannot_do():
    k4 = CacheConfig(1, 2, 1, 8, 16, "i4", group=4, align=0)
    e = raises(ValueError, H2O, KVCache(k4))
    assert "KIVI" in message(e) and "residual=0" in message(e)
    H2O(KVCache(CacheConfig(1, 2, 1, 8, 16, "i4", group=4, residual=0, align=0)))  # naive i4: fine
    e = raises(ValueError, H2O, KVCache(CacheConfig(1, 2, 1, 4, 8, "f32", window=4)))
    assert "window=0" in message(e)
    c = KVCache(CacheConfig(1, 2, 1, 4, 8, "f32", align=0))
    e = raises(ValueError, H2O, c, 9)
    assert "exceeds the cache's 8 slots" in message(e)
    e = raises(ValueError, H2O, c, 4, 3, 1)
    assert "must exceed protected" in message(e)
    e = raises(ValueError, H2O, c, 8, -1)
    assert "recent must be an int >= 0" in message(e)
    assert c.policy is None  # a refused policy does not install itself


def test_stats_line_extends_the_cache_line():
    import json
    c = KVCache(CacheConfig(1, 2, 1, 4, 8, "f32", align=0))
    pol = H2O(c, budget=6, recent=2, sinks=1, decay=2)
    k = zeros("f", 4)
    for t in range(9):
        c.append([k], [k])
        pol.scores[c.cur_slot] = 100 + t
        pol.observe()
    line = pol.stats_json()
    assert line.startswith(c.stats_json()[:-1] + ',"h2o_budget":6,')
    d = json.loads(line)
    assert d == pol.stats()
    assert d["evictions"] == 3 and d["tokens_cached"] == 6 and d["h2o_score_max"] > 0


def test_nbytes_is_two_int_arrays_per_slot():
    c = KVCache(CacheConfig(3, 4, 2, 8, 20, "i8", align=0))
    assert H2O(c, recent=2).nbytes() == 2 * 4 * 20
