# The attention path a plan asks for (kvedge.model.runplan.plan_args' int_attention): a plan made for asm/viper
# kernels runs the integer attention wherever it runs (a host run computes what the board does, bit for bit)
# exactly when the board's "auto" takes it: an i8/i4/i2 cache, and for a tier an i8 or i4 cold store
# (kvedge.tier.cache's int_ok). An f32 hot ring over an i4 cold store, planned for the rp2040's asm kernels, takes the
# float path there; CircuitPython running that plan was told to take the integer one and refused it ("the
# integer attention path needs an i8, i4 or i2 cache").
from kvedge.errors import PlanError
from kvedge.model.runplan import plan_args
from _plankit import HEAP, cache, plan, tier


def _plan(c, cold, kernels):
    """A plan of cache c (cache()'s fields), a tier of cold dtype `cold` or none, made for `kernels`."""
    doc = plan("tiered" if cold else "keep", dict(cache(0), **c), {"kind": "tiered" if cold else "ring"},
               tier(cold=cold) if cold else None)
    doc["runtime"] = None if kernels is None else {"kernels": kernels}
    return doc


KEEP = {"max_tokens": 40, "window": 0, "sinks": 0}
RING = {"max_tokens": 20, "window": 16, "sinks": 4}
# (plan's kernels, cache, tier's cold dtype, the int_attention the run is given): written out by hand
CASES = [("asm", dict(KEEP, dtype="i8"), None, True), ("viper", dict(KEEP, dtype="i4"), None, True),
         ("asm", dict(KEEP, dtype="i2"), None, True), ("asm", dict(KEEP, dtype="f32"), None, False),
         ("asm", dict(KEEP, dtype="f16"), None, False), ("plain", dict(KEEP, dtype="i8"), None, False),
         ("native", dict(KEEP, dtype="i8"), None, False), (None, dict(KEEP, dtype="i8"), None, "auto"),
         ("asm", dict(RING, dtype="f32"), "i4", False), ("asm", dict(RING, dtype="f32"), "i8", False),
         ("asm", dict(RING, dtype="i8"), "i4", True), ("viper", dict(RING, dtype="i8"), "i8", True),
         ("asm", dict(RING, dtype="i8"), "i2", False),
         ("asm", dict(RING, dtype="i8"), "f16", False)]  # i2 or f16 cold blocks: the tier's float path


def test_a_plan_asks_for_the_attention_path_its_board_takes():
    for kernels, cache, cold, want in CASES:
        got = plan_args(_plan(cache, cold, kernels), heap=HEAP)["int_attention"]
        assert got == want, (kernels, cache["dtype"], cold, got)


def test_a_tier_with_a_cold_dtype_the_runner_does_not_take_is_refused_before_its_path_is_chosen():
    for cold in ("i3", "q9", "I8"):
        try:
            plan_args(_plan(dict(RING, dtype="i8"), cold, "asm"), heap=HEAP)
        except PlanError as e:
            assert "cold_dtype" in str(e), str(e)
        else:
            raise AssertionError("tier.cold_dtype %s taken" % cold)
