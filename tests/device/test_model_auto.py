# forward="auto" (the fastest pass the model, cache and kernels allow: kvedge.model.passes) and tokens the model
# refuses before its cache gives them a position. (Tiered caches: test_model_tiered.py.)
import gc

from kvedge.model import llama  # noqa: F401 (the large modules first, on a collected heap)
gc.collect()
from kvedge import attention  # noqa: F401,E402
gc.collect()
from kvedge.model import pass_int  # noqa: F401,E402
gc.collect()
from _support import preload_kernels  # noqa: E402
from kvedge import kernels  # noqa: E402
preload_kernels(kernels.available())  # every kind's kernels, now: later the heap has no room for them
from _support import need, raises  # noqa: E402
from _support import tmp_path  # noqa: E402
from kvedge.model import checkpoint, tiny  # noqa: E402

_PATHS = {}


def _file():
    need("fs")
    if not _PATHS:
        p = tmp_path("kvedge_auto_tiny.bin")
        tiny.write_checkpoint(p, seed=5, vocab_size=48)
        q = tmp_path("kvedge_auto_tiny_i8.bin")
        checkpoint.convert_to_i8(p, q)
        _PATHS.update(i8=q)
    return _PATHS["i8"]


def _model(kv, forward="int"):
    from kvedge.model.llama import Llama
    gc.collect()
    return Llama(_file(), kv=kv, forward=forward, tile=8)


def _ulab():
    try:
        import ulab  # noqa: F401
        return True
    except ImportError:
        return False


def test_auto_takes_the_fastest_pass_the_kernels_allow():
    for kind in kernels.available():
        kernels.select(kind)
        # the integer pass with asm/viper kernels; else ulab's where the firmware has it (CircuitPython); else float
        best = "int" if kind in ("asm", "viper") else ("ulab" if _ulab() else "float")
        for kv, want in (({"dtype": "i8", "align": 0, "max_tokens": 16}, best),
                         ({"dtype": "i8", "align": 0, "max_tokens": 16, "window": 8, "sinks": 2}, best),
                         ({"dtype": "f32", "align": 0, "max_tokens": 16}, "float")):  # an f32 cache: float only
            m = _model(kv, forward="auto")
            got = m.forward_kind
            m.close()
            m = None
            assert got == want, (kind, kv, got)
    kernels.select()


def test_the_cache_kind_the_board_reports_is_the_plans():
    # the stats line's "kind" (kvedge demo compares it with the plan's): a prefix plan once read "keep"
    from kvedge.config import CacheConfig

    def cfg(**kw):
        return CacheConfig(1, 1, 1, 8, 16, "i8", align=0, **kw)
    assert llama.plan_kind(cfg()) == "keep"
    assert llama.plan_kind(cfg(prefix=4)) == "prefix"
    assert llama.plan_kind(cfg(window=8)) == "window"
    assert llama.plan_kind(cfg(window=8, sinks=2)) == "sinks"
    assert llama.plan_kind(cfg(), policy=True) == "h2o"
    assert llama.plan_kind(cfg(window=8, sinks=4), tier={"cold_dtype": "i8"}) == "tiered"


def test_refused_tokens_reserve_no_position():
    kernels.select("plain")
    for forward in ("int", "float"):
        m = _model({"dtype": "i8", "align": 0, "max_tokens": 16}, forward=forward)
        m.forward(1)
        for bad, exc in ((1.5, TypeError), (float("nan"), TypeError), (float("inf"), TypeError),
                         (True, TypeError), (None, TypeError), ("3", TypeError), (48, ValueError),
                         (-1, ValueError)):
            raises(exc, m.forward, bad)
            assert m.cache.n_seen == 1, (forward, bad)
        m.close()


def test_generate_checks_every_prompt_id_first():
    from kvedge.model.llama import generate
    from kvedge.model.sampler import Sampler
    kernels.select("plain")
    m = _model({"dtype": "i8", "align": 0, "max_tokens": 16})
    s = Sampler(48, 0.0, 1)
    raises(ValueError, generate, m, None, s, [1, 5, 99], 8)
    raises(TypeError, generate, m, None, s, [1, 5, 2.0], 8)
    raises(ValueError, generate, m, None, s, [1, 5], -1)
    assert m.cache.n_seen == 0
    m.close()
