# Helpers shared by the device tests. Runs on CPython (under pytest), MicroPython and CircuitPython.
import sys

try:
    import micropython
except ImportError:
    micropython = None


# On a microcontroller, real or emulated (20-50x slower than a desktop port), the slowest cases run lean: the same
# checks over fewer tokens or settings. CPython and the unix and wasm ports run them whole.
ON_BOARD = sys.implementation.name != "cpython" and sys.platform not in ("linux", "darwin", "win32", "webassembly")


class Skip(Exception):
    pass


def _feature(name):
    from kvedge import compat
    if name == "heap_lock":
        return compat.HAS_HEAP_LOCK
    if name == "mem_info":
        return compat.HAS_MEM_INFO
    if name == "micropython":
        return compat.IS_MICROPYTHON
    if name == "cpython":
        return compat.IS_CPYTHON
    if name in ("viper", "native"):
        from kvedge import kernels
        return name in kernels.available()
    if name == "mem_alloc":
        return compat.mem_alloc() >= 0
    if name == "hypothesis":
        try:
            import hypothesis  # noqa: F401
            return True
        except ImportError:
            return False
    if name == "fs":
        return fs_writable()
    raise ValueError("unknown feature %r" % name)


def fs_writable(opener=open):
    """True when a file can be created, written and removed in the current folder. False where os.remove is
    missing or the filesystem is read-only: CIRCUITPY while USB is connected raises OSError EROFS (30)."""
    try:
        import os
    except ImportError:
        return False
    if not hasattr(os, "remove"):
        return False
    probe = "_kvedge_probe.tmp"
    try:
        f = opener(probe, "wb")
        try:
            f.write(b"kv")
        finally:
            f.close()
        os.remove(probe)
    except OSError:
        return False
    return True


STORE_FILES = (".h0", ".h1", ".s", ".0", ".1")  # a tiered cache's cold store (kvedge.tier.store)


def remove_store(path):
    """Remove the cold store files path.* (and a folder standing in the place of one), if there."""
    import os
    for x in STORE_FILES:
        try:
            os.remove(path + x)
        except OSError:
            try:
                os.rmdir(path + x)
            except (OSError, AttributeError):
                pass


def skip(msg):
    """Skip the calling test, visibly counted (pytest's skip under pytest, Skip under devrunner)."""
    if "pytest" in sys.modules:
        import pytest
        pytest.skip(msg)
    raise Skip(msg)


def need(*features):
    """Skip the calling test (visibly counted) unless every feature is present."""
    for f in features:
        if not _feature(f):
            skip("needs " + f)


def raises(exc_type, fn, *args, **kw):
    """Call fn and return the exception of exc_type it raised; fail if it raised nothing."""
    try:
        fn(*args, **kw)
    except exc_type as e:
        return e
    raise AssertionError("%s did not raise %s" % (getattr(fn, "__name__", fn), exc_type.__name__))


def message(exc):
    return str(exc.args[0]) if exc.args else ""


def under_heap_lock(fn, *args):
    """Run fn with the heap locked (any allocation raises MemoryError). Always unlocks: an exception that
    escapes while locked hangs the wasm port."""
    a = args + (None,) * (8 - len(args))  # fn(*args) itself allocates on MicroPython: call with fixed args
    n = len(args)
    micropython.heap_lock()
    try:
        if n == 0:
            return fn()
        if n == 1:
            return fn(a[0])
        if n == 2:
            return fn(a[0], a[1])
        if n == 3:
            return fn(a[0], a[1], a[2])
        if n == 4:
            return fn(a[0], a[1], a[2], a[3])
        if n == 5:
            return fn(a[0], a[1], a[2], a[3], a[4])
        if n == 6:
            return fn(a[0], a[1], a[2], a[3], a[4], a[5])
        if n == 7:
            return fn(a[0], a[1], a[2], a[3], a[4], a[5], a[6])
        return fn(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7])
    finally:
        micropython.heap_unlock()


class Rng:
    """A small deterministic generator (same numbers on every runtime), independent of `random`."""

    def __init__(self, seed=1):
        self.s = (seed * 2654435761 + 12345) & 0x7FFFFFFF or 1

    def bits(self):
        # Park-Miller minimal standard; values stay below 2**31 so they are exact everywhere.
        self.s = (self.s * 48271) % 0x7FFFFFFF
        return self.s

    def randint(self, lo, hi):
        return lo + self.bits() % (hi - lo + 1)

    def random(self):
        return self.bits() / 2147483647.0

    def uniform(self, lo, hi):
        return lo + (hi - lo) * self.random()

    def gauss(self):
        import math
        u = (self.bits() + 1) / 2147483648.0
        v = self.random()
        return math.sqrt(-2.0 * math.log(u)) * math.cos(6.283185307179586 * v)

    def choice(self, seq):
        return seq[self.bits() % len(seq)]


def forget(*names):
    """Drop modules a test file runs once (a converter, a model writer) from sys.modules and from their package's
    attributes, so that their code is freed: on a board-sized heap the model the test runs next needs it."""
    for name in names:
        sys.modules.pop(name, None)
        pkg, _, leaf = name.rpartition(".")
        if pkg in sys.modules and hasattr(sys.modules[pkg], leaf):
            delattr(sys.modules[pkg], leaf)
    import gc
    gc.collect()


def tmp_path(name):
    # the current folder first: each run has its own (a board's filesystem, a fresh folder on the host), while
    # /tmp is shared by every run on the machine
    for d in ("", "/tmp"):
        try:
            p = d + "/" + name if d else name
            f = open(p, "wb")
            f.close()
            return p
        except OSError:
            pass
    raise OSError("no writable folder for " + name)


def preload_floats():
    """Load the float kernels the viper and asm kinds take on first use (kvedge.kernels.f32_native) now, on a collected
    heap, as kvedge.model.run does for a run that needs them: a test file that calls them reaches them early."""
    import gc
    from kvedge import kernels
    load = getattr(kernels.get(), "load_floats", None)
    if load is not None:
        load()
    gc.collect()


def preload_kernels(kinds, fold=False):
    """Load each kernel kind's integer-pass kernels (and the attention kernels it loads beside them) now, on a
    collected heap: the model tests switch kinds later, when a board-sized heap has no large block left. fold: also
    a tiered cache's fold of i8 cold blocks (kvedge.kernels.viper_tier, which kvedge.tier.cache loads on its first step)."""
    import gc
    from kvedge import kernels
    from kvedge.model import pass_int
    for kind in kinds:
        kernels.select(kind)
        pass_int.qkernels()
        k = kernels.get()
        if hasattr(k, "att_preload"):
            k.att_preload(k)
        if fold and hasattr(k, "att_preload"):
            try:  # a tiered cache's fold beside the fused drivers (kvedge.tier.cache loads it on its first step)
                import kvedge.kernels.viper_tier  # noqa: F401
            except (ImportError, SyntaxError, NameError, AttributeError, TypeError):
                pass
        gc.collect()
    kernels.select()
