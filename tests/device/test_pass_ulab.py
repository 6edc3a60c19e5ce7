# The ulab forward pass (kvedge.model.pass_ulab), where ulab imports (CircuitPython firmware): rows written into the
# i8 cache exactly as KVCache.write stores them, logits close to the integer and float passes on a small
# checkpoint the test writes itself, greedy generation.
import gc

from _support import need
from _model_support import argmax as _argmax, logit_gap as _gap, skip, tiny_checkpoints

_PATHS = {}
TOKENS = (1, 40, 30, 7, 7, 29, 3, 45, 12)


def _ulab():
    try:
        import ulab  # noqa: F401
    except ImportError:
        skip("needs ulab")


def _files():
    need("fs")
    _ulab()
    if not _PATHS:
        tiny_checkpoints(_PATHS, "kvedge_ulab_tiny")
    return _PATHS


def _model(forward, kv=None, **kw):
    from kvedge.model.llama import Llama
    gc.collect()
    return Llama(_files()["i8"], kv=kv or {"dtype": "i8", "align": 0, "max_tokens": 24}, forward=forward, tile=8,
                 **kw)


def test_ulab_rows_are_the_caches_own():
    from array import array
    from kvedge.cache import KVCache
    m = _model("ulab")
    c = m.cache
    ref = KVCache(c.cfg)
    kv = c.cfg.kv_heads * c.cfg.head_dim
    from ulab import numpy as np
    for t in range(5):
        k = np.array([((t * 7 + i * 13) % 23 - 11) * 0.37 for i in range(kv)])
        v = np.array([((t * 5 + i * 3) % 19 - 9) * 1.9 for i in range(kv)])
        c.start_token()
        ref.start_token()
        for layer in range(c.cfg.layers):
            m.intp._write(layer, k * (layer + 1), v)
            ref.write(layer, array("f", k * (layer + 1)), array("f", v))
    assert c.arena == ref.arena
    m.close()


def test_ulab_logits_track_the_integer_and_float_passes():
    u = _model("ulab")
    n = _model("int")
    f = _model("float", int_attention=False)
    worst_int = worst_float = 0.0
    agree = 0
    for tok in TOKENS:
        a = u.forward(tok)
        b = n.forward(tok)
        worst_int = max(worst_int, _gap(b, a, n.intp.exp_logits))
        worst_float = max(worst_float, _gap(a, f.forward(tok)))
        agree += _argmax(a) == _argmax(b)
    for m in (u, n, f):
        m.close()
    # measured 0.3 % against the integer pass (15-bit activations) and 1.2 % against the float one (int8
    # activations), on float32
    assert worst_int < 0.02 and worst_float < 0.04, (worst_int, worst_float)
    assert agree >= len(TOKENS) - 1


def test_ulab_generates_greedily_and_refuses_what_it_cannot_run():
    from kvedge.model.llama import Llama, generate
    from kvedge.model.sampler import Sampler

    class Tok:
        def piece(self, a, b):
            return b""
    m = _model("ulab")
    ids = generate(m, Tok(), Sampler(48), [1, 40], 10)
    m.reset()
    m.forward(1)
    t = 40
    for i in range(len(ids)):
        t = _argmax(m.forward(t))
        assert t == ids[i]
    m.close()
    for kv, stream in (({"dtype": "f32"}, False), ({"dtype": "i8", "prefix": 2}, False), ({"dtype": "i8"}, True)):
        try:
            Llama(_files()["i8"], kv=kv, stream=stream, forward="ulab")
        except ValueError:
            continue
        raise AssertionError("ulab accepted %r stream=%r" % (kv, stream))
