# The integer forward pass (kvedge.model.pass_int) is bit-identical across kernel kinds, and with its weights
# streamed from the file. Every kind's q_* kernels compiled first, on a fresh heap (this file's own).
import _intmodel
_intmodel.preload(every_kind=True)
from _intmodel import TOKENS, digest, model  # noqa: E402
from kvedge import kernels  # noqa: E402


def test_int_forward_is_bit_identical_across_kernel_kinds():
    runs = []
    for kind in kernels.available():
        kernels.select(kind)
        m = model()
        runs.append([(digest(m.forward(t)), m.intp.exp_logits, digest(m.intp.x)) for t in TOKENS])
        m.close()
        del m
    kernels.select()
    for r in runs[1:]:
        assert r == runs[0]


def test_int_forward_streamed_weights_are_identical():
    # one model at a time: the first's results are kept as digests, its arrays freed before the second loads
    a = model()
    want = [(digest(a.forward(tok)), digest(a.intp.x)) for tok in TOKENS[:5]]
    a.close()
    del a
    b = model(stream=True)
    assert [(digest(b.forward(tok)), digest(b.intp.x)) for tok in TOKENS[:5]] == want
    b.close()
