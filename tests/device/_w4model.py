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
