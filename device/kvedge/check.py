# Input checks shared by the device classes: a public method calls them before it touches any state, so a
# refused call changes nothing (errors.py says which exception means what). Messages name the argument and
# show its value, shortened. index(), length(), codes() and out() allocate nothing unless they raise (the
# integer hot path runs them under heap_lock). Kept small: every line here costs heap on a board.
import math

F32_MAX = math.ldexp(16777215.0, 104)  # largest float32, exact on every runtime (no literal to parse)
F16_MAX = 65504.0
I8_MAX = 127.0 * F16_MAX  # an i8 row's scale, amax / 127, must be a finite f16
SCALE_MAX = 0x7BFF  # f16 scale bits: finite (0x7C00 is inf/NaN) and >= 0 (the integer kernels read no sign)
_BAD = (TypeError, KeyError, IndexError, AttributeError, ValueError, OverflowError)


def show(x):
    """Type and repr of a value, cut to 40 characters (a message never carries a 1 MB repr)."""
    r = repr(x)
    return "%s %s" % (type(x).__name__, r if len(r) <= 40 else r[:37] + "...")


def index(name, x, n=0):
    """x is an int (bool counts, as in Python's own indexing) and, for n > 0, within 0..n-1."""
    if not isinstance(x, int):
        raise TypeError("%s must be an int, got %s" % (name, show(x)))
    if n and (x < 0 or x >= n):
        raise IndexError("%s %d out of range (0..%d)" % (name, x, n - 1))


def length(name, x, n):
    try:
        m = len(x)
    except TypeError:
        raise TypeError("%s must be a sequence of %d values, got %s" % (name, n, show(x)))
    if m != n:
        raise ValueError("%s has %d values, expected %d" % (name, m, n))


def floats(name, x, n, lim):
    """x[0:n] are real numbers (int, float, bool) within +-lim: NaN, inf, complex, str, None and values
    beyond the storage type's range are refused."""
    nlim = -lim
    i = 0
    try:
        for i in range(n):
            e = x[i]
            if not (nlim <= e <= lim):  # NaN fails both; complex, str, None raise TypeError
                break
        else:
            return
    except _BAD:
        raise TypeError("%s[%d] is not a number: %s" % (name, i, _item(x, i)))
    e = x[i]
    if e - e != 0:
        raise ValueError("%s[%d] is not finite: %r" % (name, i, e))
    raise ValueError("%s[%d] = %s is outside %s (+-%s)" % (name, i, show(e), _RANGE.get(lim, "range"), lim))


_RANGE = {F32_MAX: "the float32 range", F16_MAX: "the f16 range", I8_MAX: "an i8 row's range (f16 scale)"}


def codes(name, x, n, lo, hi):
    """x[0:n] are ints within lo..hi: int8/int4 codes, f16 scale bits (hi = SCALE_MAX)."""
    i = 0
    try:
        for i in range(n):
            c = x[i]
            if (c | 0) < lo or c > hi:  # `| 0` refuses floats (NaN too), str, None, complex
                break
        else:
            return
    except _BAD:
        raise TypeError("%s[%d] is not an int: %s" % (name, i, _item(x, i)))
    raise ValueError("%s[%d] = %d is outside %d..%d%s" % (
        name, i, x[i], lo, hi, " (f16 scale bits: finite, >= 0)" if hi == SCALE_MAX else ""))


def out(name, x, n, probe):
    """x is an output of at least n items that takes `probe`: a float (a float buffer: writing one into an int
    array raises), or an int it must store exactly and as an int (-2**30: an int32 array). Writes x[0]: the
    call overwrites it anyway. Allocates nothing unless it raises."""
    try:
        m = len(x)
    except TypeError:
        m = -1
    if 0 <= m < n:
        raise ValueError("%s holds %d values, needs %d" % (name, m, n))
    ok = m >= 0
    if ok and n:
        try:
            x[0] = probe
            if type(probe) is int:  # reading a float back would box it
                ok = type(x[0]) is int and x[0] == probe
        except _BAD:
            ok = False
    if not ok:
        raise TypeError("%s must be a writable buffer holding %r, got %s" % (name, probe, show(x)))


def itemsize(x):
    """Bytes per item of a buffer, 0 for a list, an empty buffer or a non-buffer. Allocates a small view."""
    try:
        return 0 if type(x) is list or not len(x) else len(bytes(memoryview(x)[0:1]))
    except _BAD:
        return 0


def _item(x, i):
    try:
        return show(x[i])
    except Exception:
        return "(unreadable)"
