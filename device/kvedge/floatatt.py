# Decode-step attention over the cache in floats, tiled, with an online softmax (no N x N matrix, no N-sized
# scratch): kvedge.attention's float path, apart so that a run that never takes the integer path (plain or native
# kernels, a float cache) does not hold the integer path's code (3-4 KB of a small board's heap).
#
# For each query head h (reading KV head h // (heads // kv_heads), trap 1 in docs/architecture.md), the live
# cached tokens are taken T at a time. For a tile: scores s_j = q.k_j / sqrt(D); if the tile raises the running
# maximum m, the running sum l and the partial output acc are rescaled by exp(m_old - m_new); then
# l += sum exp(s_j - m) and acc += sum exp(s_j - m) v_j. At the end out = acc / l. Scratch depends on T and D only.
# Rows of any cache dtype are dequantized one at a time. It can add each token's attention probability (Q16, summed
# over query heads) into a caller's per-slot array, which is what heavy-hitter eviction accumulates.
import math

from . import check, kernels
from .cache import KVCache
from .compat import zeros

MAX_TILE = 64  # keeps a tile's weighted V sum within 2**28 (the integer path's bound, kept for both)
SCORE_CAP = (1 << 30) - 1  # a `scores` entry never passes this (31-bit small ints on boards)
SCORE_STEP = 65537  # most one query head adds to one slot's score in one step (Q16 probability + rounding)
_NEG_INF = float("-inf")


def _float_array(n):
    """Accumulators in double where the runtime has it (ports built with single floats store 'd' too)."""
    try:
        return zeros("d", n)
    except (ValueError, KeyError):
        return zeros("f", n)


class FloatAttention:
    """Attention over one KVCache in floats, with scratch for tiles of `tile` tokens allocated once
    (kvedge.attention.Attention adds the integer path)."""

    def __init__(self, cache, tile=32):
        if not isinstance(cache, KVCache):
            raise TypeError("cache must be a KVCache, got %s" % check.show(cache))
        check.index("tile", tile)
        cfg = cache.cfg
        if not (1 <= tile <= MAX_TILE):
            raise ValueError("tile must be 1..%d, got %r" % (MAX_TILE, tile))
        self.cache = cache
        self.T = tile
        self.D = D = cfg.head_dim
        self.heads = cfg.heads
        self.group = cfg.heads // cfg.kv_heads
        self.scale = 1.0 / math.sqrt(D)
        self.k = kernels.get()
        # float path scratch
        self.row = zeros("f", D)
        self.acc = _float_array(D)
        self.st = _float_array(2)  # running max and sum of the head being attended
        self.s = zeros("f", tile)
        self.tslot = zeros("i", tile)
        self.hm = _float_array(cfg.heads)  # per head: running max and 1/sum, kept for the scores pass
        self.hinv = _float_array(cfg.heads)
        # a `scores` entry may be at most this before a step (the step adds <= heads * SCORE_STEP)
        self.score_room = SCORE_CAP - cfg.heads * SCORE_STEP
        self.seen = [None, None, None, None]  # buffers whose item size was checked: qc, out_q, slots, scores

    def kv_head(self, h):
        """The KV head query head h reads (GQA / MQA mapping)."""
        check.index("query head", h, self.heads)
        return h // self.group

    # ---- input checks: all of them before anything is touched (a refused step changes nothing) ----

    def _sized(self, k, name, x, size):
        """x has `size`-byte items: the viper kernels read it through raw pointers (k = 3, scores: a list or
        items of >= 4 bytes). Checked once per buffer object, since the check allocates a small view."""
        if self.seen[k] is not x:
            n = check.itemsize(x)
            if n != size and not (k == 3 and (n == 0 or n > 4)):
                raise TypeError("%s must be an array of %d-byte items, got %s" % (name, size, check.show(x)))
            self.seen[k] = x

    def _check_scores(self, scores):
        """One int per slot, each within 0..score_room (this step then cannot push one past 2**30)."""
        if scores is None:
            return
        n = self.cache.N
        try:
            m = len(scores)
        except TypeError:
            m = -1
        if m < n or self.score_room < 0:
            raise ValueError("scores must hold one int per slot (%d), got %s" % (n, check.show(scores)))
        self._sized(3, "scores", scores, 4)
        room = self.score_room
        # an int array: C-speed bounds; otherwise (or if they fail) item by item, which says which one
        # (above room: H2O.observe() was not called)
        if type(scores) is list or type(scores[0]) is not int or min(scores) < 0 or max(scores) > room:
            check.codes("scores", scores, n, 0, room)
        try:
            scores[0] = scores[0]
        except check._BAD:
            raise TypeError("scores must be writable, got %s" % check.show(scores))

    def _check_slots(self, slots, nslots):
        """slots None (nslots -1): the cache's live slots; else slots[0:nslots] (nslots >= 1), live slots."""
        c = self.cache
        check.index("nslots", nslots)
        if slots is None:
            if nslots != -1 or not c.n_cached:
                raise ValueError("nslots needs slots" if nslots != -1 else "no cached tokens to attend to")
            return
        try:
            ok = 1 <= nslots <= len(slots)
        except TypeError:
            raise TypeError("slots must be an int array, got %s" % check.show(slots))
        if not ok:
            raise ValueError("nslots must be 1..len(slots), got %d" % nslots)
        self._sized(2, "slots", slots, 4)
        check.codes("slots", slots, nslots, 0, c.N - 1)
        sp = c.slot_pos
        for j in range(nslots):
            if sp[slots[j]] < 0:
                raise ValueError("slots[%d] = %d holds no token" % (j, slots[j]))

    def check_step(self, layer, q, out, scores=None):
        """step()'s checks of everything but the slots, without attending: for a caller that must not move
        before a step would be refused (a cold tier's page-in)."""
        self._check(layer, q, out, self.heads * self.D)
        self._check_scores(scores)

    def _check(self, layer, q, out, n):
        """layer, and q and out of n = heads*head_dim floats (q finite, within float32)."""
        self.cache._check_layer(layer)
        check.length("q", q, n)
        check.floats("q", q, n, check.F32_MAX)
        check.length("out", out, n)
        check.out("out", out, n, 0.5)

    def _fill(self, slots, nslots, n):
        """Next tile: up to T slots from the cursor into tslot; returns how many. Allocates nothing."""
        ts = self.tslot
        j = self.cur
        nt = 0
        T = self.T
        while j < n and nt < T:
            if nslots < 0:
                if slots[j] >= 0:
                    ts[nt] = j
                    nt += 1
            else:
                ts[nt] = slots[j]
                nt += 1
            j += 1
        self.cur = j
        return nt

    # ---- float path ----

    def step(self, layer, q, out, scores=None, slots=None, nslots=-1):
        """out[h*D:(h+1)*D] = softmax(q_h . K / sqrt(D)) V for every query head, over the live tokens of
        `layer` (or over slots[0:nslots], e.g. a session's block table). q and out hold heads*head_dim
        floats. With `scores` (array('i') per slot), adds each token's probability in Q16."""
        self.check_step(layer, q, out, scores)
        self._check_slots(slots, nslots)
        self._step(layer, q, out, scores, slots, nslots)

    def _step(self, layer, q, out, scores, slots, nslots):
        """step() on checked arguments (a PagedPool passes the slots it built itself)."""
        c = self.cache
        if slots is None:
            slots, nslots = c.slot_pos, -1
        n = c.N if nslots < 0 else nslots
        st, acc = self.st, self.acc
        D = self.D
        for h in range(self.heads):
            kvh = h // self.group
            qo = h * D
            self.begin(st, 0, acc, 0)
            self.fold_rows(c, layer, kvh, q, qo, slots, nslots, n, st, 0, acc, 0)
            self.hinv[h] = self.finish(layer, st, 0, acc, 0, out, qo)
            self.hm[h] = st[0]
        if scores is not None:  # only once every head succeeded: a refused step adds nothing
            for h in range(self.heads):
                self._report_float(layer, h // self.group, q, h * D, self.hm[h], self.hinv[h], scores, slots,
                                   nslots)

    # The running state of one query head is (max st[so], sum st[so+1], output acc[ao:ao+D]); it may live in
    # the caller's arrays, so that rows from several sources (kvedge.tier.cache: cold blocks, then the hot ring)
    # are folded into one online softmax.

    def begin(self, st, so, acc, ao):
        """Empty running state: nothing attended yet."""
        st[so] = _NEG_INF
        st[so + 1] = 0.0
        for i in range(self.D):
            acc[ao + i] = 0.0

    def fold_rows(self, c, layer, kvh, q, qo, slots, nslots, n, st, so, acc, ao):
        """Fold the live rows of KVCache `c` for one query head, a tile at a time: slot_pos-style slots
        (nslots < 0, -1 = empty) or the slot list slots[0:nslots]."""
        self.cur = 0
        while True:
            nt = self._fill(slots, nslots, n)
            if nt == 0:
                break
            self._fold(c, layer, kvh, q, qo, nt, st, so, acc, ao)

    def _fold(self, c, layer, kvh, q, qo, nt, st, so, acc, ao):
        """One tile (slots tslot[0:nt]) of the online softmax."""
        D = self.D
        row, s, ts = self.row, self.s, self.tslot
        m = st[so]
        l = st[so + 1]
        tmax = m
        for t in range(nt):
            c._read_slot(layer, kvh, ts[t], 0, row)
            d = 0.0
            for i in range(D):
                d += q[qo + i] * row[i]
            s[t] = d * self.scale
            d = s[t]  # the stored (float32) score: the maximum's weight is then exactly exp(0) = 1
            if d > tmax:
                tmax = d
        if tmax > m:  # the maximum grew: rescale what was summed so far
            corr = math.exp(m - tmax)
            l *= corr
            for i in range(D):
                acc[ao + i] *= corr
            m = tmax
        for t in range(nt):
            w = math.exp(s[t] - m)
            l += w
            c._read_slot(layer, kvh, ts[t], 1, row)
            for i in range(D):
                acc[ao + i] += w * row[i]
        st[so] = m
        st[so + 1] = l

    def finish(self, layer, st, so, acc, ao, out, qo):
        """out[qo:qo+D] = output / sum; returns 1 / sum. A sum below 1 (the largest weight is exp(0) = 1) or
        NaN means a score overflowed the float range; an output beyond float32 is refused too."""
        l = st[so + 1]
        if l == 0.0:
            raise ValueError("no cached tokens to attend to in layer %d" % layer)
        if not (l >= 1.0):
            raise ValueError("q . k overflows the float range in layer %d: scale q down" % layer)
        inv = 1.0 / l
        big = check.F32_MAX
        for i in range(self.D):
            o = acc[ao + i] * inv
            if not (-big <= o <= big):
                raise ValueError("attention output overflows float32 in layer %d" % layer)
            out[qo + i] = o
        return inv

    def _report_float(self, layer, kvh, q, qo, m, inv, scores, slots, nslots):
        """Each token's probability under the step's max m and 1/sum inv. Its score is rounded to float32 as
        the step stored it (in self.s), so it is at most m and its weight at most 1: near float32's limit a
        double score would be up to m * 2**-24 above m and its weight overflow."""
        c = self.cache
        row = self.row
        s = self.s
        n = c.N if nslots < 0 else nslots
        for j in range(n):
            slot = j if nslots < 0 else slots[j]
            if nslots < 0 and slots[j] < 0:
                continue
            c._read_slot(layer, kvh, slot, 0, row)
            d = 0.0
            for i in range(self.D):
                d += q[qo + i] * row[i]
            s[0] = d * self.scale
            scores[slot] += int(math.exp(s[0] - m) * inv * 65536 + 0.5)
