# The cold store of a tiered cache (kvedge.tiered): blocks of re-quantized K/V in one file on flash that a power
# cut can never leave half-read.
#
# The file (sizes in kvedge.budget.tiered_bytes):
#   header A, header B   40 bytes each: layout (cold dtype, layers, kv_heads, head_dim, block, capacity, sinks,
#                        align, bytes of a sink row) and the committed state (sequence number, first block, block
#                        count, sinks saved), then Adler-32 of those 36 bytes. Commits alternate between A and B;
#                        the valid copy with the newer sequence number is the state, so a header torn by a power
#                        cut leaves the other.
#   sinks record         tag + the sinks' f32 rows verbatim (written once, before the commit of the first block)
#   C block slots        tag (block number, sequence, Adler-32 of the block's bytes, tokens) + one record per
#                        layer (the staging block's bytes verbatim). Block k lives in slot k % C.
# Commit order: a block's records and tag are written and flushed, then the header that counts it. A block is
# only written into a slot the committed header does not reference (at the cap the drop is committed first).
# On opening, every committed block's number and checksum (and the sinks') are verified: the store is reopened
# whole, or refused with ColdStoreError naming the first bad part. The file is created full size, so running
# out of flash shows at creation, not mid-stream.
import struct

from .budget import CACHE_DTYPES, TIER_HEADER_BYTES, TIER_TAG_BYTES
from .compat import zeros
from .errors import ColdStoreError

MAGIC = b"KVTC"
VERSION = 1
HDR = "<4sBBBBHHHHHHHHIII"  # magic, version, cold dtype, sinks saved, 0, layers, kv_heads, head_dim, block,
#                             capacity, sinks, align, sink row bytes, sequence, first block, block count; Adler-32
TAG = "<IIHHI"  # block number (sinks: SINKS_TAG), sequence of the commit it precedes, Adler-32 a and b, tokens
SINKS_TAG = 0xFFFFFFF
SEQ_MOD = 1 << 30  # sequence numbers wrap here (small ints on 31-bit boards)


def adler(buf, n, ab):
    """Fold buf[0:n] into the Adler-32 state ab = [a, b] (small ints only; zlib.adler32 gives the same)."""
    a = ab[0]
    b = ab[1]
    for i in range(n):
        a += buf[i]
        if a >= 65521:
            a -= 65521
        b += a
        if b >= 65521:
            b -= 65521
    ab[0] = a
    ab[1] = b


def _newer(s, t):
    return (s - t) % SEQ_MOD < (SEQ_MOD >> 1)


class ColdStore:
    """The file at `path` for `layout` = (cold dtype index, layers, kv_heads, head_dim, block, capacity, sinks,
    align, sink row bytes); `size` is budget.tiered_bytes(); `rec` the buffer (memoryview) one record is read
    into and written from. Reopens an existing file (whole, or ColdStoreError) unless fresh=True; else creates
    it."""

    def __init__(self, path, layout, size, rec, fresh=False):
        self.path, self.layout, self.rec = path, layout, rec
        self.L, self.B, self.C, self.S = layout[1], layout[4], layout[5], layout[6]
        self.rb = len(rec)
        self.flash = size["flash"]
        self.sinks_off = 2 * TIER_HEADER_BYTES
        self.sinks_bytes = size["sinks"] - TIER_TAG_BYTES if self.S else 0
        self.sinks_rec = size["sinks"]
        self.base = self.sinks_off + size["sinks"]
        self.stride = size["block"]
        self.ab = zeros("i", 2)
        self.hdr = bytearray(TIER_HEADER_BYTES)
        self.tag = bytearray(TIER_TAG_BYTES)
        self.seq = self.k0 = self.count = 0
        self.saved = False
        self.reads = self.writes = 0
        self.f = None
        f = None
        if not fresh:
            try:
                f = open(path, "r+b")
            except OSError:
                f = None
        if f is None:
            self._create()
            return
        self.f = f
        try:
            self._reopen()
        except Exception:
            self.f = None
            f.close()
            raise

    # ---- headers ----

    def _pack_header(self, seq, k0, count, saved):
        lay = self.layout
        h = self.hdr
        struct.pack_into(HDR, h, 0, MAGIC, VERSION, lay[0], 1 if saved else 0, 0, lay[1], lay[2], lay[3], lay[4],
                         lay[5], lay[6], lay[7], lay[8], seq, k0, count)
        self._sum(h, TIER_HEADER_BYTES - 4)
        struct.pack_into("<HH", h, TIER_HEADER_BYTES - 4, self.ab[0], self.ab[1])
        return h

    def _sum(self, buf, n):
        self.ab[0] = 1
        self.ab[1] = 0
        adler(buf, n, self.ab)

    def _create(self):
        f = open(self.path, "w+b")
        self.f = f
        try:
            f.write(self._pack_header(0, 0, 0, False))
            zero = bytes(64)
            left = self.flash - TIER_HEADER_BYTES  # reserve the whole file now: a short flash fails here
            while left:
                n = left if left < 64 else 64
                f.write(zero[:n] if n < 64 else zero)
                left -= n
            f.flush()
        except Exception:
            self.f = None
            f.close()
            raise

    def commit(self, k0, count, saved):
        """Write the next header (alternating copies) and flush; only then does the state here follow."""
        seq = (self.seq + 1) % SEQ_MOD
        self.f.seek(TIER_HEADER_BYTES * (seq & 1))
        self.f.write(self._pack_header(seq, k0, count, saved))
        self.f.flush()
        self.seq = seq
        self.k0 = k0
        self.count = count
        self.saved = saved

    def _read_header(self, i):
        """Header copy i as a dict, or None when it is not a valid header."""
        f = self.f
        f.seek(TIER_HEADER_BYTES * i)
        h = f.read(TIER_HEADER_BYTES)
        if h is None or len(h) != TIER_HEADER_BYTES or h[:4] != MAGIC:
            return None
        self._sum(h, TIER_HEADER_BYTES - 4)
        a, b = struct.unpack_from("<HH", h, TIER_HEADER_BYTES - 4)
        if a != self.ab[0] or b != self.ab[1]:
            return None
        v = struct.unpack_from(HDR, h, 0)
        return {"version": v[1], "layout": v[2:3] + v[5:13], "saved": v[3] != 0, "seq": v[13], "k0": v[14],
                "count": v[15]}

    def _refuse(self, what):
        raise ColdStoreError("%s: %s; refusing the cold store (delete it, or open with fresh=True to start over)"
                             % (self.path, what))

    def _reopen(self):
        hs = [self._read_header(0), self._read_header(1)]
        if hs[0] is None and hs[1] is None:
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
        if self.f.seek(0, 2) < self.flash:
            self._refuse("the file is shorter than its layout (%d bytes)" % self.flash)
        for i in range(h["count"]):
            self._verify_block(h["k0"] + i)
        saved = h["saved"] and self.S > 0
        if saved:
            self._verify_sinks()
        self.seq = h["seq"]
        self.k0 = h["k0"]
        self.count = h["count"]
        self.saved = saved

    def _check_tag(self, off, k, what):
        f = self.f
        f.seek(off)
        t = f.read(TIER_TAG_BYTES)
        if t is None or len(t) != TIER_TAG_BYTES:
            self._refuse("%s is truncated" % what)
        tk, _, a, b, _ = struct.unpack(TAG, t)
        if tk != k:
            self._refuse("%s holds block %d, not %d: the store was cut mid-write" % (what, tk, k))
        return a, b

    def _verify_block(self, k):
        first = self.S + k * self.B
        what = "block %d (positions %d-%d)" % (k, first, first + self.B - 1)
        a, b = self._check_tag(self.base + (k % self.C) * self.stride, k, what)
        self.ab[0] = 1
        self.ab[1] = 0
        for layer in range(self.L):
            if self.f.readinto(self.rec) != self.rb:
                self._refuse("%s is truncated" % what)
            adler(self.rec, self.rb, self.ab)
        if a != self.ab[0] or b != self.ab[1]:
            self._refuse("%s fails its checksum: damaged or cut mid-write" % what)

    def _verify_sinks(self):
        a, b = self._check_tag(self.sinks_off, SINKS_TAG, "the sinks' record")
        buf = self.f.read(self.sinks_bytes)
        if buf is None or len(buf) != self.sinks_bytes:
            self._refuse("the sinks' record is truncated")
        self._sum(buf, len(buf))
        if a != self.ab[0] or b != self.ab[1]:
            self._refuse("the sinks' record fails its checksum")

    # ---- blocks ----

    def _write_tag(self, off, k, ntok):
        struct.pack_into(TAG, self.tag, 0, k, (self.seq + 1) % SEQ_MOD, self.ab[0], self.ab[1], ntok)
        self.f.seek(off)
        self.f.write(self.tag)

    def write_record(self, k, layer):
        """Write rec as layer `layer` of block k (not yet committed); layers go in order 0, 1, ..."""
        if layer == 0:
            self.ab[0] = 1
            self.ab[1] = 0
        f = self.f
        f.seek(self.base + (k % self.C) * self.stride + TIER_TAG_BYTES + layer * self.rb)
        f.write(self.rec)
        adler(self.rec, self.rb, self.ab)

    def end_block(self, k, sinks=None):
        """Tag block k (after its L records), save the sinks' rows with the first block, flush. Then commit()."""
        self._write_tag(self.base + (k % self.C) * self.stride, k, self.B)
        if sinks is not None:
            self._sum(sinks, self.sinks_bytes)
            self.f.seek(self.sinks_off + TIER_TAG_BYTES)
            self.f.write(sinks)
            self._write_tag(self.sinks_off, SINKS_TAG, self.S)
        self.f.flush()
        self.writes += 1

    def load(self, k, layer):
        """rec := layer `layer` of block k, read from flash. Allocates nothing."""
        f = self.f
        f.seek(self.base + (k % self.C) * self.stride + TIER_TAG_BYTES + layer * self.rb)
        if f.readinto(self.rec) != self.rb:
            raise OSError("%s: cold block %d is truncated" % (self.path, k))
        self.reads += 1

    def load_sinks(self, buf):
        self.f.seek(self.sinks_off + TIER_TAG_BYTES)
        self.f.readinto(buf)

    def used(self):
        """Flash bytes holding committed data."""
        return (self.sinks_rec if self.saved else 0) + self.count * self.stride

    def close(self):
        if self.f is not None:
            self.f.close()
            self.f = None
