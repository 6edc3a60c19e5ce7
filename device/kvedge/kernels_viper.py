# @micropython.viper kernels: raw-pointer loops on machine words. Same results as kernels_plain.
# Viper ints are machine words that wrap silently: callers keep every sum within +-2**30.
import micropython

OK = True


@micropython.viper
def dot_i8(a, ia: int, b, ib: int, n: int) -> int:
    pa = ptr8(a)  # noqa: F821  (viper builtin)
    pb = ptr8(b)  # noqa: F821
    s = 0
    i = 0
    while i < n:
        x = pa[ia + i]
        y = pb[ib + i]
        if x > 127:
            x -= 256
        if y > 127:
            y -= 256
        s += x * y
        i += 1
    return s
