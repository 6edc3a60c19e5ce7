# @micropython.viper q_mv4: the integer pass's matrix-vector product over int4 rows, same arithmetic as
# kernels.q4_plain (see there; the register notes of kernels.q8_viper hold here too). Loaded only for int4 weights.
import micropython

OK = True


@micropython.viper
def q_mv4(w: ptr8, x: ptr32, out: ptr32, p: ptr32) -> int:  # noqa: F821
    # int4 rows (kernels.q8_plain.q_mv4): w walks the codes, x the input, a group (16 bytes, 32 products) a step;
    # each group's sum is fixed modulo 2**32 (x read through ptr32 is zero-extended on 64-bit ports)
    sb = 1
    sb <<= 31
    m32 = sb + sb - 1
    rows = p[1]
    ng = p[2] >> 5
    xm = p[3]
    os = (p[4] ^ sb) - sb
    add = p[5]
    ro = p[6]
    sa = int(w) + p[7]  # the next group's f16 scale
    eg = p[8]
    vmax = (1 << 29) - 1
    big = 0
    wa = int(w) + p[0]
    xa = int(x)
    r = 0
    while r < rows:
        s = 0
        w = ptr8(wa)  # noqa: F821
        x = ptr32(xa)  # noqa: F821
        g = ng
        while g > 0:
            d = 0
            i = 0
            while i < 4:  # four bytes (eight products) a step
                u = w[0]
                v = w[1]
                d += ((((u & 15) ^ 8) - 8) * x[0] + (((u >> 4) ^ 8) - 8) * x[1]
                      + (((v & 15) ^ 8) - 8) * x[2] + (((v >> 4) ^ 8) - 8) * x[3])
                u = w[2]
                v = w[3]
                d += ((((u & 15) ^ 8) - 8) * x[4] + (((u >> 4) ^ 8) - 8) * x[5]
                      + (((v & 15) ^ 8) - 8) * x[6] + (((v >> 4) ^ 8) - 8) * x[7])
                w = ptr8(int(w) + 4)  # noqa: F821
                x = ptr32(int(x) + 32)  # noqa: F821
                i += 1
            d = ((d & m32) ^ sb) - sb
            h = ptr8(sa)  # noqa: F821
            hv = h[0] | (h[1] << 8)
            sa += 2
            m = hv & 1023
            k = hv >> 10
            if k:
                m |= 1024
            else:
                k = 1
            k = eg - k
            if k > 31:
                k = 31
            s += (d * (m >> 3)) >> k
            g -= 1
        wa += ng << 4
        t = (s >> 15) * xm + (((s & 32767) * xm) >> 15)
        k = os
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
    return big


def _xtensa():
    from kvedge.kernels.q8_viper import xtensa_kernel
    return xtensa_kernel("q_mv4")


_f = _xtensa()  # the inline assembler's on a call0 Xtensa port (kvedge.kernels.q8_asm_xtensa)
if _f is not None:
    q_mv4 = _f  # noqa: F811
del _f
