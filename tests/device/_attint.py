# The integer path's cosine against the float reference and the same bits from every kernel kind, for
# test_attention_int.py and test_attention_int_kivi.py (split: one file no longer ran within the unix port's
# 215,040-byte heap once i4/i2 groups were fitted by least squares).
from kvedge import kernels
from _attref import reference, cosine, _case, _int_step, _same

# every kernel kind is compared: load them now, while the heap is whole (a port that compiles them from source needs
# a large transient block, which the cases' fragmented heap may not have later)
kernels.available()


def _int_case(case, seed, dtype="i8", residual=4):
    cfg, c, K, V, live, q, att = _case(dtype, case, seed, residual=residual)
    out, oq, oe = _int_step(att, cfg, q)
    cs = cosine(out, reference(cfg, K, V, live, 0, q))
    for kind in kernels.available():
        att.k = kernels.select(kind)
        _, oq2, oe2 = _int_step(att, cfg, q)
        assert _same(oq2, oq) and _same(oe2, oe), kind
    kernels.select()
    return cs
