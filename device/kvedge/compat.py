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
