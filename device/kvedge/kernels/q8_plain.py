# Plain-Python kernels of the integer forward pass: the reference, and what CPython and CircuitPython run.
# The integer forward pass takes these q_* kernels from kvedge.model.pass_int.qkernels(): the
# qkernels_* module of the attention kernels' kind (viper, native, asm, or this one).
#
# Vectors are array('i') of ints v standing for v * 2**e (the caller keeps e), |v| <= VMAX; matvec inputs are
# int8 codes (held in array('i')) standing for c * xm * 2**xe. Weights are int8 rows as the file holds them
# (two's complement bytes, read where they lie: in RAM, or in place from a mapped ROMFS file); each kind reads
# them signed its own way (here as offset-binary, (b ^ 128) = code + 128, and sum(u * x) - 128 * sum(x), which
# is the same integer). Every intermediate
# stays within +-2**30 (31-bit small ints; 32-bit words in viper/asm) and every shift is at most 31.
# Scalars that need a division (quantization reciprocals, the norm's rsqrt) are computed by the caller, once
# per vector, so every kernel kind gives the same bits.
# q_mv parameter block (array('i')): header, then one word per matrix row: (mantissa << 8) | shift; its
# indexes, q_store's block and VMAX: kvedge.kernels.words
from kvedge.kernels.words import (bitlen, VMAX, P_WO, P_ROWS, P_COLS, P_XM, P_OS, P_ADD, P_RO, P_SX, P_HDR, S_KVH, S_D,  # noqa: F401
                           S_KROW, S_KSC, S_HSTEP, S_SSTEP, S_KC, S_KS)
OK = True


def q_mv(w, x, out, p):
    """out[ro+r] (=|+=) y_r for r < rows: y = acc * wm * xm / 2**30 >> (shift + os), acc = the int8 dot product
    of row ro+r and x[0:cols], two floor multiplications by 15-bit mantissas; clamped to +-VMAX. Returns the
    largest |out| written."""
    wo = p[P_WO]
    rows = p[P_ROWS]
    cols = p[P_COLS]
    xm = p[P_XM]
    os = p[P_OS]
    add = p[P_ADD]
    ro = p[P_RO]
    sx = 0
    for c in range(cols):
        sx += x[c]
    sx <<= 7
    p[P_SX] = sx
    big = 0
    b = wo
    c8 = cols & ~7
    for r in range(rows):
        s = 0
        e = b + c8
        c = 0
        while b < e:  # eight products a step: a third less bytecode per product than one
            s += ((w[b] ^ 128) * x[c] + (w[b + 1] ^ 128) * x[c + 1] + (w[b + 2] ^ 128) * x[c + 2]
                  + (w[b + 3] ^ 128) * x[c + 3] + (w[b + 4] ^ 128) * x[c + 4] + (w[b + 5] ^ 128) * x[c + 5]
                  + (w[b + 6] ^ 128) * x[c + 6] + (w[b + 7] ^ 128) * x[c + 7])
            b += 8
            c += 8
        while c < cols:
            s += (w[b] ^ 128) * x[c]
            b += 1
            c += 1
        s -= sx
        sw = p[P_HDR + ro + r]
        m = sw >> 8
        t = (s >> 15) * m + (((s & 32767) * m) >> 15)
        t = (t >> 15) * xm + (((t & 32767) * xm) >> 15)
        k = (sw & 255) + os
        if k >= 0:
            t >>= k if k < 31 else 31
        elif k > -30:
            lim = VMAX >> -k
            t = VMAX if t > lim else (-VMAX if t < -lim else t << -k)
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


def q_scale(A, ez, C, p):
    """q_quant's parameters for codes within +-C of a vector whose max |z| is A (0 <= A < 2**30) at exponent ez,
    and the codes' scale: p[0] s, p[1] R, p[2] K, p[3] C; p[4] mantissa xm, p[5] exponent xe, so that
    z * 2**ez ~ code * xm * 2**xe. c = round(C * z / A) through a reciprocal: R = C * 2**K / A' (rounded up) with
    A' = A normalized to 15 bits (s = bitlen(A) - 15) and K = 28 - j, j = bitlen(C) - 1, so that |z'| * R <
    2**30; then z ~ c * 2**K / R = c * xm * 2**-j, xm = 2**28 / R. One call a vector: the divisions are here,
    never in q_quant's loop."""
    if A == 0:
        p[0] = 0
        p[1] = 0
        p[2] = 1
        p[3] = 0
        p[4] = 0
        p[5] = 0
        return 0
    s = bitlen(A) - 15
    An = A >> s if s >= 0 else A << -s
    j = bitlen(C) - 1
    K = 28 - j
    R = ((C << K) + An - 1) // An  # rounded up: the maximum gets code C exactly
    p[0] = s
    p[1] = R
    p[2] = K
    p[3] = C
    xm = ((1 << 29) // R + 1) >> 1
    p[4] = xm if xm < 32768 else 32767
    p[5] = ez + s - j
    return 0


def q_rnorm(ss, U, eps, p):
    """RMSNorm's 1 / sqrt(sum x^2 + n eps) folded into the codes' scale (p[4] mantissa, p[5] exponent, from
    q_scale): sum x^2 = ss * 2**U (q_normgain's sum), n eps = eps[0] * 2**eps[1]; v = the sum in 30 bits, its
    integer square root by Newton from above, r = 2**29 / isqrt(v) (at most 32767), xm * r renormalized to 15 bits.
    A zero sum or scale gives the zero scale (p[4] = 0)."""
    xm = p[4]
    k = eps[1] - U  # n * eps in the sum's units
    if k >= 0:
        eu = eps[0] << k if k < 14 else (1 << 29)
    else:
        eu = eps[0] >> -k if k > -31 else 0
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
    y = 1 << 15  # floor(sqrt(v)) for 2**28 <= v < 2**30
    z = (y + v // y) >> 1
    while z < y:
        y = z
        z = (y + v // y) >> 1
    r = (1 << 29) // y  # 1 / sqrt(sum x^2 + n eps) = r * 2**(-29 - U/2)
    if r > 32767:
        r = 32767
    pr = xm * r
    b = bitlen(pr) - 15
    p[4] = pr >> b
    p[5] += b - 29 - (U >> 1)
    return 0


def q_quant(z, codes, n, p):
    """Codes of z[0:n] into codes (array('i')): c = sign(z) * (((|z| >> s) * R + 2**(K-1)) >> K), at most C,
    with s = p[0] (negative: a left shift), R = p[1], K = p[2], C = p[3] derived by the caller from max |z|
    (|z| >> s < 2**15, R < 2**15)."""
    s = p[0]
    R = p[1]
    K = p[2]
    C = p[3]
    half = 1 << (K - 1)
    for i in range(n):
        v = z[i]
        neg = v < 0
        if neg:
            v = -v
        v = v >> s if s >= 0 else v << -s
        c = (v * R + half) >> K
        if c > C:
            c = C
        codes[i] = -c if neg else c
    return 0


def q_normgain(x, g, z, p):
    """RMSNorm's elementwise half: a = |x| >> s with s = max(0, bitlen(A) - 15) for A = p[1] = max |x| (a < 2**15;
    s back into p[1]), z = sign(x) * (a * g >> 15), and p[3] = sum(a * a >> LN) (LN = p[2]) for q_rnorm. n = p[0].
    Returns max |z|."""
    n = p[0]
    s = bitlen(p[1]) - 15
    if s < 0:
        s = 0
    p[1] = s
    ln = p[2]
    ss = 0
    big = 0
    for i in range(n):
        a = x[i]
        neg = a < 0
        if neg:
            a = -a
        a >>= s
        ss += (a * a) >> ln
        v = (a * g[i]) >> 15
        if neg:
            v = -v
        z[i] = v
        if v < 0:
            v = -v
        if v > big:
            big = v
    p[3] = ss
    return big


def q_rope(v, cs, n, hd):
    """Rotate pairs (2i, 2i+1) of v[0:n] (heads of hd values) by the Q14 cos/sin in cs[2i], cs[2i+1]."""
    half = hd >> 1
    i = 0
    j = 0
    while i < n:
        c = cs[2 * j]
        s = cs[2 * j + 1]
        a = v[i]
        b = v[i + 1]
        x = ((a >> 14) * c + (((a & 16383) * c) >> 14)) - ((b >> 14) * s + (((b & 16383) * s) >> 14))
        y = ((a >> 14) * s + (((a & 16383) * s) >> 14)) + ((b >> 14) * c + (((b & 16383) * c) >> 14))
        v[i] = VMAX if x > VMAX else (-VMAX if x < -VMAX else x)
        v[i + 1] = VMAX if y > VMAX else (-VMAX if y < -VMAX else y)
        i += 2
        j += 1
        if j == half:
            j = 0
    return 0


def _qsin(tab, f):
    """sin of f / 2**26 quarter turns, 0 <= f <= 2**26, in Q14 (tab: 258 entries, linear interpolation)."""
    i = f >> 18
    t = tab[i]
    return t + (((tab[i + 1] - t) * ((f >> 10) & 255)) >> 8)


def q_angles(fq, tab, cs, pos):
    """cs[2i], cs[2i+1] = cos, sin of pos * f_i turns in Q14 for i < fq[0], f_i = (fq[1+2i] + fq[2+2i] / 256)
    / 2**28 (Q36 turns per position). The phase is computed exactly modulo one turn (2**28) in pieces that keep
    every product below 2**30."""
    p0 = pos & 16383
    p1 = (pos >> 14) & 16383
    ph8 = pos >> 8
    pl8 = pos & 255
    for i in range(fq[0]):
        f = fq[1 + 2 * i]
        fl = fq[2 + 2 * i]
        f0 = f & 16383
        ph = (p0 * f0 + ((((p1 * f0) + p0 * (f >> 14)) & 16383) << 14)) & 0xFFFFFFF
        ph = (ph + ((ph8 * fl) & 0xFFFFFFF) + ((pl8 * fl) >> 8)) & 0xFFFFFFF
        for k in range(2):
            q = ph >> 26
            r = ph & 0x3FFFFFF
            if q & 1:
                r = 0x4000000 - r
            y = _qsin(tab, r)
            cs[2 * i + 1 - k] = -y if q & 2 else y  # k = 0: sin, k = 1: cos (a quarter turn ahead)
            ph = (ph + 0x4000000) & 0xFFFFFFF
    return 0


def q_swiglu(h, tab, n, p):
    """h[i] = silu(a) * b for a = h[i] >> s, b = h[n+i] >> s with s = max(0, bitlen(B) - 15) for B = p[0] =
    max |h[0:2n]| (s back into p[0]); sigmoid from tab (Q15, 385 points k/16 for |k| <= 192, linear interpolation)
    at a shifted by p[1] + s to Q8 table steps. Returns max |h[0:n]|."""
    s = bitlen(p[0]) - 15
    if s < 0:
        s = 0
    p[0] = s
    ks = p[1] + s
    big = 0
    lim = 192 << 8
    for i in range(n):
        a = h[i] >> s
        b = h[n + i] >> s
        if ks >= 0:
            t = a << ks if (a < (lim >> ks) and a > -(lim >> ks)) else (lim if a > 0 else -lim)
        else:
            t = a >> (-ks if ks > -31 else 31)
        if t >= lim:
            t = lim - 1
        elif t < -lim:
            t = -lim
        j = (t >> 8) + 192
        y = tab[j]
        y += ((tab[j + 1] - y) * (t & 255)) >> 8
        v = ((a * y) >> 15) * b
        h[i] = v
        if v < 0:
            v = -v
        if v > big:
            big = v
    return big


def q_heads(v, codes, sc, p):
    """int8 codes and f16 scales of p[0] segments of p[1] values of v (value = v * 2**p[2]), as the i8 cache
    stores rows: the scale is (about) the smallest half >= max|v| / 127, codes round(v / scale) within 127."""
    nseg = p[0]
    hd = p[1]
    e = p[2]
    o = 0
    for h in range(nseg):
        amax = 0
        for i in range(hd):
            a = v[o + i]
            if a < 0:
                a = -a
            if a > amax:
                amax = a
        b = 0
        while amax >> b:
            b += 1
        sh = b - 15  # |v| >> sh < 2**15 (rounded up for the maximum, so the scale never clips)
        an = ((amax - 1) >> sh) + 1 if sh > 0 else amax << -sh
        S = 3 if an * 8 <= 2047 * 127 else 2
        M = (an * (1 << S) + 126) // 127  # 1024..2047: mantissa of max/127, rounded up
        E = b + e - S + 10  # f16 exponent field of M * 2**(b - 15 + e - S)
        if amax == 0:
            bits = 0
            Mq = 1
            G = 0
        elif E >= 31:  # beyond the f16 range: the largest half, codes saturate
            bits = 0x7BFF
            Mq = 2047
            G = S + E - 30 if E < 32 else S + 1
        elif E >= 1:
            bits = (E << 10) | (M - 1024)
            Mq = M
            G = S
        else:
            k = 1 - E
            Mq = (M + (1 << k) - 1) >> k if k < 31 else 1
            bits = Mq
            G = S - k
        sc[h] = bits
        RM = (1 << 21) // Mq
        for i in range(hd):
            a = v[o + i]
            neg = a < 0
            if neg:
                a = -a
            a = a >> sh if sh >= 0 else a << -sh
            if G >= 0:
                a <<= G
            else:
                a >>= -G if G > -31 else 31
            c = (a * RM + (1 << 20)) >> 21
            if c > 127:
                c = 127
            codes[o + i] = -c if neg else c
        o += hd
    return 0


def q_align(oq, oe, n, p):
    """Bring p[0] heads of p[1] values (oq[h*hd+i] * 2**oe[h]) to the largest exponent (p[2] = it) in place,
    shifting magnitudes (toward zero); clamps to +-VMAX. Returns max |oq[0:n]|."""
    heads = p[0]
    hd = p[1]
    emax = oe[0]
    for h in range(heads):
        if oe[h] > emax:
            emax = oe[h]
    p[2] = emax
    big = 0
    o = 0
    for h in range(heads):
        k = emax - oe[h]
        if k > 31:
            k = 31
        for i in range(hd):
            a = oq[o + i]
            neg = a < 0
            if neg:
                a = -a
            a >>= k
            if a > VMAX:
                a = VMAX
            oq[o + i] = -a if neg else a
            if a > big:
                big = a
        o += hd
    return big


def q_embed(w, x, n, p):
    """x[i] = w[wo+i] * m (the byte as int8), shifted right by k (left, saturating, when negative): one row
    (wo = p[0], m = p[1], k = p[2]) into the residual's fixed point. Returns max |x[0:n]|."""
    wo = p[0]
    m = p[1]
    k = p[2]
    big = 0
    for i in range(n):
        t = ((w[wo + i] ^ 128) - 128) * m
        if k >= 0:
            t >>= k if k < 31 else 31
        elif k > -30:
            lim = VMAX >> -k
            t = VMAX if t > lim else (-VMAX if t < -lim else t << -k)
        else:
            t = VMAX if t > 0 else (-VMAX if t < 0 else 0)
        x[i] = t
        if t < 0:
            t = -t
        if t > big:
            big = t
    return big


def q_argmax(v, n):
    """Index of the first largest of v[0:n]."""
    best = 0
    bv = v[0]
    for i in range(1, n):
        if v[i] > bv:
            bv = v[i]
            best = i
    return best


def q_store(arena, codes, scales, p):
    """A token's K and V rows into an i8 cache's arena, as KVCache.write_q8 stores them (KVCache.write_q8_at fills
    p, kvedge.kernels.words's S_* words): for kv = 0 (K), 1 (V) and KV head h < p[S_KVH], p[S_D] int8 codes from
    codes[p[S_KC+kv] + h*D] to arena[p[S_KROW+kv] + h*p[S_HSTEP]], and the f16 scale bits scales[p[S_KS+kv] + h]
    to arena[p[S_KSC+kv] + h*p[S_SSTEP]] (little-endian)."""
    H = p[S_KVH]
    D = p[S_D]
    for kv in range(2):
        for h in range(H):
            dst = p[S_KROW + kv] + h * p[S_HSTEP]
            src = p[S_KC + kv] + h * D
            for i in range(D):
                arena[dst + i] = codes[src + i] & 255
            s = scales[p[S_KS + kv] + h]
            m = p[S_KSC + kv] + h * p[S_SSTEP]
            arena[m] = s & 255
            arena[m + 1] = s >> 8
    return 0
