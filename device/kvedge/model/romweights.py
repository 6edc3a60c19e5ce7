"""int8 weights read in place from a memory-mapped file (MicroPython's ROMFS): kvedge.model.checkpoint's "rom"
placement. Its own module, imported only by runs that place weights there."""
from array import array


def map_views(buf):
    """(bytes, int8, float32) views of a buffer, nothing copied: the buffer itself (viper kernels read it with
    ptr8) and uctypes arrays of signed bytes and of floats over the same memory. None without uctypes or when
    the buffer's address is not 4-aligned (float loads from it would fault on Cortex-M0+ and Xtensa)."""
    try:
        import uctypes
    except ImportError:
        return None
    addr = uctypes.addressof(buf)
    n = len(buf)
    if addr & 3:
        return None
    i8 = uctypes.struct(addr, {"a": (uctypes.ARRAY | 0, uctypes.INT8 | n)}).a
    f32 = uctypes.struct(addr, {"a": (uctypes.ARRAY | 0, uctypes.FLOAT32 | (n >> 2))}).a
    return buf, i8, f32


def map_file(f):
    """map_views() of an open file that its filesystem maps in place (ROMFS files support the buffer protocol:
    memoryview(f) points into flash), else None (littlefs/FAT/CPython files are read through a buffer)."""
    try:
        view = memoryview(f)
    except TypeError:
        return None
    return map_views(view)


def reads_raw_bytes(k):
    """True when k.mv_i8 takes unsigned buffers (bytes, memoryview) and reads them as int8 (pointer kernels
    fix the sign up), so it can run on the file's bytes; plain subscripts need the int8 view instead."""
    acc = array("i", [0])
    k.mv_i8(bytearray(b"\xff"), 0, array("b", [1]), acc, 0, 1, 1)
    return acc[0] == -1


class RomI8Matrix:
    """int8 rows and their f32 scales read where they lie in a mapped file: no copy of a row, no RAM per row."""

    def __init__(self, views, raw, off, rows, cols):
        self.codes = views[0] if raw else views[1]
        self.i8, self.f32 = views[1], views[2]
        self.so = off >> 2  # the scales, as an index of the float view (every offset is a multiple of 4)
        self.off = off + 4 * rows
        self.rows, self.cols = rows, cols

    def mv(self, k, x, xq, xs, acc, out):
        k.mv_i8(self.codes, self.off, xq, acc, 0, self.rows, self.cols)
        k.mv_scale(acc, self.f32, self.so, xs, out, 0, self.rows)

    def row(self, r, out):
        n, s, codes = self.cols, self.f32[self.so + r], self.i8
        o = self.off + r * n
        for c in range(n):
            out[c] = codes[o + c] * s
