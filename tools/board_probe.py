"""Measure the figures a board profile states, on the board itself: prints one JSON line.

    mpremote connect PORT run tools/board_probe.py        # a MicroPython board (or the emulated one)
    micropython -X heapsize=215040 tools/board_probe.py   # the unix port
    python3 tools/board_probe.py                          # CPython (no GC heap figures)

On CircuitPython copy it to the drive and run it from the REPL (`import board_probe`).
Fields: impl, version, machine; mpy_march (the -march the firmware's .mpy arch field names, null for
bytecode-only firmware); heap_usable = gc.mem_free() + gc.mem_alloc() and heap_free = gc.mem_free() after a
collection (with this probe loaded; on ports whose heap grows on demand, mem_free includes the largest block
the heap could still grow by); small_int_bits (the widest int that allocates nothing); float_mant_bits (53
double, 24 single, 22 for CircuitPython's 30-bit inline floats) and float, the profile's name for it.
Standard library only, like device code."""
import gc
import sys

# sys.implementation._mpy >> 10 & 15 -> -march (MicroPython docs, reference/mpyfiles.rst)
ARCHS = (None, "x86", "x64", "armv6", "armv6m", "armv7m", "armv7em", "armv7emsp", "armv7emdp",
         "xtensa", "xtensawin", "rv32imc", "rv64imc")
FLOATS = {53: "double", 24: "single", 22: "single30"}


def mpy_march():
    sys_mpy = getattr(sys.implementation, "_mpy", None)
    if sys_mpy is None:
        return None
    i = (sys_mpy >> 10) & 0x0F
    return ARCHS[i] if i < len(ARCHS) else "arch%d" % i


def heap():
    if not hasattr(gc, "mem_free"):
        return None, None
    gc.collect()
    free = gc.mem_free()
    return free + gc.mem_alloc(), free


def _allocates(alloc, a):
    # a + (a - 1) is the largest int of the width under test; one more must not fit
    before = alloc()
    top = a + (a - 1)
    fits = alloc() == before
    top += 1
    return fits and alloc() != before


def small_int_bits():
    """Widest signed int that is stored inline (31 on 32-bit ports, 63 on 64-bit), measured by allocation."""
    alloc = getattr(gc, "mem_alloc", None)
    if alloc is None:
        return None
    for bits in (31, 63):
        gc.collect()
        if _allocates(alloc, 1 << (bits - 2)):
            return bits
    return None


def float_mant_bits():
    """Significant bits of a float as stored: the smallest k with 1.0 + 2**-k == 1.0."""
    one = 1.0
    for k in range(1, 80):
        if one + 2.0 ** -k == one:
            return k
    return None


def main():
    impl = sys.implementation
    usable, free = heap()
    mant = float_mant_bits()
    fields = (("impl", impl.name), ("version", ".".join(str(v) for v in impl.version[:3])),
              ("machine", getattr(impl, "_machine", sys.platform)), ("mpy_march", mpy_march()),
              ("heap_usable", usable), ("heap_free", free), ("small_int_bits", small_int_bits()),
              ("float_mant_bits", mant), ("float", FLOATS.get(mant, "other")))
    # built by hand so the probe needs no json module and allocates little
    print("{" + ", ".join('"%s": %s' % (k, _js(v)) for k, v in fields) + "}")


def _js(v):
    if v is None:
        return "null"
    if isinstance(v, str):
        return '"%s"' % v.replace("\\", "\\\\").replace('"', '\\"')
    return str(v)


main()
