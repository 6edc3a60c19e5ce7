# i4/i2 KIVI groups on every runtime: zero and scale fitted by least squares from min-max, so the stored keys'
# squared error is at most min-max's (plain-Python reference in _cacheref) and, on bell-shaped data, well below.
# tests/host/test_kivi_numpy.py checks the rows bit for bit against the numpy reference on CPython.
from array import array

from kvedge.cache import KVCache
from kvedge.config import CacheConfig
from _support import Rng
from _cacheref import fit_bound, minmax_sse


def _keys_vs_min_max(dt, top, offset):
    H, D, G = 1, 8, 16
    n = 4 * G + 5
    c = KVCache(CacheConfig(1, 1, H, D, 5 * G, dt, group=G, residual=G, align=0))
    rng = Rng(11)
    toks = []
    for t in range(n):
        k = array("f", [offset + rng.gauss() for _ in range(D)])
        toks.append(k)
        c.append([k], [k])
    out = array("f", [0.0] * D)
    got = [array("f", [0.0] * D) for _ in range(3 * G)]
    for t in range(3 * G):  # three groups have left the residual
        c.read(0, 0, t, 0, got[t])
    mine = mm = 0.0
    for g in range(3):
        for ch in range(D):
            vals = [toks[t][ch] for t in range(g * G, g * G + G)]
            tol = fit_bound(vals, top)
            e2 = 0.0
            for j, t in enumerate(range(g * G, g * G + G)):
                e = got[t][ch] - vals[j]
                assert abs(e) <= tol, (dt, t, ch, e, tol)
                e2 += e * e
            mine += e2
            mm += minmax_sse(vals, top)
    c.read(0, 0, n - 1, 0, out)  # the newest token is still exact
    assert list(out) == list(toks[n - 1])
    return mine, mm


def test_i2_keys_fit_beats_min_max():
    for offset in (0.0, 300.0):  # far from 0 too: the fit's sums must not cancel in single precision
        mine, mm = _keys_vs_min_max("i2", 3, offset)
        assert mine < 0.8 * mm, (offset, mine, mm)


def test_i4_keys_fit_no_worse_than_min_max():
    mine, mm = _keys_vs_min_max("i4", 15, 0.0)
    assert mine < mm, (mine, mm)
