# The model runner on a tiered cache (a ring in RAM, older tokens in blocks on flash) under the integer forward
# pass. References: the same model on a plain cache that keeps every token (kvedge.cache.KVCache: its own arena
# and attention loop, no flash), which a tiered cache that holds every token must follow. (Each kernel kind's
# integer pass bit-identical to the plain kernels': test_model_tiered_kinds.py; forward="auto":
# test_model_tiered_auto.py; i4 cold blocks: test_model_tiered_i4.py; the float pass and refusals:
# test_model_tiered_float.py. One model test per fresh heap and only the kernels it runs: the virtual rp2040,
# with the package compiled from .py on littlefs, has no room for more.)
from _tiered_load import BEST, kernels, preload_kernels  # first: the large modules on a collected heap
preload_kernels((BEST,), fold=True)  # loaded now: later the heap has no room for them
from _tiered_model import RING, TIER, run  # noqa: E402


def test_tiered_int_pass_follows_a_cache_that_keeps_everything_and_steps_allocate_nothing():
    kernels.select(BEST)
    run({"dtype": "i8", "align": 0, "max_tokens": 32})
    # positions 14 and 15 move no block (the ring has room): there the step allocates nothing (one model run
    # checks both: the virtual rp2040's heap holds a model or two, not three)
    h, worst, flips, first = run(RING, TIER, ref=True, locked=(14, 15))
    # until the first block leaves the ring (position 12) both caches hold the same rows in the same order: equal
    # bits; then the cold blocks are folded before the ring (another order of the online softmax): close
    assert first >= 12, first
    assert worst < 2e-3 and flips == 0, (worst, flips)
