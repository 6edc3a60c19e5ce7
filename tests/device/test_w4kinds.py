# int4 weights give the same bits in RAM, streamed and with every kernel kind (a file of its own: every kind's
# kernels compiled at once leave no heap for test_w4model's float reference on a 215 KB heap).
import gc

import _intmodel
_intmodel.preload(every_kind=True)  # compiled first, on a collected heap
_intmodel.preload4()
from _intmodel import TOKENS  # noqa: E402
from _w4model import files as _files, model as _model  # noqa: E402
from kvedge import kernels  # noqa: E402


def _logits(m, tokens):
    out = []
    for t in tokens:
        x = m.forward(t)
        out.append(([x[i] for i in range(len(x))], m.intp.exp_logits))
    m.close()
    del m
    gc.collect()
    return out


def test_int4_rows_give_the_same_bits_in_ram_streamed_and_with_every_kernel_kind():
    f = _files(deq=False)
    first = None
    for kind in kernels.available():
        kernels.select(kind)
        for stream in (False, True):
            got = _logits(_model(f["i4"], stream=stream), TOKENS[:6])
            if first is None:
                first = got
            assert got == first, (kind, stream)
    kernels.select()
