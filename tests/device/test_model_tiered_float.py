# The model runner on a tiered cache under the float forward pass (it must follow a plain float cache that keeps
# every token) and the tiers and passes a model refuses before it allocates. (The integer pass:
# test_model_tiered.py; forward="auto": test_model_tiered_auto.py.)
from _tiered_load import kernels, preload_kernels  # first: the large modules on a collected heap
preload_kernels(("plain",))  # loaded now: later the heap has no room for them
from _support import raises  # noqa: E402
from _tiered_model import RING, TIER, files, model, run  # noqa: E402


def test_tiered_float_pass_follows_a_cache_that_keeps_everything():
    kernels.select("plain")
    run({"dtype": "f32", "align": 0, "max_tokens": 32}, forward="float")
    h, worst, flips, first = run(dict(RING, dtype="f32"), dict(TIER, cold_dtype="f32"), "float", ref=True)
    assert worst < 2e-4 and flips == 0, (worst, flips)



def test_a_tiered_cache_refuses_what_it_cannot_run():
    kernels.select("plain")
    f = files()
    from kvedge.model.llama import Llama
    for tier, forward, exc in ((dict(TIER, cold_dtype="f16"), "int", ValueError),
                               ([4, "i8", 8], "float", TypeError),
                               ({"block": 4, "cold_dtype": "i8"}, "float", ValueError)):
        raises(exc, Llama, f["i8"], kv=RING, forward=forward, tier=tier, cold_path=f["cold"])
    raises(ValueError, Llama, f["i8"], kv=RING, forward="int", tier=TIER, cold_path=f["cold"],
           policy=lambda c: None)
    raises(ValueError, Llama, f["i8"], kv=RING, forward="warp", cold_path=f["cold"])
