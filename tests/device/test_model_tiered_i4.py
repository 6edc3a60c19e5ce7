# The integer pass on a tiered cache with i4 cold blocks (KIVI groups on flash) stays close to a plain cache that
# keeps every token. (The rest of the tiered model tests: test_model_tiered.py.)
from _tiered_load import BEST, kernels, preload_kernels  # first: the large modules on a collected heap
preload_kernels((BEST,))  # loaded now: later the heap has no room for them
# compiled now, not while a model builds (on the 64-bit unix port's rp2040-sized heap a compile there found no
# 1,280-byte block): the i4 cold store's KIVI groups, and the account of streamed weights Llama.check reads
from kvedge import kivi  # noqa: E402,F401
from kvedge.model import sizes as msizes  # noqa: E402,F401
from _tiered_model import RING, TIER, run  # noqa: E402


def test_tiered_i4_cold_blocks_stay_close():
    import sys
    from _support import _feature, skip
    if _feature("micropython") and sys.maxsize > 1 << 32:
        # the 64-bit unix port at the rp2040's 215,040-byte heap, the package compiled from .py: its objects are
        # twice a board's, and since the tier's integer pass grew (its fused fold, kvedge.kernels_vcold) the two
        # models no longer find their blocks there (they do from about 240 KB). The 32-bit boards at that heap (the
        # emulated Cortex-M3 with .py and .mpy, the Cortex-M0), wasm, CircuitPython and CPython run it.
        skip("64-bit objects at a board's 215 KB heap: runs on the 32-bit runtimes")
    kernels.select(BEST)
    # the tiered model first, on the heap as the imports left it (it needs more blocks than the plain cache; built
    # after another model, the 64-bit unix port's rp2040-sized heap had no 1,280-byte block left for it), then the
    # cache that keeps every token, compared position by position with the tier's logits
    run(RING, dict(TIER, cold_dtype="i4"))
    h, worst, flips, first = run({"dtype": "i8", "align": 0, "max_tokens": 32}, ref=True)
    assert worst < 0.05, worst
