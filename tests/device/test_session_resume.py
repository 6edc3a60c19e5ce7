# A conversation saved and resumed (kvedge.session, issue 45 item 3): N tokens at once against N/2, save, a fresh
# model built from the same config, load, N/2 more: the same tokens and the same logits' bits (_session_model), for
# a window + sinks i8 cache, an i4 KIVI cache (window, sinks, f32 prefix) and an H2O policy; a tiered cache:
# test_session_tiered.py. (A file each: a board-sized heap holds the runner's modules and a model or two.)
import gc
from kvedge import session  # noqa: F401 (first: compiled from .py it needs a large block)
gc.collect()
from kvedge.model import llama  # noqa: F401,E402 (then the runner's large modules, each on a collected heap)
gc.collect()
from kvedge import attention  # noqa: F401,E402
gc.collect()
from kvedge.model import pass_float  # noqa: F401,E402
gc.collect()
from kvedge import cacheq8  # noqa: F401,E402 (an i8 cache the integer attention reads)
gc.collect()
from _support import preload_floats  # noqa: E402
from _session_model import resume_equals_uninterrupted  # noqa: E402
preload_floats()


def test_a_window_and_sinks_i8_cache_resumes_bit_identical():
    st = resume_equals_uninterrupted({"dtype": "i8", "window": 12, "sinks": 2, "max_tokens": 14, "align": 0}, 34)
    assert st["evictions"] == 34 - 14, st  # the counters carried on


def test_an_i4_kivi_cache_resumes_bit_identical():
    # KIVI groups of 4 with a residual of 4 f32 tokens, a window of 16 and 4 sinks; then an f32 prefix of 2 and
    # every token kept (the save falls inside a part-filled group and residual)
    resume_equals_uninterrupted({"dtype": "i4", "group": 4, "residual": 4, "window": 16, "sinks": 4,
                                  "max_tokens": 20, "align": 0}, 30)
    resume_equals_uninterrupted({"dtype": "i4", "group": 4, "residual": 4, "prefix": 2, "max_tokens": 30,
                                  "align": 0}, 27)


def test_an_h2o_cache_resumes_bit_identical():
    from kvedge.evict import H2O

    def policy(c):
        return H2O(c, budget=12, recent=5, sinks=1)
    st = resume_equals_uninterrupted({"dtype": "i8", "max_tokens": 12, "align": 0}, 30, policy)
    assert st["evictions"] == 30 - 12, st
