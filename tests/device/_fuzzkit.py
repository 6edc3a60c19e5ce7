# The device-API fuzzer's kit (issue 14): a small-int PRNG, full-state snapshots, the refusal check and the
# bad values. The families are tests/device/test_fuzz_*.py: random valid states (configs of every dtype,
# windows, sinks, prefix, alignment, GQA shapes; pools with sessions; streams; H2O; a cold tier on a file),
# then random invalid calls of every public method of KVCache, Attention, H2O, PagedPool, Stream and ColdTier:
# wrong types and lengths, NaN/inf/huge values, complex numbers, out-of-range layers/heads/positions/slots/
# sessions, bad codes and scale bits, calls in the wrong state. After each refused call the whole state (arena
# bytes, every table and counter, the tier's files) must be exactly as before and the exception one errors.py
# documents; valid calls in between are checked against independent models (_cacheref, _poolref, a plain
# softmax). Each family makes FLOOR / 4 calls on a board (real or emulated) and more on desktop ports (_scale).
import sys
from array import array

from kvedge.compat import zeros
from kvedge.budget import CACHE_DTYPES, LOWBIT
from kvedge.config import CacheConfig
from kvedge.errors import CacheFullError, BudgetError

SEED = 14  # the suite's fixed seed; KVEDGE_FUZZ_SEED (where os.getenv exists) picks another (tools/fuzz.py)
try:
    import os as _os
    SEED = int(_os.getenv("KVEDGE_FUZZ_SEED") or SEED)
except (ImportError, AttributeError, ValueError):
    pass
FLOOR = 5000  # calls per runtime, over the four families (a quarter each)
DOC = (TypeError, ValueError, IndexError, KeyError, CacheFullError, BudgetError)  # errors.py's refusals
NAN = float("nan")
INF = float("inf")
SCRATCH = ("slots", "asked", "ranked", "seen", "tag", "mv", "f", "on_pressure")  # not state, see _snap
TIER_PATH = "_kvedge_fuzz_tier.bin"


def _scale():
    """Calls per family: a quarter of the floor on boards (real or emulated: 20-50x slower than a desktop port,
    where the four families then take a few minutes) and twice that on CPython and the desktop ports (a few
    seconds on the unix port). KVEDGE_FUZZ_SCALE (where os.getenv exists) multiplies: a longer hunt."""
    n = FLOOR // 4
    if sys.implementation.name == "cpython" or sys.platform in ("linux", "darwin", "win32", "webassembly"):
        n *= 2
    try:
        import os
        n = n * int(os.getenv("KVEDGE_FUZZ_SCALE") or 1)
    except (ImportError, AttributeError, ValueError):
        pass
    return n


class Lcg:
    """x -> (a x + c) mod 2**30, multiplied in 15-bit halves so that every intermediate is a small int below
    2**30 (no long ints on 31-bit boards). a = 1 mod 4 and c odd: full period. Draws use the high bits."""

    def __init__(self, seed):
        self.x = (seed * 7919 + 1) & 0x3FFFFFFF

    def next(self):
        x = self.x
        xh = x >> 15
        xl = x & 0x7FFF
        t = 20077 * xl + 12345  # a = 29773421 = 908 * 2**15 + 20077
        mid = ((908 * xl) & 0x7FFF) + ((20077 * xh) & 0x7FFF) + (t >> 15)
        self.x = ((mid & 0x7FFF) << 15) | (t & 0x7FFF)
        return self.x

    def below(self, n):
        return (self.next() >> 15) % n

    def pick(self, seq):
        return seq[self.below(len(seq))]

    def real(self):
        return (self.next() >> 10) / 524288.0 - 1.0  # [-1, 1)


# ---- state snapshots ----

def _snap(obj, out, seen):
    """Every field of a kvedge object, arrays as bytes, kvedge objects inside followed once."""
    seen.append(id(obj))
    d = obj.__dict__
    for k in sorted(d):
        if k in SCRATCH:
            continue
        v = d[k]
        t = type(v)
        if t is bytearray or t is array:
            out.append(bytes(v))
        elif v is None or t is int or t is float or t is bool or t is str:
            out.append(v)
        elif t is list:
            out.append(len(v))
        elif type(v).__name__ in KINDS:
            if id(v) not in seen:
                _snap(v, out, seen)
            else:
                out.append(id(v))
        else:
            out.append(id(v))


KINDS = ("KVCache", "Attention", "H2O", "PagedPool", "Stream", "ColdTier", "TieredCache", "ColdStore")  # followed inside a snapshot


def _same(obj, before, i, seen):
    """_snap's walk, comparing with `before` from index i instead of copying (a bytearray arena compares in
    place): returns the next index, or -1 - index of the first difference."""
    seen.append(id(obj))
    d = obj.__dict__
    for k in sorted(d):
        if k in SCRATCH:
            continue
        v = d[k]
        t = type(v)
        if t is bytearray:
            same = v == before[i]
        elif t is array:
            same = bytes(v) == before[i]
        elif v is None or t is int or t is float or t is bool or t is str:
            same = v == before[i]
        elif t is list:
            same = len(v) == before[i]
        elif t.__name__ in KINDS and id(v) not in seen:
            i = _same(v, before, i, seen)
            if i < 0:
                return i
            continue
        else:
            same = id(v) == before[i]
        if not same:
            return -1 - i
        i += 1
    return i


def _names(obj, out, seen, path):
    seen.append(id(obj))
    d = obj.__dict__
    for k in sorted(d):
        if k in SCRATCH:
            continue
        v = d[k]
        if type(v).__name__ in KINDS and id(v) not in seen:
            _names(v, out, seen, path + k + ".")
        else:
            out.append(path + k)


class Fuzz:
    """The objects of one family, their snapshot before each refused call, and the counts."""

    def __init__(self, name, seed):
        self.name = name
        self.seed = seed
        self.rng = Lcg(seed)
        self.roots = []
        self.tier = None
        self.extra = None  # a function returning more state to compare (a tiered cache's files)
        self.refused = 0
        self.valid = 0
        self.before = None

    def snap(self):
        out = []
        seen = []
        for r in self.roots:
            _snap(r, out, seen)
        if self.tier is not None and self.tier.store is not None:
            out.append(_tier_files(self.tier))
        if self.extra is not None:
            out.append(self.extra())
        return out

    def same(self):
        i = 0
        seen = []
        for r in self.roots:
            i = _same(r, self.before, i, seen)
            if i < 0:
                return False
        if self.tier is not None and self.tier.store is not None:
            if _tier_files(self.tier) != self.before[i]:
                return False
            i += 1
        if self.extra is not None:
            if self.extra() != self.before[i]:
                return False
            i += 1
        return i == len(self.before)

    def settle(self):
        """A valid call happened: what follows is compared with this state."""
        self.valid += 1
        self.before = None  # the old snapshot is done with: never two alive at once (board heaps)
        self.before = self.snap()

    def refuse(self, fn, args, what, counted=None):
        """fn(*args) must raise a documented error and change nothing (but the counter obj.attr named by
        `counted`, which must grow by one: a documented capacity refusal)."""
        try:
            fn(*args)
        except DOC:
            pass
        except Exception as e:
            raise AssertionError("%s: %s raised undocumented %s: %s" % (self.name, _what(what, args),
                                                                     type(e).__name__, e))
        else:
            raise AssertionError("%s: %s was accepted" % (self.name, _what(what, args)))
        self.refused += 1
        if counted is not None:
            obj, attr = counted
            setattr(obj, attr, getattr(obj, attr) - 1)
        same = self.same()
        if counted is not None:
            setattr(obj, attr, getattr(obj, attr) + 1)
        if not same:
            after = self.snap()
            names = []
            for r in self.roots:
                _names(r, names, [], type(r).__name__ + ".")
            names.append("tier file" if self.extra is None else "files")
            bad = [names[i] if i < len(names) else str(i) for i in range(len(after))
                   if i >= len(self.before) or after[i] != self.before[i]]
            raise AssertionError("%s: refused %s changed %s" % (self.name, _what(what, args), bad))

    def done(self, floor=FLOOR // 4):
        assert self.refused + self.valid >= floor and self.refused >= floor * 2 // 5, (self.refused, self.valid)
        print("fuzz %s: %d calls (%d refused, %d valid), seed %d" % (
            self.name, self.refused + self.valid, self.refused, self.valid, self.seed))


def _tier_files(tier):
    """The bytes of a cold tier's files (kvedge.tier.store: two headers, two segments), flushed first."""
    out = b""
    for f in tier.store.segs:
        if f is not None:
            f.flush()
    for x in (".h0", ".h1", ".0", ".1"):
        try:
            f = open(tier.path + x, "rb")
        except OSError:
            out += b"-"
            continue
        out += f.read() + b"|"
        f.close()
    return out


def _what(what, args):
    try:
        shown = ", ".join(_short(a) for a in args)
    except Exception:
        shown = "?"
    return "%s(%s)" % (what, shown)


def _short(a):
    r = repr(a)
    return r if len(r) <= 30 else r[:27] + "..."


# ---- bad values ----

BAD_TYPE = (None, "1", 1.5, NAN, INF, 1j, [0], b"\x01")  # never an int


def bad_index(rng, n):
    """Not an int, or an int outside 0..n-1."""
    if rng.below(2):
        return rng.pick(BAD_TYPE)
    return rng.pick((-1, n, n + 7, -(1 << 40), 1 << 40))


def bad_row(rng, n, lim):
    """Not n real numbers within +-lim."""
    k = rng.below(9)
    if k == 0:
        return rng.pick((None, 7, 1.5, "x"))
    if k == 1:
        return [0.5] * (n + 1 + rng.below(3))
    if k == 2:
        return [0.5] * (n - 1)
    if k == 3:
        return "x" * n
    if k == 4:
        return {n + 7: 0.5}  # len 1, and no key 0
    r = [rng.real() for _ in range(n)]
    r[rng.below(n)] = rng.pick((NAN, INF, -INF, 1j, None, "0", lim * 2, -lim * 4, 1 << 130))
    return r if k < 8 else tuple(r)


def bad_codes(rng, n, lo, hi):
    """Not n ints within lo..hi."""
    k = rng.below(6)
    if k == 0:
        return rng.pick((None, 5, "x" * n))
    if k == 1:
        return array("b", [1] * (n + 1))
    if k == 2:
        return [0] * (n - 1) if n > 1 else []
    r = [lo] * n
    r[rng.below(n)] = rng.pick((0.5, NAN, INF, hi + 1, lo - 1, "1", None, 1 << 40, 1.0))
    return r


def bad_scales(rng, n):
    if rng.below(4) == 0:
        return rng.pick((None, [0x3C00] * (n + 1), 3))
    r = [0x3C00] * n
    r[rng.below(n)] = rng.pick((0x7C00, 0x7E00, 0xFC00, 0x8001, -1, 0x10000, 0.5, None, NAN))
    return r


def bad_out(rng, n, floats):
    """An output buffer that is too short, immutable, or of an item type that cannot hold the results."""
    k = rng.below(5)
    if k == 0:
        return rng.pick((None, 3, "x" * n))
    if k == 1:
        return zeros("f" if floats else "i", n - 1) if n > 1 else []
    if k == 2:
        return tuple([0] * n)
    if k == 3:
        return array("i", [0] * n) if floats else array("f", [0.0] * n)
    return bytearray(n) if floats else array("h", [0] * n)


# ---- shared by the families ----

def _random_cfg(rng, pool=False):
    """A valid CacheConfig (drawn until the constructor accepts it); a pool's has no window/prefix/KIVI."""
    while True:
        dt = rng.pick(CACHE_DTYPES)
        kvh = 1 + rng.below(2)
        heads = kvh * (1 + rng.below(2))
        D = 2 * (1 + rng.below(3))
        L = 1 + rng.below(2)
        kw = dict(dtype=dt, align=rng.pick((0, 0, 8, 16)))
        if pool:
            kw["residual"] = 0 if dt in LOWBIT else None
            return CacheConfig(L, heads, kvh, D, 4 * (3 + rng.below(4)), **kw)
        G = rng.pick((2, 4))
        window = rng.pick((0, 0, 4, 8))
        sinks = rng.below(3) if window else 0
        prefix = rng.below(sinks + 1) if window else rng.below(3)
        mt = window + sinks + rng.below(5) if window else 4 + rng.below(12)
        if dt in LOWBIT:
            kw.update(group=G, residual=rng.pick((0, G, 2 * G, 1)))
        try:
            return CacheConfig(L, heads, kvh, D, mt, window=window, sinks=sinks, prefix=prefix, **kw)
        except ValueError:
            continue


# write_q8 codes and scales: pure functions of (position, layer, kv, index), like _cacheref.value
def q8_code(pos, layer, kv, i):
    return (pos * 31 + layer * 7 + kv * 13 + i * 5) % 255 - 127


def q8_scale(pos, kv, h):
    return 0x2000 + (pos * 3 + kv * 5 + h) % 512


def _live(c):
    out = zeros("i", c.N)
    return list(out[:c.positions(out)])


def _remove(path):
    """The file `path`, or the files of a store named `path` (kvedge.tier.store: PATH.h0, .h1, .s, .0, .1)."""
    import os
    for x in ("", ".h0", ".h1", ".s", ".0", ".1"):
        try:
            os.remove(path + x)
        except OSError:
            pass


def _fs():
    try:
        import os
        return hasattr(os, "remove")
    except ImportError:
        return False
