# The int4 tests' model (test_w4*.py): a small random int4 file each test file writes itself with the tests' own
# writer (_w4ref.write_model; kvedge's converter is test_w4convert's), and (for test_w4model) the same weights
# dequantized to f32 by the tests' own reader.
import gc

from _intmodel import _exists
from _model_support import tmp_path
from _support import need

_PATHS = {}
KV = {"dtype": "i8", "align": 0, "max_tokens": 24}


def files(deq=True):
    """{"i4": the int4 file, "deq": its f32 dequantization (with deq)}, written once per test file."""
    need("fs")
    if _PATHS and not _exists(_PATHS["i4"]):  # written again in each test file's folder (pytest gives each its own)
        _PATHS.clear()
    if not _PATHS or (deq and "deq" not in _PATHS):
        import _w4ref
        if not _PATHS:
            # dim 32 (one group), hidden 72 (three groups, the last one padded), GQA 4 heads on 2, 48 tokens
            q = tmp_path("kvedge_w4_i4.bin")
            _w4ref.write_model(q)
            _PATHS["i4"] = q
        if deq:
            r = tmp_path("kvedge_w4_deq.bin")
            _w4ref.dequantize(_PATHS["i4"], r)
            _PATHS["deq"] = r
        from _support import forget
        forget("_w4ref")  # not run again: its code freed
    return _PATHS


def model(path, forward="int", stream=False, kv=None):
    from kvedge.model.llama import Llama
    gc.collect()
    return Llama(path, kv=kv or KV, forward=forward, tile=8, stream=stream)


def same_bits(kinds):
    """Assert that the int4 model's logits (and the residual after the last layer) have the same bits in RAM,
    streamed and with each of `kinds` (their kernels compiled first by the test file, before it imports this
    module: _intmodel.preload(kinds=...) and preload4). Each run keeps a digest of its vectors, not the vectors, and builds its model in a function
    of its own: a model referenced from a dead slot of the caller's frame stays alive (the GC scans the frame
    conservatively) while the next one loads, two models on the heap at once."""
    path = files(deq=False)["i4"]  # the tests' writer compiled, run and freed
    from kvedge import kernels
    first = None
    for kind in kinds:
        kernels.select(kind)
        for stream in (False, True):
            got = _digests(path, stream)
            if first is None:
                first = got
            assert got == first, (kind, stream)
    assert kinds, "no kernel kind loads"


def _digests(path, stream, n=6):
    from _intmodel import TOKENS, digest
    m = model(path, stream=stream)
    out = []
    for t in TOKENS[:n]:
        x = m.forward(t)
        out.append((digest(x), m.intp.exp_logits, digest(m.intp.x)))
    m.close()
    del m
    gc.collect()
    return out
