# The integer forward pass (kvedge.model.pass_int) allocates nothing per token: with its weights in RAM or
# streamed, with a ring and with H2O (each step run under micropython.heap_lock()).
import gc

import _intmodel
_intmodel.preload()
from _intmodel import files, model, steady_tokens  # noqa: E402
from _support import need  # noqa: E402


def test_int_forward_allocates_nothing_per_token():
    need("heap_lock")
    m = model()
    steady_tokens(m, 8)
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
    if _reads_allocate(files()["i8"]):
        from _model_support import skip
        skip("this board's file system allocates on every read (a Python block device)")
    m = model(stream=True)
    steady_tokens(m, 8)
    assert m.cache.n_seen == 11
    m.close()


def test_int_forward_allocates_nothing_with_a_ring_and_with_h2o():
    need("heap_lock")
    m = model(kv={"dtype": "i8", "align": 0, "max_tokens": 8, "window": 6, "sinks": 2})
    steady_tokens(m, 10)
    assert m.cache.evictions > 0
    m.close()
    del m
    from _model_support import or_skip_short_heap
    or_skip_short_heap(_h2o_steady)


def _h2o_steady():
    from kvedge.evict import H2O
    m = model(kv={"dtype": "i8", "align": 0, "max_tokens": 8}, policy=lambda c: H2O(c, budget=8, recent=4))
    try:
        steady_tokens(m, 10)
        assert m.cache.evictions > 0
    finally:
        m.close()
