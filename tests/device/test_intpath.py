# The integer forward pass (kvedge.model.intpath) on a small checkpoint the test writes itself: close to the
# float path, bit-identical across kernel kinds, streamed weights identical, allocation-free per token.
import gc

# the large modules first, each compiled on a collected heap (a 215 KB unix-port heap fragments otherwise)
from kvedge.model import llama  # noqa: F401
gc.collect()
from kvedge import attention  # noqa: F401,E402
gc.collect()
from kvedge.model import intpath  # noqa: E402
gc.collect()
intpath.qkernels()  # the q_* kernels too, and the fused attention kernels the integer pass loads
gc.collect()
_k = __import__("kvedge.kernels").kernels.get()
if hasattr(_k, "att_preload"):
    _k.att_preload(_k)
gc.collect()
for _kind in __import__("kvedge.kernels").kernels.available():  # every kind's q_* kernels (compared below), now
    __import__("kvedge.kernels").kernels.select(_kind)
    intpath.qkernels()
    gc.collect()
__import__("kvedge.kernels").kernels.select()
from _support import need, raises, under_heap_lock  # noqa: E402
from _model_support import argmax as _argmax, logit_gap as _gap, tmp_path  # noqa: E402
from kvedge import kernels  # noqa: E402
from kvedge.model import checkpoint, tiny  # noqa: E402

_PATHS = {}
TOKENS = (1, 40, 30, 7, 7, 29, 3, 45, 12, 12, 8)


def _files():
    need("fs")
    if not _PATHS:
        p = tmp_path("kvedge_int_tiny.bin")
        tiny.write_checkpoint(p, seed=11, vocab_size=48)
        q = tmp_path("kvedge_int_tiny_i8.bin")
        checkpoint.convert_to_i8(p, q)
        _PATHS.update(f32=p, i8=q)
    return _PATHS


def _model(forward="int", kv=None, policy=None, **kw):
    from kvedge.model.llama import Llama
    gc.collect()
    return Llama(_files()["i8"], kv=kv or {"dtype": "i8", "align": 0, "max_tokens": 24}, forward=forward or "int",
                 tile=8, policy=policy, **kw)


def _digest(v):
    h = 0
    for i in range(len(v)):
        h = (h * 31 + v[i]) & 0xFFFFFFF
    return h


def test_int_forward_tracks_the_float_path():
    # the float path on the same int8 weights and i8 cache: a float residual stream, int8 activations
    kernels.select("plain")
    a = _model()
    b = _model("float", int_attention=False)
    worst = 0.0
    agree = 0
    for tok in TOKENS:
        x = a.forward(tok)
        y = b.forward(tok)
        worst = max(worst, _gap(x, y, a.intp.exp_logits))
        agree += _argmax(x) == _argmax(y)
    a.close()
    b.close()
    kernels.select()
    assert worst < 0.03, worst  # measured 0.8 %: the float path's int8 activations are the coarser side
    assert agree >= len(TOKENS) - 1


def test_int_forward_is_bit_identical_across_kernel_kinds():
    runs = []
    for kind in kernels.available():
        kernels.select(kind)
        m = _model()
        runs.append([(_digest(m.forward(t)), m.intp.exp_logits, _digest(m.intp.x)) for t in TOKENS])
        m.close()
        del m
    kernels.select()
    for r in runs[1:]:
        assert r == runs[0]


def test_int_forward_streamed_weights_are_identical():
    # one model at a time: the first's results are kept as digests, its arrays freed before the second loads
    a = _model()
    want = [(_digest(a.forward(tok)), _digest(a.intp.x)) for tok in TOKENS[:5]]
    a.close()
    del a
    b = _model(stream=True)
    assert [(_digest(b.forward(tok)), _digest(b.intp.x)) for tok in TOKENS[:5]] == want
    b.close()


def _steady_tokens(m, n):
    for t in TOKENS[:3]:
        m.forward(t)
    for i in range(n):
        under_heap_lock(m.forward, TOKENS[3 + i % 8])


def test_int_forward_allocates_nothing_per_token():
    need("heap_lock")
    m = _model()
    _steady_tokens(m, 8)
    assert m.cache.n_seen == 11
    m.close()


def _reads_allocate(path):
    """Whether reading this file allocates (the emulated board's RAM disk is a Python block device)."""
    import os
    size = os.stat(path)[6]
    f = open(path, "rb")
    buf = bytearray(16)
    f.readinto(buf)
    gc.collect()
    a = gc.mem_alloc()
    f.seek(size // 2)  # other blocks than the one a file cache may hold
    f.readinto(buf)
    f.seek(size - 16)
    f.readinto(buf)
    f.seek(0)
    f.readinto(buf)
    b = gc.mem_alloc()
    f.close()
    return b > a


def test_int_forward_with_streamed_weights_allocates_nothing_per_token():
    need("heap_lock", "mem_alloc")
    if _reads_allocate(_files()["i8"]):
        from _model_support import skip
        skip("this board's file system allocates on every read (a Python block device)")
    m = _model(stream=True)
    _steady_tokens(m, 8)
    assert m.cache.n_seen == 11
    m.close()


def test_int_forward_allocates_nothing_with_a_ring_and_with_h2o():
    need("heap_lock")
    m = _model(kv={"dtype": "i8", "align": 0, "max_tokens": 8, "window": 6, "sinks": 2})
    _steady_tokens(m, 10)
    assert m.cache.evictions > 0
    m.close()
    del m
    from _model_support import or_skip_short_heap
    or_skip_short_heap(_h2o_steady)


def _h2o_steady():
    from kvedge.evict import H2O
    m = _model(kv={"dtype": "i8", "align": 0, "max_tokens": 8}, policy=lambda c: H2O(c, budget=8, recent=4))
    try:
        _steady_tokens(m, 10)
        assert m.cache.evictions > 0
    finally:
        m.close()


def test_int_forward_with_an_f32_prefix_and_refusals():
    m = _model(kv={"dtype": "i8", "align": 0, "max_tokens": 12, "prefix": 2})
    b = _model("float", kv={"dtype": "i8", "align": 0, "max_tokens": 12, "prefix": 2}, int_attention=False)
    for tok in TOKENS[:6]:
        assert _gap(m.forward(tok), b.forward(tok), m.intp.exp_logits) < 0.05
    m.close()
    b.close()
    from kvedge.model.llama import Llama
    raises(ValueError, Llama, _files()["f32"], {"dtype": "i8"}, None, 0, False, 32, None, "auto", None, "int")
    raises(ValueError, Llama, _files()["i8"], {"dtype": "f32"}, None, 0, False, 32, None, "auto", None, "int")
    raises(ValueError, Llama, _files()["i8"], {"dtype": "i8"}, None, 0, False, 32, None, "auto", None, "fast")


def test_int_forward_generates_greedily_and_with_a_temperature():
    from kvedge.model.llama import generate
    from kvedge.model.sampler import Sampler

    class Tok:
        def piece(self, a, b):
            return b""
    m = _model()
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
