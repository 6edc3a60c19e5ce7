# Device-API fuzzer, family 2: H2O eviction over a window-0 cache, its placements re-derived from the rule, its
# score sums and accumulators checked; refused calls of the policy, the cache and the attention. See _fuzzkit.py.
import gc

from kvedge.paged import PagedPool  # noqa: F401  (largest modules first, while the heap is compact)
from kvedge.attention import quantize_query
from kvedge.budget import LOWBIT
from kvedge.cache import KVCache
from kvedge.compat import zeros
from kvedge.evict import H2O
from _fuzzkit import Fuzz, SEED, _scale, BAD_TYPE, bad_index, _random_cfg
from _fuzzcache import CacheState, cache_refuse, _check_step_all

CAP = (1 << 30) - 1


def _h2o_state(rng):
    while True:
        cfg = _random_cfg(rng)
        if cfg.window or (cfg.dtype in LOWBIT and cfg.residual) or cfg.slots < 4:
            continue
        N = cfg.slots
        recent = rng.below(3)
        sinks = rng.below(3)
        protect = max(sinks, cfg.prefix)
        if N < protect + recent + 2:
            continue
        budget = protect + recent + 1 + rng.below(N - protect - recent)
        st = CacheState(rng, rng.below(1000), cfg)
        st.pol = H2O(st.c, budget, recent, sinks, rng.pick((0, 0, 3)))
        return st


def _victim(st, pos):
    """The H2O rule, derived again: least accumulated attention among unprotected, non-recent live tokens,
    ties to the oldest."""
    c, pol = st.c, st.pol
    best = None
    for s in range(c.N):
        p = c.slot_pos[s]
        if p < pol.protect or p >= pos - pol.recent:
            continue
        key = (pol.acc[s], p)
        if best is None or key < best:
            best = key
    return best[1]


def h2o_valid(fz, st):
    rng, c, pol, cfg = fz.rng, st.c, st.pol, st.cfg
    op = rng.below(8)
    pos = c.n_seen
    if op == 0:
        st.reset()
    elif op < 4 and pos < cfg.slots * 3:
        want = _victim(st, pos) if c.n_cached >= pol.budget and pos >= cfg.prefix else -1
        ks, vs = st.rows(pos)
        assert c.append(ks, vs) == pos
        assert pol.last_victim == want, (pol.last_victim, want)
        assert c.n_cached <= pol.budget
    elif op < 6 and c.n_cached:
        layer = rng.below(cfg.layers)
        q = [rng.real() for _ in range(st.hd)]
        before = sum(pol.scores)
        qc, qs = zeros("b", st.hd), zeros("H", cfg.heads)
        quantize_query(q, qc, qs, cfg.heads)
        if st.att.int_ok and rng.below(2) and st.att.q8_fits(layer, qs):  # within step_q8's range
            st.att.step_q8(layer, qc, qs, zeros("i", st.hd), zeros("i", cfg.heads), pol.scores)
        else:
            st.att.step(layer, q, zeros("f", st.hd), pol.scores)
        added = sum(pol.scores) - before  # each head's probabilities, Q16, rounded per token
        assert abs(added - cfg.heads * 65536) <= cfg.heads * (c.n_cached + 64), (added, cfg.heads)
    else:
        d = pol.decay
        want = []
        for s in range(c.N):
            a = pol.acc[s]
            if d:
                a -= a >> d
            want.append(min(CAP, a + pol.scores[s]))
        pol.observe()
        assert list(pol.acc) == want and sum(pol.scores) == 0
    fz.settle()


def h2o_refuse(fz, st):
    rng, c, pol, cfg = fz.rng, st.c, st.pol, st.cfg
    m = rng.below(6)
    if m == 0:
        other = KVCache(cfg)
        fz.refuse(pol.place, rng.pick(((other, c.n_seen), (c, c.n_seen + 1), (c, c.n_seen - 1),
                                       (c, rng.pick(BAD_TYPE)), (None, 0))), "place")
    elif m == 1:
        fz.refuse(pol.score_of, (bad_index(rng, c.n_seen),), "score_of")
    elif m == 2:  # scores that one more step could push past 2**30: observe() was not called
        sc = zeros("i", c.N)
        sc[rng.below(c.N)] = CAP - rng.below(1000)
        hd = st.hd
        fz.refuse(st.att.step, (0, [0.5] * hd, zeros("f", hd), sc), "step with saturated scores")
    elif m == 3:
        k = rng.below(7)
        kw = ((cfg.slots + 1, 0, 0, 0), (0, 0, 0, 0), (None, -1, 0, 0), (None, 0, "x", 0), (None, 0, 0, 25),
              (None, 0, 0, 1.5), (cfg.slots, cfg.slots, 0, 0))[k]
        target = c if rng.below(2) else KVCache(cfg)  # a refused H2O leaves either cache's policy alone
        fz.refuse(H2O, (target,) + kw, "H2O")
    else:
        cache_refuse(fz, st)


def test_fuzz_h2o():
    fz = Fuzz("h2o", SEED + 1)
    budget = _scale()
    rng = fz.rng
    while fz.refused + fz.valid < budget:
        st = None
        gc.collect()
        st = _h2o_state(rng)
        st.check_all = _check_step_all(st.att)
        fz.roots = [st.c, st.att, st.pol]
        fz.settle()
        for _ in range(60):
            if rng.below(2):
                h2o_valid(fz, st)
            else:
                h2o_refuse(fz, st)
    fz.done()
