# kvedge's one flash format: blocks of K/V in files on flash that a power cut can never leave half-read. Two
# owners: the tiered cache (kvedge.tier.cache, kind 0: re-quantized blocks of one sequence, dropped oldest first) and
# the paged pool's cold tier (kvedge.tier.spill, kind 1: arena blocks of sessions, its record index in the header).
#
# Files (PATH is the store's name; sizes in kvedge.budget.tiered_bytes and kvedge.budget.pool_tier_bytes):
#   PATH.h0, PATH.h1   one header each: layout (kind, cold dtype, layers, kv_heads, head_dim, block, capacity C,
#                      sinks, align, bytes of a sink row), the committed state (sequence number, first live block,
#                      block count, sinks saved), the owner's index (kind 1 only: which record holds what) and
#                      Adler-32 of all that: 40 bytes + the index. Commits alternate between the two files; the
#                      valid one with the newer sequence number is the state, so a header torn by a power cut
#                      leaves the other.
#   PATH.s             the sinks' rows (the hot ring's bytes) and their tag (written once, before the commit that
#                      saves them)
#   PATH.0, PATH.1     segments: block k is the (k % C)-th block of segment k // C, in file PATH.<(k // C) % 2>;
#                      a block is its parts (kind 0: one record per layer, the staging block's bytes verbatim;
#                      kind 1: the arena's runs of one pool block) then its tag (block number, sequence, Adler-32
#                      of the parts, tokens).
# Only appends: flash file systems (littlefs, MicroPython's default) rewrite everything after a write in the middle
# of a file, so blocks are appended, the tag last, and a segment file is started afresh when block k % C == 0
# lands in it: at most C blocks are live, so every block of the segment it held (k // C - 2) is dead by then.
# Commit order: a block's bytes are written and flushed, then the header that counts it is written (at the cap
# the drop is committed first). On opening, every committed block's number and checksum (and the sinks') are
# verified: the store is reopened whole, or refused with ColdStoreError naming the first bad part.
import struct

from kvedge.sizes import CACHE_DTYPES
# the checksum and the sequence numbers live with the sizes (core): a saved session (kvedge.session) uses them too
from .sizes import TIER_HEADER_BYTES, TIER_TAG_BYTES, SEQ_MOD, ADLER_RUN, adler, newer as _newer  # noqa: F401
from kvedge.compat import IS_MICROPYTHON, zeros
from kvedge.errors import ColdStoreError

MAGIC = b"KVTC"
VERSION = 1
HDR = "<4sBBBBHHHHHHHHIII"  # magic, version, cold dtype, sinks saved, kind, layers, kv_heads, head_dim, block,
#                             capacity, sinks, align, sink row bytes, sequence, first block, block count; then the
#                             owner's index (kind 1), then Adler-32
KINDS = ("a tiered cache's cold store", "a paged pool's cold tier")  # the kind byte: append only
TAG = "<IIHHI"  # block number (sinks: SINKS_TAG), sequence of the commit it precedes, Adler-32 a and b, tokens
SINKS_TAG = 0xFFFFFFF


def _collect():
    """Free closed files' buffers now on a board (MicroPython frees memory only when it collects); CPython
    frees them on close."""
    if IS_MICROPYTHON:
        import gc
        gc.collect()


def _open(path, mode):
    try:
        return open(path, mode)
    except OSError:
        return None


class ColdStore:
    """The files PATH.* for `layout` = (cold dtype index, layers, kv_heads, head_dim, block, capacity, sinks,
    align, sink row bytes); `size` is budget.tiered_bytes() (or budget.pool_tier_bytes()); `rec` the buffer
    (memoryview) one record is read into and written from. `kind` says whose store it is (KINDS); `parts` the
    byte lengths of a block's parts (default: `layers` parts of len(rec)), none longer than rec; `index` a
    bytearray the owner keeps its record index in, committed with every header. Reopens an existing store
    (whole, or ColdStoreError) unless fresh=True; else creates it (refused when the file system reports less free
    space than `size["flash"]`)."""

    def __init__(self, path, layout, size, rec, fresh=False, kind=0, parts=None, index=None):
        self.path, self.layout, self.rec = path, layout, rec
        self.L, self.B, self.C, self.S = layout[1], layout[4], layout[5], layout[6]
        self.rb = len(rec)
        self.kind = kind
        self.parts = parts if parts is not None else (self.rb,) * self.L
        self.poff = zeros("i", len(self.parts))
        o = 0
        for j in range(len(self.parts)):
            if self.parts[j] > self.rb:
                raise ValueError("part %d of a block (%d bytes) is longer than the record buffer (%d)"
                                 % (j, self.parts[j], self.rb))
            self.poff[j] = o
            o += self.parts[j]
        self.index = index if index is not None else bytearray(0)
        self.hb = TIER_HEADER_BYTES + len(self.index)  # bytes of one header file
        self.flash = size["flash"]
        self.sinks_bytes = size["sinks"] - TIER_TAG_BYTES if self.S else 0
        self.sinks_rec = size["sinks"]
        self.stride = size["block"]
        if o + TIER_TAG_BYTES != self.stride:
            raise ValueError("a block's parts (%d bytes) and tag do not fill its %d-byte stride" % (o, self.stride))
        self.ab = zeros("i", 2)
        self.adler = adler  # the Adler-32 fold the store uses: a native one where its owner has it (kvedge.tier.cache)
        self.hdr = bytearray(self.hb)
        self.foreign = None  # the kind byte of another kvedge store's header, when one was found
        self.tag = bytearray(TIER_TAG_BYTES)
        self.seq = self.k0 = self.count = 0
        self.saved = False
        self.reads = self.writes = 0
        self.segs = [None, None]
        self.spare = None  # an open file held for the heap its buffers take: see _hold()
        # the names a commit opens, made once: a name made between _release() and the open would take the room
        self.h_names = ("%s.h0" % path, "%s.h1" % path)
        self.s_name = path + ".s"
        self.seg_names = ("%s.0" % path, "%s.1" % path)
        h = None if fresh else _open(path + ".h0", "rb") or _open(path + ".h1", "rb")
        if h is None:
            if not fresh:  # no header, but a data file: the headers were lost, which is damage, not a new store
                for x in (".s", ".0", ".1"):
                    f = _open(path + x, "rb")
                    if f is not None:
                        f.close()
                        self._refuse("both headers (%s.h0, %s.h1) are missing but its data file %s%s is there"
                                     % (path, path, path, x))
            self._create()
            self._hold()
            return
        h.close()
        try:
            self._reopen()
        except Exception:
            self.close()
            raise
        self._hold()

    def _hold(self):
        """Keep one more file open (the sinks' file, appending nothing) for the heap its buffers take: a header
        commit or the sinks' write opens a file in the middle of a run, when a board's heap may have no block of
        that size left; _release() frees it just before (the new file's buffers take its place), _hold() takes
        it back after. An open that fails leaves nothing held (the store works the same, without the spare)."""
        if self.spare is None:
            _collect()  # the file just closed is garbage until collected: its buffers are the room to reuse
            try:
                self.spare = _open(self.s_name, "ab")
            except MemoryError:  # no room even so: the store goes on without a spare
                self.spare = None

    def _release(self):
        if self.spare is not None:
            self.spare.close()
            self.spare = None
            _collect()

    def _name(self, i):
        return self.seg_names[i]

    # ---- headers ----

    def _pack_header(self, seq, k0, count, saved):
        lay = self.layout
        h = self.hdr
        struct.pack_into(HDR, h, 0, MAGIC, VERSION, lay[0], 1 if saved else 0, self.kind, lay[1], lay[2], lay[3],
                         lay[4], lay[5], lay[6], lay[7], lay[8], seq, k0, count)
        n = TIER_HEADER_BYTES - 4
        for i in range(len(self.index)):
            h[n + i] = self.index[i]
        self._sum(h, self.hb - 4)
        struct.pack_into("<HH", h, self.hb - 4, self.ab[0], self.ab[1])
        return h

    def _sum(self, buf, n):
        self.ab[0] = 1
        self.ab[1] = 0
        self.adler(buf, n, self.ab)

    def _create(self):
        try:
            import os
            d = self.path[:self.path.rfind("/")] or "/" if "/" in self.path else "."
            st = os.statvfs(d)
            free = st[1] * st[4]
        except (ImportError, AttributeError, OSError):
            free = -1
        if 0 <= free < self.flash:
            raise OSError("%s: the cold store needs %d bytes of flash, the file system has %d free"
                          % (self.path, self.flash, free))
        # the headers first: a power cut before the segments exist leaves an empty store (its segment files
        # are made on reopen), never data files without a header (refused as damage). Over an old store
        # (fresh=True) its older header goes first: a cut between the two leaves its newest one, i.e. the old
        # store at its last commit, still whole (its segments are truncated only after both)
        hs = [self._read_header(0), self._read_header(1)]
        first = 1
        if hs[1] is not None and (hs[0] is None or _newer(hs[1]["seq"], hs[0]["seq"])):
            first = 0
        self._write_header(first, 0, 0, 0, False)  # the first commit (seq 1) then replaces copy 1
        self._write_header(1 - first, 0, 0, 0, False)
        for i in (0, 1):
            self.segs[i] = open(self._name(i), "w+b")

    def _write_header(self, i, seq, k0, count, saved):
        self._release()
        f = open(self.h_names[i], "wb")
        try:
            f.write(self._pack_header(seq, k0, count, saved))
        finally:
            f.close()
        self._hold()  # only once the header is there: a spare made beside no header would read as damage

    def commit(self, k0, count, saved):
        """Write the next header (alternating files) with the owner's index as it is now, closed = on flash; only
        then does the state here follow."""
        seq = (self.seq + 1) % SEQ_MOD
        self._write_header(seq & 1, seq, k0, count, saved)
        self.seq = seq
        self.k0 = k0
        self.count = count
        self.saved = saved

    def _read_header(self, i):
        """Header file i as a dict, or None when it is missing or not a valid header (of this store's kind: the
        kind of another kvedge store's header is in self.foreign, for the refusal to name)."""
        f = _open("%s.h%d" % (self.path, i), "rb")
        if f is None:
            return None
        try:
            h = f.read(self.hb + 1)
        finally:
            f.close()
        if h is None or len(h) < TIER_HEADER_BYTES or h[:4] != MAGIC:
            return None
        if h[7] != self.kind:
            self.foreign = h[7]
            return None
        if len(h) != self.hb:
            return None
        self._sum(h, self.hb - 4)
        a, b = struct.unpack_from("<HH", h, self.hb - 4)
        if a != self.ab[0] or b != self.ab[1]:
            return None
        v = struct.unpack_from(HDR, h, 0)
        return {"version": v[1], "layout": v[2:3] + v[5:13], "saved": v[3] != 0, "seq": v[13], "k0": v[14],
                "count": v[15], "index": h[TIER_HEADER_BYTES - 4:self.hb - 4]}

    def _refuse(self, what):
        raise ColdStoreError("%s: %s; refusing the cold store (delete it, or open with fresh=True to start over)"
                             % (self.path, what))

    def _reopen(self):
        self.foreign = None
        hs = [self._read_header(0), self._read_header(1)]
        if hs[0] is None and hs[1] is None:
            if self.foreign is not None:
                self._refuse("it is %s, not %s" % (KINDS[self.foreign] if self.foreign < len(KINDS)
                                                   else "a store of unknown kind %d" % self.foreign,
                                                   KINDS[self.kind]))
            self._refuse("no valid header (not a kvedge cold store, or both headers damaged)")
        h = hs[0]
        if h is None or (hs[1] is not None and _newer(hs[1]["seq"], h["seq"])):
            h = hs[1]
        if h["version"] != VERSION:
            self._refuse("cold store version %d, this kvedge reads %d" % (h["version"], VERSION))
        got = h["layout"]
        if got != self.layout:
            name = CACHE_DTYPES[got[0]] if got[0] < len(CACHE_DTYPES) else "?"
            self._refuse("written for another layout (cold %s, layers %d, kv_heads %d, head_dim %d, block %d, "
                         "capacity %d, sinks %d, align %d, sink row %d)" % ((name,) + tuple(got[1:])))
        if h["count"] > self.C or h["k0"] >= SEQ_MOD or (self.S and h["count"] and not h["saved"]):
            self._refuse("its header is inconsistent")
        self.header_index = h["index"]  # the owner checks it (kind 1) before anything is written
        for i in (0, 1):
            self.segs[i] = _open(self._name(i), "r+b")
        for i in range(h["count"]):
            self._verify_block(h["k0"] + i)
        saved = h["saved"] and self.S > 0
        if saved:
            self._verify_sinks()
        for i in (0, 1):
            if self.segs[i] is None:  # never written (or lost with nothing committed in it): start it empty
                self.segs[i] = open(self._name(i), "w+b")
        self.seq = h["seq"]
        self.k0 = h["k0"]
        self.count = h["count"]
        self.saved = saved

    def _verify_block(self, k):
        first = self.S + k * self.B
        what = "block %d (positions %d-%d)" % (k, first, first + self.B - 1)
        f = self.segs[(k // self.C) & 1]
        if f is None:
            self._refuse("%s: its segment file %s is missing" % (what, self._name((k // self.C) & 1)))
        f.seek((k % self.C) * self.stride)
        self.ab[0] = 1
        self.ab[1] = 0
        for n in self.parts:
            buf = self.rec if n == self.rb else self.rec[:n]
            if f.readinto(buf) != n:
                self._refuse("%s is truncated" % what)
            self.adler(buf, n, self.ab)
        self._check_tag(f.read(TIER_TAG_BYTES), k, what, self.B)

    def _check_tag(self, t, k, what, ntok):
        if t is None or len(t) != TIER_TAG_BYTES:
            self._refuse("%s is truncated" % what)
        tk, _, a, b, n = struct.unpack(TAG, t)
        if tk != k:
            self._refuse("%s holds block %d, not %d: the store was cut mid-write" % (what, tk, k))
        if a != self.ab[0] or b != self.ab[1]:
            self._refuse("%s fails its checksum: damaged or cut mid-write" % what)
        if n != ntok:
            self._refuse("%s says %d tokens, not %d: damaged" % (what, n, ntok))

    def _verify_sinks(self):
        f = _open(self.path + ".s", "rb")
        if f is None:
            self._refuse("the sinks' file %s.s is missing" % self.path)
        try:
            buf = f.read(self.sinks_bytes)
            t = f.read(TIER_TAG_BYTES)
        finally:
            f.close()
        if buf is None or len(buf) != self.sinks_bytes:
            self._refuse("the sinks' record is truncated")
        self._sum(buf, len(buf))
        self._check_tag(t, SINKS_TAG, "the sinks' record", self.S)

    # ---- blocks ----

    def _pack_tag(self, k, ntok):
        struct.pack_into(TAG, self.tag, 0, k, (self.seq + 1) % SEQ_MOD, self.ab[0], self.ab[1], ntok)
        return self.tag

    def _seg(self, i):
        """Segment file i, opened again if an earlier open failed (OSError naming it when it still cannot be)."""
        f = self.segs[i]
        if f is None:
            try:
                f = open(self._name(i), "r+b")
            except OSError as e:
                raise OSError("%s: cannot open the cold segment file %s (%s)" % (self.path, self._name(i), e))
            self.segs[i] = f
        return f

    def write_record(self, k, layer):
        """Append rec as layer `layer` of block k (not yet committed); layers go in order 0, 1, ...
        An OSError leaves the committed state as it was (the block is simply not added)."""
        self.write_part(k, layer, self.rec)

    def write_part(self, k, j, buf):
        """Append buf (parts[j] bytes) as part j of block k (not yet committed); parts go in order 0, 1, ..."""
        i = (k // self.C) & 1
        if j == 0:
            self.ab[0] = 1
            self.ab[1] = 0
            if k % self.C == 0:  # a new segment: the one this file held is dead (at most C blocks are live)
                if self.segs[i] is not None:
                    self.segs[i].close()
                    self.segs[i] = None
                self._release()
                try:
                    self.segs[i] = open(self.seg_names[i], "w+b")
                except OSError as e:  # no live block is in this file: the next use opens it again
                    raise OSError("%s: cannot start the cold segment file %s (%s)" % (self.path, self._name(i), e))
                finally:
                    self._hold()
        f = self._seg(i)
        f.seek((k % self.C) * self.stride + self.poff[j])
        f.write(buf)
        self.adler(buf, self.parts[j], self.ab)

    def end_block(self, k, sinks=None):
        """Append block k's tag and flush it; with the first block, also write the sinks' rows (`sinks`: a list of
        buffers, sinks_bytes in all). Then commit()."""
        f = self._seg((k // self.C) & 1)
        f.write(self._pack_tag(k, self.B))
        f.flush()
        if sinks is not None:
            self.ab[0] = 1
            self.ab[1] = 0
            self._release()
            g = open(self.s_name, "wb")
            try:
                for run in sinks:
                    self.adler(run, len(run), self.ab)
                    g.write(run)
                g.write(self._pack_tag(SINKS_TAG, self.S))
            finally:
                g.close()
            self._hold()
        self.writes += 1

    def load(self, k, layer):
        """rec := layer `layer` of block k, read from flash. Allocates nothing. (The tiered cache's read of every
        cold block every step: load_part's work written out, one call fewer.)"""
        f = self.segs[(k // self.C) & 1]
        if f is None:
            f = self._seg((k // self.C) & 1)
        f.seek((k % self.C) * self.stride + self.poff[layer])
        if f.readinto(self.rec) != self.rb:
            raise OSError("%s: cold block %d is truncated" % (self.path, k))
        self.reads += 1

    def load_part(self, k, j, buf):
        """buf (parts[j] bytes) := part j of block k, read from flash."""
        f = self.segs[(k // self.C) & 1]
        if f is None:
            f = self._seg((k // self.C) & 1)
        f.seek((k % self.C) * self.stride + self.poff[j])
        if f.readinto(buf) != self.parts[j]:
            raise OSError("%s: cold block %d is truncated" % (self.path, k))

    def load_sinks(self, runs):
        """The sinks' rows back into `runs` (the buffers end_block wrote, in the same order)."""
        f = open(self.path + ".s", "rb")
        try:
            for run in runs:
                f.readinto(run)
        finally:
            f.close()

    def used(self):
        """Flash bytes holding committed data."""
        return 2 * self.hb + (self.sinks_rec if self.saved else 0) + self.count * self.stride

    def close(self):
        self._release()
        for i in (0, 1):
            if self.segs[i] is not None:
                self.segs[i].close()
                self.segs[i] = None
