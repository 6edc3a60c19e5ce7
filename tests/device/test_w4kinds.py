# int4 weights give the same bits in RAM, streamed and with the fast kernel kinds (asm, viper) as with the plain
# ones (native's: test_w4native.py). Files of their own, each compiling its kinds' kernels first, on a collected
# heap, and nothing else: every kind compiled from source at once left no block for the int4 rows on a 215 KB heap.
import _intmodel
KINDS = _intmodel.preload(kinds=("plain", "asm", "viper"))  # those that load here
_intmodel.preload4(kinds=KINDS)
from _w4model import same_bits  # noqa: E402


def test_int4_rows_give_the_same_bits_in_ram_streamed_and_with_the_asm_viper_and_plain_kernels():
    same_bits(KINDS)
