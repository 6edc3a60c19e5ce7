# A cold tier on the device filesystem (docs/tiered.md): the oldest blocks of a PagedPool session,
# already in the pool's compressed form (i8 codes + scales, i4 nibbles + scale/zero, f16...), go to a file and
# come back when the session is attended.
#
# File: a 32-byte header, then `capacity` fixed-size records. A record is a 16-byte tag (generation, session
# id, block index, tokens) and the block's bytes copied verbatim from the arena: for each layer, K|V and KV
# head the block's B rows, then its scale rows. Nothing is converted, so a read returns exactly what was
# written. The file is created full size (flash space reserved up front) and every record write is flushed.
# Each opening is a new generation; records of earlier generations survive and can be adopted into a new
# session (after a reboot, say) with adopt().
#
# Page-in, not streaming: attend() brings a session's cold blocks back into free pool blocks (taking blocks
# under the pool's pressure policy like any append), then attends in RAM. A session must therefore fit in the
# pool to be attended; the win is that idle sessions cost no RAM. (Attending cold blocks one at a time through
# a single staging block would need the attention step to expose its running max and sum.)
import struct

from . import check
from .budget import F32, F16, I8, I4, I2
from .compat import zeros
from .paged import PagedPool

MAGIC = b"KVT1"
VERSION = 1
HDR = "<4sHHIIHHHHBBHI"  # magic, version, generation, record bytes, capacity, layers, kv_heads, head_dim,
HDR_BYTES = 32           # block, dtype, 0, align, 0
TAG = "<iiii"  # generation, session id (0 = free), block index in the session, tokens
TAG_BYTES = 16
DTYPES = (F32, F16, I8, I4, I2)  # the header stores the index: append only
GEN_LIMIT = 0xFFFF


class ColdTier:
    """Cold blocks of `pool` in the file `path` (created, or reopened if it exists and matches the pool)."""

    def __init__(self, pool, path, capacity):
        if not isinstance(pool, PagedPool):
            raise TypeError("pool must be a PagedPool, got %s" % check.show(pool))
        if not isinstance(path, str):
            raise TypeError("path must be a str, got %s" % check.show(path))
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
            raise ValueError("capacity must be an int >= 1 (records), got %r" % (capacity,))
        if pool.tier is not None:
            raise ValueError("the pool already has a cold tier (%s): close it first" % pool.tier.path)
        if pool.cfg.dtype not in DTYPES:
            raise ValueError("no cold tier format for dtype %s" % pool.cfg.dtype)
        self.pool = pool
        self.path = path
        self.capacity = capacity
        c = pool.cache
        self.segs = self._segments(c, pool.B)
        self.record_bytes = 0
        for off, n in self._segs_of(0):
            self.record_bytes += n
        self.stride = TAG_BYTES + self.record_bytes
        self.rec_gen = zeros("i", capacity)
        self.rec_sid = zeros("i", capacity)
        self.rec_idx = zeros("i", capacity)
        self.tag = bytearray(TAG_BYTES)
        self.mv = memoryview(c.arena)
        self.reads = 0
        self.writes = 0
        self.f = None
        try:
            f = open(path, "r+b")
        except OSError:
            f = None
        if f is None:
            self._create(path)
        else:
            self.f = f
            self._load()
        pool.tier = self

    # ---- layout ----

    @staticmethod
    def _segments(c, B):
        """(base offset of block 0, stride per block, length) of every run of bytes one block owns."""
        segs = []
        N = c.B  # data rows = slots (a pool keeps no prefix)
        for layer in range(c.L):
            for kv in (0, 1):
                for h in range(c.H):
                    segs.append((c.DATA + ((layer * 2 + kv) * c.H + h) * N * c.prow, B * c.prow))
        dt = c.cfg.dtype
        if dt == I8:
            for layer in range(c.L):
                for kv in (0, 1):
                    for h in range(c.H):
                        segs.append((c.META + ((layer * 2 + kv) * c.H + h) * N * 2, B * 2))
        elif dt == I4 or dt == I2:  # residual 0: scale and zero per row, K then V
            for base in (c.META, c.VMETA):
                for layer in range(c.L):
                    for h in range(c.H):
                        segs.append((base + (layer * c.H + h) * N * 4, B * 4))
        return segs

    def _segs_of(self, b):
        for base, n in self.segs:
            yield base + b * n, n

    def _header(self, gen):
        c = self.pool.cache
        return struct.pack(HDR, MAGIC, VERSION, gen, self.record_bytes, self.capacity, c.L, c.H, c.D,
                           self.pool.B, DTYPES.index(c.cfg.dtype), 0, c.cfg.align, 0)

    def _create(self, path):
        f = open(path, "w+b")
        self.f = f
        self.gen = 1
        f.write(self._header(self.gen))
        zero = bytes(64)
        for r in range(self.capacity):  # reserve the whole file now: running out of flash fails here
            left = self.stride
            while left:
                n = left if left < 64 else 64
                f.write(zero[:n])
                left -= n
        f.flush()

    def _load(self):
        f = self.f
        f.seek(0)
        h = f.read(HDR_BYTES)
        if len(h) != HDR_BYTES or h[:4] != MAGIC:
            f.close()
            raise ValueError("%s is not a kvedge cold tier file" % self.path)
        magic, ver, gen, rb, cap, L, H, D, B, dt, _, align, _ = struct.unpack(HDR, h)
        if ver != VERSION:
            f.close()
            raise ValueError("%s: cold tier version %d, this kvedge reads %d" % (self.path, ver, VERSION))
        want = struct.unpack(HDR, self._header(gen))
        got = struct.unpack(HDR, h)
        if got != want:
            f.close()
            raise ValueError("%s was written for another pool layout (record %d bytes, capacity %d, "
                             "layers %d, kv_heads %d, head_dim %d, block %d, dtype %s, align %d)"
                             % (self.path, rb, cap, L, H, D, B, DTYPES[dt] if dt < 4 else "?", align))
        size = f.seek(0, 2)
        want = HDR_BYTES + self.capacity * self.stride
        if size < want:
            f.close()
            raise ValueError("%s is truncated: %d bytes, its header promises %d" % (self.path, size, want))
        for r in range(self.capacity):  # read everything before the file is written (a refusal changes nothing)
            f.seek(HDR_BYTES + r * self.stride)
            g, sid, idx, _ = struct.unpack(TAG, f.read(TAG_BYTES))
            self.rec_gen[r] = g
            self.rec_sid[r] = sid
            self.rec_idx[r] = idx
        self.gen = gen + 1 if gen < GEN_LIMIT else 1
        f.seek(0)
        f.write(self._header(self.gen))
        f.flush()

    def _put_tag(self, r, gen, sid, idx, ntok):
        self.rec_gen[r] = gen
        self.rec_sid[r] = sid
        self.rec_idx[r] = idx
        struct.pack_into(TAG, self.tag, 0, gen, sid, idx, ntok)
        self.f.seek(HDR_BYTES + r * self.stride)
        self.f.write(self.tag)

    # ---- moving blocks ----

    def _check_open(self):
        if self.f is None:
            raise ValueError("the cold tier %s is closed" % self.path)

    def spill(self, sid, n=1):
        """Move up to n of the session's oldest full RAM blocks to the file; returns how many moved (fewer if
        the session has no more full RAM blocks or the file is full)."""
        self._check_open()
        p = self.pool
        i = p._handle(sid)
        check.index("n", n)
        if n < 0:
            raise ValueError("n must be >= 0, got %d" % n)
        moved = 0
        base = i * p.MB
        for j in range(p.snb[i]):
            if moved == n:
                break
            b = p.table[base + j]
            if b < 0 or p._filled(i, j) < p.B:
                continue
            r = self._free_record()
            if r < 0:
                break
            self._put_tag(r, self.gen, sid, j, p.B)
            for off, m in self._segs_of(b):
                self.f.write(self.mv[off:off + m])
            self.f.flush()
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

    def _free_record(self):
        for r in range(self.capacity):
            if self.rec_sid[r] == 0:
                return r
        return -1

    def fetch(self, sid):
        """Bring every cold block of the session back into pool blocks (under the pool's pressure policy)."""
        self._check_open()
        p = self.pool
        i = p._handle(sid)
        base = i * p.MB
        c = p.cache
        for j in range(p.snb[i]):
            e = p.table[base + j]
            if e >= 0:
                continue
            r = -e - 1
            b = p.take_block(i)
            try:
                self._read_record(r, b)
            except Exception:
                p._free_block(b, 0)  # nothing moved: the block goes back, the record stays
                raise
            self.reads += 1
            s = b * p.B
            for t in range(p.B):
                c.occupy_slot(s + t, j * p.B + t)
            p.table[base + j] = b
            p.scold[i] -= 1
            self._drop(r)

    def _read_record(self, r, b):
        f = self.f
        f.seek(HDR_BYTES + r * self.stride + TAG_BYTES)
        for off, m in self._segs_of(b):
            if f.readinto(self.mv[off:off + m]) != m:
                raise OSError("%s: record %d is truncated" % (self.path, r))

    def drop(self, r):
        """Free record r of an earlier generation (see saved()); this generation's records belong to open
        sessions and are refused (close, reset or fetch the session instead)."""
        self._check_open()
        check.index("record", r, self.capacity)
        if self.rec_sid[r] and self.rec_gen[r] == self.gen:
            raise ValueError("record %d belongs to open session %d" % (r, self.rec_sid[r]))
        self._drop(r)

    def _drop(self, r):
        """Free record r (its session was closed, reset, reclaimed or fetched it back)."""
        self._put_tag(r, 0, 0, 0, 0)
        self.f.flush()

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
        for r in range(self.capacity):
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
        for r in range(self.capacity):
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
            j = self.rec_idx[r]
            p.table[i * p.MB + j] = -(r + 1)
            self._put_tag(r, self.gen, sid, j, p.B)
        self.f.flush()
        p.snb[i] = len(recs)
        p.scold[i] = len(recs)
        p.slen[i] = len(recs) * p.B
        return sid

    def close(self):
        if self.f is not None:
            self.f.close()
            self.f = None
        if self.pool.tier is self:
            self.pool.tier = None

    # ---- stats ----

    def records_used(self):
        n = 0
        for r in range(self.capacity):
            if self.rec_sid[r]:
                n += 1
        return n

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
