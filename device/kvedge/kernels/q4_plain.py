# Plain-Python q_mv4, the integer forward pass's matrix-vector product over int4 rows: the reference, and what
# CPython and CircuitPython run. Its own module (one per kernel kind: kernels.q4_viper, _native, _asm), loaded
# only for int4 weights (kvedge.model.pass_int4.kernels4): an int8 run's heap holds none of it. Conventions
# (codes, exponents, the +-2**30 bound) as kernels.q8_plain's.
from kvedge.kernels.words import VMAX, P_WO, P_ROWS, P_COLS, P_XM, P_OS, P_ADD, P_RO, P4_SO, P4_EG
OK = True


def q_mv4(w, x, out, p):
    """q_mv for int4 rows (kvedge.model.checkpoint's layout: rows of P_COLS / 32 groups, each an f16 scale at
    w[so + 2 * (row * groups + g)] and 16 bytes of nibble codes at w[wo + 16 * (row * groups + g)]):
    y = sum over groups of (d_g * (m_g >> 3)) >> (EG - e_g), d_g the group's dot product with x, m_g and e_g the
    scale's 11-bit mantissa and exponent field (a subnormal: its fraction, field 1); then y * xm / 2**15 >> os,
    clamped to +-VMAX, stored or added at out[ro + r]. Returns the largest |out| written. The caller keeps x
    within code_max4 of the columns, so every sum stays within +-2**30; x holds P_COLS codes (the padding codes
    are zero, whatever x holds there)."""
    wo = p[P_WO]
    so = p[P4_SO]
    rows = p[P_ROWS]
    ng = p[P_COLS] >> 5
    xm = p[P_XM]
    os = p[P_OS]
    add = p[P_ADD]
    ro = p[P_RO]
    eg = p[P4_EG]
    big = 0
    b = wo
    a = so
    for r in range(rows):
        s = 0
        c = 0
        for g in range(ng):
            d = 0
            e = b + 16
            while b < e:  # eight products a step
                u = w[b]
                v = w[b + 1]
                d += ((((u & 15) ^ 8) - 8) * x[c] + (((u >> 4) ^ 8) - 8) * x[c + 1]
                      + (((v & 15) ^ 8) - 8) * x[c + 2] + (((v >> 4) ^ 8) - 8) * x[c + 3])
                u = w[b + 2]
                v = w[b + 3]
                d += ((((u & 15) ^ 8) - 8) * x[c + 4] + (((u >> 4) ^ 8) - 8) * x[c + 5]
                      + (((v & 15) ^ 8) - 8) * x[c + 6] + (((v >> 4) ^ 8) - 8) * x[c + 7])
                b += 4
                c += 8
            h = w[a] | (w[a + 1] << 8)
            a += 2
            m = h & 1023
            k = h >> 10
            if k:
                m |= 1024
            else:
                k = 1
            k = eg - k
            s += (d * (m >> 3)) >> (k if k < 31 else 31)
        t = (s >> 15) * xm + (((s & 32767) * xm) >> 15)
        if os >= 0:
            t >>= os if os < 31 else 31
        elif os > -30:
            lim = VMAX >> -os
            t = VMAX if t > lim else (-VMAX if t < -lim else t << -os)
        else:
            t = VMAX if t > 0 else (-VMAX if t < 0 else 0)
        if add:
            t += out[ro + r]
        if t > VMAX:
            t = VMAX
        elif t < -VMAX:
            t = -VMAX
        out[ro + r] = t
        if t < 0:
            t = -t
        if t > big:
            big = t
    return big
