# Issue 46's reference for the i4/i2 KIVI caches: plain softmax attention over the rows KVCache.read returns for
# the live positions (so quantization error is not the difference: step and read must see the same numbers),
# the arithmetic bound of the float step against it, and the cosine. Shared by test_attention_kivi_rows.py and
# the KIVI fuzzer family (test_fuzz_kivi.py).
import math

from kvedge.compat import zeros

EPS = 2.0 ** -24  # float32's unit roundoff: boards compute in float32, and step() keeps its scores in float32


class Ref:
    """Buffers allocated once (board heaps): the reference output, its tolerance, scores and two rows."""

    def __init__(self, c, heads):
        D = c.D
        self.c = c
        self.heads = heads
        self.D = D
        self.out = _dbl(heads * D)
        self.tol = zeros("f", heads * D)
        self.s = _dbl(c.N)
        self.k = _dbl(D)
        self.v = _dbl(D)
        self.lo = _dbl(D)
        self.hi = _dbl(D)
        self.live = zeros("i", c.N)
        self.vmax = _dbl(heads)  # per query head: the largest |v| of its rows

    def run(self, layer, q, rel=1e-4):
        """out = softmax(q_h . k / sqrt(D)) v over read()'s rows of the live positions, for every query head; tol
        the float step's allowance per component: rel * |ref| + 1e-7 * max|v| (issue 46's measure), plus its
        float32 arithmetic, bounded (not fitted): each score is rounded to float32 after a D-term dot product
        (on a float32 board every term rounds: <= (D + 4) * EPS * sum|q_i k_i| / sqrt(D) =: d), so the weights
        move by a factor within exp(+-2d) and the output by (exp(2d) - 1) times its values' spread; the sums
        of n weighted rows and the division add <= (2n + 8) * EPS * max|v|; doubled: this reference computes in
        the same float type on a board. Returns the number of live positions."""
        c, D = self.c, self.D
        n = c.positions(self.live)
        group = self.heads // c.H
        rt = math.sqrt(D)
        k, v, s, out, tol = self.k, self.v, self.s, self.out, self.tol
        for h in range(self.heads):
            kvh = h // group
            qo = h * D
            m = -1e30
            d = 0.0
            for j in range(n):
                c.read(layer, kvh, self.live[j], 0, k)
                x = 0.0
                a = 0.0
                for i in range(D):
                    x += q[qo + i] * k[i]
                    a += abs(q[qo + i] * k[i])
                x /= rt
                s[j] = x
                if x > m:
                    m = x
                if a > d:
                    d = a
            d = (D + 4) * EPS * d / rt
            tot = 0.0
            for j in range(n):
                s[j] = math.exp(s[j] - m)
                tot += s[j]
            lo, hi = self.lo, self.hi
            for i in range(D):
                out[qo + i] = 0.0
                lo[i] = 1e30
                hi[i] = -1e30
            for j in range(n):
                c.read(layer, kvh, self.live[j], 1, v)
                w = s[j]
                for i in range(D):
                    out[qo + i] += w * v[i]
                    if v[i] < lo[i]:
                        lo[i] = v[i]
                    if v[i] > hi[i]:
                        hi[i] = v[i]
            vmax = 0.0
            for i in range(D):
                out[qo + i] /= tot
                tol[qo + i] = hi[i] - lo[i]  # the spread, for now
                if -lo[i] > vmax:
                    vmax = -lo[i]
                if hi[i] > vmax:
                    vmax = hi[i]
            self.vmax[h] = vmax
            g = math.exp(2 * d) - 1
            for i in range(D):
                tol[qo + i] = (rel * abs(out[qo + i]) + 1e-7 * vmax
                               + 2 * (g * tol[qo + i] + (2 * n + 8) * EPS * vmax))
        return n


def worst(out, ref):
    """max over components of |out - ref| / tol (> 1: a mismatch), and its index."""
    w, at = 0.0, -1
    for i in range(len(ref.tol)):
        e = abs(out[i] - ref.out[i]) / ref.tol[i] if ref.tol[i] > 0 else (0.0 if out[i] == ref.out[i] else 1e9)
        if e > w:
            w, at = e, i
    return w, at


def cosine(a, b, lo, hi):
    dot = na = nb = 0.0
    for i in range(lo, hi):
        dot += a[i] * b[i]
        na += a[i] * a[i]
        nb += b[i] * b[i]
    if na == 0 or nb == 0:
        return 1.0 if na == nb else 0.0
    return dot / math.sqrt(na * nb)


def _dbl(n):
    try:
        return zeros("d", n)
    except (ValueError, KeyError):
        return zeros("f", n)
