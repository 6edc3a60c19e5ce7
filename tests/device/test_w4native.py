# int4 weights give the same bits in RAM, streamed and with the native kernels as with the plain ones (asm and
# viper: test_w4kinds.py, which says why apart).
import _intmodel
KINDS = _intmodel.preload(kinds=("plain", "native"))  # those that load here
_intmodel.preload4(kinds=KINDS)
from _w4model import same_bits  # noqa: E402


def test_int4_rows_give_the_same_bits_in_ram_streamed_and_with_the_native_and_plain_kernels():
    same_bits(KINDS)
