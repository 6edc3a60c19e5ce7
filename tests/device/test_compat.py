# kvedge.compat: zeros() allocates its array once at the final size (no throwaway buffer doubling the peak),
# float_array() falls back to 'f' where there is no 'd', and need("fs") notices a read-only filesystem.
import gc

from kvedge.compat import float_array, mem_alloc, zeros
from _support import Skip, fs_writable, need, skip

SIZES = {"b": 1, "B": 1, "h": 2, "H": 2, "i": 4, "I": 4, "f": 4}


def test_zeros_are_zeros_of_the_right_length_and_type():
    for tc in SIZES:
        for n in (0, 1, 2, 3, 5, 127, 128, 129, 255, 256, 257, 1000):
            a = zeros(tc, n)
            assert len(a) == n and len(bytes(a)) == n * SIZES[tc], (tc, n, len(a))
            for i in range(n):
                assert a[i] == 0, (tc, n, i, a[i])
            if n:
                a[n - 1] = 7                      # writable, and no item shares storage with another
                assert a[n - 1] == 7 and (n == 1 or a[n - 2] == 0)


def test_zeros_allocate_the_array_once():
    need("mem_alloc")
    for tc, n in (("f", 4096), ("i", 1500), ("h", 3000), ("b", 5000), ("B", 200)):
        gc.collect()
        gc.disable()
        try:
            a0 = mem_alloc()
            a = zeros(tc, n)
            grew = mem_alloc() - a0
        finally:
            gc.enable()
        # the array's own buffer plus small garbage (a range, log2(n) memoryview slices or a generator: about
        # 1.4 KB on a 32-bit port); the old bytes(n * size) temporary doubled the buffer
        assert n * SIZES[tc] <= grew <= n * SIZES[tc] + 2048, (tc, n, grew)
        assert len(a) == n


def test_float_array_holds_fractions():
    a = float_array(9)
    assert len(a) == 9 and len(bytes(a)) in (9 * 8, 9 * 4) and a[8] == 0
    a[3] = 0.25
    assert a[3] == 0.25


class _ReadOnly:
    # what open() does on CIRCUITPY while USB is connected
    def __call__(self, name, mode="r"):
        raise OSError(30)


def test_need_fs_notices_a_read_only_filesystem():
    assert fs_writable(_ReadOnly()) is False
    writable = fs_writable()
    try:
        need("fs")
        assert writable
    except Skip:
        assert not writable


def test_need_fs_on_a_real_read_only_filesystem():
    # the emulated board's ROMFS is read-only for real; elsewhere there is none to try
    import os
    try:
        os.listdir("/rom")
    except (OSError, AttributeError):
        skip("no read-only filesystem here")
    here = os.getcwd()
    os.chdir("/rom")
    try:
        assert fs_writable() is False
    finally:
        os.chdir(here)
    assert fs_writable() is True
