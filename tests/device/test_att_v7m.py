# The integer attention's Thumb-2 kernels (kvedge.kernels.att_v7m_thumb: UDIV and MLS by raw encodings) against the
# plain ones (kvedge.kernels.plain, the reference arithmetic), and the probe that gives them to the asm kind exactly
# on the cores that run Thumb-2 (the emulated Cortex-M3 and M7; the M0 keeps the Thumb-1 kernels).
import sys
from array import array
from kvedge import kernels
from kvedge.kernels import cpuid
from kvedge.kernels.words import T_D, T_QOFF, T_LSUM, T_HDR
from _support import skip
from _fuzzkit import Lcg


def _v7m():
    if not cpuid.has_thumb2():
        skip("no Thumb-2 on this core (kvedge.kernels.cpuid.has_thumb2())")
    try:
        from kvedge.kernels import att_v7m_thumb
    except ImportError:
        skip("kvedge.kernels.att_v7m_thumb not deployed here (an armv6m package)")
    return att_v7m_thumb


def test_the_asm_kind_takes_the_thumb2_division_exactly_where_the_core_runs_thumb2():
    if not kernels.thumb():
        skip("no inline assembler here")
    try:
        from kvedge.kernels import asm_thumb
    except ImportError:
        skip("no asm kernels deployed here")
    if "kvedge.kernels.att_v7m_thumb" in sys.modules:
        assert cpuid.has_thumb2()
        assert asm_thumb.att_div_q10 is sys.modules["kvedge.kernels.att_v7m_thumb"].att_div_q10
        assert asm_thumb.att_head_i8 is sys.modules["kvedge.kernels.att_head_v7m_thumb"].att_head_i8
    elif not cpuid.has_thumb2():
        assert asm_thumb.att_div_q10 is not None  # the Thumb-1 kernel


def _big(rng, n):
    """0 <= v < n for n up to 2**30, from two 15-bit draws."""
    return ((rng.below(1 << 15) << 15) | rng.below(1 << 15)) % n


def _div(k, acc0, D, qoff, lsum):
    acc = array("i", acc0)
    out = array("i", [12345] * (qoff + D + 2))
    tile = array("i", [0] * T_HDR)
    tile[T_D] = D
    tile[T_QOFF] = qoff
    tile[T_LSUM] = lsum
    k.att_div_q10(acc, out, tile)
    return list(acc), list(out)


def test_thumb2_att_div_q10_equals_the_plain_kernel():
    v7m = _v7m()
    from kvedge.kernels import plain
    kernels.bind_att()  # the tile's word indexes plain's att_* kernels read
    rng = Lcg(43)
    lsums = [1, 2, 3, 7, 255, 1023, 16384, 65535, 1 << 20, (1 << 22) - 1, 1 << 22, 12345677, (1 << 28) - 1, 1 << 28]
    n = 0
    for i in range(160):
        lsum = lsums[i] if i < len(lsums) else 1 + _big(rng, [1 << 10, 1 << 18, 1 << 24, 1 << 28][i & 3])
        top = lsum << 20  # |a| * 2**10 / lsum stays below 2**30 (the plain kernel's ints are unbounded)
        if top > (1 << 30) - 1 or top <= 0:
            top = (1 << 30) - 1
        D = 1 + rng.below(16)
        qoff = rng.below(3)
        acc = []
        for j in range(D):
            e = rng.below(6)
            a = (top - 1, -(top - 1), 0, 1, -1)[e] if e < 5 else _big(rng, top)
            if e == 5 and rng.below(2):
                a = -a
            acc.append(a)
        got = _div(v7m, acc, D, qoff, lsum)
        want = _div(plain, acc, D, qoff, lsum)
        assert got == want, (lsum, acc, got, want)
        n += 1
    assert n == 160
