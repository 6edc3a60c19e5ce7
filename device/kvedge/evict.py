# Heavy-hitter eviction (H2O, trap 4 in docs/architecture.md): keep the tokens attention keeps coming back to.
#
# The attention step adds each cached token's probability (Q16, summed over query heads) into `scores`, one
# int per slot. observe() folds that step's scores into the accumulated `acc` and clears `scores`. When the
# cache holds `budget` tokens, placing a new token evicts the slot with the smallest acc among the tokens
# outside the protected set: the first `sinks` positions (and the cache's f32 prefix) and the `recent`
# newest positions. Ties go to the oldest position (deterministic, and the numpy reference does the same).
#
# Integer bound (every int within +-2**30, so 31-bit boards never box an int):
#   decay = 0  saturating sum: acc = min(acc + s, CAP). Exact H2O until a token reaches CAP = 2**30 - 1,
#              after which saturated tokens tie and the oldest of them goes first.
#   decay = d  exponential forgetting: acc = acc - (acc >> d) + s, then saturate as above. Old attention
#              fades with half-life ~ 0.69 * 2**d steps; the steady state stays below s_max * 2**d.
# One step adds at most heads * 65536 (+ rounding) per layer attended, so `scores` itself stays far below
# 2**30 as long as observe() is called once per token (heads * layers attended <= 16383 is checked).
from . import check
from .cache import KVCache
from .compat import zeros
from .sizes import LOWBIT
from .errors import CacheFullError

CAP = (1 << 30) - 1


class H2O:
    """Heavy-hitter eviction policy for one KVCache (window=0). Installs itself as cache.policy.

    budget   tokens the cache may hold (default: every slot of the cache)
    recent   newest tokens that are never evicted (H2O's local window)
    sinks    first positions that are never evicted (StreamingLLM sinks; the f32 prefix always is)
    decay    0 = saturating sum, d > 0 = acc -= acc >> d per observed step (see the header)
    layers   attention steps per token that add into `scores` (to check the per-step bound)"""

    def __init__(self, cache, budget=None, recent=4, sinks=0, decay=0, layers=None):
        if not isinstance(cache, KVCache):
            raise TypeError("cache must be a KVCache, got %s" % check.show(cache))
        cfg = cache.cfg
        if cfg.window:
            raise ValueError("H2O replaces the ring buffer: build the cache with window=0 (got window=%d)"
                             % cfg.window)
        if cfg.dtype in LOWBIT and cfg.residual:
            raise ValueError("H2O cannot evict single tokens from KIVI %s groups (keys share per-channel "
                             "scales over %d tokens): use %s with residual=0, or i8/f16/f32"
                             % (cfg.dtype, cfg.group, cfg.dtype))
        N = cfg.slots
        if budget is None:
            budget = N
        for name, x, lo in (("budget", budget, 1), ("recent", recent, 0), ("sinks", sinks, 0),
                            ("decay", decay, 0)):
            if not isinstance(x, int) or isinstance(x, bool) or x < lo:
                raise ValueError("%s must be an int >= %d, got %r" % (name, lo, x))
        if budget > N:
            raise ValueError("budget (%d) exceeds the cache's %d slots" % (budget, N))
        if decay > 24:
            raise ValueError("decay must be 0..24, got %d" % decay)
        protect = sinks if sinks > cfg.prefix else cfg.prefix
        if budget < protect + recent + 1:
            raise ValueError("budget (%d) must exceed protected sinks/prefix (%d) + recent (%d)"
                             % (budget, protect, recent))
        layers = cfg.layers if layers is None else layers
        if not isinstance(layers, int) or isinstance(layers, bool) or layers < 1:
            raise ValueError("layers must be an int >= 1, got %r" % (layers,))
        if cfg.heads * layers * 65537 >= CAP:
            raise ValueError("heads * layers (%d) too large for one step's Q16 scores" % (cfg.heads * layers))
        self.cache = cache
        self.budget = budget
        self.recent = recent
        self.sinks = sinks
        self.protect = protect
        self.decay = decay
        self.scores = zeros("i", N)  # this step's Q16 attention per slot (pass to Attention.step)
        self.acc = zeros("i", N)  # accumulated, within 0..CAP
        self.saturations = 0  # times an accumulator hit CAP
        self.observed = 0  # steps folded in (wraps at 2**30)
        self.last_victim = -1  # position evicted by the last placement (-1: none)
        cache.policy = self

    # ---- the cache's placement hook ----

    def place(self, cache, pos):
        """Slot for the new position pos; evicts the least-attended unprotected token when at budget.
        Called by cache.start_token() only: cache must be this policy's cache and pos its next position."""
        if cache is not self.cache or cache.policy is not self:
            raise ValueError("place() belongs to the cache this H2O was built for")
        check.index("pos", pos)
        if pos != cache.n_seen:
            raise ValueError("place() takes the cache's next position %d, got %d" % (cache.n_seen, pos))
        P = cache.P
        sp = cache.slot_pos
        victim = -1
        if pos < P:  # the f32 prefix keeps its own rows, and is protected for ever
            slot = pos
        elif cache.n_cached < self.budget:
            slot = P
            while sp[slot] >= 0:  # a free main slot exists: n_cached < budget <= slots, prefix full
                slot += 1
        else:
            slot = self._victim(sp, pos)
            victim = sp[slot]
            cache.evict_slot(slot)
        self.last_victim = victim
        self.acc[slot] = 0
        self.scores[slot] = 0
        return slot

    def _victim(self, sp, pos):
        acc = self.acc
        edge = pos - self.recent  # positions >= edge are recent
        protect = self.protect
        best = -1
        bacc = 0
        bpos = 0
        for s in range(len(sp)):
            p = sp[s]
            if p < protect or p >= edge:  # empty (-1), protected or recent
                continue
            a = acc[s]
            if best < 0 or a < bacc or (a == bacc and p < bpos):
                best, bacc, bpos = s, a, p
        if best < 0:  # excluded by the constructor's budget check; kept as a precise error
            raise CacheFullError("H2O: every cached token is protected (budget %d)" % self.budget)
        return best

    # ---- accumulation ----

    def observe(self):
        """Fold this step's `scores` into `acc` (call once per token, after attending every layer) and clear
        `scores`. Allocates nothing; every intermediate stays within 0..2**30."""
        sc = self.scores
        acc = self.acc
        d = self.decay
        for s in range(len(sc)):
            a = acc[s]
            if d:
                a -= a >> d
            x = sc[s]
            if x >= CAP - a:
                if a < CAP:
                    self.saturations += 1
                a = CAP
            else:
                a += x
            acc[s] = a
            sc[s] = 0
        self.observed = (self.observed + 1) & CAP

    def nbytes(self):
        """RAM the policy adds beside the cache: two int32 arrays of one entry per slot (this step's scores
        and the accumulators; one int per slot covers every layer and head, since they are summed)."""
        return 4 * (len(self.scores) + len(self.acc))

    def score_of(self, pos):
        """Accumulated attention of a cached position (Q16 units)."""
        return self.acc[self.cache.slot_of(pos)]

    # ---- stats ----

    def stats(self):
        d = self.cache.stats()
        d["h2o_budget"] = self.budget
        d["h2o_recent"] = self.recent
        d["h2o_sinks"] = self.sinks
        d["h2o_decay"] = self.decay
        d["h2o_score_max"] = self._score_max()
        d["h2o_saturations"] = self.saturations
        return d

    def _score_max(self):
        m = 0
        sp = self.cache.slot_pos
        for s in range(len(sp)):
            if sp[s] >= 0 and self.acc[s] > m:
                m = self.acc[s]
        return m

    def stats_json(self):
        """The cache's stats line with the policy's keys appended, fixed order."""
        base = self.cache.stats_json()
        return base[:-1] + (',"h2o_budget":%d,"h2o_recent":%d,"h2o_sinks":%d,"h2o_decay":%d,'
                            '"h2o_score_max":%d,"h2o_saturations":%d}' % (
                                self.budget, self.recent, self.sinks, self.decay, self._score_max(),
                                self.saturations))
