# Endless streams (trap 8 in docs/architecture.md): speech, sensors, a chat that never ends. Two guarantees:
#   - a hard cap that is never exceeded: the target (a KVCache or one session of a PagedPool) never holds
#     more than its cap, and positions never reach the 2**30 small-int limit;
#   - reset points: every N tokens, on a marker (end of an utterance, a sensor event), or forced at the cap.
#     A reset point empties the target through its own reset(), so the state afterwards is exactly a fresh
#     session's: the next token gets position 0, the same slot and the same bytes a new cache would give it.
# Windowed and H2O caches evict on their own and never reach their cap; a cache without a window, or a pool
# session, reaches it and is reset there (force="reset") or refuses the token (force="error").
from . import check
from .cache import POS_LIMIT, KVCache
from .errors import CacheFullError

LO = 1 << 30  # lifetime token count as hi * 2**30 + lo: no long ints on 31-bit boards


class Stream:
    """Reset points and a hard cap over `target`: a KVCache, or a PagedPool with `session` = a session id.

    every   reset point every N tokens (0 = none: only markers and the cap)
    force   "reset": reaching the cap is a reset point; "error": CacheFullError, nothing changes"""

    def __init__(self, target, every=0, session=0, force="reset"):
        if not isinstance(every, int) or isinstance(every, bool) or every < 0:
            raise ValueError("every must be an int >= 0, got %r" % (every,))
        if not isinstance(force, str) or force not in ("reset", "error"):
            raise ValueError("force must be 'reset' or 'error', got %r" % (force,))
        check.index("session", session)
        if isinstance(target, KVCache):
            if session:
                raise ValueError("session (%d) applies to a PagedPool target only" % session)
        elif not isinstance(getattr(target, "cache", None), KVCache) or not hasattr(target, "_handle"):
            # a PagedPool is recognised by its shape: importing kvedge.paged here would cost a cache-only
            # stream the pool's code in RAM
            raise TypeError("target must be a KVCache or a PagedPool, got %s" % check.show(target))
        elif not session:
            raise ValueError("a PagedPool target needs session = an open session id")
        self.pool = None
        self.cache = None
        self.sid = session
        if session:
            target.length(session)  # KeyError now if the session is not open
            self.pool = target
            self.cap = target.MB * target.B
        else:
            self.cache = target
            cfg = target.cfg
            evicts = cfg.window or target.policy is not None
            self.cap = POS_LIMIT if evicts else cfg.slots
        self.every = every
        self.force = force
        self.seg = 0  # tokens since the last reset point (= the next position)
        self.slot = -1  # pool: the slot start_token() reserved
        self.tokens_hi = 0
        self.tokens_lo = 0
        self.resets_every = 0
        self.resets_marker = 0
        self.resets_forced = 0
        self.reset_target()

    def reset_target(self):
        if self.pool is not None:
            self.pool.reset(self.sid)
        else:
            self.cache.reset()
        self.seg = 0
        self.slot = -1

    def mark(self):
        """A reset point now (e.g. the end of an utterance). Returns True if anything was dropped."""
        if self.seg == 0:
            return False
        self.reset_target()
        self.resets_marker += 1
        return True

    def _before(self, marker):
        if marker:
            self.mark()
        if self.every and self.seg >= self.every:
            self.reset_target()
            self.resets_every += 1
        elif self.seg >= self.cap:
            if self.force == "error":
                raise CacheFullError("stream reached its hard cap of %d tokens (force='error')" % self.cap)
            self.reset_target()
            self.resets_forced += 1

    def _check_start(self, marker):
        if marker is not True and marker is not False:
            raise TypeError("marker must be True or False, got %s" % check.show(marker))
        if self.pool is not None:
            self.pool._handle(self.sid)  # KeyError before a reset point if the session was closed or reclaimed

    def start_token(self, marker=False):
        """Reserve the next token, first taking a reset point if one is due. Returns its position in the
        current segment. Then write each layer with write()/write_q8(). Allocates nothing."""
        self._check_start(marker)
        self._before(marker)
        if self.pool is not None:
            self.slot = self.pool.start_token(self.sid)
        else:
            self.cache.start_token()
        pos = self.seg
        self.seg = pos + 1
        lo = self.tokens_lo + 1
        if lo == LO:
            lo = 0
            self.tokens_hi += 1
        self.tokens_lo = lo
        return pos

    def _check_slot(self):
        """Pool: the slot start_token() reserved must still be the session's newest token (a reclaimed or reset
        session's slot may belong to another session by now)."""
        p = self.pool
        i = p._handle(self.sid)
        n = p.slen[i]
        if self.slot < 0 or n == 0:
            raise ValueError("no current token: call start_token() first")
        b = p.table[i * p.MB + (n - 1) // p.B]
        if b < 0 or self.slot != b * p.B + (n - 1) % p.B:
            raise ValueError("the session moved on since start_token(): call start_token() again")

    def write(self, layer, k, v):
        if self.pool is not None:
            self._check_slot()
            self.pool.cache.write_slot(self.slot, layer, k, v)
        else:
            self.cache.write(layer, k, v)

    def write_q8(self, layer, kc, ks, vc, vs):
        if self.pool is not None:
            self._check_slot()
            self.pool.cache.write_slot_q8(self.slot, layer, kc, ks, vc, vs)
        else:
            self.cache.write_q8(layer, kc, ks, vc, vs)

    def append(self, ks, vs, marker=False):
        """A token with K and V for every layer; validated before anything moves. Returns its position."""
        c = self.pool.cache if self.pool is not None else self.cache
        c._check_layers(ks, vs)
        self._check_start(marker)
        pos = self.start_token(marker)
        for layer in range(c.L):
            self.write(layer, ks[layer], vs[layer])
        return pos

    def cached(self):
        """Tokens the target holds now (never above the cap)."""
        if self.pool is not None:
            return self.pool.length(self.sid)
        return self.cache.n_cached

    def tokens_total(self):
        return self.tokens_hi * LO + self.tokens_lo

    def stats_json(self):
        """The target's stats line with the stream's keys appended, fixed order."""
        base = (self.pool if self.pool is not None else self.cache).stats_json()
        return base[:-1] + (',"stream_tokens":%d,"stream_segment":%d,"stream_cap":%d,"resets_every":%d,'
                            '"resets_marker":%d,"resets_forced":%d}' % (
                                self.tokens_total(), self.seg, self.cap, self.resets_every,
                                self.resets_marker, self.resets_forced))
