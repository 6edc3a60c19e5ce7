# The integer pass's start-up tables are computed in integers, so a float32 board and CPython build the same ones
# (the pass's tokens are then the same everywhere). The digests below are those of the tables from CPython's
# double-precision math (tests/host/test_int_bounds.py::test_the_integer_tables_equal_double_precision_math
# recomputes them); on the emulated Cortex-M3 math.exp/math.pow in float32 gave another sigmoid table and, at
# head_dim 64, another RoPE table.
from kvedge.model import pass_int

DIGESTS = {"sigmoid": 146567711, "sin": 213059609, "rope8": 66471103, "rope64": 148528996}


def digest(t):
    h = 0
    for v in t:
        h = (h * 31 + v) & 0xFFFFFFF
    return h


def test_the_tables_are_the_same_on_every_runtime():
    assert digest(pass_int.sigmoid_table()) == DIGESTS["sigmoid"]
    assert digest(pass_int.sin_table()) == DIGESTS["sin"]
    assert digest(pass_int.rope_turns(8)) == DIGESTS["rope8"]
    assert digest(pass_int.rope_turns(64)) == DIGESTS["rope64"]


def test_f32_frequencies_are_float32_of_the_exact_power():
    # 10000**0 = 1: mantissa 2**23, exponent 1 (1 = 0.5 * 2**1); 10000**(-1/2) = 0.01 -> float32 0x3C23D70A
    assert pass_int.f32_freq(0, 8) == (1 << 23, 1)
    m, e = pass_int.f32_freq(1, 4)
    assert (m, e) == (0xA3D70A, -6), (hex(m), e)


class _OneArgFile:
    """A file whose readinto takes the buffer only, as mpremote mount's remote files do on a board."""

    def __init__(self, data):
        self.data, self.at = data, 0

    def readinto(self, buf):
        n = min(len(buf), len(self.data) - self.at)
        for i in range(n):
            buf[i] = self.data[self.at + i]
        self.at += n
        return n


def test_streamed_rows_read_from_a_file_whose_readinto_takes_one_argument():
    # pass_int._read's readinto(buf, n) raised TypeError on a mounted file (the device suite from mpremote mount)
    f = _OneArgFile(bytes(range(10)))
    buf = bytearray(8)
    assert pass_int._read(f, buf, 4) == 4 and bytes(buf) == bytes([0, 1, 2, 3, 0, 0, 0, 0])
    assert pass_int._read(f, buf, 8) == 6 and bytes(buf[:6]) == bytes(range(4, 10))
