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


# ---- matrix-vector products of the model (mv_*) ----
# Float kernels come from the native module (viper has no float pointers); the int8 one is viper.
from kvedge.kernels_native import mv_f32, mv_scale, mv_quant  # noqa: E402,F401


@micropython.viper
def mv_i8(w, wo: int, x, acc, ao: int, rows: int, cols: int):
    # acc[ao+r] = sum_c w[wo + r*cols + c] * x[c]; w, x array('b'), acc array('i'). (v ^ 128) - 128 turns
    # the unsigned byte back into its signed value without a branch. |sum| <= 127*127*cols < 2**30.
    pw = ptr8(w)  # noqa: F821
    px = ptr8(x)  # noqa: F821
    pa = ptr32(acc)  # noqa: F821
    b = wo
    r = 0
    while r < rows:
        s = 0
        c = 0
        while c < cols:
            s += ((pw[b + c] ^ 128) - 128) * ((px[c] ^ 128) - 128)
            c += 1
        pa[ao + r] = s
        b += cols
        r += 1
