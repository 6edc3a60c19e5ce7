# A conversation saved to flash and resumed after a reset, bit for bit (issue 45, item 3): the cache (a KVCache of
# any dtype, window, sinks, f32 prefix, KIVI residual; or a TieredCache's hot ring, its cold blocks staying in their
# own store), an attached H2O policy, the sampler (temperature, Rng state) and the runner's next token.
#
#   from kvedge import session
#   session.save_run("chat", m, sampler, token)      # m: a kvedge.model.llama.Llama; token: the next one to feed
#   token = session.load_run("chat", m, sampler)     # m built from the same checkpoint and cache config
#   generate(m, tok, sampler, [token], steps)        # goes on as if it had never stopped
#
# Files: PATH.s0 and PATH.s1, one save each; a save overwrites the one that does not hold the newest complete save,
# so a power cut at any write leaves the previous save whole. A file is written front to back (flash file systems
# rewrite what follows a write in the middle of a file), little-endian:
#   header  magic KVSS, version, kind (0 KVCache, 1 TieredCache), flags (1 H2O policy, 2 sampler, 4 model,
#           8 token), sequence number (mod 2**30, kvedge.tier.sizes.newer), total bytes, the fingerprint (30 u32:
#           the cache config, the arena's bytes, the model's shape and weights dtype, the policy's and the tier's
#           fields; 0 where absent), Adler-32 of all that: HDR_BYTES
#   parts   each followed by its tag (part id, 0, Adler-32 a, b: 8 bytes):
#           1 state   the cache's counters (n_seen, n_cached, n_pre, span, cur_slot, used/peak bytes, live groups,
#                     evictions, alloc failures), the next token, a tier's committed store state and counters, the
#                     sampler's temperature (f64) and Rng state (4 x u16), the policy's counters: STATE_BYTES
#           2 tables  slot_pos (i32 a slot), res_lo, res_hi (i32 a layer), kbits (u16 a layer), group_live (u16
#                     a KIVI group)
#           3 policy  (flag 1) H2O's accumulators and this step's scores (i32 a slot)
#           4 arena   the cache's arena (a tier: its ring's) verbatim
#   end     magic KVSE and the sequence number again: the file is complete only when its length is the header's total
# Loading reads both headers, takes the newer complete save (a file shorter than its header says, or than a
# header, is a save a power cut stopped: the other one is taken), and streams it twice through a CHUNK-byte
# buffer: first every checksum, the fingerprint against the cache given and every table's consistency (counts,
# ranges, the byte account), without touching anything; then into the cache. A damaged, foreign or mismatched
# file raises SessionError naming the file and the part, and the cache is as it was (a file that changes between
# the two passes is refused in the second, the cache then reset: never half-loaded). The arena is read straight
# into place: nothing the size of the arena is allocated. Only small ints (below 2**30) are computed.
#
# A TieredCache's cold blocks are not copied: the save records its store's committed state (sequence, first
# block, count), and a load needs the store reopened at that very state (TieredCache(..., fresh=False) after the
# reset), refused otherwise: blocks committed after the save may have overwritten the save's.
import struct

from .cache import POS_LIMIT
from .compat import const, zeros
from .sizes import CACHE_DTYPES
from .tier.sizes import SEQ_MOD, adler, newer
from .errors import SessionError

MAGIC = b"KVSS"
END = b"KVSE"
VERSION = 1
SUFFIXES = (".s0", ".s1")
CHUNK = const(256)  # the buffer a save and a load stream through (a multiple of 4)
HDR = "<4sBBBBII30I"
HDR_BYTES = const(140)  # struct.calcsize(HDR) + the header's Adler-32 (a, b: 2 x u16)
STATE = "<18id4H3i"  # the state part's layout (written and read a field at a time)
STATE_BYTES = const(100)
TAG = "<HHHH"
TAG_BYTES = const(8)
END_BYTES = const(8)
F_POLICY = const(1)
F_SAMPLER = const(2)
F_MODEL = const(4)
F_TOKEN = const(8)
PARTS = ("the header", "the state", "the tables", "the H2O policy", "the arena", "the end record")
# the fingerprint's fields, in the header's order (named in a refusal)
FIELDS = ("layers", "heads", "kv_heads", "head_dim", "slots", "dtype", "window", "sinks", "prefix", "align",
          "group", "residual", "arena bytes", "model dim", "model hidden_dim", "model n_layers", "model n_heads",
          "model n_kv_heads", "model vocab_size", "model seq_len", "weights dtype", "H2O budget", "H2O recent",
          "H2O sinks", "H2O decay", "tier block", "tier cold dtype", "tier cold_blocks", "tier at_cap",
          "tier cold_align")
WEIGHTS = ("f32", "i8", "i4")
AT_CAP = ("drop", "reset")
CAP = (1 << 30) - 1  # kvedge.evict's accumulator cap (not imported: a session without a policy loads no evict)
_M16 = 0xFFFF


def files(path):
    """The two files of the session PATH."""
    return (path + SUFFIXES[0], path + SUFFIXES[1])


def remove(path):
    """Delete the session PATH's files (those that are there)."""
    import os
    for name in files(path):
        try:
            os.remove(name)
        except OSError:
            pass


def _ring(cache):
    """(the KVCache holding the arena and tables, the tiered cache or None)."""
    ring = getattr(cache, "ring", None)
    if ring is not None and getattr(cache, "store", None) is not None:
        return ring, cache
    return cache, None


def _index(seq, x):
    for i in range(len(seq)):
        if seq[i] == x:
            return i
    return 0


def fingerprint(cache, policy=None, model=None, out=None):
    """The 30 fingerprint values (FIELDS) of a cache with its policy and model, into out (a list, made if None)."""
    r, t = _ring(cache)
    c = r.cfg
    f = out if out is not None else [0] * len(FIELDS)
    for i in range(len(FIELDS)):
        f[i] = 0
    f[0], f[1], f[2], f[3], f[4] = c.layers, c.heads, c.kv_heads, c.head_dim, c.slots
    # a dtype's index; K and V apart (kvedge.kvsplit): the split's code, 5 and above
    f[5], f[6], f[7], f[8], f[9] = getattr(c, "code", 0) or _index(CACHE_DTYPES, c.dtype), c.window, c.sinks, \
        c.prefix, c.align
    f[10], f[11], f[12] = c.group, c.residual, len(r.arena)
    if model is not None:
        m = model.cfg
        f[13], f[14], f[15], f[16], f[17] = m.dim, m.hidden_dim, m.n_layers, m.n_heads, m.n_kv_heads
        f[18], f[19], f[20] = m.vocab_size, m.seq_len, 1 + _index(WEIGHTS, getattr(model, "wdtype", "f32"))
    if policy is not None:
        f[21], f[22], f[23], f[24] = policy.budget, policy.recent, policy.sinks, policy.decay
    if t is not None:
        f[25], f[26], f[27] = t.B, 1 + _index(CACHE_DTYPES, t.cold), t.C
        f[28], f[29] = _index(AT_CAP, t.at_cap), t.cold_align
    return f


def _sizes(r, policy):
    """(tables bytes, policy bytes, arena bytes) of ring r."""
    return 4 * r.N + 10 * r.L + 2 * r.NG, (8 * r.N if policy is not None else 0), len(r.arena)


def _total(r, policy):
    tb, pb, ab = _sizes(r, policy)
    n = HDR_BYTES + STATE_BYTES + tb + ab + 3 * TAG_BYTES + END_BYTES
    if pb:
        n += pb + TAG_BYTES
    return n


def _refuse(name, what):
    raise SessionError("%s: %s; refusing the saved session (the cache is unchanged)" % (name, what))


class _Io:
    """One file streamed through the CHUNK-byte buffer, with the running Adler-32 of the part being read or
    written."""

    def __init__(self, f, name, buf):
        self.f, self.name, self.buf = f, name, buf
        self.mv = memoryview(buf)
        self.ab = zeros("i", 2)
        self.i = self.n = self.left = 0
        self.part = 0

    # ---- writing ----

    def start(self, part):
        self.part = part
        self.ab[0] = 1
        self.ab[1] = 0
        self.n = 0

    def put(self, fmt, size, x):
        if self.n + size > CHUNK:
            self.flush()
        struct.pack_into(fmt, self.buf, self.n, x)
        self.n += size

    def flush(self):
        if self.n:
            adler(self.mv, self.n, self.ab)
            self.f.write(self.mv[:self.n])
            self.n = 0

    def raw(self, mv):
        """Bytes written as they are (the arena), summed into the part."""
        n = len(mv)
        o = 0
        while o < n:
            e = o + 2048 if n - o > 2048 else n
            adler(mv[o:e], e - o, self.ab)
            self.f.write(mv[o:e])
            o = e

    def end(self):
        self.flush()
        struct.pack_into(TAG, self.buf, 0, self.part, 0, self.ab[0], self.ab[1])
        self.f.write(self.mv[:TAG_BYTES])

    # ---- reading ----

    def begin(self, part, nbytes):
        self.part = part
        self.left = nbytes
        self.i = self.n = 0
        self.ab[0] = 1
        self.ab[1] = 0

    def _fill(self, want, into=None):
        """Read exactly `want` bytes into `into` (a memoryview) or the buffer's tail; summed; refused when short."""
        dst = into if into is not None else self.mv[self.n:self.n + want]
        got = self.f.readinto(dst)
        if got is None or got != want:
            _refuse(self.name, "%s is truncated" % PARTS[self.part])
        adler(dst, want, self.ab)
        self.left -= want

    def take(self, k):
        """The offset in buf of the part's next k bytes (k <= 4)."""
        if self.n - self.i < k:
            rest = self.n - self.i
            b = self.buf
            for j in range(rest):
                b[j] = b[self.i + j]
            self.n = rest
            self.i = 0
            want = CHUNK - rest
            if want > self.left:
                want = self.left
            if want < k - rest:
                _refuse(self.name, "%s is shorter than its layout" % PARTS[self.part])
            self._fill(want)
            self.n = rest + want
        o = self.i
        self.i += k
        return o

    def i32(self):
        return struct.unpack_from("<i", self.buf, self.take(4))[0]

    def u16(self):
        o = self.take(2)
        return self.buf[o] | (self.buf[o + 1] << 8)

    def skip_raw(self, nbytes, into=None):
        """The part's next nbytes: into `into` (a memoryview of that length, e.g. the arena) or only summed."""
        o = 0
        while o < nbytes:
            e = o + CHUNK if nbytes - o > CHUNK else nbytes
            if into is None:
                self.n = 0
                self._fill(e - o)
            else:
                self._fill(e - o, into[o:e])
            o = e

    def check_tag(self):
        """The part's tag: its id and its checksum."""
        if self.left or self.n != self.i:
            _refuse(self.name, "%s does not end where its layout does" % PARTS[self.part])
        got = self.f.readinto(self.mv[:TAG_BYTES])
        if got is None or got != TAG_BYTES:
            _refuse(self.name, "%s is truncated (its tag)" % PARTS[self.part])
        pid, zero, a, b = struct.unpack_from(TAG, self.buf, 0)
        if pid != self.part or zero:
            _refuse(self.name, "%s: the file holds part %d in its place" % (PARTS[self.part], pid))
        if a != self.ab[0] or b != self.ab[1]:
            _refuse(self.name, "%s fails its checksum: damaged" % PARTS[self.part])


def _read_header(name, buf):
    """(status, header fields): status "none" (no file, or an empty one), "short" (a header a power cut stopped),
    "foreign" (not a kvedge session), "damaged" (a whole header failing its checksum), or "ok"."""
    try:
        f = open(name, "rb")
    except OSError:
        return "none", None
    try:
        mv = memoryview(buf)
        got = f.readinto(mv[:HDR_BYTES])
        size = f.seek(0, 2)
    finally:
        f.close()
    got = got or 0
    if got == 0:
        return "none", None
    if bytes(mv[:4 if got >= 4 else got]) != MAGIC[:4 if got >= 4 else got]:
        return "foreign", None
    if got < HDR_BYTES:
        return "short", None
    ab = zeros("i", 2)
    ab[0] = 1
    adler(mv, HDR_BYTES - 4, ab)
    a, b = struct.unpack_from("<HH", buf, HDR_BYTES - 4)
    if a != ab[0] or b != ab[1]:
        return "damaged", None
    h = struct.unpack_from(HDR, buf, 0)
    return "ok", (h, size)


def _newest(path, buf):
    """Both files' headers: (index of the newest complete save or -1, the highest sequence number of a whole header
    or -1, [(status, (header, size))] x 2). A save is complete when its file is as long as its header says."""
    hs = [_read_header(n, buf) for n in files(path)]
    best = top = -1
    for i in (0, 1):
        st, hz = hs[i]
        if st != "ok":
            continue
        seq = hz[0][5]
        if top < 0 or newer(seq, top):
            top = seq
        if hz[1] == hz[0][6] and (best < 0 or newer(seq, hs[best][1][0][5])):
            best = i
    return best, top, hs


def save(path, cache, policy=None, sampler=None, token=-1, model=None):
    """Write the session PATH: the cache (a KVCache, or a TieredCache: its ring and its store's committed state),
    an H2O `policy` attached to it, a `sampler` (kvedge.model.sampler.Sampler), the runner's next `token` (-1: none)
    and the `model`'s shape (a Llama: its cfg and wdtype). Into the file that does not hold the newest complete
    save, front to back; a power cut at any write leaves the newest save as it was. Allocates the CHUNK buffer
    and small objects only. OSError from the file system goes through (the previous save stays)."""
    r, t = _ring(cache)
    buf = bytearray(CHUNK)
    best, top, hs = _newest(path, buf)
    seq = (top + 1) % SEQ_MOD if top >= 0 else 1
    target = 1 - best if best >= 0 else 0
    name = files(path)[target]
    flags = (F_POLICY if policy is not None else 0) | (F_SAMPLER if sampler is not None else 0) | \
        (F_MODEL if model is not None else 0) | (F_TOKEN if token >= 0 else 0)
    fp = fingerprint(cache, policy, model)
    total = _total(r, policy)
    if total >= 1 << 30:
        raise ValueError("a session of %d bytes: file offsets must stay below 2**30" % total)
    f = open(name, "wb")
    try:
        io = _Io(f, name, buf)
        struct.pack_into("<4sBBBBII", buf, 0, MAGIC, VERSION, 1 if t is not None else 0, flags, 0, seq, total)
        for i in range(len(FIELDS)):
            struct.pack_into("<I", buf, 16 + 4 * i, fp[i])
        io.start(0)
        io.n = HDR_BYTES - 4
        io.flush()  # summed: the header's own checksum follows it
        struct.pack_into("<HH", buf, 0, io.ab[0], io.ab[1])
        f.write(io.mv[:4])
        io.start(1)
        for x in (r.n_seen, r.n_cached, r.n_pre, r.span, r.cur_slot, r.used_bytes, r.peak_bytes, r.live_groups,
                  r.evictions, r.alloc_failures, token):
            io.put("<i", 4, x)
        st = t.store if t is not None else None
        for x in ((st.seq, st.k0, st.count, 1 if st.saved else 0, t.demoted, t.drops, t.cap_resets)
                  if t is not None else (0, 0, 0, 0, 0, 0, 0)):
            io.put("<i", 4, x)
        io.put("<d", 8, sampler.temperature if sampler is not None else 0.0)
        s = sampler.rng.state if sampler is not None else 0
        for k in range(4):
            io.put("<H", 2, (s >> (16 * k)) & _M16)
        for x in ((policy.saturations, policy.observed, policy.last_victim) if policy is not None else (0, 0, 0)):
            io.put("<i", 4, x)
        io.end()
        io.start(2)
        for arr, fmt, size in ((r.slot_pos, "<i", 4), (r.res_lo, "<i", 4), (r.res_hi, "<i", 4), (r.kbits, "<H", 2),
                               (r.group_live, "<H", 2)):
            for i in range(len(arr)):
                io.put(fmt, size, arr[i])
        io.end()
        if policy is not None:
            io.start(3)
            for arr in (policy.acc, policy.scores):
                for i in range(len(arr)):
                    io.put("<i", 4, arr[i])
            io.end()
        io.start(4)
        io.raw(memoryview(r.arena))
        io.end()
        struct.pack_into("<4sI", buf, 0, END, seq)
        f.write(io.mv[:END_BYTES])
        if hasattr(f, "flush"):
            f.flush()
    finally:
        f.close()
    return name


def save_run(path, model, sampler, token):
    """save() of a Llama's run: its cache, its policy, the sampler and the next token (the last one sampled)."""
    return save(path, model.cache, model.policy, sampler, token, model)


def load_run(path, model, sampler):
    """load() into a Llama built from the same checkpoint and cache config; returns the next token to feed."""
    return load(path, model.cache, model.policy, sampler, model)


# ---- the runner's (kvedge.model.run: generate --save / --resume) ----

def reopen_tier(tier, tile, arena):
    """A Llama cache factory: the tiered cache of a plan's `tier` with its cold store reopened (fresh=False) as a
    saved run left it; arena: the ring's, allocated earlier."""
    def build(ccfg, q8):
        from kvedge import caches
        return caches.build(ccfg, tier, caches.COLD_PATH, tile, arena, q8=q8, fresh=False)
    return build


def load_next(path, model, sampler):
    """load_run(), and the next token there must be."""
    t = load_run(path, model, sampler)
    if t < 0:
        raise SessionError("%s: the session holds no next token to go on from" % path)
    return t


class Last:
    """A sampler remembering the last token it gave: the next one to feed when the run is saved."""

    def __init__(self, s):
        self.s = s
        self.temperature = s.temperature
        self.last = -1

    def sample(self, logits):
        t = self.s.sample(logits)
        self.last = t
        return t


def save_end(path, model, last, ids, seen0):
    """save_run() at the end of a run: the next token is the last one sampled, else (a prompt longer than the run)
    the prompt's next one; ids: the tokens the run was given, seen0: the positions the cache held before it."""
    ran = model.cache.stats()["tokens_seen"] - seen0
    nxt = last.last if last.last >= 0 else (ids[ran] if ran < len(ids) else -1)
    return save_run(path, model, last.s, nxt)


def load(path, cache, policy=None, sampler=None, model=None):
    """Read the newest complete save of PATH back into `cache` (and `policy`, `sampler`), built as the saved ones
    were (fingerprint: the cache config, the model's shape, the policy's and the tier's fields). Returns the saved
    next token (-1 when none was saved). Everything is checked before anything changes: SessionError names the file
    and the part; the cache, policy and sampler are then as they were."""
    r, t = _ring(cache)
    buf = bytearray(CHUNK)
    best, top, hs = _newest(path, buf)
    names = files(path)
    for i in (0, 1):
        st = hs[i][0]
        if st == "foreign":
            _refuse(names[i], "not a kvedge session (no KVSS magic)")
        if st == "damaged":
            _refuse(names[i], "its header fails its checksum: damaged")
        if st == "ok" and hs[i][1][1] > hs[i][1][0][6]:
            _refuse(names[i], "%d bytes, its header says %d: damaged" % (hs[i][1][1], hs[i][1][0][6]))
    if best < 0:
        if hs[0][0] == "none" and hs[1][0] == "none":
            raise SessionError("%s: no saved session (neither %s nor %s holds one)" % (path, names[0], names[1]))
        why = []
        for i in (0, 1):
            st, hz = hs[i]
            why.append("%s %s" % (names[i], "is missing or empty" if st == "none" else
                                  "was cut inside its header" if st == "short" else
                                  "was cut at %d of its %d bytes" % (hz[1], hz[0][6])))
        _refuse(path, "no complete save (a save interrupted, and none before it): " + " and ".join(why))
    h = hs[best][1][0]
    name = names[best]
    _check_header(name, h, fingerprint(cache, policy, model), t, policy, sampler, model)
    total = _total(r, policy)
    if h[6] != total:
        _refuse(name, "the header says %d bytes, this layout takes %d: damaged" % (h[6], total))
    f = open(name, "rb")
    try:
        io = _Io(f, name, buf)
        f.seek(HDR_BYTES)
        _stream(io, r, t, policy, sampler, model, h, False)  # every check; nothing changes
        f.seek(HDR_BYTES)
        try:
            return _stream(io, r, t, policy, sampler, model, h, True)
        except SessionError:  # the file changed between the passes: an empty cache, never a half-loaded one
            r.reset()
            raise
    finally:
        f.close()


def _check_header(name, h, want, t, policy, sampler, model):
    if h[1] != VERSION:
        _refuse(name, "session version %d, this kvedge reads %d" % (h[1], VERSION))
    kind = 1 if t is not None else 0
    if h[2] != kind:
        _refuse(name, "saved from a %s, loaded into a %s" % (("KVCache", "TieredCache")[h[2] & 1],
                                                             ("KVCache", "TieredCache")[kind]))
    flags = h[3]
    if bool(flags & F_POLICY) != (policy is not None):
        _refuse(name, "saved %s an H2O policy, loaded %s one" % (("with", "without") if flags & F_POLICY
                                                               else ("without", "with")))
    if sampler is not None and not flags & F_SAMPLER:
        _refuse(name, "saved without a sampler")
    for j in range(len(FIELDS)):
        got = h[7 + j]
        if (j >= 13 and j <= 20) and (model is None or not flags & F_MODEL):
            continue  # the model's shape is compared when both sides have one
        if got != want[j]:
            _refuse(name, "written for another layout: %s %s in the file, %s here" % (FIELDS[j], _show(j, got),
                                                                                     _show(j, want[j])))


def _show(j, x):
    """A fingerprint value as the refusal names it: a dtype or an at_cap policy by name."""
    names = {5: CACHE_DTYPES, 20: ("none",) + WEIGHTS, 26: ("none",) + CACHE_DTYPES, 28: AT_CAP}.get(j)
    return names[x] if names is not None and 0 <= x < len(names) else "%d" % x


def _stream(io, r, t, policy, sampler, model, h, apply):
    """One pass over the parts after the header: apply=False checks everything, apply=True also writes it into
    the cache (the checks again: a file that changed since the first pass is refused). Returns the token."""
    name = io.name
    N, L, P = r.N, r.L, r.P
    tb, pb, ab_ = _sizes(r, policy)
    # ---- state ----
    io.begin(1, STATE_BYTES)
    v = [io.i32() for _ in range(18)]
    o = io.take(8)
    temp = struct.unpack_from("<d", io.buf, o)[0]
    rs = [io.u16() for _ in range(4)]
    pv = [io.i32() for _ in range(3)]
    io.check_tag()
    n_seen, n_cached, n_pre, span, cur, used, peak, live_g, evs, fails, token = v[:11]
    bad = None
    if not 0 <= n_seen <= POS_LIMIT or not 0 <= n_cached <= N or not 0 <= n_pre <= P or not 0 <= span <= N:
        bad = "positions or counts out of range"
    elif not -1 <= cur < N or used < 0 or peak < used or evs < 0 or fails < 0:
        bad = "the current slot or the byte counters out of range"
    elif not 0 <= live_g <= r.NG:
        bad = "live groups out of range"
    elif token < -1 or (model is not None and token >= model.cfg.vocab_size) or (token >= 0) != bool(h[3] & F_TOKEN):
        bad = "the next token %d out of range" % token
    elif used != n_pre * r.pre_slot_bytes + (n_cached - n_pre) * r.main_slot_bytes + live_g * r.group_bytes:
        bad = "its byte account (%d) does not match its counts" % used
    elif not temp >= 0 or temp != temp:
        bad = "the sampler's temperature is not a number >= 0"
    elif h[3] & F_SAMPLER and rs[0] == 0 and rs[1] == 0 and rs[2] == 0 and rs[3] == 0:
        bad = "the sampler's generator state is 0"
    elif policy is not None and (pv[0] < 0 or not 0 <= pv[1] <= CAP or pv[2] < -1 or pv[2] >= n_seen):
        bad = "the policy's counters out of range"
    if bad is not None:
        _refuse(name, "the state: " + bad)
    if t is not None:
        st = t.store
        sseq, sk0, scount, ssaved = v[11:15]
        if (sseq, sk0, scount, ssaved) != (st.seq, st.k0, st.count, 1 if st.saved else 0):
            _refuse(name, "the tier: the cold store %s is at commit %d (blocks %d-%d), the save was made at commit "
                    "%d (blocks %d-%d): reopen the store the save was made with" % (
                        t.path, st.seq, st.k0, st.k0 + st.count - 1, sseq, sk0, sk0 + scount - 1))
        if v[15] < 0 or v[16] < 0 or v[17] < 0:
            _refuse(name, "the state: the tier's counters out of range")
    # ---- tables ----
    io.begin(2, tb)
    live = pre = 0
    sp = r.slot_pos
    for s in range(N):
        p = io.i32()
        if p < -1 or p >= n_seen or (p >= 0 and s >= span):
            _refuse(name, "the tables: slot %d holds position %d (n_seen %d, span %d)" % (s, p, n_seen, span))
        if p >= 0:
            live += 1
            if s < P:
                pre += 1
        if apply:
            sp[s] = p
    if live != n_cached or pre != n_pre:
        _refuse(name, "the tables: %d live slots (%d in the prefix), the state says %d (%d)"
                % (live, pre, n_cached, n_pre))
    if cur >= 0 and n_cached and not apply and cur >= span:
        _refuse(name, "the tables: the current slot %d is past the span %d" % (cur, span))
    for arr in (r.res_lo, r.res_hi):
        for i in range(L):
            x = io.i32()
            if x < 0 or x > n_seen:
                _refuse(name, "the tables: a KIVI residual bound %d out of range" % x)
            if apply:
                arr[i] = x
    for i in range(L):
        x = io.u16()
        if x > 0x7BFF:
            _refuse(name, "the tables: key scale bits %d out of range" % x)
        if apply:
            r.kbits[i] = x
    ng = 0
    for i in range(r.NG):
        x = io.u16()
        if x > r.G:
            _refuse(name, "the tables: group %d counts %d live tokens, more than its %d" % (i, x, r.G))
        if x:
            ng += 1
        if apply:
            r.group_live[i] = x
    if ng != live_g:
        _refuse(name, "the tables: %d live groups, the state says %d" % (ng, live_g))
    io.check_tag()
    # ---- policy ----
    if policy is not None:
        io.begin(3, pb)
        for arr in (policy.acc, policy.scores):
            for i in range(N):
                x = io.i32()
                if not 0 <= x <= CAP:
                    _refuse(name, "the H2O policy: a score %d out of range" % x)
                if apply:
                    arr[i] = x
        io.check_tag()
    # ---- arena ----
    io.begin(4, ab_)
    io.skip_raw(ab_, memoryview(r.arena) if apply else None)
    io.check_tag()
    got = io.f.readinto(io.mv[:END_BYTES])
    if got != END_BYTES or bytes(io.mv[:4]) != END or struct.unpack_from("<I", io.buf, 4)[0] != h[5]:
        _refuse(name, "the end record is missing or not this save's")
    if apply:
        r.n_seen, r.n_cached, r.n_pre, r.span, r.cur_slot = n_seen, n_cached, n_pre, span, cur
        r.used_bytes, r.peak_bytes, r.live_groups, r.evictions, r.alloc_failures = used, peak, live_g, evs, fails
        if t is not None:
            t.demoted, t.drops, t.cap_resets = v[15], v[16], v[17]
        if sampler is not None:
            sampler.temperature = temp
            sampler.rng.state = rs[0] | (rs[1] << 16) | (rs[2] << 32) | (rs[3] << 48)
        if policy is not None:
            policy.saturations, policy.observed, policy.last_victim = pv[0], pv[1], pv[2]
    return token
