# Runtime differences in one place: CPython, MicroPython, CircuitPython.
import sys

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


_ITEMSIZE = {"b": 1, "B": 1, "h": 2, "H": 2, "i": 4, "I": 4, "f": 4, "d": 8}


def zeros(typecode, n):
    """array(typecode) of n zeros without a temporary list of n boxed items (heap fragmentation on boards).

    MicroPython fills an array from a bytes object's raw memory; CPython can repeat an array instead."""
    from array import array
    if IS_CPYTHON:
        return array(typecode, [0]) * n
    return array(typecode, bytes(n * _ITEMSIZE[typecode]))
