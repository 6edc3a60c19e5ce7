# One session of a PagedPool as a model's cache: the decode interface (kvedge.caches: start_token, write /
# store_q8, attend / attend_q8, bind_q8 / bind_query, q8_fits, quiet, reset, close) over the session's blocks,
# so one Llama runs several conversations on one board (docs/pool.md):
#
#   pool = PagedPool(ccfg, block=16, sessions=4)
#   a, b = PoolSession(pool), PoolSession(pool)
#   m = Llama(path, kv=KV, cache=a)        # a session is its own cache factory
#   m.forward(t)  ...  m.use(b); m.forward(t)  ...  m.use(a)
#   story = PoolSession(pool); ...feed the prompt...; c = story.fork()   # the prompt's blocks held once
#
# The model never asks which cache it has. The integer pass's buffers are bound once for the pool (every session
# of it writes through the same block and kernel), so Llama.use() switches sessions without binding again.
#
# A session reclaimed under memory pressure (the pool's least recently used, trap 2) is dropped: its blocks go to
# the conversation that needed them and its next call raises KeyError ("closed or reclaimed"), as a closed one
# does; open a new session (or replay the conversation) to go on. To keep it instead, give the pool
# on_pressure=ColdTier(...).save_instead: its full blocks go to flash and start_token() brings them back.
from . import check


class PoolSession:
    chunks = False  # a prompt goes in a token at a time (a chunk places its tokens in slots of its own)

    def __init__(self, pool, sid=None):
        """A new session of `pool` (kvedge.paged.PagedPool), or the open session `sid` of it."""
        if not hasattr(pool, "needs_block"):
            raise TypeError("pool must be a PagedPool, got %s" % check.show(pool))
        if sid is None:
            sid = pool.open()
        elif not pool.is_open(sid):
            raise KeyError("no open session %r (closed or reclaimed)" % (sid,))
        self.pool = pool
        self.sid = sid
        self.slot = -1  # the current token's slot (start_token)
        self.att = pool.att  # kvedge.caches.attach leaves a cache that has its attention
        self.int_ok = pool.cache.int_ok

    def __call__(self, ccfg, q8):
        """Llama's cache factory: this session, if the model's cache config is the pool's kind."""
        pc = self.pool.cfg
        for name in ("layers", "heads", "kv_heads", "head_dim", "dtype"):
            if getattr(ccfg, name) != getattr(pc, name):
                raise ValueError("the model's cache has %s %r, the pool %r" % (name, getattr(ccfg, name),
                                                                               getattr(pc, name)))
        if q8 and pc.dtype != "i8":
            raise ValueError("the run writes int8 codes: it needs an i8 pool, this one is %s" % pc.dtype)
        return self

    def fork(self):
        """A new session holding this one's tokens in the same blocks (a shared prompt; kvedge.paged.fork)."""
        return PoolSession(self.pool, self.pool.fork(self.sid))

    def alive(self):
        return self.pool.is_open(self.sid)

    def length(self):
        return self.pool.length(self.sid)

    # ---- the decode interface ----

    def start_token(self):
        """Reserve the session's next position (a new block, or a copy of a shared one, when it needs one);
        returns it. CacheFullError (nothing changed) when the session is at its cap or no block can be had."""
        p = self.pool
        i = p._handle(self.sid)
        if p.scold[i]:
            p.tier.fetch(self.sid)  # its blocks on flash come back first (a ColdTier saved them)
        self.slot = p._next_slot(i)
        return p._commit(i)

    def write(self, layer, k, v):
        self.pool.cache.write_slot(self.slot, layer, k, v)

    def attend(self, layer, q, out):
        self.pool.attend(self.sid, layer, q, out)

    def bind_query(self, qc, qs, oq, oe):
        """The integer attention's buffers, checked once (the pool's attention: every session's)."""
        self.pool.att.check_step_q8(0, qc, qs, oq, oe, None)

    def bind_q8(self, sp, kc, vc, ks, vs, codes, scales, q_store, qc, qs, oq, oe):
        """The integer pass's buffers, bound once for the pool (kvedge.cacheq8's bind_q8, for explicit slots)."""
        from . import q8rows
        p = self.pool
        q8rows.q8_store_block(p.cache, sp, kc, vc, ks, vs, len(codes), len(scales))
        self.bind_query(qc, qs, oq, oe)
        p.q8_block = (sp, q_store, q8rows.write_q8_at)
        pre = getattr(p.att.k, "att_preload", None)
        if pre is not None:
            pre(p.att.k)

    def store_q8(self, layer, codes, scales, slot=-1):
        p = self.pool
        sp, store, write = p.q8_block
        write(p.cache, layer, codes, scales, self.slot, sp, store)

    def attend_q8(self, layer, qc, qs, oq, oe, span=-1):
        self.pool.attend_q8(self.sid, layer, qc, qs, oq, oe)

    def q8_fits(self, layer, qs):
        return self.pool.att.q8_fits(layer, qs)

    def quiet(self):
        """Whether the next step allocates nothing: a block at hand (in its last one, or a free one to take or
        copy into; a reclaim's callback may allocate), below the session's cap, nothing on flash."""
        p = self.pool
        i = p._handle(self.sid)
        if p.scold[i] or p.slen[i] >= p.MB * p.B:
            return False
        return p.nfree > 0 or not p.needs_block(self.sid)

    def reset(self):
        """Empty this conversation (its blocks released; shared ones stay with their other holders)."""
        self.pool.reset(self.sid)

    def close(self):
        """End this conversation; closing it again, or after a reclaim, does nothing."""
        if self.pool.is_open(self.sid):
            self.pool.close(self.sid)
