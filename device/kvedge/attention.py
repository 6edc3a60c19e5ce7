# Decode-step attention over the cache, tiled, with an online softmax (no N x N matrix, no N-sized scratch).
#
# For each query head h (reading KV head h // (heads // kv_heads), trap 1), the live cached tokens are taken
# T at a time. For a tile: scores s_j = q.k_j / sqrt(D); if the tile raises the running maximum m, the running
# sum l and the partial output acc are rescaled by exp(m_old - m_new); then l += sum exp(s_j - m) and
# acc += sum exp(s_j - m) v_j. At the end out = acc / l. Scratch depends on T and D only.
#
# Two arithmetic paths:
#   step()     floats, for any cache dtype (rows are dequantized one at a time).
#   step_q8()  integers end to end for i8 caches and an int8 query: scores as log2 in Q16, weights from a
#              2**x table in Q14, every intermediate within +-2**30, no float and no allocation once warm.
#              Output: out_q[h*D + i] * 2**out_exp[h] is the attention output.
#
# Both can add each token's attention probability (Q16, summed over query heads) into a caller's per-slot
# array, which is what heavy-hitter eviction accumulates.
import math

from . import kernels, quant
from .compat import zeros
from .budget import I8
from .kernels_plain import (T_N, T_D, T_QOFF, T_T, T_B, T_EQ, T_M, T_WS, T_EVMAX, T_TMAX, T_EVT, T_HDR, SAT)

LOG2E = 1.4426950408889634
MAX_TILE = 64  # keeps a tile's weighted V sum within 2**28
_LIM = 1 << 28


def _float_array(n):
    """Accumulators in double where the runtime has it (ports built with single floats store 'd' too)."""
    try:
        return zeros("d", n)
    except (ValueError, KeyError):
        return zeros("f", n)


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


class Attention:
    """Attention over one KVCache, with scratch for tiles of `tile` tokens allocated once."""

    def __init__(self, cache, tile=32):
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
        self.s = zeros("f", tile)
        self.tslot = zeros("i", tile)
        # integer path scratch
        self.int_ok = cfg.dtype == I8 and cfg.prefix == 0 and D <= 256
        if self.int_ok:
            self.tile = zeros("i", T_HDR + 6 * tile)
            self.tile[T_D] = D
            self.tile[T_T] = tile
            self.iacc = zeros("i", D)
            self.ipart = zeros("i", D)
            self.exp2 = _exp2_table()
            self.lam = int(LOG2E / math.sqrt(D) * 16384 + 0.5)

    def kv_head(self, h):
        """The KV head query head h reads (GQA / MQA mapping)."""
        return h // self.group

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
        c = self.cache
        self._check(layer, q, out, self.heads * self.D)
        if slots is None:
            slots, nslots = c.slot_pos, -1
        n = c.N if nslots < 0 else nslots
        D = self.D
        row, acc, s, ts = self.row, self.acc, self.s, self.tslot
        for h in range(self.heads):
            kvh = h // self.group
            qo = h * D
            m = -1e30
            l = 0.0
            for i in range(D):
                acc[i] = 0.0
            self.cur = 0
            while True:
                nt = self._fill(slots, nslots, n)
                if nt == 0:
                    break
                tmax = m
                for t in range(nt):
                    c.read_slot(layer, kvh, ts[t], 0, row)
                    d = 0.0
                    for i in range(D):
                        d += q[qo + i] * row[i]
                    d *= self.scale
                    s[t] = d
                    if d > tmax:
                        tmax = d
                if tmax > m:  # the maximum grew: rescale what was summed so far
                    corr = math.exp(m - tmax)
                    l *= corr
                    for i in range(D):
                        acc[i] *= corr
                    m = tmax
                for t in range(nt):
                    w = math.exp(s[t] - m)
                    l += w
                    c.read_slot(layer, kvh, ts[t], 1, row)
                    for i in range(D):
                        acc[i] += w * row[i]
            if l == 0.0:
                raise ValueError("no cached tokens to attend to in layer %d" % layer)
            inv = 1.0 / l
            for i in range(D):
                out[qo + i] = acc[i] * inv
            if scores is not None:
                self._report_float(layer, kvh, q, qo, m, inv, scores, slots, nslots)

    def _report_float(self, layer, kvh, q, qo, m, inv, scores, slots, nslots):
        c = self.cache
        row = self.row
        n = c.N if nslots < 0 else nslots
        for j in range(n):
            slot = j if nslots < 0 else slots[j]
            if nslots < 0 and slots[j] < 0:
                continue
            c.read_slot(layer, kvh, slot, 0, row)
            d = 0.0
            for i in range(self.D):
                d += q[qo + i] * row[i]
            scores[slot] += int(math.exp(d * self.scale - m) * inv * 65536 + 0.5)

    def _check(self, layer, q, out, n):
        c = self.cache
        c._check_layer(layer)
        for name, x in (("q", q), ("out", out)):
            try:
                m = len(x)
            except TypeError:
                raise TypeError("%s must be a buffer of %d values, got %s" % (name, n, type(x).__name__))
            if m != n:
                raise ValueError("%s has %d values, expected heads*head_dim = %d" % (name, m, n))

    # ---- integer path ----

    def step_q8(self, layer, qc, qs, out_q, out_exp, scores=None, slots=None, nslots=-1):
        """Integer attention for an i8 cache: qc int8 query codes (heads*head_dim, array('b')), qs f16 scale
        bits per query head; writes out_q (array('i'), heads*head_dim) and out_exp (per head) so that the
        output is out_q * 2**out_exp. Allocates nothing once warm; all ints stay within +-2**30."""
        if not self.int_ok:
            raise ValueError("the integer path needs an i8 cache without f32 prefix and head_dim <= 256")
        c = self.cache
        c._check_layer(layer)
        n = self.heads * self.D
        if len(qc) != n or len(out_q) != n:
            raise ValueError("qc and out_q must hold heads*head_dim = %d values" % n)
        if len(qs) != self.heads or len(out_exp) != self.heads:
            raise ValueError("qs and out_exp must hold heads = %d values" % self.heads)
        if slots is None:
            slots = c.slot_pos
            nslots = -1
        nmax = c.N if nslots < 0 else nslots
        k = self.k
        tile = self.tile
        ts = self.tslot
        iacc = self.iacc
        ipart = self.ipart
        exp2 = self.exp2
        arena = c.arena
        D, T = self.D, self.T
        H, B, prow = c.H, c.B, c.prow
        for h in range(self.heads):
            kvh = h // self.group
            qb = qs[h]  # f16 bits: mantissa mq, exponent eq (inline: a returned tuple would allocate)
            eq = (qb >> 10) & 31
            mq = qb & 1023
            if eq:
                mq += 1024
            else:
                eq = 1
            tile[T_B] = (mq * self.lam) >> 10
            tile[T_EQ] = eq
            tile[T_QOFF] = h * D
            kbase = c.DATA + ((layer * 2) * H + kvh) * B * prow
            vbase = c.DATA + ((layer * 2 + 1) * H + kvh) * B * prow
            kmb = c.META + ((layer * 2) * H + kvh) * B * 2
            vmb = c.META + ((layer * 2 + 1) * H + kvh) * B * 2
            for i in range(D):
                iacc[i] = 0
            M = 0
            lsum = 0
            ws = 0
            evmax = 0
            first = True
            self.cur = 0
            while True:
                nt = self._fill(slots, nslots, nmax)
                if nt == 0:
                    break
                for t in range(nt):
                    b = ts[t]
                    tile[T_HDR + t] = kbase + b * prow
                    tile[T_HDR + T + t] = kmb + b * 2
                    tile[T_HDR + 3 * T + t] = vbase + b * prow
                    tile[T_HDR + 4 * T + t] = vmb + b * 2
                tile[T_N] = nt
                k.att_scores_i8(arena, qc, tile)
                tmax = tile[T_TMAX]
                evt = tile[T_EVT]
                if evt > evmax:  # a larger V scale: express the sum so far in its units
                    sh = evt - evmax
                    for i in range(D):
                        iacc[i] >>= sh
                    evmax = evt
                if first:
                    M = tmax
                    first = False
                elif tmax > M:  # the maximum grew: rescale by 2**(-(tmax - M))
                    corr = _exp2q14(tmax - M, 0, exp2)
                    for i in range(D):
                        iacc[i] = _mulq14(iacc[i], corr)
                    lsum = _mulq14(lsum, corr)
                    M = tmax
                tile[T_M] = M
                tile[T_WS] = ws
                tile[T_EVMAX] = evmax
                lsum += k.att_weights_i8(arena, tile, exp2)
                k.att_wsum_i8(arena, tile, ipart)
                big = lsum
                for i in range(D):
                    x = iacc[i] + ipart[i]
                    iacc[i] = x
                    if x < 0:
                        x = -x
                    if x > big:
                        big = x
                while big > _LIM:  # overflow guard: halve sums and future weights together
                    for i in range(D):
                        iacc[i] >>= 1
                    lsum >>= 1
                    big >>= 1
                    ws += 1
            if lsum <= 0:
                raise ValueError("no cached tokens to attend to in layer %d" % layer)
            qo = h * D
            for i in range(D):
                out_q[qo + i] = _divq10(iacc[i], lsum)
            out_exp[h] = evmax - 25
            if scores is not None:
                self._report_int(scores, slots, nslots, nmax, qc, kbase, kmb, vbase, vmb, M, ws, lsum)

    def _report_int(self, scores, slots, nslots, nmax, qc, kbase, kmb, vbase, vmb, M, ws, lsum):
        """Adds each token's probability in Q16: 2**((U - M)/2**16) / (lsum * 2**ws)."""
        tile, ts, T, prow = self.tile, self.tslot, self.T, self.cache.prow
        self.cur = 0
        while True:
            nt = self._fill(slots, nslots, nmax)
            if nt == 0:
                break
            for t in range(nt):
                b = ts[t]
                tile[T_HDR + t] = kbase + b * prow
                tile[T_HDR + T + t] = kmb + b * 2
                tile[T_HDR + 3 * T + t] = vbase + b * prow
                tile[T_HDR + 4 * T + t] = vmb + b * 2
            tile[T_N] = nt
            self.k.att_scores_i8(self.cache.arena, qc, tile)
            for t in range(nt):
                w = _exp2q14(M - tile[T_HDR + 2 * T + t], 0, self.exp2)
                scores[ts[t]] += _divq10((w << 6) >> ws, lsum)


def quantize_query(q, qc, qs, heads):
    """Float query (heads*head_dim) -> int8 codes in qc and f16 scale bits per head in qs (float path)."""
    D = len(q) // heads
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
    """out = out_q * 2**out_exp per head, the floats the integer path stands for (converted once)."""
    D = len(out_q) // heads
    for h in range(heads):
        e = out_exp[h]
        for i in range(h * D, (h + 1) * D):
            out[i] = math.ldexp(out_q[i], e)
