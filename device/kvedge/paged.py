# A paged KV pool for many sessions (traps 2, 3: docs/architecture.md): blocks on demand, not max_seq_len each.
#
# Storage is one KVCache (window 0, no prefix) whose slots are cut into n_blocks blocks of B tokens: block b
# holds slots b*B .. b*B+B-1 in every layer, K and V, every KV head, with the cache's own dtype, padding and
# scales. Each session (a conversation, a sensor stream) has a block table: its token i lives in slot
# table[i // B] * B + i % B. A block is taken when a session's token count crosses a multiple of B and given
# back on close() / reset(). Attention follows the block table (Attention.step with an explicit slot list).
#
# Memory pressure: when no block is free, the least-recently-used other session holding RAM blocks is offered
# to `on_pressure(session_id)`. True: it is reclaimed (closed, blocks freed). False: refused, the next LRU
# session is offered; if the callback freed blocks another way (e.g. spilled them to a ColdTier) they are
# used. Every request that found no free block counts one alloc_failure; when nothing can be freed the append
# raises CacheFullError and changes nothing. A session's data is only ever touched through its own table.
#
# Shared prefixes (fork): a session may start as a copy of another's tokens (a system or story prompt) by
# holding the same blocks, each block counting its holders in refs. A write into a block that another session
# still holds first copies the block's filled rows into a block of its own (copy on write); every holder of a
# shared block has the same tokens in it (fork takes the whole session, and a write past it copies). Closing,
# resetting or reclaiming a session drops its references; a block is freed when its last holder lets it go,
# so a reclaim never frees a block another session still uses. Under pressure only sessions that would free a
# block (one held by them alone) are offered: reclaiming one that shares all its blocks frees nothing.
#
# Waste is the unfilled part of each distinct last block, reported as waste_bytes.
from . import check
from .attention import Attention
from .sizes import I8, LOWBIT
from .poolsizes import pool_meta_bytes
from .cache import KVCache
from .config import CacheConfig
from .compat import zeros
from .errors import CacheFullError

ID_LIMIT = (1 << 30) - 1  # session ids and LRU ticks stay small ints on 31-bit boards


class PagedPool:
    """Sessions over one block store. cfg.max_tokens = n_blocks * block (window 0, prefix 0, no KIVI).

    block          tokens per block (B)
    sessions       how many sessions may be open at once (their tables are preallocated)
    session_blocks hard cap on one session's blocks (default: all of them)
    on_pressure    callback(session_id) -> bool, see the header; None reclaims the LRU session unasked
    arena          the store's arena allocated earlier (KVCache(arena=...): a bytearray of cfg.nbytes())"""

    def __init__(self, cfg, block, sessions=8, session_blocks=0, on_pressure=None, budget=None, tile=16,
                 arena=None):
        if not isinstance(cfg, CacheConfig):
            raise TypeError("cfg must be a CacheConfig, got %s" % check.show(cfg))
        if cfg.window or cfg.sinks:
            raise ValueError("a paged pool grows sessions by blocks: build its config with window=0")
        if cfg.prefix:
            raise ValueError("a paged pool keeps no f32 prefix (prefix=%d): slots belong to sessions" % cfg.prefix)
        if cfg.dtype in LOWBIT and cfg.residual:
            raise ValueError("KIVI %s groups span tokens of one sequence: use %s with residual=0 in a pool"
                             % (cfg.dtype, cfg.dtype))
        for name, x in (("block", block), ("sessions", sessions)):
            if not isinstance(x, int) or isinstance(x, bool) or x < 1:
                raise ValueError("%s must be an int >= 1, got %r" % (name, x))
        if sessions > 0x7FFF:  # a block's holder count is an int16
            raise ValueError("sessions must be at most 32767, got %d" % sessions)
        if cfg.max_tokens % block:
            raise ValueError("max_tokens (%d) must be a multiple of block (%d)" % (cfg.max_tokens, block))
        nb = cfg.max_tokens // block
        if (not isinstance(session_blocks, int) or isinstance(session_blocks, bool) or session_blocks < 0
                or session_blocks > nb):
            raise ValueError("session_blocks must be 0..%d, got %r" % (nb, session_blocks))
        if on_pressure is not None and not callable(on_pressure):
            raise TypeError("on_pressure must be a callable or None, got %s" % check.show(on_pressure))
        self.cache = KVCache(cfg, budget, arena)
        self.cfg = cfg
        self.B = block
        self.NB = nb
        self.S = sessions
        self.MB = session_blocks or nb
        self.on_pressure = on_pressure
        self.table = zeros("i", sessions * self.MB)  # >= 0: RAM block; -(r + 1): cold record r (kvedge.tier.spill)
        self.sid = zeros("i", sessions)  # session id per handle, 0 = handle free
        self.slen = zeros("i", sessions)  # tokens per session
        self.snb = zeros("i", sessions)  # blocks per session (RAM and cold)
        self.scold = zeros("i", sessions)  # of which cold
        self.stick = zeros("i", sessions)  # last use (LRU)
        self.asked = zeros("b", sessions)  # offered to on_pressure during the current request
        self.ranked = zeros("b", sessions)  # scratch of _renumber
        self.refs = zeros("h", nb)  # sessions holding each block, 0 = free (at most `sessions`)
        self.free = zeros("h", nb)  # stack of free blocks
        self.nfree = nb
        for b in range(nb):
            self.free[b] = nb - 1 - b  # block 0 is taken first
        self.slots = zeros("i", self.MB * block)  # a session's slots, expanded for the attention step
        self.att = Attention(self.cache, tile)
        self.tier = None  # a ColdTier attaches itself here
        self.q8_block = None  # the integer pass's block, kernel and write, once bound (kvedge.pooled)
        self.next_id = 1
        self.tick = 0
        self.alloc_failures = 0
        self.reclaims = 0
        self.refusals = 0
        self.appends_failed = 0  # appends (and tier page-ins) that found no block even after pressure
        self.opened = 0
        self.closed = 0

    # ---- sessions ----

    def _handle(self, sid):
        check.index("session id", sid)
        sids = self.sid
        for i in range(self.S):
            if sids[i] == sid and sid > 0:
                return i
        raise KeyError("no open session %r (closed or reclaimed)" % (sid,))

    def _touch(self, i):
        t = self.tick + 1
        if t >= ID_LIMIT:  # renumber the ticks (keeps the LRU order, keeps ints small)
            t = self._renumber()
        self.tick = t
        self.stick[i] = t

    def _renumber(self):
        """Ranks of the open sessions' ticks, 1..n in LRU order (selection: S is small); returns n + 1."""
        done = self.ranked
        for j in range(self.S):
            done[j] = 0
        n = 0
        while True:
            best = -1
            for j in range(self.S):
                if self.sid[j] and not done[j] and (best < 0 or self.stick[j] < self.stick[best]):
                    best = j
            if best < 0:
                return n + 1
            done[best] = 1
            n += 1
            self.stick[best] = n

    def _free_handle(self):
        for i in range(self.S):
            if self.sid[i] == 0:
                return i
        raise CacheFullError("all %d session handles are open: close one first" % self.S)

    def open(self):
        """A new empty session; returns its id: an int > 0, not reused until the ids wrap at 2**30, so a stale
        id of a closed or reclaimed session raises KeyError instead of reaching another session's data."""
        i = self._free_handle()
        sid = self._new_id()
        self.sid[i] = sid
        self.slen[i] = 0
        self.snb[i] = 0
        self.scold[i] = 0
        self._touch(i)
        self.opened = (self.opened + 1) & ID_LIMIT
        return sid

    def _new_id(self):
        while True:
            sid = self.next_id
            self.next_id = sid + 1 if sid < ID_LIMIT else 1
            for i in range(self.S):
                if self.sid[i] == sid:
                    break
            else:
                return sid

    def is_open(self, sid):
        check.index("session id", sid)
        for i in range(self.S):
            if self.sid[i] == sid and sid > 0:
                return True
        return False

    def length(self, sid):
        return self.slen[self._handle(sid)]

    def close(self, sid):
        """End a session: every block goes back to the pool (trap 2)."""
        i = self._handle(sid)
        self._drop_blocks(i)
        self.sid[i] = 0
        self.closed = (self.closed + 1) & ID_LIMIT

    def reset(self, sid):
        """Empty a session, keep it open (a new turn of the same conversation, a stream's reset point)."""
        i = self._handle(sid)
        self._drop_blocks(i)
        self._touch(i)

    def _drop_blocks(self, i):
        base = i * self.MB
        cold = self.scold[i]
        for j in range(self.snb[i]):
            b = self.table[base + j]
            if b >= 0:
                self._unref(b, self._filled(i, j))
            elif self.tier is not None:  # a closed tier keeps its records on file (adoptable later)
                self.tier._drop(-b - 1)
        self.snb[i] = 0
        self.scold[i] = 0
        self.slen[i] = 0
        if cold and self.tier is not None:  # one commit drops the session's records on flash
            self.tier.sync()

    def _filled(self, i, j):
        """Tokens in the j-th block of handle i."""
        n = self.slen[i] - j * self.B
        return self.B if n > self.B else n

    def _unref(self, b, filled):
        """One holder lets block b go; the last one frees it (its `filled` slots released)."""
        if self.refs[b] > 1:
            self.refs[b] -= 1
        else:
            self._free_block(b, filled)

    def _free_block(self, b, filled):
        c = self.cache
        s = b * self.B
        for t in range(filled):
            c.release_slot(s + t)
        self.refs[b] = 0
        self.free[self.nfree] = b
        self.nfree += 1

    def fork(self, sid):
        """A new session holding the same tokens as session sid, sharing its blocks (a common prompt held once);
        returns its id. Either session's first write into a shared block copies it. Refused (nothing changes):
        an unknown id, no free handle, or a session with blocks on flash."""
        src = self._handle(sid)
        if self.scold[src]:
            raise ValueError("session %d has %d blocks on flash: fetch them before forking" % (sid, self.scold[src]))
        i = self._free_handle()
        n = self.snb[src]
        a, d = src * self.MB, i * self.MB
        for j in range(n):
            b = self.table[a + j]
            self.table[d + j] = b
            self.refs[b] += 1
        self.sid[i] = self._new_id()
        self.slen[i] = self.slen[src]
        self.snb[i] = n
        self.scold[i] = 0
        self._touch(i)
        self.opened = (self.opened + 1) & ID_LIMIT
        return self.sid[i]

    def _copy_block(self, src, dst, filled):
        """The first `filled` rows of block src (every layer, K|V, KV head, and their scales) into block dst,
        whose slots are taken for the same positions. A byte loop: allocates nothing."""
        c = self.cache
        a = c.arena
        B = self.B
        rows = filled * c.row_pitch()
        meta = 2 if c.cfg.dtype == I8 else (4 if c.lowbit else 0)
        for layer in range(c.L):
            for kv in (0, 1):
                for h in range(c.H):
                    s = c.row_at(layer, kv, h, src * B)
                    d = c.row_at(layer, kv, h, dst * B)
                    for k in range(rows):
                        a[d + k] = a[s + k]
                    if meta:
                        s = c.scale_at(layer, kv, h, src * B)
                        d = c.scale_at(layer, kv, h, dst * B)
                        for k in range(filled * meta):
                            a[d + k] = a[s + k]
        for t in range(filled):
            c.occupy_slot(dst * B + t, c.slot_pos[src * B + t])

    # ---- blocks ----

    def take_block(self, i):
        """A free block for handle i, under pressure reclaiming LRU sessions. Public for kvedge.tier."""
        check.index("handle", i, self.S)
        if not self.sid[i]:
            raise ValueError("handle %d holds no open session" % i)
        if self.nfree == 0:
            self._pressure(i)
        self.nfree -= 1
        b = self.free[self.nfree]
        self.refs[b] = 1
        return b

    def _pressure(self, i):
        self.alloc_failures += 1
        for j in range(self.S):
            self.asked[j] = 0
        while self.nfree == 0:
            v = -1
            for j in range(self.S):  # LRU among the other sessions that hold a block alone and were not asked
                if (j != i and self.sid[j] and not self.asked[j] and (v < 0 or self.stick[j] < self.stick[v])
                        and self.sole_blocks(j)):
                    v = j
            if v < 0:
                self.appends_failed += 1
                raise CacheFullError("no free block among %d and no session can be reclaimed" % self.NB)
            self.asked[v] = 1
            cb = self.on_pressure
            if cb is not None and not cb(self.sid[v]):
                self.refusals += 1
                continue  # refused; the callback may still have freed blocks (spilled them)
            if self.sid[v]:  # the callback may have closed it itself
                self._drop_blocks(v)
                self.sid[v] = 0
            self.reclaims += 1

    def sole_blocks(self, i):
        """RAM blocks handle i holds alone: what reclaiming it frees."""
        n = 0
        base = i * self.MB
        for j in range(self.snb[i]):
            b = self.table[base + j]
            if b >= 0 and self.refs[b] == 1:
                n += 1
        return n

    def append(self, sid, ks, vs):
        """Add a token to a session: ks[layer], vs[layer] flat kv_heads*head_dim floats. Returns its position
        in the session. On any error nothing changes (except the pressure counters and reclaimed sessions)."""
        i = self._handle(sid)
        c = self.cache
        c._check_layers(ks, vs)
        slot = self._next_slot(i)
        for layer in range(c.L):
            c.write_slot(slot, layer, ks[layer], vs[layer])
        return self._commit(i)

    def start_token(self, sid):
        """Reserve the session's next token and return its slot, for write_q8(); then call it per layer."""
        i = self._handle(sid)
        slot = self._next_slot(i)
        self._commit(i)
        return slot

    def write_q8(self, slot, layer, kc, ks, vc, vs):
        """Pre-quantized rows of one layer into a slot from start_token() (i8 pools). Allocates nothing."""
        self.cache.write_slot_q8(slot, layer, kc, ks, vc, vs)

    def _next_slot(self, i):
        n = self.slen[i]
        B = self.B
        j = n // B
        if n == self.MB * B:
            self.appends_failed += 1
            raise CacheFullError("session %d reached its cap of %d tokens (%d blocks)"
                                 % (self.sid[i], n, self.MB))
        if n % B == 0:
            b = self.take_block(i)
            self.table[i * self.MB + j] = b
            self.snb[i] = j + 1
        else:
            b = self.table[i * self.MB + j]
            if self.refs[b] > 1:  # the first write past a shared part: a block of its own first
                nb = self.take_block(i)  # pressure never reclaims i, so b stays held meanwhile
                self._copy_block(b, nb, n % B)
                self._unref(b, n % B)
                self.table[i * self.MB + j] = nb
                b = nb
        slot = b * B + n % B
        self.cache.occupy_slot(slot, n)
        return slot

    def _commit(self, i):
        n = self.slen[i]
        self.slen[i] = n + 1
        self._touch(i)
        return n

    # ---- reads and attention ----

    def slot_of(self, sid, pos):
        i = self._handle(sid)
        check.index("pos", pos)
        if pos < 0 or pos >= self.slen[i]:
            raise IndexError("position %d out of range (0..%d)" % (pos, self.slen[i] - 1))
        b = self.table[i * self.MB + pos // self.B]
        if b < 0:
            raise ValueError("position %d of session %d is on flash: fetch it through the tier" % (pos, sid))
        return b * self.B + pos % self.B

    def read(self, sid, layer, head, pos, kv, out):
        """Dequantized K (kv=0) or V (kv=1) row of a session's position into out."""
        slot = self.slot_of(sid, pos)
        c = self.cache
        c._check_read(layer, head, kv, out)
        c._read_slot(layer, head, slot, kv, out)

    def expand(self, sid):
        """The session's slots in position order into self.slots; returns how many. Allocates nothing."""
        i = self._handle(sid)
        n = self._expand(i)
        self._touch(i)
        return n

    def needs_block(self, sid):
        """Whether the session's next token takes a block (a new one, or a copy of a shared one)."""
        i = self._handle(sid)
        n = self.slen[i]
        return n % self.B == 0 or self.refs[self.table[i * self.MB + n // self.B]] > 1

    def _expand(self, i):
        sid = self.sid[i]
        if self.scold[i]:
            raise ValueError("session %d has %d blocks on flash: attend through its ColdTier"
                             % (sid, self.scold[i]))
        n = self.slen[i]
        if n == 0:
            raise ValueError("session %d holds no tokens to attend to" % sid)
        B = self.B
        sl = self.slots
        base = i * self.MB
        for p in range(n):
            sl[p] = self.table[base + p // B] * B + p % B
        return n

    def attend(self, sid, layer, q, out, scores=None):
        """Float attention of one layer over the session's tokens only (Attention.step). The session counts
        as used (LRU) only when the step succeeds."""
        i = self._handle(sid)
        att = self.att
        att.check_step(layer, q, out, scores)  # every check before self.slots (what expand() shows) is filled
        n = self._expand(i)
        att._step(layer, q, out, scores, self.slots, n)  # the slots are the session's own: no re-check
        self._touch(i)

    def attend_q8(self, sid, layer, qc, qs, out_q, out_exp, scores=None):
        """Integer attention (i8 pools) over the session's tokens; allocates nothing once warm."""
        i = self._handle(sid)
        att = self.att
        att.check_step_q8(layer, qc, qs, out_q, out_exp, scores)
        n = self._expand(i)
        att.q8_step(layer, qc, qs, out_q, out_exp, scores, self.slots, n)
        self._touch(i)

    # ---- accounting ----

    def check(self):
        """Consistency of the block accounting: raises AssertionError naming the first violation."""
        seen = zeros("b", self.NB)
        held = zeros("h", self.NB)  # holders counted from the tables
        for k in range(self.nfree):
            b = self.free[k]
            if seen[b]:
                raise AssertionError("block %d is free twice" % b)
            if self.refs[b] != 0:
                raise AssertionError("free block %d has %d holders" % (b, self.refs[b]))
            seen[b] = 1
        for i in range(self.S):
            if not self.sid[i]:
                continue
            need = (self.slen[i] + self.B - 1) // self.B
            if self.snb[i] != need:
                raise AssertionError("session %d: %d blocks for %d tokens" % (self.sid[i], self.snb[i],
                                                                                self.slen[i]))
            cold = 0
            for j in range(self.snb[i]):
                b = self.table[i * self.MB + j]
                if b < 0:
                    cold += 1
                    continue
                if seen[b] == 1:
                    raise AssertionError("block %d free and held (session %d)" % (b, self.sid[i]))
                seen[b] = 2
                held[b] += 1
            if cold != self.scold[i]:
                raise AssertionError("session %d: %d cold blocks, counted %d" % (self.sid[i], cold,
                                                                                self.scold[i]))
        for b in range(self.NB):
            if not seen[b]:
                raise AssertionError("block %d lost (neither free nor held)" % b)
            if seen[b] == 2 and held[b] != self.refs[b]:
                raise AssertionError("block %d counts %d holders, tables %d" % (b, self.refs[b], held[b]))
        if self.cache.n_cached != self.tokens_in_ram():
            raise AssertionError("store holds %d tokens, sessions %d" % (self.cache.n_cached,
                                                                         self.tokens_in_ram()))

    def tokens_in_ram(self):
        """Tokens held in RAM blocks, a shared block's once (each of its holders has the same in it)."""
        n = 0
        for i in range(self.S):
            if self.sid[i]:
                for j in range(self.snb[i]):
                    b = self.table[i * self.MB + j]
                    if b >= 0 and self._first_holder(i, j, b):
                        n += self._filled(i, j)
        return n

    def _first_holder(self, i, j, b):
        """Whether handle i is the lowest handle holding block b (a shared block sits at the same index j)."""
        if self.refs[b] == 1:
            return True
        for k in range(i):
            if self.sid[k] and self.snb[k] > j and self.table[k * self.MB + j] == b:
                return False
        return True

    def blocks_held(self):
        return self.NB - self.nfree

    def held_bytes(self):
        """Arena bytes of the blocks in use, a shared block's once (kvedge.budget.pool_block_bytes each)."""
        return (self.NB - self.nfree) * (len(self.cache.arena) // self.NB)

    def sessions_open(self):
        n = 0
        for i in range(self.S):
            if self.sid[i]:
                n += 1
        return n

    def tokens(self):
        n = 0
        for i in range(self.S):
            if self.sid[i]:
                n += self.slen[i]
        return n

    def waste_tokens(self):
        """Unfilled slots of each session's last block: the only slots a session holds and does not use."""
        n = 0
        for i in range(self.S):
            if self.sid[i] and self.slen[i] % self.B:
                j = self.snb[i] - 1
                b = self.table[i * self.MB + j]
                if b < 0 or self._first_holder(i, j, b):
                    n += self.B - self.slen[i] % self.B
        return n

    def meta_bytes(self):
        """RAM of the pool's bookkeeping beside the arena: block tables, per-session and per-block arrays,
        and the slot list of one attention step (the Attention scratch is not counted)."""
        return pool_meta_bytes(self.S, self.NB, self.B, self.MB)

    def stats(self):
        c = self.cache
        return {
            "total_bytes": len(c.arena),
            "used_bytes": c.used_bytes,
            "peak_bytes": c.peak_bytes,
            "padding_bytes": c.padding_bytes,
            "block_tokens": self.B,
            "blocks_total": self.NB,
            "blocks_free": self.nfree,
            "sessions_open": self.sessions_open(),
            "tokens_cached": self.tokens(),
            "waste_bytes": self.waste_tokens() * c.main_slot_bytes,
            "alloc_failures": self.alloc_failures,
            "reclaims": self.reclaims,
            "refusals": self.refusals,
            "appends_failed": self.appends_failed,
        }

    def stats_json(self):
        """One compact JSON object, keys in the fixed order of stats()."""
        c = self.cache
        return ('{"total_bytes":%d,"used_bytes":%d,"peak_bytes":%d,"padding_bytes":%d,"block_tokens":%d,'
                '"blocks_total":%d,"blocks_free":%d,"sessions_open":%d,"tokens_cached":%d,"waste_bytes":%d,'
                '"alloc_failures":%d,"reclaims":%d,"refusals":%d,"appends_failed":%d}' % (
                    len(c.arena), c.used_bytes, c.peak_bytes, c.padding_bytes, self.B, self.NB, self.nfree,
                    self.sessions_open(), self.tokens(), self.waste_tokens() * c.main_slot_bytes,
                    self.alloc_failures, self.reclaims, self.refusals, self.appends_failed))
