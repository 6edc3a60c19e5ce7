# The integer pass's small steps in Thumb-2 (kvedge.kernels.q8_steps_v7m_thumb: raw encodings) against the plain
# kernels (kvedge.kernels.q8_plain, the reference arithmetic) on random and edge inputs, and the probe that gives
# them to the asm kind exactly on the cores that run Thumb-2 (the emulated Cortex-M3 and M7; the M0 keeps viper's).
import sys
from array import array
from kvedge import kernels
from kvedge.kernels import cpuid
from kvedge.model import pass_int
from _support import skip
from _fuzzkit import Lcg

NAMES = ("q_swiglu", "q_heads", "q_normgain", "q_rope", "q_align")


def _steps():
    if not cpuid.has_thumb2():
        skip("no Thumb-2 on this core (kvedge.kernels.cpuid.has_thumb2())")
    try:
        from kvedge.kernels import q8_steps_v7m_thumb
    except ImportError:
        skip("kvedge.kernels.q8_steps_v7m_thumb not deployed here (an armv6m package)")
    return q8_steps_v7m_thumb


def test_the_asm_kind_takes_the_thumb2_steps_exactly_where_the_core_runs_thumb2():
    if not kernels.thumb():
        skip("no inline assembler here")
    try:
        from kvedge.kernels import q8_asm_thumb
    except ImportError:
        skip("no asm kernels deployed here")
    mod = sys.modules.get("kvedge.kernels.q8_steps_v7m_thumb")
    if mod is not None:
        assert cpuid.has_thumb2()
        for n in NAMES:
            assert getattr(q8_asm_thumb, n) is getattr(mod, n), n
        if not cpuid.has_dsp():  # the DSP module's q_quant (its packed codes) where it loads
            assert q8_asm_thumb.q_quant is mod.q_quant
    elif not cpuid.has_thumb2():
        from kvedge.kernels import q8_viper
        for n in NAMES:
            assert getattr(q8_asm_thumb, n) is getattr(q8_viper, n), n


def _big(rng, n):
    """0 <= v < n for n up to 2**30, from two 15-bit draws."""
    return ((rng.below(1 << 15) << 15) | rng.below(1 << 15)) % n


def _swiglu(k, h, n, tab, B, ks):
    hh = array("i", h)
    p = array("i", [B, ks, 0, 0])
    r = k.q_swiglu(hh, tab, n, p)
    return r, list(hh), list(p)


def test_thumb2_q_swiglu_equals_the_plain_kernel():
    # every shift of a (left within the table, saturating beyond it at +-lim, right by up to 31 and beyond), values
    # from 0 to the residual's +-VMAX, a = 0 where the table saturates, one value and many
    st = _steps()
    from kvedge.kernels import q8_plain as plain
    tab = pass_int.sigmoid_table()
    rng = Lcg(4301)
    n_cases = 0
    for ks in (-40, -31, -30, -17, -9, -3, -1, 0, 1, 3, 8, 15, 16, 17, 31, 32, 40):
        for mag in (0, 1, 200, 1 << 14, 1 << 15, 1 << 20, (1 << 29) - 1):
            n = 1 + rng.below(40)
            h = []
            for i in range(2 * n):
                v = _big(rng, mag + 1) if mag else 0
                h.append(-v if rng.below(2) else v)
            if mag:
                h[0] = mag
                h[2 * n - 1] = -mag
            if n > 1:
                h[1] = 0
            B = 0
            for v in h:
                B = max(B, abs(v))
            for extra in (0, 1):  # B as the pass gives it, and a B larger than max |h| (a smaller shift)
                got = _swiglu(st, h, n, tab, B << extra, ks)
                want = _swiglu(plain, h, n, tab, B << extra, ks)
                assert got == want, (ks, mag, n, extra, got, want)
                n_cases += 1
    assert n_cases == 238


def _heads(k, v, nseg, hd, e):
    codes = array("b", [0] * (nseg * hd))
    sc = array("H", [0] * nseg)
    r = k.q_heads(array("i", v), codes, sc, array("i", [nseg, hd, e, 0]))
    return r, list(codes), list(sc)


def test_thumb2_q_heads_equals_the_plain_kernel():
    # every f16 case of the scale (zero rows, subnormal, normal, beyond the range), maxima from 1 to +-VMAX (shifts
    # both ways), head_dim 1 to 64, exponents from -60 to 40
    st = _steps()
    from kvedge.kernels import q8_plain as plain
    rng = Lcg(4302)
    n_cases = 0
    for e in (-60, -40, -33, -30, -26, -24, -20, -16, -10, -4, 0, 5, 12, 20, 40):
        for mag in (0, 1, 2, 127, 128, 255, 1000, (1 << 14) - 1, 1 << 14, 1 << 15, (1 << 15) + 1, 1 << 20,
                    (1 << 29) - 1):
            hd = (1, 2, 3, 8, 16, 64)[rng.below(6)]
            nseg = 1 + rng.below(4)
            v = []
            for i in range(nseg * hd):
                x = _big(rng, mag + 1) if mag else 0
                v.append(-x if rng.below(2) else x)
            if mag:
                v[rng.below(len(v))] = -mag if rng.below(2) else mag
            if nseg > 1:
                for i in range(hd):
                    v[i] = 0  # a zero segment
            got = _heads(st, v, nseg, hd, e)
            want = _heads(plain, v, nseg, hd, e)
            assert got == want, (e, mag, hd, nseg, v, got, want)
            n_cases += 1
    assert n_cases == 195


def _normgain(k, x, g, A, ln):
    n = len(x)
    z = array("i", [7] * n)
    p = array("i", [n, A, ln, 0])
    r = k.q_normgain(array("i", x), array("i", g), z, p)
    return r, list(z), list(p)


def test_thumb2_q_normgain_equals_the_plain_kernel():
    # residuals from 0 to +-VMAX (no shift to s = 14), gains of both signs up to +-32767, LN 0 to 9, n 1 to 64, a
    # maximum A given larger than max |x| (a larger shift)
    st = _steps()
    from kvedge.kernels import q8_plain as plain
    rng = Lcg(4304)
    m = 0
    for mag in (0, 1, 100, (1 << 15) - 1, 1 << 15, 1 << 20, (1 << 29) - 1):
        for ln in (0, 3, 7, 9):
            n = (1, 2, 7, 64)[rng.below(4)]
            x = []
            g = []
            for i in range(n):
                v = _big(rng, mag + 1) if mag else 0
                x.append(-v if rng.below(2) else v)
                w = rng.below(32768)
                g.append(-w if rng.below(2) else w)
            if mag:
                x[0] = -mag
            g[0] = -32767
            if n > 1:
                g[1] = 32767
            for A in (mag, 2 * mag + 1):
                got = _normgain(st, x, g, A, ln)
                want = _normgain(plain, x, g, A, ln)
                assert got == want, (mag, ln, n, A, got, want)
                m += 1
    assert m == 56


def test_thumb2_q_rope_equals_the_plain_kernel():
    # values up to +-VMAX (the clamp both ways), cos and sin of every sign up to +-16384, head_dim 2 to 64, several
    # heads (cs back to its start)
    st = _steps()
    from kvedge.kernels import q8_plain as plain
    rng = Lcg(4305)
    m = 0
    for hd in (2, 4, 8, 64):
        for mag in (0, 1, 16383, 16384, 1 << 20, (1 << 29) - 1):
            heads = 1 + rng.below(4)
            n = heads * hd
            v = []
            for i in range(n):
                x = _big(rng, mag + 1) if mag else 0
                v.append(-x if rng.below(2) else x)
            if mag:
                v[0] = mag
                v[1] = mag
            cs = []
            for i in range(hd):
                c = rng.below(16385)
                cs.append(-c if rng.below(2) else c)
            cs[0] = 16384
            cs[1] = -16384
            got = array("i", v)
            want = array("i", v)
            assert st.q_rope(got, array("i", cs), n, hd) == plain.q_rope(want, array("i", cs), n, hd)
            assert list(got) == list(want), (hd, mag, heads)
            m += 1
    assert m == 24


def test_thumb2_q_align_equals_the_plain_kernel():
    # exponents apart by 0 to beyond 31, values up to +-2**30 - 1 (the clamp at VMAX), 1 to 8 heads of 1 to 64
    st = _steps()
    from kvedge.kernels import q8_plain as plain
    rng = Lcg(4306)
    m = 0
    for spread in (0, 1, 5, 31, 32, 60):
        for mag in (0, 1, 1000, (1 << 29) - 1, (1 << 30) - 1):
            heads = 1 + rng.below(8)
            hd = (1, 8, 64)[rng.below(3)]
            n = heads * hd
            oq = []
            for i in range(n):
                x = _big(rng, mag + 1) if mag else 0
                oq.append(-x if rng.below(2) else x)
            oe = [rng.below(spread + 1) - 40 for _ in range(heads)]
            got = array("i", oq)
            want = array("i", oq)
            pg = array("i", [heads, hd, 0, 0])
            pw = array("i", [heads, hd, 0, 0])
            rg = st.q_align(got, array("i", oe), n, pg)
            rw = plain.q_align(want, array("i", oe), n, pw)
            assert (rg, list(got), list(pg)) == (rw, list(want), list(pw)), (spread, mag, heads, hd)
            m += 1
    assert m == 30


def test_thumb2_q_quant_equals_the_plain_kernel():
    # shifts both ways (and beyond 31), the widest codes (C up to 32767), values up to +-VMAX, zeros, odd n
    st = _steps()
    from kvedge.kernels import q8_plain as plain
    rng = Lcg(4307)
    m = 0
    for s, R, K, C in ((0, 16384, 14, 127), (-15, 32767, 22, 32767), (-3, 20000, 20, 5000), (5, 12345, 16, 127),
                       (14, 32767, 15, 32767), (31, 32767, 1, 32767), (40, 1, 1, 7), (-1, 1 << 14, 28, 32767)):
        for n in (1, 2, 3, 64, 65, 172):
            lim = (1 << 29) - 1 if s >= 0 else ((1 << 15) - 1) >> -s
            top = min(lim, ((1 << 15) - 1) << s) if 0 <= s < 15 else lim
            z = array("i", [_big(rng, top + 1) for _ in range(n)])
            for i in range(n):
                if rng.below(2):
                    z[i] = -z[i]
            z[0] = top
            if n > 1:
                z[1] = -top
            if n > 2:
                z[2] = 0
            ip = array("i", [s, R, K, C, 0, 0, 0, 0])
            want = array("i", [7] * n)
            got = array("i", [7] * n)
            assert st.q_quant(z, got, n, ip) == plain.q_quant(z, want, n, ip)
            assert list(got) == list(want), (s, R, K, C, n)
            m += 1
    assert m == 48
