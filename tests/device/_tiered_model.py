# The tiered model tests' shared part: a tiny int8 model (random codes, _w8ref), the tokens, a ring and a tier that move blocks to
# flash, and a runner that compares a model's logits position by position with a reference run's.
import gc

from _support import _feature, need, tmp_path, under_heap_lock
from kvedge.compat import zeros

PATHS = {}
# 22 tokens: with a ring of 8 (+ 4 sinks) in blocks of 4, four blocks leave the ring for flash
TOKENS = (1, 40, 30, 7, 7, 29, 3, 45, 12, 12, 8, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
RING = {"dtype": "i8", "align": 0, "max_tokens": 12, "window": 8, "sinks": 4}
TIER = {"block": 4, "cold_dtype": "i8", "cold_blocks": 8, "at_cap": "drop"}
V = 48
ROW = zeros("i", V)  # one position's reference logits, read back from the reference's file


def files():
    need("fs")
    if PATHS:
        try:  # under pytest each test module runs in its own folder: files made for another are not here
            open(PATHS["i8"], "rb").close()
        except OSError:
            PATHS.clear()
    if not PATHS:
        # the tests' own int8 writer (no f32 model, no converter compiled on the board's heap)
        import _w8ref
        q = tmp_path("kvedge_tier_tiny_i8.bin")
        _w8ref.write_model(q, seed=11, V=V)
        from _support import forget
        forget("_w8ref")  # written once: its code freed
        PATHS.update(i8=q, cold=tmp_path("kvedge_tier_cold"), ref=tmp_path("kvedge_tier_ref.bin"))
    return PATHS


def model(kv, tier=None, forward="int"):
    from kvedge.model.llama import Llama
    f = files()
    gc.collect()
    return Llama(f["i8"], kv=kv, forward=forward, tile=8, tier=tier, cold_path=f["cold"])


def value(lg, i, forward):
    return lg[i] if forward == "int" else int(lg[i] * 65536)


def run(kv, tier=None, forward="int", ref=False, keep=True, locked=()):
    """Run a model on this cache over TOKENS. ref=False: write its logits (the float pass's in units of 2**-16)
    to the reference's file and return their digest; ref=True: compare each position with that file's as it
    comes (one model in RAM at a time, and no reference in RAM: a board-sized heap holds little more) and return
    (digest, the largest gap relative to the row's largest logit, positions whose top token differs, the first
    position whose bits differ). keep=False: the digest alone (no reference written). locked: positions run
    with the heap locked where the runtime can lock it (an allocation there raises MemoryError)."""
    f = open(files()["ref"], "rb" if ref else "wb") if keep or ref else None  # opened before the model is built
    lock = locked if _feature("heap_lock") else ()
    m = None
    h = 0
    worst = 0
    flips = 0
    first = -1
    try:
        m = model(kv, tier, forward)
        assert m.cfg.vocab_size == V and m.forward_kind == forward
        for j in range(len(TOKENS)):
            lg = under_heap_lock(m.forward, TOKENS[j]) if j in lock else m.forward(TOKENS[j])
            if ref:
                assert f.readinto(ROW) == 4 * V
            big = 1
            gap = 0
            ra = 0
            ga = 0
            for i in range(V):
                x = value(lg, i, forward)
                h = (h * 31 + x) & 0xFFFFFFF
                if not ref:
                    ROW[i] = x
                    continue
                r = ROW[i]
                big = max(big, abs(r))
                gap = max(gap, abs(r - x))
                if r > ROW[ra]:
                    ra = i
                if x > value(lg, ga, forward):
                    ga = i
            if ref:
                if gap and first < 0:
                    first = j
                worst = max(worst, gap / big)
                flips += ra != ga
            elif f is not None:
                f.write(ROW)
    finally:
        if f is not None:
            f.close()
        if m is not None:
            m.close()
            drop(m)
    return (h, worst, flips, first) if ref else h


def drop(m):
    """Let go of everything a closed model holds: a stale pointer to it on MicroPython's C stack (the collector
    scans it conservatively) must not keep a 20 KB model alive for the next one."""
    for k in list(m.__dict__):
        setattr(m, k, None)


# the model's files when this module is imported (after the test file's kernels: each test file imports it then),
# while the runner collects garbage every 16 KB: the converter compiled later, between the tests' live objects,
# found no block in one piece on the unix port's 215 KB heap
try:
    files()
except Exception:  # no filesystem here: the tests that need one skip themselves (need("fs"))
    pass
