# Device side of `kvedge check`: one script, run unchanged on CPython, the MicroPython unix/wasm ports or a
# board. The host appends one line, `main(CASES_JSON)`, and reads back one JSON line per (case, path):
#
#   {"case": NAME, "path": "float", "kind": "-", "out": HEX}                  out = array('f') bytes, LE
#   {"case": NAME, "path": "int", "kind": KIND, "q": HEX, "e": [..]}          q = array('i') bytes, LE;
#                                                                              output = q * 2**e[head]
#   {"case": NAME, "error": MESSAGE}                                           the case raised
#
# Inputs are drawn from Gen, an integer generator whose values are k / 2**14 with |k| < 2**17: exact in
# float32 and float64, so a board with single-precision floats and the host see the same numbers. The host
# imports this file to draw the same inputs for its numpy reference.
# Device rules: no f-strings, dicts are unordered on MicroPython (JSON lines are built by hand).
import gc
import json
from array import array

try:
    from binascii import hexlify
except ImportError:  # pragma: no cover
    from ubinascii import hexlify


class Gen:
    """Park-Miller minimal standard generator; gauss() is an Irwin-Hall sum of four 15-bit uniforms."""

    def __init__(self, seed):
        self.s = (seed * 2654435761 + 12345) % 0x7FFFFFFF or 1

    def bits(self):
        self.s = (self.s * 48271) % 0x7FFFFFFF
        return self.s

    def gauss_k(self):
        """An integer k, approximately Gaussian with standard deviation 2**14 * 1.15; value = k / 2**14."""
        a = self.bits()
        b = self.bits()
        return (a & 0x7FFF) + ((a >> 15) & 0x7FFF) + (b & 0x7FFF) + ((b >> 15) & 0x7FFF) - 65534

    def fill(self, buf, off, n, head_dim, outliers):
        """buf[off:off+n] = Gaussian values; with outliers, channels 1 and head_dim-1 of every head are
        scaled by 8 and 4 (outlier key channels, as real keys have; powers of two keep values exact)."""
        for i in range(n):
            x = self.gauss_k() / 16384.0
            if outliers:
                c = i % head_dim
                if c == 1:
                    x *= 8.0
                elif c == head_dim - 1:
                    x *= 4.0
            buf[off + i] = x


def _zeros(code, n):
    return array(code, bytes(n * {"b": 1, "H": 2, "i": 4, "f": 4}[code]))


def case_config(c):
    """The case's CacheConfig (a tiered case: its hot ring's, in dtype c["ring"])."""
    from kvedge.config import CacheConfig
    kw = {"window": c["window"], "sinks": c["sinks"], "align": c["align"], "prefix": c["prefix"]}
    dt = c.get("ring", c["dtype"])
    if dt in ("i4", "i2"):
        kw["group"] = c["group"]
        kw["residual"] = c["residual"]
    return CacheConfig(c["layers"], c["heads"], c["kv_heads"], c["head_dim"], c["max_tokens"], dt, **kw)


TIER_PATH = "_kvedge_check_tiered"


def _tiered(c):
    """A tiered case: sinks + hot ring (case_config) in RAM, older tokens in blocks of c["tier"] on flash."""
    from kvedge.tier.cache import TieredCache
    t = c["tier"]
    return TieredCache(case_config(c), TIER_PATH, t["block"], t["cold"], t["cold_blocks"], tile=c["tile"],
                       fresh=True)


def _remove_store():
    import os
    for x in (".h0", ".h1", ".s", ".0", ".1"):
        try:
            os.remove(TIER_PATH + x)
        except OSError:
            pass


def fill_cache(c, cache, g):
    """Append the case's tokens: for each position, for each layer, K then V (kv_heads*head_dim each)."""
    n = c["kv_heads"] * c["head_dim"]
    ks = [_zeros("f", n) for _ in range(c["layers"])]
    vs = [_zeros("f", n) for _ in range(c["layers"])]
    for _ in range(c["tokens"]):
        for layer in range(c["layers"]):
            g.fill(ks[layer], 0, n, c["head_dim"], True)
            g.fill(vs[layer], 0, n, c["head_dim"], False)
        if cache is not None:
            cache.append(ks, vs)


def _hex(buf):
    return hexlify(buf).decode()


def _run_case(c):
    from kvedge import kernels
    from kvedge.attention import Attention, quantize_query
    from kvedge.cache import KVCache
    name = json.dumps(c["name"])
    gc.collect()  # the arena is the one large block: give it the tidiest heap
    if "tier" in c:
        try:
            _run_tiered(c, name)
        finally:
            _remove_store()
        return
    cache = KVCache(case_config(c))
    g = Gen(c["seed"])
    fill_cache(c, cache, g)
    H, D = c["heads"], c["head_dim"]
    q = _zeros("f", H * D)
    g.fill(q, 0, H * D, D, False)
    qscale = c.get("qscale", 1.0)  # a power of two (exact): large values make the softmax sharp
    for i in range(H * D):
        q[i] *= qscale
    gc.collect()
    kernels.select()
    att = Attention(cache, c["tile"])
    out = _zeros("f", H * D)
    att.step(c["layer"], q, out)
    print('{"case":%s,"path":"float","kind":"-","out":"%s"}' % (name, _hex(out)))
    if att.int_ok:
        qc, qs = _zeros("b", H * D), _zeros("H", H)
        oq, oe = _zeros("i", H * D), _zeros("i", H)
        quantize_query(q, qc, qs, H)
        for kind in kernels.available():
            kernels.select(kind)
            a = Attention(cache, c["tile"])
            # the fixed-point core against numpy on the same int8 query: sharp cases (qscale) run past
            # step_q8's Q8_RANGE, where it refuses (issue 46)
            a.check_step_q8(c["layer"], qc, qs, oq, oe)
            a.q8_step(c["layer"], qc, qs, oq, oe, None, None, -1)
            print('{"case":%s,"path":"int","kind":"%s","q":"%s","e":[%s]}'
                  % (name, kind, _hex(oq), ",".join([str(x) for x in oe])))
        kernels.select()


def _query(c, g):
    H, D = c["heads"], c["head_dim"]
    q = _zeros("f", H * D)
    g.fill(q, 0, H * D, D, False)
    return q


def _run_tiered(c, name):
    """The tiered cache's own step and step_q8 (cold blocks read back from flash, then the ring)."""
    from kvedge import kernels
    from kvedge.attention import quantize_query
    tc = _tiered(c)
    try:
        g = Gen(c["seed"])
        fill_cache(c, tc, g)
        H, D = c["heads"], c["head_dim"]
        q = _query(c, g)
        out = _zeros("f", H * D)
        tc.step(c["layer"], q, out)
        print('{"case":%s,"path":"float","kind":"-","out":"%s"}' % (name, _hex(out)))
        if tc.int_ok:
            qc, qs = _zeros("b", H * D), _zeros("H", H)
            oq, oe = _zeros("i", H * D), _zeros("i", H)
            quantize_query(q, qc, qs, H)
            for kind in kernels.available():
                tc.att.k = kernels.select(kind)
                tc.step_q8(c["layer"], qc, qs, oq, oe)
                print('{"case":%s,"path":"int","kind":"%s","q":"%s","e":[%s]}'
                      % (name, kind, _hex(oq), ",".join([str(x) for x in oe])))
            kernels.select()
    finally:
        tc.close()


def main(cases_json):
    for c in json.loads(cases_json):
        try:
            _run_case(c)
        except Exception as e:  # report and go on: one broken case must not hide the others
            print('{"case":%s,"error":%s}' % (json.dumps(c["name"]), json.dumps("%s: %s" % (type(e).__name__, e))))
        gc.collect()
    print('{"done":true}')
