# The integer forward pass's test model, shared by test_pass_int*.py: a small checkpoint each file writes itself
# (f32 and its int8 conversion), the model on it, a digest of a vector. preload() first: it compiles the large
# modules, each on a collected heap (a 215 KB heap with the package compiled from source fragments otherwise).
import gc

TOKENS = (1, 40, 30, 7, 7, 29, 3, 45, 12, 12, 8)
_PATHS = {}


def preload(every_kind=False, kinds=None):
    """Import the model, the attention and the integer pass, and compile the q_* and fused attention kernels of
    the selected kind (with every_kind, of every kind this runtime has, for tests that compare them; kinds: of
    those of these kinds that load here, no other's). Returns the kinds compiled."""
    from kvedge.model import llama  # noqa: F401
    gc.collect()
    from kvedge import attention  # noqa: F401
    gc.collect()
    from kvedge.model import pass_int
    gc.collect()
    from kvedge import cacheq8  # noqa: F401 (the integer pass's cache)
    gc.collect()
    from kvedge import kernels
    restore = kinds is None  # the kinds a caller names: the last one stays selected (no other kind loaded)
    if kinds is None:
        kinds = kernels.available() if every_kind else (kernels.kind(),)
    done = []
    for kind in kinds:
        try:
            k = kernels.select(kind)
        except ValueError:  # not on this runtime
            continue
        pass_int.qkernels()
        gc.collect()
        if hasattr(k, "att_preload"):
            k.att_preload(k)
        gc.collect()
        done.append(kind)
    if restore:
        kernels.select()
    return done


def preload4(every_kind=True, kinds=None):
    """Compile q_mv4 (kvedge.q4kernels_*) of the selected kind (every_kind: of every kind this runtime has; kinds:
    of those), on a collected heap."""
    from kvedge import kernels
    from kvedge.model import pass_int4
    restore = kinds is None
    if kinds is None:
        kinds = kernels.available() if every_kind else (kernels.kind(),)
    for kind in kinds:
        kernels.select(kind)
        pass_int4.kernels4()
        gc.collect()
    if restore:
        kernels.select()


def files():
    from _support import need
    from _model_support import tiny_checkpoints
    need("fs")
    if not (_PATHS and _exists(_PATHS["i8"])):  # written again in each test file's folder (pytest gives each its own)
        tiny_checkpoints(_PATHS, "kvedge_int_tiny")
    return _PATHS


def _exists(path):
    import os
    try:
        os.stat(path)
        return True
    except OSError:
        return False


def model(forward="int", kv=None, policy=None, **kw):
    """The int8 checkpoint with an i8 cache of 24 tokens (or kv), tiles of 8, the given forward pass."""
    from kvedge.model.llama import Llama
    gc.collect()
    return Llama(files()["i8"], kv=kv or {"dtype": "i8", "align": 0, "max_tokens": 24}, forward=forward or "int",
                 tile=8, policy=policy, **kw)


def digest(v):
    h = 0
    for i in range(len(v)):
        h = (h * 31 + v[i]) & 0xFFFFFFF
    return h


def steady_tokens(m, n):
    """Three tokens to warm up, then n with the heap locked (raises if a step allocates)."""
    from _support import under_heap_lock
    for t in TOKENS[:3]:
        m.forward(t)
    for i in range(n):
        under_heap_lock(m.forward, TOKENS[3 + i % 8])
