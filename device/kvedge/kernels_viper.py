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


# ---- attention tiles over the i8 cache: same arithmetic as kernels_plain.att_* (see there) ----
# ptr32 loads are zero-extended on 64-bit ports: values that may be negative are sign-extended by hand
# (or-ing in -2**31 sets the high bits on 64-bit words and changes nothing on 32-bit ones). The constants
# are built at run time: a literal 1 << 31 is not a small int on 32-bit boards and would not compile.

@micropython.viper
def att_scores_i8(arena, q, tile) -> int:
    a = ptr8(arena)  # noqa: F821
    qq = ptr8(q)  # noqa: F821
    tl = ptr32(tile)  # noqa: F821
    nt = int(tl[0])
    D = int(tl[1])
    qo = int(tl[2])
    T = int(tl[3])
    B = int(tl[4])
    eq = int(tl[5])
    sat = 1 << 29
    tmax = 0 - sat
    evt = 0
    j = 0
    while j < nt:
        ko = int(tl[16 + j])
        s = 0
        i = 0
        while i < D:
            s += ((int(a[ko + i]) ^ 128) - 128) * ((int(qq[qo + i]) ^ 128) - 128)
            i += 1
        km = int(tl[16 + T + j])
        h = int(a[km]) | (int(a[km + 1]) << 8)
        e = (h >> 10) & 31
        m = h & 1023
        if e != 0:
            m += 1024
        else:
            e = 1
        neg = 0
        if s < 0:
            neg = 1
            s = 0 - s
        aa = (s >> 10) * m + (((s & 1023) * m) >> 10)
        x = (aa >> 11) * B
        y = (aa & 2047) * B
        r = 28 - eq - e
        u = 0
        if r >= 11:
            u = (x >> (r - 11)) + (y >> r)
        elif r >= 0 and x < (1 << (18 + r)):
            u = (x << (11 - r)) + (y >> r)
        elif aa != 0:
            u = sat
        if u > sat:
            u = sat
        if neg:
            u = 0 - u
        tl[16 + 2 * T + j] = u
        if u > tmax:
            tmax = u
        vm = int(tl[16 + 4 * T + j])
        ev = (int(a[vm + 1]) >> 2) & 31
        if ev == 0:
            ev = 1
        if ev > evt:
            evt = ev
        j += 1
    tl[9] = tmax
    tl[10] = evt
    return 0


@micropython.viper
def att_weights_i8(arena, tile, exp2) -> int:
    a = ptr8(arena)  # noqa: F821
    tl = ptr32(tile)  # noqa: F821
    ex = ptr16(exp2)  # noqa: F821
    nt = int(tl[0])
    T = int(tl[3])
    sbit = 1
    sbit <<= 31
    hi = 0 - sbit
    M = int(tl[6])
    if M & sbit:
        M |= hi
    ws = int(tl[7])
    evmax = int(tl[8])
    total = 0
    j = 0
    while j < nt:
        u = int(tl[16 + 2 * T + j])
        if u & sbit:
            u |= hi
        d = M - u
        n = d >> 16
        if n >= 15:
            tl[16 + 5 * T + j] = 0
            j += 1
            continue
        f = d & 0xFFFF
        i = f >> 8
        t0 = int(ex[i])
        w = (t0 - (((t0 - int(ex[i + 1])) * (f & 255)) >> 8)) >> (n + ws)
        total += w
        vm = int(tl[16 + 4 * T + j])
        h = int(a[vm]) | (int(a[vm + 1]) << 8)
        e = (h >> 10) & 31
        m = h & 1023
        if e != 0:
            m += 1024
        else:
            e = 1
        tl[16 + 5 * T + j] = (w * m) >> (10 + evmax - e)
        j += 1
    return total


@micropython.viper
def att_wsum_i8(arena, tile, out) -> int:
    a = ptr8(arena)  # noqa: F821
    tl = ptr32(tile)  # noqa: F821
    o = ptr32(out)  # noqa: F821
    nt = int(tl[0])
    D = int(tl[1])
    T = int(tl[3])
    i = 0
    while i < D:
        s = 0
        j = 0
        while j < nt:
            s += int(tl[16 + 5 * T + j]) * ((int(a[int(tl[16 + 3 * T + j]) + i]) ^ 128) - 128)
            j += 1
        o[i] = s
        i += 1
    return 0


# Row conversions for f32 and i4 rows run once per row per step: the native versions serve here.
from kvedge.kernels_native import att_conv_f32, att_conv_i4  # noqa: E402,F401
