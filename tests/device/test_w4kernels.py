# q_mv4, the integer pass's matrix-vector product over int4 rows (kvedge.qkernels_*): every kernel kind against
# arithmetic written out here from the file format's definition (nibbles, f16 fields, floor shifts), and every
# kind bit-identical; the result also tracks the float product of the dequantized rows.
from array import array

from _support import Rng
from kvedge import kernels
from kvedge.kernels.words import VMAX, P4_HDR
from kvedge.model import pass_int, pass_int4
from kvedge.quant import f16_value


def _nibble(code):
    return code & 15


def _signed(n):
    return n - 16 if n >= 8 else n


def _fields(h):
    """(11-bit mantissa, exponent field) of f16 bits h as q_mv4 reads them (a subnormal: fraction, field 1)."""
    e = (h >> 10) & 31
    return ((h & 1023) | 1024, e) if e else (h & 1023, 1)


def _pack(codes, scales, rows, groups, wo, so, size):
    """A buffer of `size` bytes: f16 scales (row-major) at so, nibble codes (two a byte, low first) at wo."""
    w = bytearray(size)
    for i in range(rows * groups):
        w[so + 2 * i] = scales[i] & 255
        w[so + 2 * i + 1] = scales[i] >> 8
    for i in range(rows * groups * 16):
        w[wo + i] = _nibble(codes[2 * i]) | (_nibble(codes[2 * i + 1]) << 4)
    return w


def _reference(codes, scales, x, rows, groups, eg, xm, os, add, base):
    out = []
    for r in range(rows):
        s = 0
        for g in range(groups):
            d = 0
            for j in range(32):
                d += codes[(r * groups + g) * 32 + j] * x[g * 32 + j]
            m, e = _fields(scales[r * groups + g])
            s += (d * (m >> 3)) // (1 << min(eg - e, 31))
        t = (s * xm) // 32768
        if os >= 0:
            t //= 1 << min(os, 31)
        else:
            t = max(-VMAX, min(VMAX, t * (1 << -os)))
        if add:
            t += base[r]
        out.append(max(-VMAX, min(VMAX, t)))
    return out


def _case(rng, rows, groups, xc, eg_min, os, add, zero_group=False):
    codes = [rng.randint(-8, 7) for _ in range(rows * groups * 32)]
    # exponents up to 11 below the largest (a 2**-11 shift), one subnormal scale and, optionally, a zero one
    scales = [(rng.randint(eg_min, eg_min + 11) << 10) | rng.randint(0, 1023) for _ in range(rows * groups)]
    scales[rng.randint(0, rows * groups - 1)] = rng.randint(1, 1023)
    if zero_group:
        scales[0] = 0
    eg = max(max((h >> 10) & 31, 1) for h in scales)
    x = [rng.randint(-xc, xc) for _ in range(groups * 32)]
    return codes, scales, x, eg, rng.randint(8000, 32767), [rng.randint(-VMAX, VMAX) for _ in range(rows)]


def test_q_mv4_is_the_groups_dot_products_scaled_and_shifted_in_every_kind():
    rng = Rng(41)
    for rows, groups, os, add, zero in ((3, 2, 0, 0, False), (5, 3, -6, 1, True), (2, 1, 9, 0, False),
                                        (4, 6, -40, 1, False), (1, 9, 31, 0, True)):
        xc = pass_int4.code_max4(groups * 32)
        codes, scales, x, eg, xm, base = _case(rng, rows, groups, xc, 10, os, add, zero)
        want = _reference(codes, scales, x, rows, groups, eg, xm, os, add, base)
        so, wo = 6, 8 + ((2 * rows * groups + 3) & ~3)  # offsets as a file gives them (even, a multiple of 4)
        first = None
        for kind in kernels.available():
            kernels.select(kind)
            k = pass_int4.kernels4()
            # each kind's own module (kernels4 falls back to the next kind that compiles: a kernel that stopped
            # compiling would pass unseen); asm's only on a Thumb core
            assert k.__name__ == kernels.module_name("q4_", kind) or (kind == "asm" and not kernels.thumb()), \
                (kind, k.__name__)
            w = _pack(codes, scales, rows, groups, wo, so, wo + 16 * rows * groups + 4)
            out = array("i", [7] + base + [7])
            p = array("i", [0] * P4_HDR)
            p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8] = wo, rows, groups * 32, xm, os, add, 1, so, eg
            big = k.q_mv4(w, array("i", x), out, p)
            got = list(out)
            assert got[0] == 7 and got[-1] == 7, kind  # nothing outside out[ro:ro+rows]
            assert got[1:-1] == want, (kind, rows, groups, got[1:-1], want)
            assert big == max(abs(v) for v in want), (kind, big)
            first = first or kind
        kernels.select()


def test_q_mv4_tracks_the_float_product_of_the_dequantized_rows():
    rng = Rng(42)
    rows, groups = 6, 4
    xc = pass_int4.code_max4(groups * 32)
    codes, scales, x, eg, xm, _ = _case(rng, rows, groups, xc, 14, 0, 0)
    w = _pack(codes, scales, rows, groups, 0, rows * groups * 32 // 2, rows * groups * 16 + 2 * rows * groups)
    p = array("i", [0] * P4_HDR)
    p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8] = 0, rows, groups * 32, xm, 0, 0, 0, \
        rows * groups * 16, eg
    out = array("i", [0] * rows)
    kernels.select("plain")
    pass_int4.kernels4().q_mv4(w, array("i", x), out, p)
    kernels.select()
    for r in range(rows):
        f = 0.0
        for g in range(groups):
            sc = f16_value(scales[r * groups + g])
            for j in range(32):
                f += codes[(r * groups + g) * 32 + j] * sc * x[g * 32 + j]
        want = f * xm / 32768.0 * 2.0 ** (22 - eg)  # out = value * 2**-(EG - 7) for input scale xm * 2**-15
        tol = 4.0 * groups + abs(want) * 0.02  # m >> 3 keeps 8 of the scale's 11 bits
        assert abs(out[r] - want) <= tol, (r, out[r], want)


def test_code_max4_keeps_every_sum_within_31_bits():
    for cols in (32, 64, 192, 288, 768, 2048):
        c = pass_int4.code_max4(cols)
        groups = (cols + 31) // 32
        assert 0 < c <= 32767
        assert groups * 32 * 8 * c * 255 < (1 << 30), cols
