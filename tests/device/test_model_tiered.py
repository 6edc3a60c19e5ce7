# The model runner on every cache kind a plan names: a tiered cache (a ring in RAM, older tokens in blocks on
# flash) under the integer and the float forward pass, forward="auto" (the fastest pass the cache and kernels
# allow), and refused tokens that change nothing. References: the same model on a plain cache that keeps every
# token (kvedge.cache.KVCache: its own arena and attention loop, no flash), which a tiered cache that holds every
# token must follow; each kernel kind's integer pass is bit-identical to the plain kernels'.
import gc

from kvedge.model import llama  # noqa: F401 (the large modules first, on a collected heap)
gc.collect()
from kvedge import attention  # noqa: F401,E402
gc.collect()
from kvedge.model import intpath  # noqa: E402
gc.collect()
from kvedge import tiered  # noqa: F401,E402
gc.collect()
# the kernels compared below (plain and this runtime's best kind), loaded now: later the heap has no room
__import__("kvedge.kernels").kernels.select()
BEST = __import__("kvedge.kernels").kernels.kind()  # asm on Arm, viper on MicroPython, plain elsewhere
for _kind in ("plain", BEST):
    __import__("kvedge.kernels").kernels.select(_kind)
    intpath.qkernels()
    _k = __import__("kvedge.kernels").kernels.get()
    if hasattr(_k, "att_preload"):
        _k.att_preload(_k)
    gc.collect()
__import__("kvedge.kernels").kernels.select()
from _support import need, raises, under_heap_lock  # noqa: E402
from _model_support import tmp_path  # noqa: E402
from kvedge import kernels  # noqa: E402
from kvedge.compat import zeros  # noqa: E402
from kvedge.model import checkpoint, tiny  # noqa: E402

_PATHS = {}
# 22 tokens: with a ring of 8 (+ 4 sinks) in blocks of 4, four blocks leave the ring for flash
TOKENS = (1, 40, 30, 7, 7, 29, 3, 45, 12, 12, 8, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
RING = {"dtype": "i8", "align": 0, "max_tokens": 12, "window": 8, "sinks": 4}
TIER = {"block": 4, "cold_dtype": "i8", "cold_blocks": 8, "at_cap": "drop"}
V = 48
_REF = zeros("i", V * len(TOKENS))  # the reference's logits, made now: later the heap has no 4 KB block left


def _files():
    need("fs")
    if not _PATHS:
        p = tmp_path("kvedge_tier_tiny.bin")
        tiny.write_checkpoint(p, seed=11, vocab_size=V)
        q = tmp_path("kvedge_tier_tiny_i8.bin")
        checkpoint.convert_to_i8(p, q)
        _PATHS.update(i8=q, cold=tmp_path("kvedge_tier_cold"))
    return _PATHS


def _model(kv, tier=None, forward="int"):
    from kvedge.model.llama import Llama
    f = _files()
    gc.collect()
    return Llama(f["i8"], kv=kv, forward=forward, tile=8, tier=tier, cold_path=f["cold"])


def _value(lg, i, forward):
    return lg[i] if forward == "int" else int(lg[i] * 65536)


def _run(kv, tier=None, forward="int", ref=False):
    """Run a model on this cache over TOKENS. ref=False: keep its logits in _REF (the float pass's in units of
    2**-16) and return their digest; ref=True: compare each position with _REF as it comes (one model in RAM at
    a time: a board-sized 64-bit heap holds little more) and return (digest, the largest gap relative to the
    row's largest logit, positions whose top token differs, the first position whose bits differ)."""
    m = _model(kv, tier, forward)
    h = 0
    worst = 0
    flips = 0
    first = -1
    try:
        assert m.cfg.vocab_size == V and m.forward_kind == forward
        for j in range(len(TOKENS)):
            lg = m.forward(TOKENS[j])
            o = j * V
            big = 1
            gap = 0
            ra = 0
            ga = 0
            for i in range(V):
                x = _value(lg, i, forward)
                h = (h * 31 + x) & 0xFFFFFFF
                if not ref:
                    _REF[o + i] = x
                    continue
                r = _REF[o + i]
                big = max(big, abs(r))
                gap = max(gap, abs(r - x))
                if r > _REF[o + ra]:
                    ra = i
                if x > _value(lg, ga, forward):
                    ga = i
            if ref:
                if gap and first < 0:
                    first = j
                worst = max(worst, gap / big)
                flips += ra != ga
    finally:
        m.close()
        _drop(m)
    return (h, worst, flips, first) if ref else h


def _drop(m):
    """Let go of everything a closed model holds: a stale pointer to it on MicroPython's C stack (the collector
    scans it conservatively) must not keep a 20 KB model alive for the next one."""
    for k in list(m.__dict__):
        setattr(m, k, None)


def test_tiered_int_pass_follows_a_cache_that_keeps_everything():
    kernels.select("plain")
    _run({"dtype": "i8", "align": 0, "max_tokens": 32})
    h, worst, flips, first = _run(RING, TIER, ref=True)
    # until the first block leaves the ring (position 12) both caches hold the same rows in the same order: equal
    # bits; then the cold blocks are folded before the ring (another order of the online softmax): close
    assert first >= 12, first
    assert worst < 2e-3 and flips == 0, (worst, flips)


def test_tiered_float_pass_follows_a_cache_that_keeps_everything():
    kernels.select("plain")
    _run({"dtype": "f32", "align": 0, "max_tokens": 32}, forward="float")
    h, worst, flips, first = _run(dict(RING, dtype="f32"), dict(TIER, cold_dtype="f32"), "float", ref=True)
    assert worst < 2e-4 and flips == 0, (worst, flips)


def test_tiered_int_pass_is_bit_identical_across_kernel_kinds():
    kernels.select("plain")
    want = _run(RING, dict(TIER, cold_dtype="i4"))
    kernels.select(BEST)  # the best kind here (asm on Arm, viper on MicroPython) against plain
    assert _run(RING, dict(TIER, cold_dtype="i4")) == want, BEST
    kernels.select()


def test_tiered_i4_cold_blocks_stay_close():
    kernels.select("plain")
    _run({"dtype": "i8", "align": 0, "max_tokens": 32})
    h, worst, flips, first = _run(RING, dict(TIER, cold_dtype="i4"), ref=True)
    assert worst < 0.05, worst


def test_tiered_int_step_allocates_nothing():
    need("heap_lock")
    kernels.select()
    m = _model(RING, TIER)
    for t in TOKENS[:14]:  # warm, and past the first block's move to flash
        m.forward(t)
    try:
        for i in range(2):  # positions 14, 15: no block moves (the ring has room)
            under_heap_lock(m.forward, TOKENS[14 + i])
    finally:
        m.close()


def test_auto_runs_a_tiered_cache_on_the_integer_pass_where_the_kernels_allow():
    for kind in ("plain", BEST):
        kernels.select(kind)
        m = _model(RING, TIER, forward="auto")
        got = m.forward_kind
        m.close()
        m = None
        assert got == ("int" if kind in ("asm", "viper") else "float"), (kind, got)
    kernels.select()


def test_a_tiered_cache_refuses_what_it_cannot_run():
    kernels.select("plain")
    f = _files()
    from kvedge.model.llama import Llama
    for tier, forward, exc in ((dict(TIER, cold_dtype="f16"), "int", ValueError),
                               ([4, "i8", 8], "float", TypeError),
                               ({"block": 4, "cold_dtype": "i8"}, "float", ValueError)):
        raises(exc, Llama, f["i8"], kv=RING, forward=forward, tier=tier, cold_path=f["cold"])
    raises(ValueError, Llama, f["i8"], kv=RING, forward="int", tier=TIER, cold_path=f["cold"],
           policy=lambda c: None)
    raises(ValueError, Llama, f["i8"], kv=RING, forward="warp", cold_path=f["cold"])

