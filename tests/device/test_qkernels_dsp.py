# The DSP kernels of the integer forward pass (kvedge.kernels.q8_dsp_thumb: SXTB16 and SMLAD by raw encodings) against
# the plain ones (kvedge.kernels.q8_plain, the reference arithmetic): q_quant then q_mv give the same out values
# and the same largest |out| over int8 rows (every byte value), for every column count's tail (cols % 32, % 4), row offsets, weight
# offsets, shifts both ways (saturating) and adding into out. Runs only where kvedge.kernels.cpuid.has_dsp() finds the
# instructions in the core (the emulated Cortex-M7 and M55: tests/host/test_dsp_kernels.py); elsewhere the
# probe must say no (an M3 or M0 core would take a HardFault on them).
import sys
from array import array
from kvedge import kernels
from kvedge.kernels import cpuid
from kvedge.kernels.words import P_WO, P_ROWS, P_COLS, P_XM, P_OS, P_ADD, P_RO, P_HDR
from _support import skip
from _fuzzkit import Lcg


def test_the_probe_says_no_on_cores_without_dsp():
    m = getattr(sys.implementation, "_machine", "")
    if "Cortex-M3" in m or "Cortex-M0" in m or "nRF51" in m or kernels.arch() < 3:
        assert not cpuid.has_dsp(), m
    elif "Cortex-M7" in m or "Cortex-M55" in m:
        assert cpuid.has_dsp(), m


def test_the_asm_kernels_take_the_dsp_product_exactly_where_the_core_has_it():
    if not kernels.thumb():
        skip("no inline assembler here")
    try:
        from kvedge.kernels import q8_asm_thumb
    except ImportError:
        skip("no asm kernels deployed here")
    if cpuid.has_dsp():
        from kvedge.kernels import q8_dsp_thumb
        assert q8_asm_thumb.q_mv is q8_dsp_thumb.q_mv and q8_asm_thumb.q_quant is q8_dsp_thumb.q_quant
    else:
        assert "kvedge.kernels.q8_dsp_thumb" not in sys.modules  # absent, or refused and not kept


def _case(rng, q, rows, cols, ro, wo, os, add):
    n = cols
    z = array("i", [rng.below(1 << 20) - (1 << 19) for _ in range(n)])
    A = max(abs(v) for v in z) or 1
    ip = array("i", [0] * 8)
    # quantize's parameters (kvedge.model.pass_int.quantize): 15-bit normalized maximum, C = 127
    s = 0
    a = A
    while a >= (1 << 15):
        a >>= 1
        s += 1
    K = 28 - 6
    ip[0], ip[1], ip[2], ip[3] = s, ((127 << K) + a - 1) // a, K, 127
    codes = array("i", [0] * n)
    q.q_quant(z, codes, n, ip)
    w = bytearray(rng.below(256) for _ in range(wo + (ro + rows) * cols))
    p = array("i", [0] * (P_HDR + ro + rows))
    p[P_WO], p[P_ROWS], p[P_COLS], p[P_XM], p[P_OS], p[P_ADD], p[P_RO] = wo, rows, cols, 12345, os, add, ro
    for r in range(ro + rows):
        p[P_HDR + r] = ((16384 + rng.below(16384)) << 8) | rng.below(12)
    out = array("i", [rng.below(1 << 20) - (1 << 19) for _ in range(ro + rows)])
    big = q.q_mv(w, codes, out, p)
    return list(out), big


def test_dsp_q_quant_and_q_mv_equal_the_plain_kernels():
    if not cpuid.has_dsp():
        skip("no DSP instructions on this core (kvedge.kernels.cpuid.has_dsp())")
    from kvedge.kernels import q8_dsp_thumb as dsp, q8_plain as plain
    n = 0
    for cols in (1, 2, 3, 4, 5, 7, 8, 16, 31, 32, 33, 36, 63, 64, 65, 100, 172):
        for rows, ro, wo, os, add in ((1, 0, 0, 0, 0), (3, 2, 5, -3, 1), (5, 0, 3, 4, 0), (2, 1, 0, -40, 1)):
            seed = 1 + cols * 131 + rows * 7 + ro
            got = _case(Lcg(seed), dsp, rows, cols, ro, wo, os, add)
            want = _case(Lcg(seed), plain, rows, cols, ro, wo, os, add)
            assert got == want, (cols, rows, ro, wo, os, add, got, want)
            n += 1
    assert n == 68


def _edge(q, wb, zv, cols, rows, mant, shift, os, add, outv):
    """q_quant then q_mv with every weight byte wb and every input value zv (the codes at their largest, C = 127),
    rows of mantissa `mant` and shift `shift`: the extremes of the products, the scales and the clamps."""
    z = array("i", [zv if (i & 1) else -zv for i in range(cols)])
    ip = array("i", [0, 16384, 14, 127])  # no shift, R / 2**K = 1: codes = z, within C
    codes = array("i", [0] * cols)
    q.q_quant(z, codes, cols, ip)
    w = bytearray([wb] * (rows * cols))
    for i in range(0, len(w), 3):
        w[i] = 255 - wb  # the other extreme, now and then
    p = array("i", [0] * (P_HDR + rows))
    p[P_ROWS], p[P_COLS], p[P_XM], p[P_OS], p[P_ADD] = rows, cols, 32767, os, add
    for r in range(rows):
        p[P_HDR + r] = (mant << 8) | shift
    out = array("i", [outv] * rows)
    big = q.q_mv(w, codes, out, p)
    return list(out), big


def test_dsp_q_mv_equals_the_plain_kernel_at_the_extremes():
    # int8 weights -128 and 127 (bytes 0x80, 0x7F), input codes at +-127, the largest mantissas (32767 for the rows
    # and xm), shifts from a large left shift (saturating) to beyond 31, the residual's add at +-VMAX
    if not cpuid.has_dsp():
        skip("no DSP instructions on this core (kvedge.kernels.cpuid.has_dsp())")
    from kvedge.kernels import q8_dsp_thumb as dsp, q8_plain as plain
    vmax = (1 << 29) - 1
    n = 0
    for wb in (0x80, 0x7F, 0x00, 0xFF):
        for cols, rows in ((64, 2), (172, 3), (7, 1), (33, 4)):
            for mant, shift, os in ((32767, 0, 0), (32767, 0, -20), (16384, 3, -2), (32767, 40, 0), (1, 0, -29),
                                    (32767, 0, -35), (20000, 12, 0)):
                for add, outv in ((0, 0), (1, vmax), (1, -vmax), (1, 12345)):
                    args = (wb, 127, cols, rows, mant, shift, os, add, outv)
                    got = _edge(dsp, *args)
                    want = _edge(plain, *args)
                    assert got == want, (args, got, want)
                    n += 1
    assert n == 448


def _unpacked(codes, n):
    """The n codes q8_dsp_thumb.q_quant packed (the layout in its header), in order."""
    b = bytes(codes)
    assert b[0:4] == bytes(4) and b[4] | (b[5] << 8) | (b[6] << 16) | (b[7] << 24) == n
    n4 = n & ~3
    out = []
    for i in range(n):
        r = i & 3
        h = 4 + (i - r) + ((r & 1) << 1) + (r >> 1) if i < n4 else 4 + i
        v = b[2 * h] | (b[2 * h + 1] << 8)
        out.append(v - 65536 if v & 32768 else v)
    return out


def test_dsp_q_quant_gives_the_plain_codes_in_its_layout():
    # shifts both ways (and beyond 31), the widest codes (C up to 32767), values up to +-VMAX, zeros, every n % 4
    if not cpuid.has_dsp():
        skip("no DSP instructions on this core (kvedge.kernels.cpuid.has_dsp())")
    from kvedge.kernels import q8_dsp_thumb as dsp, q8_plain as plain
    rng = Lcg(4303)
    m = 0
    for s, R, K, C in ((0, 16384, 14, 127), (-15, 32767, 22, 32767), (-3, 20000, 20, 5000), (5, 12345, 16, 127),
                       (14, 32767, 15, 32767), (31, 32767, 1, 32767), (40, 1, 1, 7), (-1, 1 << 14, 28, 32767)):
        for n in (1, 2, 3, 4, 5, 7, 8, 63, 64, 65, 172):
            lim = (1 << 29) - 1 if s >= 0 else ((1 << 15) - 1) >> -s
            top = min(lim, ((1 << 15) - 1) << s) if 0 <= s < 15 else lim
            z = array("i", [(rng.below(1 << 15) * 32768 + rng.below(1 << 15)) % (top + 1) for _ in range(n)])
            for i in range(n):
                if rng.below(2):
                    z[i] = -z[i]
            z[0] = top
            if n > 1:
                z[1] = -top
            if n > 2:
                z[2] = 0
            ip = array("i", [s, R, K, C, 0, 0, 0, 0])
            want = array("i", [0] * n)
            plain.q_quant(z, want, n, ip)
            got = array("i", [0] * (n + 4))  # 8 + 2n bytes of the layout (pass_int's xq: at least 4 words)
            assert dsp.q_quant(z, got, n, ip) == 0
            assert _unpacked(got, n) == list(want), (s, R, K, C, n)
            m += 1
    assert m == 88


class _PlainCodesV7M:
    """kernels.q8_v7m_thumb's q_mv over the plain kernels' codes (it reads them as asm's Thumb-1 q_mv does)."""

    def __init__(self, v7m, plain):
        self.q_mv = v7m.q_mv
        self.q_quant = plain.q_quant


def test_thumb2_q_mv_equals_the_plain_kernel():
    # kernels.q8_v7m_thumb (LDRSB.W and MLA by raw encodings): where the core runs Thumb-2 and the board got the
    # module (deploy sends it to armv7m boards and up), every column tail, row and weight offset, shift and add
    if not cpuid.has_thumb2():
        skip("no Thumb-2 on this core (kvedge.kernels.cpuid.has_thumb2())")
    try:
        from kvedge.kernels import q8_v7m_thumb
    except ImportError:
        skip("kvedge.kernels.q8_v7m_thumb not deployed here (an armv6m package)")
    from kvedge.kernels import q8_plain as plain
    got_kind = _PlainCodesV7M(q8_v7m_thumb, plain)
    n = 0
    for cols in (1, 2, 3, 4, 5, 15, 16, 17, 20, 31, 32, 33, 64, 100, 172):
        for rows, ro, wo, os, add in ((1, 0, 0, 0, 0), (3, 2, 5, -3, 1), (5, 0, 3, 4, 0), (2, 1, 0, -40, 1)):
            seed = 7 + cols * 131 + rows * 7 + ro
            got = _case(Lcg(seed), got_kind, rows, cols, ro, wo, os, add)
            want = _case(Lcg(seed), plain, rows, cols, ro, wo, os, add)
            assert got == want, (cols, rows, ro, wo, os, add, got, want)
            n += 1
    assert n == 60


def test_the_probe_says_thumb2_exactly_on_armv7m_cores_and_up():
    m = getattr(sys.implementation, "_machine", "")
    if "Cortex-M0" in m or "nRF51" in m or kernels.arch() < 3:
        assert not cpuid.has_thumb2(), m
    elif "Cortex-M3" in m or "Cortex-M7" in m or "Cortex-M55" in m:
        assert cpuid.has_thumb2(), m
