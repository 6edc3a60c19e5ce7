# @micropython.viper kernels of the integer forward pass: same arithmetic as kernels.q8_plain (see there).
import micropython

OK = True

# Register-aware: the viper emitter keeps the first locals (parameters first) in registers, only two in .mpy
# files and one when a function has three or more parameters, so inner loops are unrolled (fewer loop-variable
# loads and stores per multiply) and hoist what they read into as few locals as possible.
# Signed int32 values read through ptr32 are sign-extended with (v ^ sb) - sb (sb = 2**31 built at run time):
# a no-op on 32-bit ports, the extension 64-bit ports need. Sums of products are instead exact modulo 2**32
# and fixed once per row.

@micropython.viper
def q_mv(w: ptr8, x: ptr32, out: ptr32, p: ptr32) -> int:  # noqa: F821
    # w and x, the first two parameters, are the two locals a .mpy's viper code keeps in registers (measured on
    # the emulated Cortex-M3: every other local lives on the stack): the inner loop moves them along the row
    # and the input and reads through them at constant offsets; wa and xa keep where they start
    sb = 1
    sb <<= 31
    m32 = sb + sb - 1  # 2**32 - 1 on 64-bit ports, -1 (all ones) on 32-bit ones
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
        sx += x[c]
        c += 1
    sx = (((sx << 7) & m32) ^ sb) - sb
    p[7] = sx
    c32 = cols - (cols & 31)
    tail = cols & 31
    big = 0
    wa = int(w) + p[0]  # the row's address, moved one row at a time
    xa = int(x)
    r = 0
    while r < rows:
        s = 0
        w = ptr8(wa)  # noqa: F821
        x = ptr32(xa)  # noqa: F821
        e = wa + c32
        while int(w) < e:  # 32 products on constant offsets, the loop's test on the moving pointer itself
            s += ((w[0] ^ 128) * x[0] + (w[1] ^ 128) * x[1] + (w[2] ^ 128) * x[2] + (w[3] ^ 128) * x[3]
                  + (w[4] ^ 128) * x[4] + (w[5] ^ 128) * x[5] + (w[6] ^ 128) * x[6] + (w[7] ^ 128) * x[7]
                  + (w[8] ^ 128) * x[8] + (w[9] ^ 128) * x[9] + (w[10] ^ 128) * x[10] + (w[11] ^ 128) * x[11]
                  + (w[12] ^ 128) * x[12] + (w[13] ^ 128) * x[13] + (w[14] ^ 128) * x[14] + (w[15] ^ 128) * x[15]
                  + (w[16] ^ 128) * x[16] + (w[17] ^ 128) * x[17] + (w[18] ^ 128) * x[18] + (w[19] ^ 128) * x[19]
                  + (w[20] ^ 128) * x[20] + (w[21] ^ 128) * x[21] + (w[22] ^ 128) * x[22] + (w[23] ^ 128) * x[23]
                  + (w[24] ^ 128) * x[24] + (w[25] ^ 128) * x[25] + (w[26] ^ 128) * x[26] + (w[27] ^ 128) * x[27]
                  + (w[28] ^ 128) * x[28] + (w[29] ^ 128) * x[29] + (w[30] ^ 128) * x[30] + (w[31] ^ 128) * x[31])
            w = ptr8(int(w) + 32)  # noqa: F821
            x = ptr32(int(x) + 128)  # noqa: F821
        if tail >= 16:
            s += ((w[0] ^ 128) * x[0] + (w[1] ^ 128) * x[1] + (w[2] ^ 128) * x[2] + (w[3] ^ 128) * x[3]
                  + (w[4] ^ 128) * x[4] + (w[5] ^ 128) * x[5] + (w[6] ^ 128) * x[6] + (w[7] ^ 128) * x[7]
                  + (w[8] ^ 128) * x[8] + (w[9] ^ 128) * x[9] + (w[10] ^ 128) * x[10] + (w[11] ^ 128) * x[11]
                  + (w[12] ^ 128) * x[12] + (w[13] ^ 128) * x[13] + (w[14] ^ 128) * x[14] + (w[15] ^ 128) * x[15])
            w = ptr8(int(w) + 16)  # noqa: F821
            x = ptr32(int(x) + 64)  # noqa: F821
        if tail & 8:
            s += ((w[0] ^ 128) * x[0] + (w[1] ^ 128) * x[1] + (w[2] ^ 128) * x[2] + (w[3] ^ 128) * x[3]
                  + (w[4] ^ 128) * x[4] + (w[5] ^ 128) * x[5] + (w[6] ^ 128) * x[6] + (w[7] ^ 128) * x[7])
            w = ptr8(int(w) + 8)  # noqa: F821
            x = ptr32(int(x) + 32)  # noqa: F821
        c = tail & 7
        while c > 0:
            c -= 1
            s += (w[c] ^ 128) * x[c]
        wa += cols
        s = (((s - sx) & m32) ^ sb) - sb
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
    return big


@micropython.viper
def q_scale(A: int, ez: int, C: int, p: ptr32) -> int:  # noqa: F821
    # kernels.q8_plain.q_scale: the two bit lengths by halving, the divisions native
    if A == 0:
        p[0] = 0
        p[1] = 0
        p[2] = 1
        p[3] = 0
        p[4] = 0
        p[5] = 0
        return 0
    a = A
    s = 0 - 15
    if a >> 16:
        a >>= 16
        s += 16
    if a >> 8:
        a >>= 8
        s += 8
    if a >> 4:
        a >>= 4
        s += 4
    if a >> 2:
        a >>= 2
        s += 2
    if a >> 1:
        a >>= 1
        s += 1
    s += a
    if s >= 0:
        An = A >> s
    else:
        An = A << (0 - s)
    c = C
    j = 0 - 1
    if c >> 8:
        c >>= 8
        j += 8
    if c >> 4:
        c >>= 4
        j += 4
    if c >> 2:
        c >>= 2
        j += 2
    if c >> 1:
        c >>= 1
        j += 1
    j += c
    K = 28 - j
    R = ((C << K) + An - 1) // An
    p[0] = s
    p[1] = R
    p[2] = K
    p[3] = C
    xm = ((1 << 29) // R + 1) >> 1
    if xm > 32767:
        xm = 32767
    p[4] = xm
    p[5] = ez + s - j
    return 0


@micropython.viper
def q_rnorm(ss: int, U: int, eps: ptr32, p: ptr32) -> int:  # noqa: F821
    # kernels.q8_plain.q_rnorm
    sb = 1
    sb <<= 31
    xm = p[4]
    k = ((eps[1] ^ sb) - sb) - U
    em = eps[0]
    eu = 0
    if k >= 0:
        if k < 14:
            eu = em << k
        else:
            eu = 1 << 29
    elif k > -31:
        eu = em >> (0 - k)
    v = (ss >> 1) + (eu >> 1)
    U += 1
    if U & 1:
        v >>= 1
        U += 1
    if v == 0 or xm == 0:
        p[4] = 0
        return 0
    while v < (1 << 28):
        v <<= 2
        U -= 2
    y = 1 << 15
    z = (y + v // y) >> 1
    while z < y:
        y = z
        z = (y + v // y) >> 1
    r = (1 << 29) // y
    if r > 32767:
        r = 32767
    pr = xm * r
    a = pr
    b = 0 - 15
    if a >> 16:
        a >>= 16
        b += 16
    if a >> 8:
        a >>= 8
        b += 8
    if a >> 4:
        a >>= 4
        b += 4
    if a >> 2:
        a >>= 2
        b += 2
    if a >> 1:
        a >>= 1
        b += 1
    b += a
    p[4] = pr >> b
    p[5] = ((p[5] ^ sb) - sb) + b - 29 - (U >> 1)
    return 0


@micropython.viper
def q_quant(z: ptr32, codes: ptr32, n: int, p: ptr32) -> int:  # noqa: F821
    sb = 1
    sb <<= 31
    s = (p[0] ^ sb) - sb
    R = p[1]
    K = p[2]
    C = p[3]
    half = 1 << (K - 1)
    i = 0
    while i < n:
        v = (z[i] ^ sb) - sb
        neg = v < 0
        if neg:
            v = 0 - v
        if s >= 0:
            v = v >> s
        else:
            v = v << (0 - s)
        c = (v * R + half) >> K
        if c > C:
            c = C
        if neg:
            c = 0 - c
        codes[i] = c
        i += 1
    return 0


@micropython.viper
def q_normgain(x: ptr32, g: ptr32, z: ptr32, p: ptr32) -> int:  # noqa: F821
    sb = 1
    sb <<= 31
    n = p[0]
    a = p[1]  # max |x|: s = max(0, bitlen - 15), back into p[1]
    s = 0 - 15
    if a >> 16:
        a >>= 16
        s += 16
    if a >> 8:
        a >>= 8
        s += 8
    if a >> 4:
        a >>= 4
        s += 4
    if a >> 2:
        a >>= 2
        s += 2
    if a >> 1:
        a >>= 1
        s += 1
    s += a
    if s < 0:
        s = 0
    p[1] = s
    ln = p[2]
    ss = 0
    big = 0
    i = 0
    while i < n:
        a = (x[i] ^ sb) - sb
        neg = a < 0
        if neg:
            a = 0 - a
        a = a >> s
        ss += (a * a) >> ln
        v = (a * ((g[i] ^ sb) - sb)) >> 15
        if neg:
            v = 0 - v
        z[i] = v
        if v < 0:
            v = 0 - v
        if v > big:
            big = v
        i += 1
    p[3] = ss
    return big


@micropython.viper
def q_rope(v: ptr32, cs: ptr32, n: int, hd: int) -> int:  # noqa: F821
    sb = 1
    sb <<= 31
    vmax = (1 << 29) - 1
    half = hd >> 1
    i = 0
    j = 0
    while i < n:
        c = (cs[2 * j] ^ sb) - sb
        s = (cs[2 * j + 1] ^ sb) - sb
        a = (v[i] ^ sb) - sb
        b = (v[i + 1] ^ sb) - sb
        x = ((a >> 14) * c + (((a & 16383) * c) >> 14)) - ((b >> 14) * s + (((b & 16383) * s) >> 14))
        y = ((a >> 14) * s + (((a & 16383) * s) >> 14)) + ((b >> 14) * c + (((b & 16383) * c) >> 14))
        if x > vmax:
            x = vmax
        elif x < 0 - vmax:
            x = 0 - vmax
        if y > vmax:
            y = vmax
        elif y < 0 - vmax:
            y = 0 - vmax
        v[i] = x
        v[i + 1] = y
        i += 2
        j += 1
        if j == half:
            j = 0
    return 0


@micropython.viper
def q_angles(fq: ptr32, tab: ptr16, cs: ptr32, pos: int) -> int:  # noqa: F821
    p0 = pos & 16383
    p1 = (pos >> 14) & 16383
    ph8 = pos >> 8
    pl8 = pos & 255
    n = fq[0]
    i = 0
    while i < n:
        f = fq[1 + 2 * i]
        fl = fq[2 + 2 * i]
        f0 = f & 16383
        ph = (p0 * f0 + ((((p1 * f0) + p0 * (f >> 14)) & 16383) << 14)) & 0xFFFFFFF
        ph = (ph + ((ph8 * fl) & 0xFFFFFFF) + ((pl8 * fl) >> 8)) & 0xFFFFFFF
        k = 0
        while k < 2:
            q = ph >> 26
            r = ph & 0x3FFFFFF
            if q & 1:
                r = 0x4000000 - r
            j = r >> 18
            t = int(tab[j])
            y = t + (((int(tab[j + 1]) - t) * ((r >> 10) & 255)) >> 8)
            if q & 2:
                y = 0 - y
            cs[2 * i + 1 - k] = y
            ph = (ph + 0x4000000) & 0xFFFFFFF
            k += 1
        i += 1
    return 0


@micropython.viper
def q_swiglu(h: ptr32, tab: ptr16, n: int, p: ptr32) -> int:  # noqa: F821
    sb = 1
    sb <<= 31
    a = p[0]  # max |h[0:2n]|: s = max(0, bitlen - 15), back into p[0]
    s = 0 - 15
    if a >> 16:
        a >>= 16
        s += 16
    if a >> 8:
        a >>= 8
        s += 8
    if a >> 4:
        a >>= 4
        s += 4
    if a >> 2:
        a >>= 2
        s += 2
    if a >> 1:
        a >>= 1
        s += 1
    s += a
    if s < 0:
        s = 0
    p[0] = s
    ks = ((p[1] ^ sb) - sb) + s
    lim = 192 << 8
    big = 0
    i = 0
    while i < n:
        a = ((h[i] ^ sb) - sb) >> s
        b = ((h[n + i] ^ sb) - sb) >> s
        t = 0
        if ks >= 0:
            lk = lim >> ks
            if a >= lk:
                t = lim
            elif a <= 0 - lk:
                t = 0 - lim
            else:
                t = a << ks
        elif ks > -31:
            t = a >> (0 - ks)
        else:
            t = a >> 31
        if t >= lim:
            t = lim - 1
        elif t < 0 - lim:
            t = 0 - lim
        j = (t >> 8) + 192
        y = int(tab[j])
        y += ((int(tab[j + 1]) - y) * (t & 255)) >> 8
        v = ((a * y) >> 15) * b
        h[i] = v
        if v < 0:
            v = 0 - v
        if v > big:
            big = v
        i += 1
    return big


@micropython.viper
def q_heads(v: ptr32, codes: ptr8, sc: ptr16, p: ptr32) -> int:  # noqa: F821
    sb = 1
    sb <<= 31
    nseg = p[0]
    hd = p[1]
    e = (p[2] ^ sb) - sb
    o = 0
    h = 0
    while h < nseg:
        amax = 0
        i = 0
        while i < hd:
            a = (v[o + i] ^ sb) - sb
            if a < 0:
                a = 0 - a
            if a > amax:
                amax = a
            i += 1
        b = 0
        while amax >> b:
            b += 1
        sh = b - 15
        an = 0
        if sh > 0:
            an = ((amax - 1) >> sh) + 1
        else:
            an = amax << (0 - sh)
        S = 2
        if an * 8 <= 2047 * 127:
            S = 3
        M = (an * (1 << S) + 126) // 127
        E = b + e - S + 10
        bits = 0
        Mq = 1
        G = 0
        if amax == 0:
            bits = 0
        elif E >= 31:
            bits = 0x7BFF
            Mq = 2047
            if E < 32:
                G = S + E - 30
            else:
                G = S + 1
        elif E >= 1:
            bits = (E << 10) | (M - 1024)
            Mq = M
            G = S
        else:
            k = 1 - E
            if k < 31:
                Mq = (M + (1 << k) - 1) >> k
            bits = Mq
            G = S - k
        sc[h] = bits
        RM = (1 << 21) // Mq
        i = 0
        while i < hd:
            a = (v[o + i] ^ sb) - sb
            neg = a < 0
            if neg:
                a = 0 - a
            if sh >= 0:
                a = a >> sh
            else:
                a = a << (0 - sh)
            if G >= 0:
                a = a << G
            elif G > -31:
                a = a >> (0 - G)
            else:
                a = a >> 31
            c = (a * RM + (1 << 20)) >> 21
            if c > 127:
                c = 127
            if neg:
                c = 0 - c
            codes[o + i] = c & 255
            i += 1
        o += hd
        h += 1
    return 0


@micropython.viper
def q_align(oq: ptr32, oe: ptr32, n: int, p: ptr32) -> int:  # noqa: F821
    sb = 1
    sb <<= 31
    vmax = (1 << 29) - 1
    heads = p[0]
    hd = p[1]
    emax = (oe[0] ^ sb) - sb
    h = 0
    while h < heads:
        e = (oe[h] ^ sb) - sb
        if e > emax:
            emax = e
        h += 1
    p[2] = emax
    big = 0
    o = 0
    h = 0
    while h < heads:
        k = emax - ((oe[h] ^ sb) - sb)
        if k > 31:
            k = 31
        i = 0
        while i < hd:
            a = (oq[o + i] ^ sb) - sb
            neg = a < 0
            if neg:
                a = 0 - a
            a = a >> k
            if a > vmax:
                a = vmax
            if a > big:
                big = a
            if neg:
                a = 0 - a
            oq[o + i] = a
            i += 1
        o += hd
        h += 1
    return big


@micropython.viper
def q_embed(w: ptr8, x: ptr32, n: int, p: ptr32) -> int:  # noqa: F821
    sb = 1
    sb <<= 31
    vmax = (1 << 29) - 1
    wo = p[0]
    m = p[1]
    k = (p[2] ^ sb) - sb
    big = 0
    i = 0
    while i < n:
        t = ((int(w[wo + i]) ^ 128) - 128) * m  # the byte as int8
        if k >= 0:
            if k > 31:
                t = t >> 31
            else:
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
        x[i] = t
        if t < 0:
            t = 0 - t
        if t > big:
            big = t
        i += 1
    return big


@micropython.viper
def q_argmax(v: ptr32, n: int) -> int:  # noqa: F821
    sb = 1
    sb <<= 31
    best = 0
    bv = (v[0] ^ sb) - sb
    i = 1
    while i < n:
        a = (v[i] ^ sb) - sb
        if a > bv:
            bv = a
            best = i
        i += 1
    return best


@micropython.viper
def q_store(arena: ptr8, codes: ptr8, scales: ptr16, p: ptr32) -> int:  # noqa: F821
    H = p[0]
    D = p[1]
    kv = 0
    while kv < 2:
        h = 0
        while h < H:
            dst = p[2 + kv] + h * p[6]
            src = p[8 + kv] + h * D
            i = 0
            while i < D:
                arena[dst + i] = codes[src + i]
                i += 1
            s = int(scales[p[10 + kv] + h])
            m = p[4 + kv] + h * p[7]
            arena[m] = s & 255
            arena[m + 1] = s >> 8
            h += 1
        kv += 1
    return 0


def xtensa_kernel(name):
    """Kernel `name` (q_mv, q_quant, q_mv4) of kvedge.kernels.q8_asm_xtensa, the inline assembler's, on a call0 Xtensa
    port that has it; else None. Probed, never assumed: only there does that module compile and load."""
    from kvedge.kernels import arch
    if arch() != 9:  # xtensa (call0: the ESP8266, the lx106 stand-in); xtensawin ports have no asm_xtensa
        return None
    try:
        mod = __import__("kvedge.kernels.q8_asm_xtensa").kernels.q8_asm_xtensa
    except (ImportError, SyntaxError, NameError, AttributeError, TypeError, ValueError):
        return None
    return getattr(mod, name, None) if mod.OK else None


_f = xtensa_kernel("q_mv")
if _f is not None:
    q_mv = _f  # noqa: F811
    q_quant = xtensa_kernel("q_quant") or q_quant  # noqa: F811
del _f
