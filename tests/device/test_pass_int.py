# The integer forward pass (kvedge.model.pass_int) on a small checkpoint the test writes itself: close to the
# float path, with an f32 prefix, refusing what it cannot run, generating. Bit-identity across kernel kinds is in
# test_pass_int_kinds.py, allocation-freedom in test_pass_int_alloc.py: each file starts on a fresh heap.
import gc

import _intmodel
_intmodel.preload()
from _intmodel import TOKENS, files, model  # noqa: E402
from _support import raises  # noqa: E402
from _model_support import argmax as _argmax, logit_gap as _gap  # noqa: E402
from kvedge import kernels  # noqa: E402


def _logits(m, tokens):
    """The integer pass's logits for each token (as lists, with their exponent), the model closed and freed: the
    float model it is compared with loads after it (two at once do not fit a 215 KB heap compiled from source)."""
    out = []
    for tok in tokens:
        x = m.forward(tok)
        out.append(([x[i] for i in range(len(x))], m.intp.exp_logits))
    m.close()
    del m, x
    gc.collect()
    return out


def test_int_forward_tracks_the_float_path():
    # the float path on the same int8 weights and i8 cache: a float residual stream, int8 activations. One model at
    # a time (the integer pass's logits kept as lists, its arrays freed first): two fit the .mpy boards' 215 KB
    # heap, not the same heap where the package is compiled from source
    kernels.select("plain")
    want = _logits(model(), TOKENS)
    b = model("float", int_attention=False)
    worst = 0.0
    agree = 0
    for tok, (x, exp_logits) in zip(TOKENS, want):
        y = b.forward(tok)
        worst = max(worst, _gap(x, y, exp_logits))
        agree += _argmax(x) == _argmax(y)
    b.close()
    kernels.select()
    assert worst < 0.03, worst  # measured 0.8 %: the float path's int8 activations are the coarser side
    assert agree >= len(TOKENS) - 1


def test_int_forward_with_an_f32_prefix_and_refusals():
    kv = {"dtype": "i8", "align": 0, "max_tokens": 12, "prefix": 2}
    want = _logits(model(kv=kv), TOKENS[:6])
    b = model("float", kv=kv, int_attention=False)
    for tok, (x, exp_logits) in zip(TOKENS[:6], want):
        assert _gap(x, b.forward(tok), exp_logits) < 0.05
    b.close()
    from kvedge.model.llama import Llama
    raises(ValueError, Llama, files()["f32"], {"dtype": "i8"}, None, 0, False, 32, None, "auto", None, "int")
    raises(ValueError, Llama, files()["i8"], {"dtype": "f32"}, None, 0, False, 32, None, "auto", None, "int")
    raises(ValueError, Llama, files()["i8"], {"dtype": "i8"}, None, 0, False, 32, None, "auto", None, "fast")


def test_int_forward_generates_greedily_and_with_a_temperature():
    from kvedge.model.llama import generate
    from kvedge.model.sampler import Sampler

    class Tok:
        def piece(self, a, b):
            return b""
    m = model()
    ids = generate(m, Tok(), Sampler(48), [1, 40], 10)
    m.reset()
    greedy = []
    t = 40
    m.forward(1)
    for _ in range(len(ids)):
        t = _argmax(m.forward(t))
        greedy.append(t)
    assert ids == greedy[:len(ids)] and len(ids) > 0
    m.reset()
    s1 = generate(m, Tok(), Sampler(48, 1.0, 7), [1], 10)
    m.reset()
    s2 = generate(m, Tok(), Sampler(48, 1.0, 7), [1], 10)
    assert s1 == s2 and len(s1) > 0
    m.close()
