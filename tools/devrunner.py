# The device test runner: runs tests/device/test_*.py on MicroPython, CircuitPython or CPython without pytest.
# Prints one line per test (PASS/FAIL/SKIP) and closes with "N passed, N failed, N skipped".
# Used by tools/mprun.py (unix and wasm ports) and by `kvedge test` on a board.
import sys
import gc


def _emulate_circuitpython():
    # CircuitPython's limits on a real MicroPython: no viper/native, no heap_lock, no mem_info.
    # `micropython` is swapped for an object with only what CircuitPython's has, before kvedge imports it.
    import micropython as real

    class _CPMicropython:
        const = staticmethod(real.const)

        @staticmethod
        def opt_level(*a):
            return real.opt_level(*a)

    sys.modules["micropython"] = _CPMicropython
    import kvedge.kernels
    kvedge.kernels.ALLOWED = ["plain"]  # CircuitPython cannot compile the others: available() lists none
    kvedge.kernels.select("plain")


def _print_traceback(e):
    # MicroPython: sys.print_exception; CircuitPython: traceback.print_exception(e) only (no print_exc);
    # CPython: traceback.print_exception(e) as well (3.10+). A runner that cannot print a traceback still
    # goes on with the next test.
    if hasattr(sys, "print_exception"):
        sys.print_exception(e)
        return
    try:
        import traceback
        traceback.print_exception(e)
    except Exception as e2:
        print("(no traceback: %s: %s)" % (type(e2).__name__, e2))


def _run_module(name, counts, only):
    # Compiling a test module and the modules it imports from source leaves garbage between live objects;
    # collecting every 16 KB meanwhile keeps free blocks whole on a board-sized heap (a new qstr pool needs
    # ~3.5 KB in one piece). Not while the tests run: that would change what they measure, and cost time.
    thresh = hasattr(gc, "threshold")
    if thresh:
        gc.threshold(16384)
    try:
        mod = __import__(name)
    except Exception as e:
        if thresh:
            gc.threshold(-1)
        counts[1] += 1
        print("FAIL %s (import): %s: %s" % (name, type(e).__name__, e))
        _print_traceback(e)
        return
    if thresh:
        gc.threshold(-1)
    from _support import Skip
    tests = [k for k in dir(mod) if k.startswith("test_")]
    tests.sort()
    for t in tests:
        if only and t not in only:
            continue
        fn = getattr(mod, t)
        if not callable(fn):
            continue
        gc.collect()
        try:
            fn()
        except Skip as e:
            counts[2] += 1
            print("SKIP %s::%s: %s" % (name, t, e))
            continue
        except Exception as e:
            counts[1] += 1
            print("FAIL %s::%s: %s: %s" % (name, t, type(e).__name__, e))
            _print_traceback(e)
            continue
        counts[0] += 1
        print("PASS %s::%s" % (name, t))
    del sys.modules[name]
    gc.collect()


def main(modules, circuitpython=False, only=None):
    if circuitpython:
        _emulate_circuitpython()
    counts = [0, 0, 0]
    for m in modules:
        if m.endswith(".py"):
            m = m[:-3]
        m = m.split("/")[-1]
        _run_module(m, counts, only)
    print("%d passed, %d failed, %d skipped" % (counts[0], counts[1], counts[2]))
    return counts
