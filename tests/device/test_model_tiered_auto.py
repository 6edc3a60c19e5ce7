# forward="auto" on a tiered cache takes the integer pass where the kernels allow (asm, viper), else the float
# pass (kvedge.model.passes). (The rest of the tiered model tests: test_model_tiered.py.)
from _tiered_load import BEST, kernels, preload_kernels  # first: the large modules on a collected heap
preload_kernels(("plain", BEST), fold=True)  # the kinds tried below, loaded now: later the heap has no room
from _tiered_model import RING, TIER, model  # noqa: E402


def test_auto_runs_a_tiered_cache_on_the_integer_pass_where_the_kernels_allow():
    import sys
    from _support import _feature, skip
    if _feature("micropython") and sys.maxsize > 1 << 32:
        # the 64-bit unix port at the rp2040's 215,040-byte heap, the package compiled from .py (objects twice a
        # board's): since every cache kind answers the decode interface (kvedge.caches; ~1.5 KB more source-compiled
        # code there) a float model and an integer one in turn no longer find their blocks. The 32-bit boards at
        # that heap, wasm, CircuitPython and CPython run it.
        skip("64-bit objects at a board's 215 KB heap: runs on the 32-bit runtimes")
    for kind in ("plain", BEST):
        kernels.select(kind)
        m = model(RING, TIER, forward="auto")
        got = m.forward_kind
        m.close()
        m = None
        assert got == ("int" if kind in ("asm", "viper") else "float"), (kind, got)
    kernels.select()
