# The decode interface (kvedge.caches): the forward passes talk to a cache through start_token, write / store_q8,
# attend / attend_q8, bind_q8 / bind_query, quiet, reset and close only. A cache kind written here, which has those
# and nothing else of a KVCache, runs the float and the integer pass without a line of kvedge.model changed, and
# gives the same logits, bit for bit, as the cache kvedge builds itself.
import _intmodel
_intmodel.preload()
from _intmodel import TOKENS, digest, model  # noqa: E402
from _support import raises  # noqa: E402

KV = {"dtype": "i8", "align": 0, "max_tokens": 24, "window": 12, "sinks": 2}


class Relay:
    """A cache kind of this test: rows kept by a KVCache (or KVCacheQ8) that only it sees, with its own attention
    loop; the passes reach them through the interface's methods below (any other attribute is missing here, so a
    pass that asked for one would fail with AttributeError). `calls` counts each method's calls."""

    chunks = False  # prompts a token at a time

    def __init__(self, ccfg, q8):
        from kvedge import caches
        from kvedge.attention import Attention
        self._c = caches.build(ccfg, q8=q8)
        self.att = Attention(self._c, tile=8)  # its own: kvedge.caches.attach leaves a cache that has one
        self._c.attach(self.att)
        self.int_ok = self._c.int_ok
        self.calls = {}
        self.L = ccfg.layers

    def _count(self, name):
        self.calls[name] = self.calls.get(name, 0) + 1

    def start_token(self):
        self._count("start_token")
        return self._c.start_token()

    def write(self, layer, k, v):
        self._count("write")
        self._c.write(layer, k, v)

    def store_q8(self, layer, codes, scales, slot=-1):
        self._count("store_q8")
        self._c.store_q8(layer, codes, scales, slot)

    def attend(self, layer, q, out):
        self._count("attend")
        self._c.attend(layer, q, out)

    def attend_q8(self, layer, qc, qs, oq, oe, span=-1):
        self._count("attend_q8")
        self._c.attend_q8(layer, qc, qs, oq, oe, span)

    def bind_q8(self, p, kc, vc, ks, vs, codes, scales, q_store, qc, qs, oq, oe):
        self._count("bind_q8")
        self._c.bind_q8(p, kc, vc, ks, vs, codes, scales, q_store, qc, qs, oq, oe)

    def q8_fits(self, layer, qs):
        self._count("q8_fits")
        return self._c.q8_fits(layer, qs)

    def bind_query(self, qc, qs, oq, oe):
        self._count("bind_query")
        self._c.bind_query(qc, qs, oq, oe)

    def quiet(self):
        return self._c.quiet()

    def reset(self):
        self._count("reset")
        self._c.reset()

    def close(self):
        self._count("close")


def _run(forward, cache=None, int_attention="auto"):
    """The logits' digests over TOKENS, then again after a reset, the relay's call counts (or None) and the
    model's layers."""
    made = []

    def factory(ccfg, q8):
        made.append(Relay(ccfg, q8))
        return made[0]

    m = model(forward, kv=KV, cache=factory if cache else None, int_attention=int_attention)
    out = []
    for _ in range(2):
        for t in TOKENS:
            lg = m.forward(t)
            out.append(digest(lg) if forward == "int" else digest([int(x * 65536) for x in lg]))
        m.reset()
    m.close()
    return out, (made[0].calls if made else None), m.cfg.n_layers


def test_a_cache_kind_written_here_runs_the_integer_pass_bit_for_bit():
    want, _, _ = _run("int")
    got, calls, layers = _run("int", cache=True)
    assert got == want
    n = 2 * len(TOKENS)
    assert calls["start_token"] == n and calls["bind_q8"] == 1 and calls["reset"] == 2 and calls["close"] == 1
    assert calls["store_q8"] == n * layers and calls["attend_q8"] == n * layers, calls
    assert "write" not in calls and "attend" not in calls


def test_a_cache_kind_written_here_runs_the_float_pass_in_floats_and_in_integers():
    for ints in (False, True):
        want, _, _ = _run("float", int_attention=ints)
        got, calls, layers = _run("float", cache=True, int_attention=ints)
        assert got == want, ints
        n = 2 * len(TOKENS) * layers
        assert calls["write"] == n and "store_q8" not in calls, calls
        if ints:  # a layer whose query is beyond step_q8's range (q8_fits) takes the float attend
            assert calls["q8_fits"] == n and calls["attend_q8"] + calls.get("attend", 0) == n, calls
            assert calls["attend_q8"] >= n // 2 and calls["bind_query"] == 1, calls
        else:
            assert calls["attend"] == n and "attend_q8" not in calls and "bind_query" not in calls, calls


def test_a_cache_kind_without_the_integer_calls_is_refused_by_the_integer_pass_before_a_token():
    class FloatOnly(Relay):
        bind_q8 = None  # not callable: the integer pass cannot bind its buffers

    raises(TypeError, model, "int", kv=KV, cache=lambda ccfg, q8: FloatOnly(ccfg, q8))
