# q_mv for Xtensa cores whose MicroPython has the inline assembler (@micropython.asm_xtensa: the ESP8266 port and
# the lx106 stand-in; an ESP32's MicroPython has none by default, and there this module does not load).
# kvedge.qkernels_viper takes its q_mv from here on an Xtensa port (its probe); the other q_* kernels stay viper.
# Same arithmetic as kvedge.qkernels_plain.q_mv, bit for bit:
# - _dots (asm): the raw dot products sum(u * x) of up to CHUNK rows of offset-binary bytes u with the int32
#   codes x, eight products a loop step (l8ui, l32i, mull, add: four instructions a product), then the row's
#   last cols % 8 one at a time. Every sum stays below 2**30 (intpath.code_max bounds the codes).
# - q_mv (viper): 128 * sum(x) once, then per chunk of rows the asm sums and the viper epilogue of
#   qkernels_viper.q_mv (mantissas, shift, clamp, add, max |out|).
# Nothing is allocated per call: the chunk's sums and the asm's parameter words live in two module arrays; the
# asm gets the weights and codes as the caller's own objects (their buffers' addresses), never a boxed address.
import micropython
from array import array

OK = True
CHUNK = 64  # rows a call of _dots (the sums' buffer: 256 bytes)
_S = array("i", [0] * CHUNK)
_D = array("i", [0] * 4)  # rows of this chunk, cols & ~7, cols & 7, byte offset of the chunk's first row


@micropython.asm_xtensa
def _dots(a2, a3, a4, a5):
    # a2: the weights' buffer, a3: the codes (int32), a4: the sums (int32, one a row), a5: _D
    l32i(a6, a5, 0)  # rows left
    l32i(a7, a5, 4)  # cols & ~7
    l32i(a12, a5, 8)  # cols & 7
    l32i(a13, a5, 12)
    add(a2, a2, a13)  # the chunk's first row
    label(ROW)
    movi(a9, 0)  # the row's sum
    mov(a8, a3)  # the codes, from the first
    add(a13, a2, a7)  # the end of the row's groups of eight
    j(TEST8)  # loops test at the bottom: mpy-cross 1.29 asserts on a forward conditional branch after a label
    label(EIGHT)
    l8ui(a10, a2, 0)
    l32i(a11, a8, 0)
    mull(a10, a10, a11)
    add(a9, a9, a10)
    l8ui(a14, a2, 1)
    l32i(a11, a8, 4)
    mull(a14, a14, a11)
    add(a9, a9, a14)
    l8ui(a10, a2, 2)
    l32i(a11, a8, 8)
    mull(a10, a10, a11)
    add(a9, a9, a10)
    l8ui(a14, a2, 3)
    l32i(a11, a8, 12)
    mull(a14, a14, a11)
    add(a9, a9, a14)
    l8ui(a10, a2, 4)
    l32i(a11, a8, 16)
    mull(a10, a10, a11)
    add(a9, a9, a10)
    l8ui(a14, a2, 5)
    l32i(a11, a8, 20)
    mull(a14, a14, a11)
    add(a9, a9, a14)
    l8ui(a10, a2, 6)
    l32i(a11, a8, 24)
    mull(a10, a10, a11)
    add(a9, a9, a10)
    l8ui(a14, a2, 7)
    l32i(a11, a8, 28)
    mull(a14, a14, a11)
    add(a9, a9, a14)
    addi(a2, a2, 8)
    addi(a8, a8, 32)
    label(TEST8)
    bne(a2, a13, EIGHT)
    add(a13, a2, a12)  # the row's end
    j(TEST1)
    label(ONE)
    l8ui(a10, a2, 0)
    l32i(a11, a8, 0)
    mull(a10, a10, a11)
    add(a9, a9, a10)
    addi(a2, a2, 1)
    addi(a8, a8, 4)
    label(TEST1)
    bne(a2, a13, ONE)
    s32i(a9, a4, 0)
    addi(a4, a4, 4)
    addi(a6, a6, -1)
    bnez(a6, ROW)
    movi(a2, 0)


@micropython.viper
def q_mv(w, x, out: ptr32, p: ptr32) -> int:  # noqa: F821
    # w and x stay objects: _dots takes them as they are (a viper int above 2**30, as a RAM address is, would be
    # boxed into a heap long int on the way)
    sb = 1
    sb <<= 31
    m32 = sb + sb - 1
    xp = ptr32(x)  # noqa: F821
    rows = p[1]
    cols = p[2]
    xm = p[3]
    os = (p[4] ^ sb) - sb
    add = p[5]
    ro = p[6]
    vmax = (1 << 29) - 1
    sx = 0
    c = 0
    while c < cols:
        sx += xp[c]
        c += 1
    sx = (((sx << 7) & m32) ^ sb) - sb
    p[7] = sx
    S = _S
    sp = ptr32(S)  # noqa: F821
    Dobj = _D
    D = ptr32(Dobj)  # noqa: F821
    D[1] = cols - (cols & 7)
    D[2] = cols & 7
    off = p[0]
    big = 0
    r = 0
    while r < rows:
        n = rows - r
        if n > 64:  # CHUNK
            n = 64
        D[0] = n
        D[3] = off
        _dots(w, x, S, Dobj)
        off += n * cols
        i = 0
        while i < n:
            s = (((sp[i] - sx) & m32) ^ sb) - sb
            sw = p[8 + ro + r]
            m = sw >> 8
            t = (s >> 15) * m + (((s & 32767) * m) >> 15)
            t = (t >> 15) * xm + (((t & 32767) * xm) >> 15)
            k = (sw & 255) + os
            if k >= 0:
                if k > 31:
                    k = 31
                t = t >> k
            elif k > -30:
                lim = vmax >> (0 - k)
                if t > lim:
                    t = vmax
                elif t < 0 - lim:
                    t = 0 - vmax
                else:
                    t = t << (0 - k)
            elif t > 0:
                t = vmax
            elif t < 0:
                t = 0 - vmax
            if add:
                t += (out[ro + r] ^ sb) - sb
            if t > vmax:
                t = vmax
            elif t < 0 - vmax:
                t = 0 - vmax
            out[ro + r] = t
            if t < 0:
                t = 0 - t
            if t > big:
                big = t
            r += 1
            i += 1
    return big
