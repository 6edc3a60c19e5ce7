# The integer pass on a tiered cache with i4 cold blocks (KIVI groups on flash) stays close to a plain cache that
# keeps every token. (The rest of the tiered model tests: test_model_tiered.py.)
from _tiered_load import BEST, kernels, preload_kernels  # first: the large modules on a collected heap
preload_kernels((BEST,))  # loaded now: later the heap has no room for them
from _tiered_model import RING, TIER, run  # noqa: E402


def test_tiered_i4_cold_blocks_stay_close():
    kernels.select(BEST)
    run({"dtype": "i8", "align": 0, "max_tokens": 32})
    h, worst, flips, first = run(RING, dict(TIER, cold_dtype="i4"), ref=True)
    assert worst < 0.05, worst
