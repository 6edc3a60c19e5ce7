# The integer forward pass's q_* kernels (kvedge.qkernels_*): each kernel against arithmetic written out
# independently here (big ints, floats, kvedge.quant's float int8 rows), and every kernel kind bit-identical.
import math
import sys
from array import array

from _support import Rng
from kvedge import kernels, quant
from kvedge.kernels.words import VMAX, P_HDR, P_SX
from kvedge.model import pass_int


def _kinds():
    return kernels.available()


def _same_every_kind(name, make, check=None, scratch=None):
    """Run kernel `name` on fresh copies of make()'s arguments with every kernel kind; the arrays it writes
    and its result must be identical (scratch: (argument, index) of a word each kind may use its own way, not
    compared). Returns the plain kind's (result, args)."""
    first = None
    for kind in _kinds():
        kernels.select(kind)
        k, qk = pass_int.qkernels()
        assert qk == kind
        args = make()
        r = _kernel(k, qk, name)(*args)
        if scratch is not None:
            args[scratch[0]][scratch[1]] = 0
        # a bytearray (an arena) kept as bytes: as a list it took 8 bytes an entry on the 64-bit unix port, whose
        # heap is the rp2040's (MemoryError allocating 8,192 bytes)
        got = (r, [a if isinstance(a, int) else (bytes(a) if isinstance(a, bytearray) else list(a)) for a in args])
        if first is None:
            first = got
            if check:
                check(r, args)
        else:
            assert got == first, "%s differs: %s" % (name, kind)
    kernels.select()
    return first


def _kernel(k, qk, name):
    """Kernel `name` of the q_* module k of kind qk. Where kernels.q8_dsp_thumb's q_quant and q_mv replaced asm's own
    (its q_quant packs the codes for its q_mv: tested composed in test_qkernels_dsp), the plain ones stand in:
    asm's Thumb pair is tested on the cores without DSP instructions."""
    if qk == "asm" and name in ("q_quant", "q_mv") and "kvedge.kernels.q8_dsp_thumb" in sys.modules:
        from kvedge.kernels import q8_plain
        return getattr(q8_plain, name)
    return getattr(k, name)


class _Codes:
    """What pass_int.quantize reads of a q_* module: its q_quant writing plain codes (_kernel)."""

    def __init__(self, k, qk):
        self.q_quant = _kernel(k, qk, "q_quant")
        self.q_scale = k.q_scale


def _floor_shift(v, k):
    """v * 2**-k rounded down (k >= 0), or v * 2**-k saturated to +-VMAX (k < 0): the q_* shift rule."""
    if k >= 0:
        return v // (1 << min(k, 31))
    y = v * (1 << -k)
    return VMAX if y > VMAX else (-VMAX if y < -VMAX else y)


def test_q_mv_is_the_exact_dot_product_times_two_floor_scalings():
    _q_mv_cases(21, ((5, 37, 7, 0, 0, 3, 1), (4, 64, 15, 1, -9, 3, 1), (3, 9, 12, 0, 6, 3, 1),
                     (6, 16, 15, 1, -40, 3, 1)))


def test_q_mv_odd_lengths_and_alignments():
    """Rows of any length from any byte offset (the Xtensa kernels' groups of eight and their tails, the row
    starts at every alignment), many rows, every shift case (right, beyond 31, left with and
    without saturation, beyond -30), the widest codes the pass gives (pass_int.code_max)."""
    cases = []
    for i, cols in enumerate((1, 2, 7, 8, 9, 15, 17, 23, 63, 65)):
        cases.append((3 + (i & 3), cols, 15 if cols < 16 else 14, i & 1, (-45, -20, -3, 0, 9, 25)[i % 6], i & 3,
                      (0, 1, 5)[i % 3]))
    cases.append((66, 5, 12, 1, -2, 1, 2))
    cases.append((2, 172, 14, 0, 40, 2, 0))
    _q_mv_cases(25, cases)


def _q_mv_cases(seed, cases):
    rng = Rng(seed)
    for rows, cols, xbits, add, os, wo, ro in cases:
        while (1 << xbits) - 1 > pass_int.code_max(cols):
            xbits -= 1
        codes = [rng.randint(-128, 127) for _ in range(rows * cols)]
        x = [rng.randint(-(1 << xbits) + 1, (1 << xbits) - 1) for _ in range(cols)]
        words = [(rng.randint(16384, 32767) << 8) | rng.randint(0, 33 if r else 0) for r in range(rows)]
        xm = rng.randint(8000, 32767)
        base = [rng.randint(-VMAX, VMAX) for _ in range(rows)]

        def make():
            w = bytearray(wo + rows * cols + 3)
            for i in range(rows * cols):
                w[wo + i] = codes[i] & 255  # int8, as the file holds it
            p = array("i", [0] * (P_HDR + ro + rows))
            p[0], p[1], p[2], p[3], p[4], p[5], p[6] = wo, rows, cols, xm, os, add, ro
            for r in range(rows):
                p[P_HDR + ro + r] = words[r]
            return [w, array("i", x), array("i", [7] * ro + base), p]

        def check(r, a):
            out = a[2]
            big = 0
            for j in range(rows):
                acc = sum(codes[j * cols + c] * x[c] for c in range(cols))
                t = (acc * (words[j] >> 8)) // 32768
                t = (t * xm) // 32768
                y = _floor_shift(t, (words[j] & 255) + os)
                if add:
                    y += base[j]
                y = max(-VMAX, min(VMAX, y))
                assert out[ro + j] == y, (j, out[ro + j], y)
                big = max(big, abs(y))
            assert list(out[:ro]) == [7] * ro and r == big
        _same_every_kind("q_mv", make, check, scratch=(3, P_SX))


def test_q_scale_is_the_reciprocal_and_the_codes_scale_in_integers():
    # written out with big ints: s = bitlen(A) - 15, R = ceil(C * 2**K / (A >> s)), K = 28 - (bitlen(C) - 1),
    # xm = round(2**28 / R) (at most 32767), xe = ez + s - j; A = 0 gives the zero scale
    rng = Rng(29)
    cases = [(0, -3, 127), (1, 0, 127), (32767, 5, 32767), (32768, -20, 65535 >> 1), ((1 << 30) - 1, -16, 7)]
    for _ in range(40):
        cases.append((rng.randint(1, (1 << 30) - 1), rng.randint(-60, 40), rng.randint(1, 32767)))
    for A, ez, C in cases:
        def check(r, a, A=A, ez=ez, C=C):
            p = list(a[3][:6])
            if A == 0:
                assert p == [0, 0, 1, 0, 0, 0]
                return
            s = A.bit_length() - 15 if hasattr(A, "bit_length") else p[0]
            j = C.bit_length() - 1 if hasattr(C, "bit_length") else 28 - p[2]
            an = A >> s if s >= 0 else A << -s
            assert (1 << 14) <= an < (1 << 15) and (1 << j) <= C < (1 << (j + 1))  # the two bit lengths
            R = -(-(C << (28 - j)) // an)
            assert p[:4] == [s, R, 28 - j, C], (A, C, p)
            assert p[4] == min(32767, ((1 << 29) // R + 1) >> 1) and p[5] == ez + s - j
            assert abs(an * R - (C << (28 - j))) < an  # R is the reciprocal, rounded up
        _same_every_kind("q_scale", lambda A=A, ez=ez, C=C: [A, ez, C, array("i", [9] * 8)], check)


def test_q_quant_codes_are_rounded_fractions_of_the_maximum():
    rng = Rng(22)
    for n, amax, C in ((40, 12345, 127), (33, 700, 32767), (20, 3 << 27, 24483), (9, 1, 127)):
        z = [rng.randint(-amax, amax) for _ in range(n)]
        z[rng.randint(0, n - 1)] = -amax
        A = max(abs(v) for v in z)
        ip = array("i", [0] * 8)
        codes = array("i", [0] * n)
        for kind in _kinds():
            kernels.select(kind)
            k, qk = pass_int.qkernels()
            pass_int.quantize(_Codes(k, qk), array("i", z), codes, n, A, -20, C, ip)
            xm, xe = ip[4], ip[5]
            got = (list(codes), xm, xe)
            if kind == _kinds()[0]:
                ref = got
                for i in range(n):
                    assert abs(codes[i] - C * z[i] / A) <= 0.51 + C * 2.0 ** -13, (i, codes[i], C * z[i] / A)
                    if z[i]:  # the scale gives back z within half a code step
                        assert abs(codes[i] * xm * 2.0 ** xe - z[i] * 2.0 ** -20) <= \
                            (0.5 + C * 2.0 ** -12) * xm * 2.0 ** xe, i
                assert max(abs(c) for c in codes) == C  # the largest value takes the largest code
            assert got == ref, kind
    kernels.select()


def test_q_heads_gives_the_caches_own_int8_rows():
    rng = Rng(23)
    hd = 8
    for e, mag in ((-20, 1 << 20), (-20, 3), (-30, 1 << 24), (-40, 1 << 10), (-2, 9000)):
        vals = [rng.randint(-mag, mag) for _ in range(3 * hd)]
        vals[hd:2 * hd] = [0] * hd  # an all-zero head

        def make():
            p = array("i", [3, hd, e, 0])
            return [array("i", vals), array("b", [0] * (3 * hd)), array("H", [0] * 3), p]

        def check(r, a):
            codes, sc = a[1], a[2]
            for h in range(3):
                seg = [v * 2.0 ** e for v in vals[h * hd:(h + 1) * hd]]
                amax = max(abs(v) for v in seg)
                want = quant.i8_scale_bits(amax)  # the float cache's scale: smallest half >= amax / 127
                assert want <= sc[h] <= want + 1, (e, h, sc[h], want)
                s = quant.f16_value(sc[h])
                for i in range(hd):
                    ref = quant.i8_code(seg[i], 1.0 / s) if s else 0
                    assert abs(codes[h * hd + i] - ref) <= 1, (e, h, i, codes[h * hd + i], ref)
        _same_every_kind("q_heads", make, check)


def test_q_rope_and_angles_rotate_like_floats():
    rng = Rng(24)
    hd = 8
    fq = pass_int.rope_turns(hd)
    freqs = array("f", [1.0 / math.pow(10000.0, 2 * i / hd) for i in range(hd // 2)])  # f32, as llama2.c
    tab = pass_int.sin_table()
    for i in range(hd // 2):  # the table: the frequency in turns per position, to 2**-36
        q = (fq[1 + 2 * i] << 8) | fq[2 + 2 * i]
        assert abs(q / 2.0 ** 36 * 2 * math.pi - freqs[i]) <= freqs[i] * 1e-6 + 2.0 ** -34, i
    for pos in (0, 1, 7, 300, 4095, 70000, 3000000, (1 << 30) - 1):
        got = _same_every_kind("q_angles", lambda: [fq, tab, array("i", [0] * hd), pos])[1][2]
        for i in range(hd // 2):
            # the exact phase of pos steps (big ints), then sin and cos of an angle below 2 pi
            ph = ((pos * ((fq[1 + 2 * i] << 8) | fq[2 + 2 * i])) >> 8) & 0xFFFFFFF
            a = ph / 2.0 ** 28 * 2 * math.pi
            assert abs(got[2 * i] / 16384 - math.cos(a)) < 1e-4, (pos, i)
            assert abs(got[2 * i + 1] / 16384 - math.sin(a)) < 1e-4, (pos, i)
        v = [rng.randint(-VMAX, VMAX) for _ in range(2 * hd)]
        cs = array("i", got)
        out = _same_every_kind("q_rope", lambda: [array("i", v), cs, 2 * hd, hd])[1][0]
        for j in range(0, 2 * hd, 2):
            c, s = cs[j % hd], cs[j % hd + 1]
            x = (v[j] * c - v[j + 1] * s) // 16384  # exact big ints (float32 boards would round these)
            y = (v[j] * s + v[j + 1] * c) // 16384
            assert abs(out[j] - max(-VMAX, min(VMAX, x))) <= 2 and abs(out[j + 1] - max(-VMAX, min(VMAX, y))) <= 2


def _bits(a):
    n = 0
    while a >> n:
        n += 1
    return n


def test_q_normgain_then_q_rnorm_is_rmsnorm():
    # q_normgain: its own shift from max |x|, the gained values and the sum of squares, written out; q_rnorm: the
    # codes' scale times 1 / sqrt(sum x^2 + n eps) against floats, for sums that need a left and a right shift
    rng = Rng(31)
    n = 24
    ln = _bits(n)
    g = [rng.randint(-32767, 32767) for _ in range(n)]
    for mag in (3, 1 << 14, 1 << 20, (1 << 29) - 1):
        x = [rng.randint(-mag, mag) for _ in range(n)]
        A = max(abs(v) for v in x)
        s = max(0, _bits(A) - 15)

        def check(r, a, x=x, s=s):
            z = a[2]
            ss = 0
            for i in range(n):
                v = abs(x[i]) >> s
                ss += (v * v) >> ln
                assert z[i] == (1 if x[i] >= 0 else -1) * ((v * g[i]) >> 15), i
            assert list(a[3][:4]) == [n, s, ln, ss] and r == max(abs(v) for v in z)
        _same_every_kind("q_normgain", lambda x=x, A=A: [array("i", x), array("i", g), array("i", [0] * n),
                                                       array("i", [n, A, ln, 0])], check)
    for ss, U, em, ee, xm, xe in ((5000, -20, 16000, -30, 20000, -7), ((1 << 29) + 77, 3, 30000, -40, 16385, 12),
                                  (1 << 20, -9, 20000, -5, 32767, -30), (0, 0, 0, 0, 20000, 0), (9, 1, 1, 0, 0, 4)):
        def check_r(r, a, ss=ss, U=U, em=em, ee=ee, xm=xm, xe=xe):
            got = a[3][4] * 2.0 ** a[3][5]
            total = ss * 2.0 ** U + em * 2.0 ** ee
            if total == 0 or xm == 0:
                assert a[3][4] == 0
                return
            want = xm * 2.0 ** xe / math.sqrt(total)
            # 15-bit steps (isqrt, the reciprocal, the product's renormalization) and the sum's own last bit
            assert abs(got - want) <= (2e-4 + 1.0 / ss) * want and (1 << 14) <= a[3][4] < (1 << 15), (got, want)
        _same_every_kind("q_rnorm", lambda ss=ss, U=U, em=em, ee=ee, xm=xm, xe=xe: [
            ss, U, array("i", [em, ee]), array("i", [0, 0, 0, 0, xm, xe, 0, 0])], check_r)


def test_q_swiglu_is_silu_times_gate():
    rng = Rng(25)
    n = 30
    tab = pass_int.sigmoid_table()
    for e in (-20, -12, -3):
        h = [rng.randint(-(20 << -e), 20 << -e) for _ in range(2 * n)]
        h[0] = 14 << (-e)  # beyond the table (sigmoid ~ 1) and far below it
        h[1] = -(14 << (-e))
        big = max(abs(v) for v in h)
        s = max(0, pass_int.bitlen(big) - 15)

        def make():  # the kernel takes max |h| and finds its shift s itself (back into p[0])
            return [array("i", h), tab, n, array("i", [big, e + 12, 0, 0])]

        def check(r, a):
            out = a[0]
            assert a[3][0] == s
            for i in range(n):
                x = (h[i] >> s) * 2.0 ** (e + s)
                g = (h[n + i] >> s) * 2.0 ** (e + s)
                want = x / (1.0 + math.exp(-x)) * g
                got = out[i] * 2.0 ** (2 * (e + s))
                assert abs(got - want) <= 1e-4 * abs(want) + 2e-4 * abs(g) + 2.0 ** (e + s) * (abs(g) + 1), \
                    (e, i, got, want)
            assert r == max(abs(v) for v in out[:n])
        _same_every_kind("q_swiglu", make, check)


def test_q_align_embed_argmax():
    rng = Rng(26)
    hd = 4
    oq = [rng.randint(-(1 << 28), 1 << 28) for _ in range(3 * hd)]
    oe = [-20, -13, -44]

    def check_align(r, a):
        q = a[0]
        for h in range(3):
            k = min(31, -13 - oe[h])
            for i in range(hd):
                v = oq[h * hd + i]
                want = min(VMAX, abs(v) >> k) * (1 if v >= 0 else -1)
                assert q[h * hd + i] == want
        assert a[3][2] == -13 and r == max(abs(v) for v in q)
    _same_every_kind("q_align", lambda: [array("i", oq), array("i", oe), 3 * hd, array("i", [3, hd, 0, 0])],
                     check_align)
    row = [rng.randint(-128, 127) for _ in range(20)]
    for k in (3, 0, -5, -30, 40):
        def make():
            w = bytearray(25)
            for i in range(20):
                w[5 + i] = row[i] & 255
            return [w, array("i", [0] * 20), 20, array("i", [5, 30000, k])]

        def check_embed(r, a):
            for i in range(20):
                assert a[1][i] == max(-VMAX, min(VMAX, _floor_shift(row[i] * 30000, k))), (k, i)
        _same_every_kind("q_embed", make, check_embed)
    v = [rng.randint(-1000, 1000) for _ in range(50)]
    v[17] = v[31] = 5000
    assert _same_every_kind("q_argmax", lambda: [array("i", v), 50])[0] == 17
    lo, hi = -(1 << 31), (1 << 31) - 1
    # ties (the first wins), int32's ends, the largest last or first, one value, fewer than the array holds
    for vals, n, want in (([3, 3, 3], 3, 0), ([lo, lo, lo + 1], 3, 2), ([hi, lo, hi], 3, 0), ([lo, -1, 0, hi], 4, 3),
                          ([-5, -7, -5, -6], 4, 0), ([7], 1, 0), ([1, 2, 9, 4], 2, 1), ([0, -1, 1 << 30, 5], 4, 2)):
        assert _same_every_kind("q_argmax", lambda: [array("i", vals), n])[0] == want, (vals, n)


def test_q_store_writes_rows_as_the_caches_write_q8():
    from kvedge.cache import KVCache
    from kvedge.config import CacheConfig
    rng = Rng(27)
    cfg = CacheConfig(2, 4, 2, 6, 5, "i8", align=16)  # padded rows: the stride is not head_dim
    q, kv = 4 * 6, 2 * 6
    codes = [rng.randint(-127, 127) for _ in range(q + 2 * kv)]
    scales = [rng.randint(0, 0x7BFF) for _ in range(4 + 4)]
    ref = KVCache(cfg)
    ref.start_token()
    ref.start_token()  # slot 1
    ref.write_q8(1, array("b", codes[q:q + kv]), array("H", scales[4:6]), array("b", codes[q + kv:]),
                 array("H", scales[6:8]))

    def make():
        c = KVCache(cfg)
        b = 1
        p = array("i", [2, 6, 0, 0, 0, 0, c.B * c.prow, 2 * c.B, q, q + kv, 4, 6])
        p[2] = c.DATA + ((1 * 2) * 2) * c.B * c.prow + b * c.prow
        p[3] = p[2] + 2 * c.B * c.prow
        p[4] = c.META + ((1 * 2) * 2) * c.B * 2 + 2 * b
        p[5] = p[4] + 2 * 2 * c.B
        return [c.arena, array("b", codes), array("H", scales), p]
    got = _same_every_kind("q_store", make)[1][0]
    assert bytes(got) == bytes(ref.arena)
