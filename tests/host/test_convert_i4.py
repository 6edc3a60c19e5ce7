"""The host's int4 converter (kvedge_host.readers.write.convert_i4_numpy: numpy, for 15M-parameter models) writes
byte for byte the file the device's converter (kvedge.model.convert4, pure Python: the rule) writes, on random
models of several shapes (rows that end inside a group, an unshared classifier) with the groups that test the
rule's edges: all zero, values so small the scale is an f16 subnormal, one outlier among small values, values
halfway between codes. And numpy's float64 -> float16 rounding is kvedge.quant.f16_bits' (the scales' bits)."""
import struct

import numpy as np
import pytest

from kvedge.model import header, tiny
from kvedge.model.convert4 import convert_to_i4
from kvedge.quant import f16_bits
from kvedge_host.readers.write import convert_i4_numpy


def _edges(path, dim):
    """Overwrite the embedding's first rows (llama2.c file: header, then the embedding) with edge-case groups."""
    rows = [np.zeros(dim), np.full(dim, 3e-7), np.r_[50.0, np.full(dim - 1, 0.01)],
            (np.arange(dim) % 16 - 8 + 0.5) * 0.125, -np.linspace(1e-3, 2.0, dim)]
    with open(path, "r+b") as f:
        f.seek(28)
        for r in rows:
            f.write(np.asarray(r, dtype="<f4").tobytes())


@pytest.mark.parametrize("shape,shared,seed", [
    (dict(dim=32, hidden_dim=72, vocab_size=48), True, 3),
    (dict(dim=48, hidden_dim=100, vocab_size=300, n_heads=6, n_kv_heads=3), False, 8),
    (dict(dim=16, hidden_dim=40, vocab_size=352), True, 21),
])
def test_numpy_and_device_converters_write_the_same_bytes(tmp_path, shape, shared, seed):
    src = str(tmp_path / "m.bin")
    tiny.write_checkpoint(src, seed=seed, shared=shared, **shape)
    _edges(src, shape["dim"])
    a, b = str(tmp_path / "dev.i4.bin"), str(tmp_path / "np.i4.bin")
    n = convert_to_i4(src, a)[1]
    assert convert_i4_numpy(src, b) == n
    da, db = open(a, "rb").read(), open(b, "rb").read()
    assert len(da) == n and header.read_config(b)[1] == "i4"
    if da != db:
        i = next(i for i in range(len(da)) if da[i] != db[i])
        pytest.fail("first differing byte at %d of %d: %r vs %r" % (i, n, da[i:i + 8], db[i:i + 8]))


def test_a_non_finite_weight_is_refused_by_both(tmp_path):
    src = str(tmp_path / "m.bin")
    tiny.write_checkpoint(src, seed=4, dim=32, hidden_dim=72, vocab_size=48)
    with open(src, "r+b") as f:
        f.seek(28 + 4 * 40)
        f.write(struct.pack("<f", float("inf")))
    for conv in (lambda o: convert_to_i4(src, o), lambda o: convert_i4_numpy(src, o)):
        with pytest.raises(header.CheckpointError, match="not finite"):
            conv(str(tmp_path / "out.bin"))


def test_numpys_half_rounding_is_kvedges():
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.standard_normal(20000) * 10.0 ** rng.integers(-9, 5, 20000),
                        # exact halfway points between neighbouring halves (ties to even), subnormals included
                        (np.arange(1, 4000) + 0.5) * 2.0 ** -24, (np.arange(1024, 3000) + 0.5) * 2.0 ** -10,
                        [65504.0, 65519.99, 65520.0, 6.1e-5, 5.96e-8, 2.98e-8, 2.99e-8]])
    with np.errstate(over="ignore"):  # 65520 and above round to infinity, as f16_bits says
        got = x.astype(np.float16).view(np.uint16)
    want = np.array([f16_bits(float(v)) for v in x], dtype=np.uint16)
    assert (got == want).all(), x[got != want][:5]
