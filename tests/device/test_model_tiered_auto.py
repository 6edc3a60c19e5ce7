# forward="auto" on a tiered cache takes the integer pass where the kernels allow (asm, viper), else the float
# pass (kvedge.model.passes). (The rest of the tiered model tests: test_model_tiered.py.)
from _tiered_load import BEST, kernels, preload_kernels  # first: the large modules on a collected heap
preload_kernels(("plain", BEST), fold=True)  # the kinds tried below, loaded now: later the heap has no room
from _tiered_model import RING, TIER, model  # noqa: E402


def test_auto_runs_a_tiered_cache_on_the_integer_pass_where_the_kernels_allow():
    for kind in ("plain", BEST):
        kernels.select(kind)
        m = model(RING, TIER, forward="auto")
        got = m.forward_kind
        m.close()
        m = None
        assert got == ("int" if kind in ("asm", "viper") else "float"), (kind, got)
    kernels.select()
