# The integer pass on a tiered cache is bit-identical under every kernel kind: this runtime's best kind (asm on
# Arm, viper on MicroPython) against the plain kernels, with i8 cold blocks. (i4 and i2 codes are compared kind
# by kind in test_attention_int_kivi.py: with them here, two kinds' kernels and a model do not fit an rp2040's
# heap beside the package compiled from .py.)
from _tiered_load import BEST, kernels, preload_kernels  # first: the large modules on a collected heap
preload_kernels(("plain", BEST), fold=True)  # the kinds compared below, loaded now: later the heap has no room
from _tiered_model import RING, TIER, run  # noqa: E402


def test_tiered_int_pass_is_bit_identical_across_kernel_kinds():
    import sys
    from _support import _feature, skip
    if _feature("micropython") and sys.maxsize > 1 << 32:
        # the 64-bit unix port at the rp2040's 215,040-byte heap, the package compiled from .py: two kinds' kernels
        # and a model, in objects twice a board's, leave no 1,280-byte block (CI, 7f2dc90; a few bytes more of
        # _support moved it). The 32-bit boards at that heap (the emulated Cortex-M0, M3 as .py and .mpy, M7),
        # wasm, CircuitPython and CPython run it; test_attention_int_kivi.py compares viper with plain there.
        skip("64-bit objects at a board's 215 KB heap: runs on the 32-bit runtimes")
    kernels.select("plain")
    want = run(RING, TIER, keep=False)
    kernels.select(BEST)  # the best kind here (asm on Arm, viper on MicroPython) against plain
    assert run(RING, TIER, keep=False) == want, BEST
    kernels.select()
