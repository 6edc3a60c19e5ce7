# Attention's integer path on i4 and i2 KIVI caches (f32 sinks, the sliding f32 residual, low-bit groups) against
# the naive float reference, the same bits from every kernel kind (split from test_attention_int.py for the
# unix port's 215,040-byte heap).
import gc

from _attref import CASES
from _attint import _int_case


def test_integer_path_i4_kivi_with_f32_sinks_and_residual():
    # i4 rows, the f32 prefix (sinks) and the sliding f32 residual (one or two groups) all go through int8 codes
    for i, case in enumerate(CASES):
        for residual in (4, 8):
            cs = _int_case(case, 45 + i, "i4", residual)
            assert cs >= 0.99, (case, residual, cs)
            gc.collect()


def test_integer_path_i2_kivi_and_same_bits_on_every_kernel():
    # 2-bit rows (four levels per value) through the same conversion to int8 codes as i4
    for i, case in enumerate(CASES):
        cs = _int_case(case, 60 + i, "i2", 8 if i % 2 else 4)
        assert cs >= 0.9, (case, cs)
        gc.collect()
