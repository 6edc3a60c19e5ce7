# A cold tier on the device filesystem (docs/device-api.md): the oldest blocks of a PagedPool session, already in
# the pool's compressed form (i8 codes + scales, i4 nibbles + scale/zero, f16...), go to flash and come back when
# the session is attended.
#
# Format: kvedge's one flash format, a kvedge.tier.store store of kind 1 (files PATH.h0, PATH.h1, PATH.0, PATH.1;
# sizes in kvedge.budget.pool_tier_bytes). A record is one pool block's bytes copied verbatim from the arena (for
# each layer, K|V and KV head the block's B rows, then its scale rows) and its checksummed tag, appended to a log
# of `slots` blocks per segment. Nothing is converted, so a read returns exactly what was written.
#
# Which record holds what is the store's index, committed in every header: per log slot the session id, its
# generation and the block's index in the session (session 0: no record). Log block k sits in slot k % slots; the
# committed window k0 .. k0 + count - 1 of the store is every block a live record may be in, so a record is named
# by its slot (the pool's table holds -(slot + 1)) and k follows from the window.
#
# Only appends (littlefs rewrites everything after a write in the middle of a file):
# - spill appends the block as log block k0 + count, then commits the header that names it. A block spilled,
#   paged in and spilled again is a new record (the old one was dropped when it came back): the index only ever
#   points at the newest copy.
# - fetch, close, reset and drop free records by committing an index without them; the window then starts at
#   its oldest live record (dead blocks in front of it are forgotten).
# - compaction, when the window is full (count == slots) and a record is spilled: its oldest block k0 is live
#   (the window starts at a live one), so it is appended again as block k0 + slots, in the same slot, and the
#   commit that counts the copy drops k0; repeated until the window has room. At most capacity - 1 records are
#   live then, so at most capacity - 1 copies precede a spill, about capacity / (slots - capacity) of them per
#   spill on average (1 for the default slots = 2 x capacity). Each copy is a commit of its own, so a power cut
#   at any instant leaves either the block at k0 or its copy as the record: both bit-identical.
# - the store's segment rule (a segment file restarts when block k % slots == 0 lands in it) never meets a live
#   record: everything in the file it restarts is older than k0.
# Reopening verifies every block of the committed window (checksum, number) and the index (every entry in the
# window, none twice, none outside it): the tier is reopened whole or refused with ColdStoreError, never repaired.
# Each opening is a new generation; records of earlier generations survive and can be adopted into a new
# session (after a reboot, say) with adopt().
#
# Page-in, not streaming: attend() brings a session's cold blocks back into free pool blocks (taking blocks
# under the pool's pressure policy like any append), then attends in RAM. A session must therefore fit in the
# pool to be attended; the win is that idle sessions cost no RAM. (Attending cold blocks one at a time through
# a single staging block would need the attention step to expose its running max and sum.)
import struct

from kvedge import check
from kvedge.budget import CACHE_DTYPES, POOL_ENTRY_BYTES, POOL_INDEX_HEAD, F32, F16, I8, I4, I2, pool_tier_bytes
from .store import SEQ_MOD as SEQ_LIMIT, ColdStore
from kvedge.compat import zeros
from kvedge.errors import ColdStoreError
from kvedge.paged import PagedPool

KIND = 1  # coldstore.KINDS: a paged pool's cold tier
DTYPES = (F32, F16, I8, I4, I2)
GEN_LIMIT = 0xFFFF
ENTRY = "<IHH"  # session id (0: no record), generation, block index in the session
SLOT_LIMIT = 0xFFFF  # the store's header holds the slot count in 16 bits


class ColdTier:
    """Cold blocks of `pool` in the store PATH.* (created, or reopened if it exists and matches the pool; refused
    with ColdStoreError when damaged, truncated, foreign or for another layout). At most `capacity` records live
    at once, in a log of `slots` blocks per segment (default 2 x capacity; budget.pool_tier_bytes sizes it).
    fresh=True starts an empty tier whatever is there."""

    def __init__(self, pool, path, capacity, slots=None, fresh=False):
        if not isinstance(pool, PagedPool):
            raise TypeError("pool must be a PagedPool, got %s" % check.show(pool))
        if not isinstance(path, str):
            raise TypeError("path must be a str, got %s" % check.show(path))
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
            raise ValueError("capacity must be an int >= 1 (records), got %r" % (capacity,))
        if slots is None:
            slots = 2 * capacity
        if not isinstance(slots, int) or isinstance(slots, bool) or not capacity < slots <= SLOT_LIMIT:
            raise ValueError("slots must be an int in %d..%d (more than capacity), got %r"
                             % (capacity + 1, SLOT_LIMIT, slots))
        if pool.tier is not None:
            raise ValueError("the pool already has a cold tier (%s): close it first" % pool.tier.path)
        if pool.cfg.dtype not in DTYPES:
            raise ValueError("no cold tier format for dtype %s" % pool.cfg.dtype)
        if pool.MB > 0xFFFF:
            raise ValueError("session_blocks %d exceeds the tier's 16-bit block index" % pool.MB)
        c = pool.cache
        cfg = c.cfg
        size = pool_tier_bytes(c.L, c.H, c.D, pool.B, cfg.dtype, cfg.align, capacity, slots)
        self.pool = pool
        self.path = path
        self.capacity = capacity
        self.slots = slots
        self.size = size
        self.segs = self._segments(c, pool.B)
        self.parts = tuple(n for _, n in self.segs)
        self.record_bytes = size["record"]
        if sum(self.parts) != self.record_bytes or len(self.parts) != size["parts"]:
            raise AssertionError("the pool's block (%d bytes in %d runs) is not budget.pool_tier_bytes' record"
                                 % (sum(self.parts), len(self.parts)))
        self.rec_gen = zeros("i", slots)
        self.rec_sid = zeros("i", slots)
        self.rec_idx = zeros("i", slots)
        self.index = bytearray(size["index"])
        self.scratch = memoryview(bytearray(size["scratch"]))
        self.mv = memoryview(c.arena)
        self.reads = 0
        self.writes = 0
        self.copies = 0  # records appended again by compaction
        self.gen = 1
        lay = (CACHE_DTYPES.index(cfg.dtype), c.L, c.H, c.D, pool.B, slots, 0, cfg.align, 0)
        self.store = ColdStore(path, lay, {"flash": size["flash"], "sinks": 0, "block": size["block"]},
                               self.scratch, fresh, KIND, self.parts, self.index)
        try:
            if self.store.seq or self.store.count:
                self._load(self.store.header_index)
        except Exception:
            self.store.close()
            raise
        pool.tier = self

    # ---- layout ----

    @staticmethod
    def _segments(c, B):
        """(base offset of block 0, length) of every run of bytes one block owns (run j of block b starts at
        base + b * length)."""
        segs = []  # from the cache's accessors: a pool keeps no prefix and no KIVI groups
        L, H = c.L, c.H
        for i in range(2 * L * H):  # the rows of every (layer, K|V, KV head)
            layer, kv, h = i // (2 * H), (i // H) % 2, i % H
            o = c.row_at(layer, kv, h, 0)
            segs.append((o, c.row_at(layer, kv, h, B) - o))
        dt = c.cfg.dtype
        if dt == I8:  # their scales, in the same order
            for i in range(2 * L * H):
                layer, kv, h = i // (2 * H), (i // H) % 2, i % H
                o = c.scale_at(layer, kv, h, 0)
                segs.append((o, c.scale_at(layer, kv, h, B) - o))
        elif dt == I4 or dt == I2:  # residual 0: scale and zero per row, K then V
            for kv in (0, 1):
                for i in range(L * H):
                    o = c.scale_at(i // H, kv, i % H, 0)
                    segs.append((o, c.scale_at(i // H, kv, i % H, B) - o))
        return segs

    def _segs_of(self, b):
        for base, n in self.segs:
            yield base + b * n, n

    # ---- the index ----

    def _load(self, data):
        """The committed index (bytes from the header) into the tables, after checking it whole."""
        st = self.store
        S = self.slots
        gen = struct.unpack_from("<H", data, 0)[0]
        if not 1 <= gen <= GEN_LIMIT:
            self._refuse("its index names generation %d" % gen)
        seen = []
        for r in range(S):
            sid, g, j = struct.unpack_from(ENTRY, data, POOL_INDEX_HEAD + r * POOL_ENTRY_BYTES)
            if not sid:
                if g or j:
                    self._refuse("slot %d of its index is neither a record nor empty" % r)
                continue
            if (r - st.k0) % S >= st.count:
                self._refuse("slot %d of its index names a record outside the committed blocks" % r)
            if not 1 <= g <= GEN_LIMIT or sid >= 1 << 30:
                self._refuse("slot %d of its index is damaged (session %d, generation %d)" % (r, sid, g))
            key = (g, sid, j)
            if key in seen:
                self._refuse("block %d of session %d (generation %d) is in its index twice" % (j, sid, g))
            seen.append(key)
            self.rec_sid[r] = sid
            self.rec_gen[r] = g
            self.rec_idx[r] = j
        if st.count and not self.rec_sid[st.k0 % S]:
            self._refuse("its committed blocks start at a slot without a record")
        self.gen = gen + 1 if gen < GEN_LIMIT else 1

    def _refuse(self, what):
        raise ColdStoreError("%s: %s; refusing the cold tier (delete it, or open with fresh=True to start over)"
                             % (self.path, what))

    def _pack(self):
        struct.pack_into("<HH", self.index, 0, self.gen, 0)
        for r in range(self.slots):
            struct.pack_into(ENTRY, self.index, POOL_INDEX_HEAD + r * POOL_ENTRY_BYTES, self.rec_sid[r],
                             self.rec_gen[r] if self.rec_sid[r] else 0, self.rec_idx[r] if self.rec_sid[r] else 0)

    def _block_of(self, r):
        """Log block number of the record in slot r (in the committed window)."""
        st = self.store
        return st.k0 + (r - st.k0) % self.slots

    def _commit(self, k0, count):
        """Commit the tables as they are now with the window k0 .. k0 + count - 1, its dead front dropped."""
        S = self.slots
        while count and not self.rec_sid[k0 % S]:
            k0 += 1
            count -= 1
        if not count:
            k0 = self.store.k0 + self.store.count  # empty: the next block goes right after the last one
        self._pack()
        self.store.commit(k0, count, False)

    def _set(self, r, sid, gen, j):
        self.rec_sid[r] = sid
        self.rec_gen[r] = gen
        self.rec_idx[r] = j

    # ---- moving blocks ----

    def _check_open(self):
        if self.store is None:
            raise ValueError("the cold tier %s is closed" % self.path)

    def _room(self):
        """Make the log's next block free for a new record (compaction: copy the oldest live ones forward)."""
        st = self.store
        S = self.slots
        while st.count == S:  # the window starts at a live record (commit drops a dead front)
            k = st.k0
            if k + S >= SEQ_LIMIT:
                raise OSError("%s: the tier's log has reached block %d: start it with fresh=True" % (self.path, k))
            for j in range(len(self.parts)):
                buf = self.scratch[:self.parts[j]]
                st.load_part(k, j, buf)
                st.write_part(k + S, j, buf)
            st.end_block(k + S)
            self._commit(k + 1, S)
            self.copies += 1

    def spill(self, sid, n=1):
        """Move up to n of the session's oldest full RAM blocks to flash; returns how many moved (fewer if the
        session has no more full RAM blocks or the tier holds `capacity` records). Each block is committed
        (appended, flushed, then named in a header) before its RAM block is freed."""
        self._check_open()
        p = self.pool
        i = p._handle(sid)
        check.index("n", n)
        if n < 0:
            raise ValueError("n must be >= 0, got %d" % n)
        moved = 0
        base = i * p.MB
        st = self.store
        for j in range(p.snb[i]):
            if moved == n:
                break
            b = p.table[base + j]
            if b < 0 or p._filled(i, j) < p.B or p.refs[b] > 1:  # a shared block stays (its holders read it)
                continue
            if self.records_used() >= self.capacity:
                break
            self._room()
            k = st.k0 + st.count
            if k >= SEQ_LIMIT:
                raise OSError("%s: the tier's log has reached block %d: start it with fresh=True" % (self.path, k))
            r = k % self.slots
            q = 0
            for off, m in self._segs_of(b):
                st.write_part(k, q, self.mv[off:off + m])
                q += 1
            st.end_block(k)
            self._set(r, sid, self.gen, j)
            try:
                self._commit(st.k0 if st.count else k, st.count + 1)
            except Exception:
                self._set(r, 0, 0, 0)
                raise
            self.writes += 1
            p._free_block(b, p.B)
            p.table[base + j] = -(r + 1)
            p.scold[i] += 1
            moved += 1
        return moved

    def save_instead(self, sid):
        """An on_pressure callback: spill the session's full blocks instead of losing it. Returns False
        (keep the session) when blocks were freed that way, True (reclaim it) when nothing could be spilled."""
        return self.spill(sid, self.pool.MB) == 0

    def fetch(self, sid):
        """Bring every cold block of the session back into pool blocks (under the pool's pressure policy); one
        commit then drops their records (also when a later block could not be brought back)."""
        self._check_open()
        p = self.pool
        i = p._handle(sid)
        base = i * p.MB
        c = p.cache
        st = self.store
        back = 0
        try:
            for j in range(p.snb[i]):
                e = p.table[base + j]
                if e >= 0:
                    continue
                r = -e - 1
                b = p.take_block(i)
                try:
                    k = self._block_of(r)
                    q = 0
                    for off, m in self._segs_of(b):
                        st.load_part(k, q, self.mv[off:off + m])
                        q += 1
                except Exception:
                    p._free_block(b, 0)  # nothing moved: the block goes back, the record stays
                    raise
                self.reads += 1
                s = b * p.B
                for t in range(p.B):
                    c.occupy_slot(s + t, j * p.B + t)
                p.table[base + j] = b
                p.scold[i] -= 1
                self._set(r, 0, 0, 0)
                back += 1
        finally:
            if back:
                self._commit(st.k0, st.count)

    def drop(self, r):
        """Free the record in log slot r of an earlier generation (see saved()); this generation's records belong
        to open sessions and are refused (close, reset or fetch the session instead)."""
        self._check_open()
        check.index("record", r, self.slots)
        if self.rec_sid[r] and self.rec_gen[r] == self.gen:
            raise ValueError("record %d belongs to open session %d" % (r, self.rec_sid[r]))
        if self.rec_sid[r]:
            self._set(r, 0, 0, 0)
            self._commit(self.store.k0, self.store.count)

    def _drop(self, r):
        """Forget record r (its session was closed, reset or reclaimed); sync() commits."""
        self._set(r, 0, 0, 0)

    def sync(self):
        """Commit the records dropped since the last commit (PagedPool calls it after a close or reset)."""
        if self.store is not None:
            self._commit(self.store.k0, self.store.count)

    def _check_attend(self, sid):
        self._check_open()
        p = self.pool
        if not p.slen[p._handle(sid)]:
            raise ValueError("session %d holds no tokens to attend to" % sid)

    def attend(self, sid, layer, q, out, scores=None):
        """Float attention over the whole session, cold blocks paged in first (after every argument is
        checked: a refused call pages nothing in)."""
        self._check_attend(sid)
        self.pool.att.check_step(layer, q, out, scores)
        self.fetch(sid)
        self.pool.attend(sid, layer, q, out, scores)

    def attend_q8(self, sid, layer, qc, qs, out_q, out_exp, scores=None):
        self._check_attend(sid)
        self.pool.att.check_step_q8(layer, qc, qs, out_q, out_exp, scores)
        self.fetch(sid)
        self.pool.attend_q8(sid, layer, qc, qs, out_q, out_exp, scores)

    # ---- persistence ----

    def saved(self):
        """Sessions of earlier generations on file: a list of (generation, session id, blocks)."""
        found = []
        for r in range(self.slots):
            g, s = self.rec_gen[r], self.rec_sid[r]
            if s and g != self.gen:
                for k in range(len(found)):
                    if found[k][0] == g and found[k][1] == s:
                        found[k] = (g, s, found[k][2] + 1)
                        break
                else:
                    found.append((g, s, 1))
        return found

    def adopt(self, gen, old_sid):
        """A new session made of the blocks an earlier generation saved for old_sid (all cold until attended).
        Returns its id."""
        self._check_open()
        check.index("gen", gen)
        check.index("old_sid", old_sid)
        p = self.pool
        recs = []
        for r in range(self.slots):
            if self.rec_sid[r] == old_sid and old_sid and self.rec_gen[r] == gen and gen != self.gen:
                recs.append(r)
        if not recs:
            raise KeyError("no saved blocks for session %d of generation %d" % (old_sid, gen))
        idx = sorted(self.rec_idx[r] for r in recs)
        if idx != list(range(len(recs))):
            raise ValueError("saved blocks of session %d are not its oldest %d blocks" % (old_sid, len(recs)))
        if len(recs) > p.MB:
            raise ValueError("%d saved blocks exceed the pool's session cap of %d" % (len(recs), p.MB))
        sid = p.open()
        i = p._handle(sid)
        for r in recs:
            self._set(r, sid, self.gen, self.rec_idx[r])
        try:
            self._commit(self.store.k0, self.store.count)
        except Exception:
            for r in recs:
                self._set(r, old_sid, gen, self.rec_idx[r])
            p.close(sid)
            raise
        for r in recs:
            p.table[i * p.MB + self.rec_idx[r]] = -(r + 1)
        p.snb[i] = len(recs)
        p.scold[i] = len(recs)
        p.slen[i] = len(recs) * p.B
        return sid

    def close(self):
        if self.store is not None:
            self.store.close()
            self.store = None
        if self.pool.tier is self:
            self.pool.tier = None

    # ---- stats ----

    def records_used(self):
        n = 0
        for r in range(self.slots):
            if self.rec_sid[r]:
                n += 1
        return n

    def ram_bytes(self):
        """The tier's own buffers (budget.pool_tier_bytes()["ram"])."""
        st = self.store
        return (4 * (len(self.rec_gen) + len(self.rec_sid) + len(self.rec_idx)) + len(self.index) + len(st.hdr)
                + len(st.tag) + len(self.scratch) + 4 * len(st.poff) + 4 * len(st.ab))

    def stats(self):
        d = self.pool.stats()
        d["ram_bytes"] = self.pool.cache.used_bytes
        d["flash_bytes"] = self.records_used() * self.record_bytes
        d["flash_capacity"] = self.capacity * self.record_bytes
        d["flash_reads"] = self.reads
        d["flash_writes"] = self.writes
        return d

    def stats_json(self):
        """The pool's stats line with the tiers' keys appended, fixed order."""
        return self.pool.stats_json()[:-1] + (
            ',"ram_bytes":%d,"flash_bytes":%d,"flash_capacity":%d,"flash_reads":%d,"flash_writes":%d}' % (
                self.pool.cache.used_bytes, self.records_used() * self.record_bytes,
                self.capacity * self.record_bytes, self.reads, self.writes))
