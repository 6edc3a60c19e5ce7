"""Stateful property test of the paged pool (hypothesis): open/append/attend/close/reset/pin (refusing
reclaim) and, with a cold tier, spill/page-in, in any order, many sessions of different lengths, against the
plain-Python model in tests/device/_poolref.py. Zero divergence, no block owned twice, none lost
(PagedPool.check), counters exact, every row in RAM exact, attention equal to a plain-Python reference."""
import os
import tempfile

from hypothesis import settings, strategies as st, HealthCheck
from hypothesis.stateful import RuleBasedStateMachine, rule, invariant, precondition, initialize

from kvedge.compat import zeros
from kvedge.config import CacheConfig
from kvedge.paged import PagedPool
from kvedge.tier.spill import ColdTier
from _poolref import PoolModel, check_all, op_open, op_append, op_close, op_reset, op_attend, op_spill

NB, B, S, MB, RECORDS = 6, 3, 4, 4, 5


class PoolMachine(RuleBasedStateMachine):
    tier = None

    @initialize(with_tier=st.booleans())
    def setup(self, with_tier):
        self.cfg = CacheConfig(2, 2, 1, 4, NB * B, "f32", align=0)
        self.model = PoolModel(NB, B, S, MB, RECORDS)
        self.pool = PagedPool(self.cfg, B, sessions=S, session_blocks=MB,
                              on_pressure=lambda sid: sid not in self.model.pinned)
        if with_tier:
            fd, self.path = tempfile.mkstemp(suffix=".kvt")
            os.close(fd)
            os.remove(self.path)
            self.tier = ColdTier(self.pool, self.path, RECORDS)
        n = self.cfg.kv_heads * self.cfg.head_dim
        self.ks = [zeros("f", n) for _ in range(2)]
        self.vs = [zeros("f", n) for _ in range(2)]
        self.buf = zeros("f", 4)
        self.out = zeros("f", 8)
        self.want = zeros("f", 8)

    def teardown(self):
        if self.tier is not None:
            self.tier.close()
            for x in (".h0", ".h1", ".0", ".1"):  # the store's files (kvedge.tier.store)
                if os.path.exists(self.path + x):
                    os.remove(self.path + x)

    def pick(self, k):
        ids = sorted(self.model.sess)
        return ids[k % len(ids)]

    @rule(seed=st.integers(1, 10 ** 6))
    def open(self, seed):
        op_open(self.pool, self.model, seed)

    @precondition(lambda self: self.model.sess)
    @rule(k=st.integers(0, 99), n=st.integers(1, 7))
    def append(self, k, n):
        sid = self.pick(k)
        for _ in range(n):
            if sid not in self.model.sess:
                break
            op_append(self.pool, self.model, sid, self.ks, self.vs)

    @precondition(lambda self: self.model.sess)
    @rule(k=st.integers(0, 99), q=st.lists(st.floats(-2, 2), min_size=8, max_size=8))
    def attend(self, k, q):
        qa = zeros("f", 8)
        for i in range(8):
            qa[i] = q[i]
        op_attend(self.pool, self.model, self.pick(k), qa, self.out, self.want, self.tier)

    @precondition(lambda self: self.model.sess)
    @rule(k=st.integers(0, 99))
    def close(self, k):
        op_close(self.pool, self.model, self.pick(k))

    @precondition(lambda self: self.model.sess)
    @rule(k=st.integers(0, 99), seed=st.integers(1, 10 ** 6))
    def reset(self, k, seed):
        op_reset(self.pool, self.model, self.pick(k), seed)

    @precondition(lambda self: self.model.sess)
    @rule(k=st.integers(0, 99))
    def pin(self, k):
        self.model.pinned ^= {self.pick(k)}

    @precondition(lambda self: self.model.sess and self.tier is not None)
    @rule(k=st.integers(0, 99), n=st.integers(1, 3))
    def spill(self, k, n):
        op_spill(self.tier, self.model, self.pick(k), n)

    @invariant()
    def agrees(self):
        if hasattr(self, "pool"):
            check_all(self.pool, self.model, self.buf)
            if self.tier is not None:
                assert self.tier.records_used() == sum(v[3] for v in self.model.sess.values())


TestPool = PoolMachine.TestCase
TestPool.settings = settings(max_examples=80, stateful_step_count=40, deadline=None,
                             suppress_health_check=[HealthCheck.too_slow])
