# Runtime differences in one place: CPython, MicroPython, CircuitPython.
import sys
import time

try:
    import micropython
    const = micropython.const
except ImportError:  # CPython
    micropython = None

    def const(x):
        return x

IS_MICROPYTHON = sys.implementation.name in ("micropython", "circuitpython")
IS_CPYTHON = sys.implementation.name == "cpython"
# CircuitPython and some MicroPython builds have no heap_lock / mem_info.
HAS_HEAP_LOCK = micropython is not None and hasattr(micropython, "heap_lock")
HAS_MEM_INFO = micropython is not None and hasattr(micropython, "mem_info")


def isfinite(x):
    # math.isfinite is missing on some MicroPython builds; x - x is 0 only for finite x.
    return x - x == 0


def mem_alloc():
    """Bytes allocated on the heap, or -1 where the runtime cannot tell (CPython)."""
    import gc
    f = getattr(gc, "mem_alloc", None)
    return f() if f else -1


def mem_free():
    import gc
    f = getattr(gc, "mem_free", None)
    return f() if f else -1


# Largest n for which range(n) fits the typecode: CircuitPython checks (after allocating the array), MicroPython
# stores the values truncated, which is harmless for buffers that are filled or cleared next.
_RANGE_OK = {"b": 128, "B": 256, "h": 32768, "H": 65536}
_RANGE_CHECKED = sys.implementation.name != "micropython"


def _range_fits(typecode, n):
    return not _RANGE_CHECKED or n <= _RANGE_OK.get(typecode, 1 << 30)


class _Zeros:
    """n zeros with a known length: array() then allocates its buffer once, at the final size."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __iter__(self):
        for _ in range(self.n):
            yield 0


def empty(typecode, n):
    """array(typecode) of n items with undefined contents (to be filled by the caller), allocated once at its
    final size. MicroPython: array(typecode, range(n)) sizes the array from len(range) and fills it in C (values
    past a narrow typecode's range are truncated); CircuitPython raises for those (after allocating), so there a
    length-known iterator of zeros fills it instead. CPython repeats an array."""
    from array import array
    if IS_CPYTHON:
        return array(typecode, [0]) * n
    if not _range_fits(typecode, n):
        return array(typecode, _Zeros(n))
    return array(typecode, range(n))


def zeros(typecode, n):
    """array(typecode) of n zeros, allocated once at its final size: no temporary list of n boxed items and no
    throwaway n-item buffer (either would double the peak on a board's heap).

    empty(), then (where it holds range(n)) the values are cleared in place: a loop that allocates nothing
    (clearing by memoryview copies would leave log2(n) small views between long-lived objects)."""
    a = empty(typecode, n)
    if IS_CPYTHON or not _range_fits(typecode, n):
        return a
    for i in range(n):
        a[i] = 0
    return a


def float_array(n):
    """n zeros as doubles where the runtime stores them ('d'), else as floats: small CircuitPython builds have
    no 'd' typecode."""
    try:
        return zeros("d", n)
    except (ValueError, KeyError):
        return zeros("f", n)


# Clocks: wrap-safe ticks everywhere. MicroPython (and CircuitPython's unix build) have time.ticks_*;
# CircuitPython boards have none: supervisor.ticks_ms() (a small int wrapping at 2**29) and time.monotonic_ns()
# (a long int once uptime passes ~1 s: it allocates, so hot loops must not call it); CPython has monotonic_ns.
TICKS_PERIOD = const(1 << 29)


def make_clock(time_mod, supervisor_mod=None, period=TICKS_PERIOD):
    """(ticks_ms, ticks_us, ticks_diff) from these modules: time's own ticks where it has them; else
    supervisor.ticks_ms and monotonic_ns in microseconds, both modulo `period`, with the ticks_diff that
    matches (period=None: no wrap, for CPython's unbounded ints)."""
    if hasattr(time_mod, "ticks_ms") and hasattr(time_mod, "ticks_us") and hasattr(time_mod, "ticks_diff"):
        return time_mod.ticks_ms, time_mod.ticks_us, time_mod.ticks_diff
    ns = getattr(time_mod, "monotonic_ns", None)
    if ns is None:
        mono = time_mod.monotonic

        def ns():
            return int(mono() * 1000000000)
    if period is None:
        def ticks_us():
            return ns() // 1000

        def ticks_ms():
            return ns() // 1000000

        def ticks_diff(t1, t0):
            return t1 - t0
        return ticks_ms, ticks_us, ticks_diff
    mask, half = period - 1, period >> 1

    def ticks_us():
        return (ns() // 1000) & mask

    ticks_ms = getattr(supervisor_mod, "ticks_ms", None) if period == TICKS_PERIOD else None
    if ticks_ms is None:
        def ticks_ms():
            return (ns() // 1000000) & mask

    def ticks_diff(t1, t0):
        return ((t1 - t0 + half) & mask) - half
    return ticks_ms, ticks_us, ticks_diff


def _supervisor():
    try:
        import supervisor
        return supervisor
    except ImportError:
        return None


ticks_ms, ticks_us, ticks_diff = make_clock(time, _supervisor(), None if IS_CPYTHON else TICKS_PERIOD)
