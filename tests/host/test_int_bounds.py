"""Every integer the integer attention path computes stays a small int on a 31-bit board (|x| < 2**30).

The plain kernels and the attention module's integer helpers are traced line by line (sys.settrace) while
step_q8 runs over i8, i4 and i2 caches: ordinary Gaussian rows with outlier channels, and rows mixing f16's
extremes (6e4 beside 1e-4 and subnormals) whose scores saturate in both directions. Any local int outside
[-2**30, 2**30) fails the test, naming the function, the variable and the line (on ESP32/RP2040 such an int is a
heap long: an allocation in a loop that must allocate nothing, and a MemoryError under heap_lock)."""
import os
import sys

import numpy as np
import pytest

from kvedge import kernels
from kvedge.attention import Attention, quantize_query
from kvedge.cache import KVCache
from kvedge.compat import zeros
from kvedge.config import CacheConfig

LIM = 1 << 30
EXTREMES = (60000.0, -60000.0, 1e-4, -3e-5, 2.0 ** -14, 30000.0, -0.5, 0.0, 6e-8, -65000.0)


def _traced_step(att, qc, qs, oq, oe, layers, scores):
    """step_q8 over every layer with every local int of the kernels and attention.py checked; returns the
    out-of-range ones as {(function, variable): (value, line)}."""
    bad = {}

    def local(frame, event, arg):
        for k, v in frame.f_locals.items():
            if type(v) is int and not (-LIM <= v < LIM) and (frame.f_code.co_name, k) not in bad:
                bad[(frame.f_code.co_name, k)] = (v, frame.f_lineno)
        return local

    def tracer(frame, event, arg):
        if frame.f_code.co_filename.endswith(("kernels/plain.py", "attention.py")):
            return local
        return None
    sys.settrace(tracer)
    try:
        for layer in range(layers):
            # the core (q8_step): these rows run far past step_q8's Q8_RANGE, where it refuses
            att.q8_step(layer, qc, qs, oq, oe, None, None, -1)
            att.q8_step(layer, qc, qs, oq, oe, scores, None, -1)  # and the per-slot probabilities H2O accumulates
    finally:
        sys.settrace(None)
    return bad


def _fill(c, rows):
    cfg = c.cfg
    n = cfg.kv_heads * cfg.head_dim
    for p in range(len(rows)):
        c.append([rows[p][0][layer * n:(layer + 1) * n] for layer in range(cfg.layers)],
                 [rows[p][1][layer * n:(layer + 1) * n] for layer in range(cfg.layers)])


@pytest.mark.parametrize("dtype,residual", [("i8", None), ("i4", 8), ("i4", 0), ("i2", 8), ("i2", 0)])
@pytest.mark.parametrize("data", ["gauss", "extremes"])
def test_integer_path_intermediates_stay_small_ints(dtype, residual, data):
    kernels.select("plain")
    try:
        kw = {"group": 4, "residual": residual} if residual is not None else {}
        cfg = CacheConfig(2, 4, 2, 8, 40, dtype, window=32, sinks=4, prefix=4 if residual else 0, align=0, **kw)
        c = KVCache(cfg)
        rng = np.random.default_rng(7)
        n = cfg.layers * cfg.kv_heads * cfg.head_dim
        rows = []
        for p in range(70):  # the ring wraps twice
            if data == "gauss":
                k = rng.normal(size=n) * np.where(np.arange(n) % 8 == 1, 8.0, 1.0)
                v = rng.normal(size=n)
            else:
                k = np.array([EXTREMES[(i + p) % 10] for i in range(n)])
                v = np.array([EXTREMES[(3 * i + p) % 10] * 0.5 for i in range(n)])
            rows.append((k.tolist(), v.tolist()))
        _fill(c, rows)
        att = Attention(c, tile=8)
        q = zeros("f", cfg.heads * cfg.head_dim)
        for i in range(len(q)):
            q[i] = EXTREMES[i % 10] * 1e-2 if data == "extremes" else float(rng.normal())
        qc, qs = zeros("b", len(q)), zeros("H", cfg.heads)
        oq, oe = zeros("i", len(q)), zeros("i", cfg.heads)
        quantize_query(q, qc, qs, cfg.heads)
        scores = zeros("i", cfg.slots)
        bad = _traced_step(att, qc, qs, oq, oe, cfg.layers, scores)
        assert not bad, bad
        assert max(scores) > 0
    finally:
        kernels.select()


def test_the_integer_tables_equal_double_precision_math():
    # the device test's digests (tests/device/test_pass_int_tables.py) are those of llama2.c's float formulas in
    # CPython's doubles: the integer computation of the tables gives exactly these values
    import math
    from array import array
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "device"))
    from test_pass_int_tables import DIGESTS, digest
    from kvedge.model import pass_int
    sig = [min(32767, int(32768 / (1.0 + math.exp(-(k - 192) / 16)) + 0.5)) for k in range(385)]
    assert list(pass_int.sigmoid_table()) == sig and digest(sig) == DIGESTS["sigmoid"]
    for hd, key in ((8, "rope8"), (64, "rope64")):
        want = [hd // 2]
        for i in range(hd // 2):
            fr = array("f", [1.0 / math.pow(10000.0, (2 * i) / hd)])[0]
            m, e = math.frexp(fr)
            q = (int(m * 16777216) * pass_int.TURN61 + (1 << (48 - e))) >> (49 - e)
            want += [q >> 8, q & 255]
        assert list(pass_int.rope_turns(hd)) == want and digest(want) == DIGESTS[key]
