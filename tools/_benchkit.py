"""Shared by the benchmark scripts: device-side timing and heap helpers, prepended to their device code."""

# Runs on MicroPython (ticks_us, gc.mem_alloc) and on CPython (perf_counter; no heap figures).
TIMING = r"""
import gc
import time

if hasattr(time, "ticks_us"):
    def now():
        return time.ticks_us()

    def since(t0):
        return time.ticks_diff(time.ticks_us(), t0)
else:
    def now():
        return time.perf_counter()

    def since(t0):
        return (time.perf_counter() - t0) * 1e6

HAS_MEM = hasattr(gc, "mem_alloc")


def mem():
    return gc.mem_alloc() if HAS_MEM else 0
"""
