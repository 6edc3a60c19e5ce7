# The Thumb-2 q_mv4 (kvedge.kernels.q4_v7m_thumb: SBFX, MLA, LDM by raw encodings, from tools/gen_q4_v7m.py) against
# the plain one (kvedge.kernels.q4_plain, the reference arithmetic): the same out values, the same largest |out|
# and nothing written outside out[ro:ro + rows], on random rows and on the edges: codes -8 and 7 only, inputs at
# +-code_max4, the largest and smallest f16 scales (exponent field 30, subnormals, zero), shifts both ways
# (saturating), adding into out at +-VMAX, no rows, no columns, offsets. Runs where the core runs Thumb-2 and the
# board got the module (deploy sends it to armv7m boards and up: the M3 with an armv7m package, the M7, the M55);
# elsewhere the probe must leave the Thumb-1 kernel in place (an M0+ would fault on these instructions).
import sys
from array import array
from kvedge import kernels
from kvedge.kernels import cpuid
from kvedge.kernels.words import VMAX, P4_HDR
from kvedge.model import pass_int4
from _support import skip
from _fuzzkit import Lcg


def _thumb2():
    if not cpuid.has_thumb2():
        skip("no Thumb-2 on this core (kvedge.kernels.cpuid.has_thumb2())")
    try:
        from kvedge.kernels import q4_v7m_thumb
    except ImportError:
        skip("kvedge.kernels.q4_v7m_thumb not deployed here (an armv6m package)")
    return q4_v7m_thumb


def _scale(rng, kind, eg):
    """f16 bits of a positive group scale: "any" normal up to exponent field eg, "top" the largest (field 30),
    "sub" a subnormal, "zero", "low" exponent field 1."""
    if kind == "top":
        return (30 << 10) | rng.below(1024)
    if kind == "sub":
        return 1 + rng.below(1023)
    if kind == "zero":
        return 0
    if kind == "low":
        return (1 << 10) | rng.below(1024)
    return ((1 + rng.below(eg)) << 10) | rng.below(1024)


def _case(seed, rows, groups, codes="any", xs="any", scales="any", os=0, add=0, ro=0, wo=0, so=0, egx=0):
    """(w, x, out, p) for q_mv4: rows of `groups` groups, each part drawn as named."""
    rng = Lcg(seed)
    cols = 32 * groups
    c = pass_int4.code_max4(cols) if cols else 1
    eg = 1
    h = []
    for i in range(rows * groups):
        k = scales if scales != "mix" else rng.pick(("any", "top", "sub", "zero", "low"))
        v = _scale(rng, k, 30)
        h.append(v)
        e = v >> 10
        eg = max(eg, e if e else 1)
    eg = min(31, eg + egx)  # a block may say a larger EG than its scales reach (every shift longer)
    sb = (2 * rows * groups + 3) & ~3
    wo += (so + sb + 3) & ~3  # the codes after the scales, at a multiple of 4 (wo's is one too; so is even)
    w = bytearray(wo + 16 * rows * groups + 8)
    for i in range(len(w)):
        w[i] = rng.below(256)  # whatever lies around the matrix
    for i in range(rows * groups):
        w[so + 2 * i] = h[i] & 255
        w[so + 2 * i + 1] = h[i] >> 8
    for i in range(16 * rows * groups):
        if codes == "min":
            b = 0x88
        elif codes == "max":
            b = 0x77
        elif codes == "ends":
            b = rng.pick((0x78, 0x87, 0x88, 0x77))
        else:
            b = rng.below(256)
        w[wo + i] = b
    if xs == "max":
        x = [c] * cols
    elif xs == "min":
        x = [-c] * cols
    elif xs == "ends":
        x = [rng.pick((c, -c)) for _ in range(cols)]
    else:
        x = [rng.below(2 * c + 1) - c for _ in range(cols)]
    out = [rng.below(2 * VMAX + 1) - VMAX for _ in range(ro + rows + 2)]
    if add == 2:  # out at the clamp's ends
        out = [rng.pick((VMAX, -VMAX)) for _ in range(ro + rows + 2)]
    p = array("i", [0] * P4_HDR)
    p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8] = wo, rows, cols, 1 + rng.below(32767), os, \
        1 if add else 0, ro, so, eg
    return w, array("i", x), array("i", out), p


def _same(k, plain, *args, **kw):
    w, x, out, p = _case(*args, **kw)
    o2 = array("i", out)
    big = k.q_mv4(w, x, out, p)
    want = plain.q_mv4(w, x, o2, p)
    assert (big, list(out)) == (want, list(o2)), (args, kw, big, want)


def test_thumb2_q_mv4_equals_the_plain_kernel_on_random_rows():
    k = _thumb2()
    from kvedge.kernels import q4_plain as plain
    n = 0
    for rows, groups in ((1, 1), (3, 2), (5, 9), (2, 24), (7, 3)):
        for os, add in ((0, 0), (3, 1), (-5, 0), (31, 1), (-29, 1), (40, 0), (-30, 0), (-64, 1), (12, 2)):
            _same(k, plain, 3 + n, rows, groups, scales="mix", os=os, add=add, ro=n % 3, so=2 * (n % 2))
            n += 1
    assert n == 45


def test_thumb2_q_mv4_equals_the_plain_kernel_on_the_edges():
    k = _thumb2()
    from kvedge.kernels import q4_plain as plain
    n = 0
    for codes in ("min", "max", "ends"):
        for xs in ("max", "min", "ends"):
            for scales in ("top", "sub", "zero", "low", "mix"):
                _same(k, plain, 100 + n, 3, 9, codes=codes, xs=xs, scales=scales, os=n % 5 - 2, add=n % 2,
                      egx=n % 3)
                n += 1
    assert n == 45
    # no rows (nothing written, 0 returned), no columns (each row's sum is 0), offsets of the codes and scales
    _same(k, plain, 1, 0, 3)
    _same(k, plain, 2, 4, 0, add=1)
    _same(k, plain, 3, 4, 0, os=-3)
    _same(k, plain, 4, 6, 2, ro=5, wo=12, so=6)
    # columns beyond the last whole group are not read (q4_plain's groups are cols >> 5)
    w, x, out, p = _case(5, 3, 2)
    p[2] = 32 * 2 + 13
    o2 = array("i", out)
    assert k.q_mv4(w, x, out, p) == plain.q_mv4(w, x, o2, p) and list(out) == list(o2)


def test_asm_takes_the_thumb2_q_mv4_exactly_where_the_core_runs_it():
    if not kernels.thumb():
        skip("no inline assembler here")
    try:
        from kvedge.kernels import q4_asm_thumb
    except ImportError:
        skip("no asm kernels deployed here")
    if cpuid.has_thumb2() and "kvedge.kernels.q4_v7m_thumb" in sys.modules:
        from kvedge.kernels import q4_v7m_thumb
        assert q4_asm_thumb.q_mv4 is q4_v7m_thumb.q_mv4
    else:  # an Armv6-M core, or an armv6m package: the Thumb-1 kernel, the module refused or absent
        assert "kvedge.kernels.q4_v7m_thumb" not in sys.modules
        m = getattr(sys.implementation, "_machine", "")
        assert "Cortex-M0" not in m or not cpuid.has_thumb2(), m
