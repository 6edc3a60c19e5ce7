# Decode-step attention over the cache, tiled, with an online softmax (no N x N matrix, no N-sized scratch).
#
# For each query head h (reading KV head h // (heads // kv_heads), trap 1 in docs/architecture.md), the live
# cached tokens are taken T at a time. For a tile: scores s_j = q.k_j / sqrt(D); if the tile raises the running
# maximum m, the running sum l and the partial output acc are rescaled by exp(m_old - m_new); then
# l += sum exp(s_j - m) and acc += sum exp(s_j - m) v_j. At the end out = acc / l. Scratch depends on T and D only.
#
# Two arithmetic paths:
#   step()     floats, for any cache dtype (rows are dequantized one at a time): kvedge.floatatt, which a run
#              that takes only this path loads alone.
#   step_q8()  integers end to end for i8 caches and an int8 query: scores as log2 in Q16, weights from a
#              2**x table in Q14, every intermediate within +-2**30, no float and no allocation once warm.
#              Output: out_q[h*D + i] * 2**out_exp[h] is the attention output.
#
# Both can add each token's attention probability (Q16, summed over query heads) into a caller's per-slot
# array, which is what heavy-hitter eviction accumulates.
import math

from . import check, kernels, quant
kernels.bind_att()  # the att_* kernels' tile indexes (kvedge.kernels.words): the integer attention is loading
from .compat import zeros
from .floatatt import FloatAttention, MAX_TILE, SCORE_CAP, SCORE_STEP, _float_array  # noqa: F401 (its names)
from .sizes import I2, I4, I8
from .kernels.words import (T_N, T_D, T_QOFF, T_T, T_B, T_EQ, T_M, T_WS, T_EVMAX, T_TMAX, T_EVT, T_HDR, T_KIVI, T_LSUM,
                     T_SH, T_CORR, T_QBITS, R_KROW, R_KSC, R_U, R_VROW, R_VSC, R_SLOT, R_RUNS, G_KROW, G_PITCH, G_P, G_J, G_N, G_LISTED, G_END, LG_WORDS)

# geo (kvedge.kernels.words G_*): att_fill_i8's geometry, one query head's running state and scratch of the fused kernels
# (kernels.viper/asm: att_head_i8 and their drivers att_step_i8, att_rows_i8), which run every tile of a head
# in one call with the same operations, in the same order, as the tile loop below (_tile_q8): their reference.
LOG2E = 1.4426950408889634
_LIM = 1 << 28
# step_q8's range: max|q_h| x max|k| x sqrt(head_dim), which bounds every logit |q_h . k| / sqrt(head_dim). The
# query's int8 step (amax / 254) and the int8 codes with a power-of-two step that f32, i4 and i2 rows are
# converted to (up to amax / 64) move a logit by at most about this bound / 85. Within Q8_RANGE the integer step
# holds, against softmax over the rows KVCache.read returns with the float query, a cosine >= 0.99 wherever the
# output is >= 0.1 of its values' magnitude (an output that cancels to a small average of them has a noisy
# direction) and an error <= 6 % of max|v| everywhere: tests/device/test_fuzz_kivi.py, 10 minutes on the unix port
# (tools/fuzz.py --runtime unix -k test_fuzz_kivi --minutes 10 --seed 8000: 137 seeds, 79,764 integer steps
# within it, none outside those bounds; issue 46). At 32 the same 10 minutes (seed 7000 on) found 4 of 76 seeds
# with cosines of 0.879-0.990 (head_dim 2 to 8, i2 and i4, windows with sinks); up to 64 it fell to 0.979, at
# 1,024 to 0.5, and at magnitudes of 1,000 (issue 46's rows) to 0.32 and below: the error reaches whole nats and
# moves the softmax's winner, like llama.cpp's int8 query. Beyond it step_q8 refuses (ValueError) before it
# touches anything; the float step has no such limit (kvedge.model.llama takes it for that layer).
Q8_RANGE = 16


def _exp2_table():
    """2**(-i/256) in Q14 for i = 0..256."""
    t = zeros("H", 257)
    for i in range(257):
        t[i] = int(16384 * 2.0 ** (-i / 256.0) + 0.5)
    return t


def _exp2q14(d, ws, exp2):
    """2**(-d / 2**16) in Q14, shifted right by ws (d >= 0). Same arithmetic as att_weights_i8."""
    n = d >> 16
    if n >= 15:
        return 0
    f = d & 0xFFFF
    i = f >> 8
    t0 = exp2[i]
    return (t0 - (((t0 - exp2[i + 1]) * (f & 255)) >> 8)) >> (n + ws)


def _mulq14(x, c):
    """x * c / 2**14 for |x| < 2**29, 0 <= c <= 2**14, without passing 2**30."""
    neg = x < 0
    if neg:
        x = -x
    r = (x >> 14) * c + (((x & 16383) * c) >> 14)
    return -r if neg else r


def _divq10(a, l):
    """a * 2**10 // l (truncated toward zero) by long division, for |a| < 2**30, 0 < l <= 2**28."""
    neg = a < 0
    if neg:
        a = -a
    q = a // l
    r = a - q * l
    for _ in range(10):  # one bit at a time keeps r << 1 below 2**29
        r <<= 1
        q <<= 1
        if r >= l:
            r -= l
            q += 1
    return -q if neg else q


class Attention(FloatAttention):
    """Attention over one KVCache, with scratch for tiles of `tile` tokens allocated once: the float path
    (kvedge.floatatt) and the integer path."""

    # viper and asm kernels fold a head's i8 tiles in one call (att_head_i8); plain and native ones, and
    # fused = False, drive the same tiles from Python (_tile_q8): the same results (tested)
    fused = True

    def __init__(self, cache, tile=32, integer=True):
        # integer=False: the float path only; the integer path's scratch and tables (about 1.6 KB at tile 32)
        # are then not allocated, and step_q8 refuses (a run that never takes it: kvedge.floatatt alone)
        FloatAttention.__init__(self, cache, tile)
        cfg = cache.cfg
        D = self.D
        # integer path scratch
        self.int_ok = integer and cfg.dtype in (I8, I4, I2) and D <= 256
        self.P, self.G = cfg.prefix, cfg.group
        self.i4 = cache.lowbit  # i4 or i2 rows: converted to int8 codes a tile at a time
        self.kivi = cache.kivi
        self.mixed = self.P > 0 or self.kivi  # rows other than the cache dtype exist
        if self.int_ok:
            self.tile = zeros("i", T_HDR + R_RUNS * tile)
            self.geo = zeros("i", G_END + D + LG_WORDS)  # geometry, a head's state, kernel scratch, layer bases
            self.tile[T_D] = D
            self.tile[T_T] = tile
            self.tile[T_KIVI] = 1 if self.kivi else 0
            self.tile[T_QBITS] = cache.bits or 4
            self.scratch = self.conv = None
            if self.mixed or self.i4:  # converted rows: codes and scales of one tile, and per-channel ints
                self.need_conversion()
            self.layer = self.cur = self.M = self.lsum = self.ws = self.evmax = 0
            self.first = True
            self.iacc = zeros("i", D)
            self.exp2 = _exp2_table()
            # the fused kernels' other buffers (for any kind: self.k may be swapped after construction): slots,
            # exp2, acc, geo, then qs, out_q, out_exp and the head and division kernels of a layer step, then a
            # tiered cache's per-head running states and accumulators (kernels.viper_head.att_cold_i8)
            self.aux = [None, self.exp2, self.iacc, self.geo, None, None, None, None, None, None, None]
            self.lam = int(LOG2E / math.sqrt(D) * 16384 + 0.5)
            # Q8_RANGE as a bound on the product of the query's and the keys' f16 scales, 128 * sq * 128 * sk *
            # sqrt(D) <= Q8_RANGE, held as rmant * 2**(rexp - 50) (rounded down): _in_range compares the f16
            # mantissas' product against it with ints only (no float, no allocation on the step's path)
            m, e = math.frexp(Q8_RANGE / (128.0 * 128.0 * math.sqrt(D)))
            self.rmant = int(m * (1 << 21))
            self.rexp = e - 21 + 50

    def check_step_q8(self, layer, qc, qs, out_q, out_exp, scores=None):
        """step_q8()'s checks of everything but the slots. Allocates nothing once warm (see _sized)."""
        if not self.int_ok:
            raise ValueError("the integer path needs an i8, i4 or i2 cache with head_dim <= 256")
        self.cache._check_layer(layer)
        self._check_q8(qc, qs, out_q, out_exp)
        self._check_scores(scores)

    def q8_fits(self, layer, qs):
        """Whether step_q8 takes this query (f16 scale bits qs per query head) in `layer`: for every head,
        128 * its scale x 128 * the largest K scale written to the layer since reset() x sqrt(head_dim), a bound on
        max|q_h| x max|k| x sqrt(head_dim), is within Q8_RANGE. Ints only: no allocation. (A caller holding the
        float query takes step() otherwise: kvedge.model.llama.)"""
        if not self.int_ok:
            return False
        kb = self.cache.kbits[layer]
        for h in range(self.heads):
            if not self._in_range(qs[h], kb):
                return False
        return True

    def _range_error(self, layer, qs):
        kb = self.cache.kbits[layer]
        for h in range(self.heads):
            if not self._in_range(qs[h], kb):
                return ValueError("layer %d, query head %d: |q| x |k| x sqrt(head_dim) may reach %.4g, beyond the "
                                  "integer step's range (%d), where an int8 step of q or k moves the softmax's "
                                  "winner: use step() with the float query" % (
                                      layer, h, 128 * quant.f16_value(qs[h]) * 128 * quant.f16_value(kb)
                                      * math.sqrt(self.D), Q8_RANGE))

    def _in_range(self, qb, kb):
        """Whether 128 * sq * 128 * sk * sqrt(D) <= Q8_RANGE for f16 scale bits qb, kb (finite, >= 0): ints only."""
        eq = qb >> 10
        mq = qb & 1023
        if eq:
            mq += 1024
        else:
            eq = 1
        ek = kb >> 10
        mk = kb & 1023
        if ek:
            mk += 1024
        else:
            ek = 1
        p = mq * mk  # < 2**22; sq * sk = p * 2**(eq + ek - 50)
        if p == 0:
            return True
        s = self.rexp - eq - ek
        if s >= 2:  # rmant >= 2**20: the bound is >= 2**22 > p
            return True
        if s >= 0:
            return p <= self.rmant << s
        return p <= self.rmant >> -s

    # ---- integer path ----
    # Slots are visited in three passes (the online softmax does not care about order): 0 = f32 prefix rows,
    # 1 = KIVI's f32 residual rows (see cache.py), 2 = rows in the cache dtype. Passes 0 and 1, and i4 rows, are
    # converted tile by tile to int8 codes with a power-of-two scale (kernels att_conv_*) so the path stays integer.

    def _kind(self, c, s):
        if s < c.P:
            return 0
        if c.kivi:
            t = c.slot_pos[s] - c.P  # its place in the quantized region: f32 while in the residual
            if t >= c.res_lo[self.layer] and t < c.res_hi[self.layer]:
                return 1
        return 2

    def _fill_kind(self, c, slots, nslots, n, kind):
        """Like _fill, but only slots of one kind."""
        ts = self.tslot
        j = self.cur
        nt = 0
        T = self.T
        while j < n and nt < T:
            s = j if nslots < 0 else slots[j]
            j += 1
            if nslots < 0 and slots[s] < 0:
                continue
            if self._kind(c, s) == kind:
                ts[nt] = s
                nt += 1
        self.cur = j
        return nt

    def _prep(self, c, kind, layer, kvh, nt):
        """Point the tile at the rows of tslot[0:nt] of cache c (offsets from its accessors: kvedge.cache owns the
        layout); returns the buffer the att_* kernels must read."""
        tile = self.tile  # one name per line: unpacking 4+ values builds a tuple (an allocation)
        ts = self.tslot
        T = self.T
        P = c.P
        if kind == 2:
            pitch = c.row_pitch()
            kbase = c.base(layer, 0, kvh)
            vbase = c.base(layer, 1, kvh)
            for t in range(nt):
                b = ts[t] - P
                tile[T_HDR + R_SLOT * T + t] = ts[t]
                tile[T_HDR + R_KROW * T + t] = kbase + b * pitch
                tile[T_HDR + R_KSC * T + t] = c.scale_at(layer, 0, kvh, b)
                tile[T_HDR + R_VROW * T + t] = vbase + b * pitch
                tile[T_HDR + R_VSC * T + t] = c.scale_at(layer, 1, kvh, b)
            tile[T_N] = nt
            if not c.lowbit:
                return c.arena
            tile[T_KIVI] = 1 if c.kivi else 0  # c's own fields: the tile may have served another cache last
            tile[T_QBITS] = c.bits
            self.k.att_conv_i4(c.arena, tile, self.scratch, self.conv)
            return self.scratch
        pitch = c.f32_pitch()
        if kind == 0:
            kbase = c.prefix_at(layer, 0, kvh, 0)
            vbase = c.prefix_at(layer, 1, kvh, 0)
        else:
            kbase = c.residual_at(layer, 0, kvh, 0)
            vbase = c.residual_at(layer, 1, kvh, 0)
        for t in range(nt):
            r = ts[t] if kind == 0 else (c.slot_pos[ts[t]] - P) % c.R
            tile[T_HDR + R_SLOT * T + t] = ts[t]
            tile[T_HDR + R_KROW * T + t] = kbase + r * pitch
            tile[T_HDR + R_VROW * T + t] = vbase + r * pitch
        tile[T_N] = nt
        self.k.att_conv_f32(c.arena, tile, self.scratch, self.conv)
        return self.scratch

    def head_geo(self, c, layer, kvh):
        """geo's geometry of KV head kvh's i8 rows in `layer` of cache c (G_KROW..G_PITCH), from c's accessors."""
        c.i8_bases(self.geo, G_KROW, layer, kvh)  # G_KROW, G_VROW, G_KSC, G_VSC
        self.geo[G_PITCH] = c.row_pitch()

    def _tile_q8(self, src, qc):
        """One tile of the online softmax on int8 rows in src; state in self.M/lsum/ws/evmax."""
        k = self.k
        tile = self.tile
        iacc = self.iacc
        k.att_scores_i8(src, qc, tile)
        tmax = tile[T_TMAX]
        evt = tile[T_EVT]
        sh = 0
        corr = 16384
        if evt > self.evmax:  # a larger V scale: express the sum so far in its units
            sh = evt - self.evmax
            self.evmax = evt
        if self.first:
            self.M = tmax
            self.first = False
        elif tmax > self.M:  # the maximum grew: rescale by 2**(-(tmax - M))
            corr = _exp2q14(tmax - self.M, 0, self.exp2)
            self.lsum = _mulq14(self.lsum, corr)
            self.M = tmax
        if sh or corr != 16384:
            tile[T_SH] = sh
            tile[T_CORR] = corr
            k.att_rescale(iacc, tile)
        tile[T_M] = self.M
        tile[T_WS] = self.ws
        tile[T_EVMAX] = self.evmax
        lsum = self.lsum + k.att_weights_i8(src, tile, self.exp2)
        big = k.att_wsum_i8(src, tile, iacc)
        if lsum > big:
            big = lsum
        if big > _LIM:  # overflow guard: halve sums and future weights together
            tile[T_CORR] = 16384
            while big > _LIM:
                tile[T_SH] = 1
                k.att_rescale(iacc, tile)
                lsum >>= 1
                big >>= 1
                self.ws += 1
        self.lsum = lsum

    def step_q8(self, layer, qc, qs, out_q, out_exp, scores=None, slots=None, nslots=-1):
        """Integer attention for i8, i4 and i2 caches: qc int8 query codes (heads*head_dim, array('b')), qs f16
        scale bits per query head; writes out_q (array('i'), heads*head_dim) and out_exp (per head) so that
        the output is out_q * 2**out_exp. Allocates nothing once warm; all ints stay within +-2**30.
        Refuses (ValueError) a query beyond Q8_RANGE in this layer (q8_fits): the float step() has no such
        limit. q8_step() is the same step without that check or the others, for callers whose int8 query is
        exact (the integer forward passes) or that pin the fixed-point arithmetic at any scale."""
        self.check_step_q8(layer, qc, qs, out_q, out_exp, scores)
        self._check_slots(slots, nslots)
        if not self.q8_fits(layer, qs):  # beyond Q8_RANGE: refused before anything moves
            raise self._range_error(layer, qs)
        self.q8_step(layer, qc, qs, out_q, out_exp, scores, slots, nslots)

    def q8_step(self, layer, qc, qs, out_q, out_exp, scores, slots, nslots, span=-1):
        """step_q8() without its checks, for a caller that checked its own buffers once (check_step_q8 with the
        same qc, qs, out_q, out_exp and scores; slots None with nslots -1, or a list of nslots live slots) and
        passes a valid layer. span >= 0: no slot from span on holds a token (a caller that places every token
        knows; the rows' scan stops there), -1: every slot is scanned."""
        c = self.cache
        if slots is None:
            slots = c.slot_pos
            nslots = -1
        nmax = (c.N if span < 0 else span) if nslots < 0 else nslots
        iacc = self.iacc
        for i in range(self.D):  # att_div_q10 clears it after each head; an earlier failed call may not have
            iacc[i] = 0
        if scores is None and self.fused and not (self.mixed or self.i4):
            fast = getattr(self.k, "att_step_i8", None)  # kinds with a fused head kernel bring their driver
            if fast is not None and fast(self, c, layer, qc, qs, out_q, out_exp, slots, nslots, nmax):
                return
        self._q8_heads(layer, qc, qs, out_q, out_exp, scores, slots, nslots, nmax)

    def attend_q8(self, layer, qc, qs, out_q, out_exp, span=-1):
        """The decode interface's integer attention (kvedge.cacheq8.KVCacheQ8.bind_query makes it the cache's
        attend_q8): q8_step over the cache's slots up to its span (or `span`: a chunk's token, the slots up to its
        own) with the scores the cache was given, for the buffers bind_query() checked; the layer is checked here.
        q8_step's body, not a call of it: one Python call a layer less on the integer pass's hot path."""
        c = self.cache
        if type(layer) is not int or layer < 0 or layer >= c.L:
            c._check_layer(layer)
        scores = c.scores
        nmax = c.span if span < 0 else span
        iacc = self.iacc
        for i in range(self.D):
            iacc[i] = 0
        if scores is None and self.fused and not (self.mixed or self.i4):
            fast = getattr(self.k, "att_step_i8", None)
            if fast is not None and fast(self, c, layer, qc, qs, out_q, out_exp, c.slot_pos, -1, nmax):
                return
        self._q8_heads(layer, qc, qs, out_q, out_exp, scores, c.slot_pos, -1, nmax)

    def _q8_heads(self, layer, qc, qs, out_q, out_exp, scores, slots, nslots, nmax):
        """A layer's query heads one at a time (the plain and native kinds, a policy's scores, converted rows)."""
        c = self.cache
        for h in range(self.heads):
            kvh = h // self.group
            self.q8_head(h, qs)
            self.q8_begin()
            self.q8_rows(c, layer, kvh, qc, slots, nslots, nmax)
            if self.lsum <= 0:
                raise ValueError("no cached tokens to attend to in layer %d" % layer)
            if scores is not None:
                self._report_int(scores, slots, nslots, nmax, qc, layer, kvh)
            self.q8_finish(h, out_q, out_exp)

    def _check_q8(self, qc, qs, out_q, out_exp):
        """The query and output buffers of the integer path. Allocates nothing once warm (see _sized)."""
        n = self.heads * self.D
        check.length("qc", qc, n)
        self._sized(0, "qc", qc, 1)  # bytes: ints by construction, so C-speed bounds suffice
        if min(qc) < -128 or max(qc) > 127:
            check.codes("qc", qc, n, -128, 127)
        check.length("qs", qs, self.heads)
        check.codes("qs", qs, self.heads, 0, check.SCALE_MAX)
        check.length("out_q", out_q, n)
        check.out("out_q", out_q, n, -SCORE_CAP - 1)
        self._sized(1, "out_q", out_q, 4)
        check.length("out_exp", out_exp, self.heads)
        check.out("out_exp", out_exp, self.heads, -128)

    # The integer running state of one query head is M, lsum, ws, evmax, first and iacc[0:D]. step_q8 runs one
    # head at a time; kvedge.tier.cache keeps one state per head (q8_save/q8_load, its own iacc per head) so that
    # each cold block read from flash is folded into every head before the next block is read.

    def q8_head(self, h, qs):
        """Point the tile at query head h: its offset and its f16 scale (qs[h]) as mantissa and exponent."""
        tile = self.tile
        qb = qs[h]  # inline: a returned tuple would allocate
        eq = (qb >> 10) & 31
        mq = qb & 1023
        if eq:
            mq += 1024
        else:
            eq = 1
        tile[T_B] = (mq * self.lam) >> 10
        tile[T_EQ] = eq
        tile[T_QOFF] = h * self.D

    def q8_begin(self):
        self.M = 0
        self.lsum = 0
        self.ws = 0
        self.evmax = 0
        self.first = True

    def q8_save(self, st, o):
        """The running state (without iacc) into st[o:o+5]."""
        st[o] = self.M
        st[o + 1] = self.lsum
        st[o + 2] = self.ws
        st[o + 3] = self.evmax
        st[o + 4] = 1 if self.first else 0

    def q8_load(self, st, o):
        self.M = st[o]
        self.lsum = st[o + 1]
        self.ws = st[o + 2]
        self.evmax = st[o + 3]
        self.first = st[o + 4] != 0

    def q8_rows(self, c, layer, kvh, qc, slots, nslots, nmax):
        """Fold the live rows of cache c (its slot_pos, or slots[0:nslots]) for the current query head
        (q8_head) into the running state. c may be another cache than the bound one (same head_dim)."""
        tile = self.tile
        geo = self.geo
        P = c.P
        i4 = c.lowbit
        tile[T_KIVI] = 1 if c.kivi else 0
        tile[T_QBITS] = c.bits or 4
        self.layer = layer
        for kind in range(3):
            if (kind == 0 and P == 0) or (kind == 1 and not c.kivi):
                continue
            if kind == 2 and not i4:  # the hot case: i8 rows, gathered by a kernel
                self.head_geo(c, layer, kvh)
                geo[G_P] = P
                geo[G_J] = 0
                geo[G_N] = nmax
                geo[G_LISTED] = 0 if nslots < 0 else 1
                rows = getattr(self.k, "att_rows_i8", None) if self.fused else None
                if rows is None or not rows(self, c.arena, qc, slots):
                    while self.k.att_fill_i8(slots, tile, geo):
                        self._tile_q8(c.arena, qc)
                continue
            self.cur = 0
            n = nmax
            if kind == 0 and nslots < 0 and P < n:  # prefix rows are slots 0..P-1: no need to scan the rest
                n = P
            while True:
                nt = self._fill_kind(c, slots, nslots, n, kind)
                if nt == 0:
                    break
                self._tile_q8(self._prep(c, kind, layer, kvh, nt), qc)

    def q8_finish(self, h, out_q, out_exp):
        """Head h's output: out_q[h*D:(h+1)*D] * 2**out_exp[h]; clears iacc. The caller checked lsum > 0."""
        self.tile[T_LSUM] = self.lsum
        self.k.att_div_q10(self.iacc, out_q, self.tile)  # tile[T_QOFF] == h * D
        out_exp[h] = self.evmax - 25

    def need_conversion(self):
        """Scratch for rows the i8 kernels cannot read directly (f32, i4): allocated once, if not yet."""
        if self.scratch is None:
            self.scratch = bytearray(2 * self.T * self.D + 4 * self.T)
            self.conv = zeros("i", 2 * self.D)
        if self.mixed:
            # f32 rows (prefix, KIVI residual) exist: the kinds that load their float kernels on first use
            # (viper, asm) load them now, at start-up, not at the first f32 row of some later step, when the
            # heap may be full or locked (the unix port's fuzz of a tier ran out there: 1,792 bytes)
            load = getattr(self.k, "load_floats", None)
            if load is not None:
                load()

    def _report_int(self, scores, slots, nslots, nmax, qc, layer, kvh):
        """Adds each token's probability in Q16: 2**((U - M)/2**16) / (lsum * 2**ws)."""
        tile = self.tile
        T = self.T
        c = self.cache
        geo = self.geo
        for kind in range(3):
            if kind < 2 and not self.mixed:
                continue
            if kind == 2 and not self.i4:
                geo[G_J] = 0
                src = c.arena
                nt = self.k.att_fill_i8(slots, tile, geo)
            else:
                self.cur = 0
                nt = self._fill_kind(c, slots, nslots, nmax, kind)
                src = self._prep(c, kind, layer, kvh, nt) if nt else c.arena
            while nt:
                self.k.att_scores_i8(src, qc, tile)
                for t in range(nt):
                    w = _exp2q14(self.M - tile[T_HDR + R_U * T + t], 0, self.exp2)
                    scores[tile[T_HDR + R_SLOT * T + t]] += _divq10((w << 6) >> self.ws, self.lsum)
                if kind == 2 and not self.i4:
                    nt = self.k.att_fill_i8(slots, tile, geo)
                else:
                    nt = self._fill_kind(c, slots, nslots, nmax, kind)
                    if nt:
                        src = self._prep(c, kind, layer, kvh, nt)


def _check_heads(heads, x, name):
    check.index("heads", heads)
    try:
        n = len(x)
    except TypeError:
        n = 0
    if heads < 1 or n == 0 or n % heads:
        raise ValueError("%s must hold heads (%r) x head_dim values, got %s" % (name, heads, check.show(x)))
    return n


def quantize_query(q, qc, qs, heads):
    """Float query (heads*head_dim) -> int8 codes in qc and f16 scale bits per head in qs (float path).
    Every value of q must be finite and within what an i8 row's f16 scale covers."""
    n = _check_heads(heads, q, "q")
    check.floats("q", q, n, check.I8_MAX)
    check.length("qc", qc, n)
    check.out("qc", qc, n, -127)
    check.length("qs", qs, heads)
    check.out("qs", qs, heads, check.SCALE_MAX)
    D = n // heads
    for h in range(heads):
        amax = 0.0
        for i in range(h * D, (h + 1) * D):
            a = abs(q[i])
            if a > amax:
                amax = a
        sb = quant.i8_scale_bits(amax)
        s = quant.f16_value(sb)
        inv = 1.0 / s if s else 0.0
        for i in range(h * D, (h + 1) * D):
            qc[i] = quant.i8_code(q[i], inv)
        qs[h] = sb


def dequantize_output(out_q, out_exp, out, heads):
    """out = out_q * 2**out_exp per head, the floats the integer path stands for (converted once).
    out_q: ints within +-2**30, out_exp: ints within -1024..64 (what step_q8 gives is far inside both)."""
    n = _check_heads(heads, out_q, "out_q")
    check.length("out_exp", out_exp, heads)
    check.codes("out_q", out_q, n, -SCORE_CAP - 1, SCORE_CAP)
    check.codes("out_exp", out_exp, heads, -1024, 64)
    check.length("out", out, n)
    check.out("out", out, n, 0.5)
    D = n // heads
    for h in range(heads):
        e = out_exp[h]
        for i in range(h * D, (h + 1) * D):
            out[i] = math.ldexp(out_q[i], e)
