# Number formats of the cache: IEEE half and symmetric int8 (asymmetric int4 and int2: kvedge.kivi).
#
# IEEE half is converted here, not with struct's 'e': MicroPython's 'e' rounds ties away from even and wraps
# on overflow. These functions are exact round-to-nearest-even on every runtime (the scaling by powers of two
# and the floor below are exact in both float32 and float64).
import math

F16_MAX = 65504.0
_INF = float("inf")


def _rne(y):
    """Round a non-negative float to the nearest integer, ties to even."""
    f = math.floor(y)
    r = y - f
    n = int(f)
    if r > 0.5 or (r == 0.5 and n & 1):
        n += 1
    return n


def f16_bits(x):
    """IEEE half bits of x, rounded to nearest even; overflow gives infinity, NaN a quiet NaN."""
    if x != x:
        return 0x7E00
    sign = 0x8000 if math.copysign(1.0, x) < 0 else 0
    a = -x if sign else x
    if a == _INF:
        return sign | 0x7C00
    if a == 0:
        return sign
    m, e = math.frexp(a)
    k = e - 1  # a = 1.f * 2**k
    if k < -14:  # subnormal: a = q * 2**-24 (q == 1024 is the smallest normal, and its bits are right)
        return sign | _rne(math.ldexp(a, 24))
    q = _rne(math.ldexp(a, 10 - k))  # 1024 <= q <= 2048
    if q == 2048:
        q = 1024
        k += 1
    if k > 15:
        return sign | 0x7C00
    return sign | ((k + 15) << 10) | (q - 1024)


def f16_value(h):
    """The float that half bits h stand for."""
    e = (h >> 10) & 0x1F
    f = h & 0x3FF
    if e == 0:
        v = math.ldexp(f, -24)
    elif e == 31:
        v = float("nan") if f else _INF
    else:
        v = math.ldexp(f + 1024, e - 25)
    return -v if h & 0x8000 else v


def f16_bits_up(x):
    """Half bits of the smallest half >= x (x finite, >= 0): a scale that never clips."""
    h = f16_bits(x)
    if f16_value(h) < x:
        h += 1
    return h


def f16_bits_down(x):
    """Half bits of the largest half <= x (x finite): a zero point at or below the minimum."""
    h = f16_bits(x)
    if f16_value(h) > x:
        h = h + 1 if h & 0x8000 else h - 1  # one step toward -inf (h == 0 is never above x here)
    return h


def check_f16(name, x):
    if not (x - x == 0):
        raise ValueError("%s is not finite: %r" % (name, x))
    if x > F16_MAX or x < -F16_MAX:
        raise ValueError("%s %r is outside the f16 range (+-65504)" % (name, x))


# ---- int8, symmetric: x ~ code * scale, code in -127..127 ----

def i8_scale_bits(amax):
    """f16 scale for a row whose largest magnitude is amax; codes then stay within +-127."""
    s = amax / 127.0
    if s > F16_MAX:
        raise ValueError("value %r too large for an i8 row (f16 scale limit)" % amax)
    return f16_bits_up(s)


def i8_code(x, inv):
    """Round x * inv to the nearest int (ties away from zero), clamped to +-127."""
    y = x * inv
    n = int(y + 0.5) if y >= 0 else -int(0.5 - y)
    return 127 if n > 127 else (-127 if n < -127 else n)


# int4 / int2 (asymmetric, KIVI) live in kvedge.kivi: only i4/i2 caches load them.
