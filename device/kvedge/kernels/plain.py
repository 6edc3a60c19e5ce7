# Plain-Python kernels: the reference for the viper/native ones and the path CPython and CircuitPython take.
OK = True


def dot_i8(a, ia, b, ib, n):
    """Integer dot product of n int8 values: a[ia:ia+n] . b[ib:ib+n] (array('b') or signed buffers)."""
    s = 0
    for i in range(n):
        s += a[ia + i] * b[ib + i]
    return s


# ---- matrix-vector products of the model (mv_*) ----
from math import sqrt as _sqrt, exp as _exp  # noqa: E402
# Weights are row-major [rows, cols] starting at offset wo; rows land at out[oo:oo+rows] (acc[ao:...]).

def mv_f32(w, wo, x, out, oo, rows, cols):
    """out[oo+r] = sum_c w[wo + r*cols + c] * x[c] for r < rows (float weights and input)."""
    b = wo
    for r in range(rows):
        s = 0.0
        for c in range(cols):
            s += w[b + c] * x[c]
        out[oo + r] = s
        b += cols


def mv_i8(w, wo, x, acc, ao, rows, cols):
    """acc[ao+r] = sum_c w[wo + r*cols + c] * x[c]: int8 weights times int8 codes, exact int sums.

    Callers keep 127 * 127 * cols within 2**30 (cols <= 65536)."""
    b = wo
    for r in range(rows):
        s = 0
        for c in range(cols):
            s += w[b + c] * x[c]
        acc[ao + r] = s
        b += cols


def mv_scale(acc, scales, so, xs, out, oo, rows):
    """out[oo+r] = acc[r] * scales[so+r] * xs: int sums back to floats (per-row weight scale, input scale)."""
    for r in range(rows):
        out[oo + r] = acc[r] * scales[so + r] * xs


def mv_quant(x, n, q):
    """Symmetric int8 codes of x[0:n] into q (round half away from zero); returns the scale (amax / 127)."""
    amax = 0.0
    for i in range(n):
        v = x[i]
        if v < 0:
            v = -v
        if v > amax:
            amax = v
    if amax == 0:
        for i in range(n):
            q[i] = 0
        return 0.0
    inv = 127.0 / amax
    for i in range(n):
        y = x[i] * inv
        c = int(y + 0.5) if y >= 0 else -int(0.5 - y)
        q[i] = 127 if c > 127 else (-127 if c < -127 else c)
    return amax / 127.0


def mv_rmsnorm(out, x, w, n):
    """out[i] = w[i] * (x[i] / sqrt(mean(x[0:n]**2) + 1e-5)) (llama2.c's rmsnorm; out may be x)."""
    ss = 0.0
    for i in range(n):
        ss += x[i] * x[i]
    ss = 1.0 / _sqrt(ss / n + 1e-5)
    for i in range(n):
        out[i] = w[i] * (ss * x[i])


def mv_swiglu(h, g, n):
    """h[i] = silu(h[i]) * g[i]: the SwiGLU gate of the FFN."""
    for i in range(n):
        a = h[i]
        h[i] = a / (1.0 + _exp(-a)) * g[i]


def mv_add(x, y, n):
    """x[i] += y[i] (the residual connection)."""
    for i in range(n):
        x[i] += y[i]


# ---- attention tiles over the i8 cache (att_*) ----
# The tile is an array('i'): a header (kvedge.kernels.words's T_* indexes) then runs of T entries (R_*): K row
# offsets, K scale offsets, scores U (log2 units, Q16), V row offsets, V scale offsets, weights, slots.
# Arena bytes are unsigned: (b ^ 128) - 128 sign-extends an int8. f16 scale bits give mantissa m and
# exponent e with value m * 2**(e - 25) (subnormals: m = fraction, e = 1).
# The tile's word indexes (kvedge.kernels.words's T_*) become this module's globals when the integer attention loads
# (att_bind, called by kvedge.kernels.bind_att): a float-only run never loads kvedge.kernels.words (2,960 bytes of heap).
def att_bind():
    global T_N, T_D, T_QOFF, T_T, T_B, T_EQ, T_M, T_WS, T_EVMAX, T_TMAX, T_EVT, T_KIVI, T_LSUM, T_SH, T_CORR, T_QBITS, T_HDR
    from kvedge.kernels.words import (T_N, T_D, T_QOFF, T_T, T_B, T_EQ, T_M, T_WS, T_EVMAX, T_TMAX, T_EVT, T_KIVI, T_LSUM, T_SH, T_CORR, T_QBITS, T_HDR)  # noqa: F401


SAT = (1 << 29) - 1  # |U| <= SAT: a difference of two scores (M - U) stays below 2**30, a small int


def att_scores_i8(arena, q, tile):
    """U[j] = q . K_j * scales, as log2 of the softmax weight in Q16 (saturating at +-SAT); tile max and
    the tile's largest V scale exponent go to the header. Every intermediate stays within +-2**30."""
    nt = tile[T_N]
    D = tile[T_D]
    qo = tile[T_QOFF]
    T = tile[T_T]
    B = tile[T_B]
    eq = tile[T_EQ]
    tmax = -SAT
    evt = 0
    for j in range(nt):
        ko = tile[T_HDR + j]
        s = 0
        for i in range(D):
            s += ((arena[ko + i] ^ 128) - 128) * q[qo + i]
        km = tile[T_HDR + T + j]
        h = arena[km] | (arena[km + 1] << 8)
        e = (h >> 10) & 31
        m = h & 1023
        if e:
            m += 1024
        else:
            e = 1
        neg = s < 0
        if neg:
            s = -s
        a = (s >> 10) * m + (((s & 1023) * m) >> 10)  # s * m / 2**10 without passing 2**30
        x = (a >> 11) * B
        y = (a & 2047) * B
        r = 28 - eq - e  # u = a * B * 2**-r = x * 2**(11 - r) + y * 2**-r
        if r >= 11:
            u = (x >> (r - 11)) + (y >> r)
        elif r >= 0:
            u = (x << (11 - r)) + (y >> r) if x < (1 << (18 + r)) else SAT
        elif r >= -18 and x < (1 << (18 + r)) and y < (1 << (29 + r)):
            u = (x << (11 - r)) + (y << -r)  # large scales: still exact while each term is < 2**29
        else:
            u = SAT if a else 0
        if u > SAT:
            u = SAT
        if neg:
            u = -u
        tile[T_HDR + 2 * T + j] = u
        if u > tmax:
            tmax = u
        vm = tile[T_HDR + 4 * T + j]
        ev = (arena[vm + 1] >> 2) & 31
        if ev == 0:
            ev = 1
        if ev > evt:
            evt = ev
    tile[T_TMAX] = tmax
    tile[T_EVT] = evt


def att_weights_i8(arena, tile, exp2):
    """Softmax weights of the tile, 2**((U - M) / 2**16) in Q14 from the exp2 table (linear interpolation),
    shifted by the overflow guard WS; folds each token's V scale in. Returns the tile's sum of weights."""
    nt = tile[T_N]
    T = tile[T_T]
    M = tile[T_M]
    ws = tile[T_WS]
    evmax = tile[T_EVMAX]
    total = 0
    for j in range(nt):
        d = M - tile[T_HDR + 2 * T + j]
        n = d >> 16
        if n >= 15:
            tile[T_HDR + 5 * T + j] = 0
            continue
        f = d & 0xFFFF
        i = f >> 8
        t0 = exp2[i]
        w = (t0 - (((t0 - exp2[i + 1]) * (f & 255)) >> 8)) >> (n + ws)
        total += w
        vm = tile[T_HDR + 4 * T + j]
        h = arena[vm] | (arena[vm + 1] << 8)
        e = (h >> 10) & 31
        m = h & 1023
        if e:
            m += 1024
        else:
            e = 1
        tile[T_HDR + 5 * T + j] = (w * m) >> (10 + evmax - e)
    return total


def att_wsum_i8(arena, tile, acc):
    """acc[i] += sum_j W[j] * V_j[i] over the tile (W <= 2**15, |V| <= 128, T <= 64: a tile adds < 2**28);
    returns the largest |acc[i]| afterwards (the caller keeps it below 2**28)."""
    nt = tile[T_N]
    D = tile[T_D]
    T = tile[T_T]
    big = 0
    for i in range(D):
        s = acc[i]
        for j in range(nt):
            s += tile[T_HDR + 5 * T + j] * ((arena[tile[T_HDR + 3 * T + j] + i] ^ 128) - 128)
        acc[i] = s
        if s < 0:
            s = -s
        if s > big:
            big = s
    return big


def att_rescale(acc, tile):
    """acc[i] = (acc[i] >> SH) * CORR / 2**14, the online softmax's correction (|acc| < 2**29)."""
    D = tile[T_D]
    sh = tile[T_SH]
    c = tile[T_CORR]
    for i in range(D):
        x = acc[i] >> sh
        neg = x < 0
        if neg:
            x = -x
        x = (x >> 14) * c + (((x & 16383) * c) >> 14)
        acc[i] = -x if neg else x


def att_div_q10(acc, out, tile):
    """out[QOFF + i] = acc[i] * 2**10 / LSUM (long division, truncated toward zero); clears acc."""
    D = tile[T_D]
    qo = tile[T_QOFF]
    ls = tile[T_LSUM]
    for i in range(D):
        a = acc[i]
        acc[i] = 0
        neg = a < 0
        if neg:
            a = -a
        q = a // ls
        r = a - q * ls
        for _ in range(10):
            r <<= 1
            q <<= 1
            if r >= ls:
                r -= ls
                q += 1
        out[qo + i] = -q if neg else q


def att_fill_i8(slots, tile, geo):
    """Gather the next tile of i8 rows: live slots >= P from geo's cursor; writes the K/V row and scale
    offsets and the slot numbers, returns how many. geo: kbase, vbase, kmeta, vmeta, row bytes, P, cursor,
    end, explicit (1: slots lists slot numbers; 0: slots is slot_pos, index = slot, -1 = empty)."""
    T = tile[T_T]
    kb = geo[0]
    vb = geo[1]
    km = geo[2]
    vm = geo[3]
    prow = geo[4]
    P = geo[5]
    j = geo[6]
    n = geo[7]
    explicit = geo[8]
    nt = 0
    while j < n and nt < T:
        if explicit:
            s = slots[j]
        else:
            s = j if slots[j] >= 0 else -1
        j += 1
        if s < P:
            continue
        b = s - P
        tile[T_HDR + nt] = kb + b * prow
        tile[T_HDR + T + nt] = km + 2 * b
        tile[T_HDR + 3 * T + nt] = vb + b * prow
        tile[T_HDR + 4 * T + nt] = vm + 2 * b
        tile[T_HDR + 6 * T + nt] = s
        nt += 1
    geo[6] = j
    tile[T_N] = nt
    return nt


# ---- rows the i8 tile kernels cannot read directly, converted to int8 codes with a power-of-two scale ----
# f32 rows (the full-precision prefix and KIVI's residual) and i4/i2 rows are rewritten, a tile at a time, into
# `scratch` (bytearray): K codes [0, T*D), V codes [T*D, 2*T*D), K scale bits at 2*T*D + 2j, V scale bits at
# 2*T*D + 2*T + 2j; the tile's offsets are pointed there, and the att_* kernels then run on scratch.


def _pow2_bits(k):
    """f16 bits of 2**k (0 when too small for a half); k > 15 saturates at 2**15."""
    if k > 15:
        k = 15
    if k >= -14:
        return (k + 15) << 10
    if k >= -24:
        return 1 << (k + 24)
    return 0


def _emit_row(x, D, scratch, co, mo, ex):
    """x[0:D]: ints with value x * 2**(ex - 25); writes int8 codes (rounded, within +-127) and the scale."""
    big = 0
    for i in range(D):
        v = x[i]
        if v < 0:
            v = -v
        if v > big:
            big = v
    sh = 0
    while (big >> sh) > 127:
        sh += 1
    half = (1 << sh) >> 1
    for i in range(D):
        v = x[i]
        if v < 0:
            c = -((half - v) >> sh)
        else:
            c = (v + half) >> sh
        if c > 127:
            c = 127
        elif c < -127:
            c = -127
        scratch[co + i] = c & 255
    b = _pow2_bits(ex - 25 + sh) if big else 0
    scratch[mo] = b & 255
    scratch[mo + 1] = b >> 8


def att_conv_f32(arena, tile, scratch, conv):
    """f32 rows -> int8 codes: each value's 24-bit mantissa is shifted to the row's largest exponent."""
    nt = tile[T_N]
    D = tile[T_D]
    T = tile[T_T]
    for kv in range(2):
        ro = T_HDR + 3 * T * kv
        for j in range(nt):
            src = tile[ro + j]
            emax = 1
            for i in range(D):
                o = src + 4 * i
                e = ((arena[o + 3] & 127) << 1) | (arena[o + 2] >> 7)
                if e > emax:
                    emax = e
            for i in range(D):
                o = src + 4 * i
                e = ((arena[o + 3] & 127) << 1) | (arena[o + 2] >> 7)
                m = ((arena[o + 2] & 127) << 16) | (arena[o + 1] << 8) | arena[o]
                if e:
                    m |= 1 << 23
                else:
                    e = 1
                sh = emax - e
                m = m >> sh if sh < 24 else 0
                conv[i] = -m if arena[o + 3] & 128 else m
            # conv[i] * 2**(emax - 150) == conv[i] * 2**(ex - 25) with ex = emax - 125
            co = (kv * T + j) * D
            _emit_row(conv, D, scratch, co, 2 * T * D + 2 * T * kv + 2 * j, emax - 125)
            tile[ro + j] = co
            tile[ro + T + j] = 2 * T * D + 2 * T * kv + 2 * j


def att_conv_i4(arena, tile, scratch, conv):
    """i4 or i2 rows (asymmetric: value = zero + code * scale, per row or per channel) -> int8 codes."""
    nt = tile[T_N]
    D = tile[T_D]
    T = tile[T_T]
    kivi = tile[T_KIVI]
    bits = tile[T_QBITS]
    lg = 1 if bits == 4 else 2  # log2 of the codes per byte
    msk = (1 << lg) - 1
    cmax = (1 << bits) - 1  # the largest code
    for kv in range(2):
        ro = T_HDR + 3 * T * kv
        for j in range(nt):
            src = tile[ro + j]
            mo = tile[ro + T + j]
            emin = 99
            for i in range(D):  # value_i = zm * 2**(ze-25) + q * sm * 2**(se-25) in integers
                mi = mo + 4 * i if (kv == 0 and kivi) else mo
                # f16 scale and zero as (mantissa, exponent): value = m * 2**(e - 25); scales are >= 0
                h = arena[mi] | (arena[mi + 1] << 8)
                se = (h >> 10) & 31
                sm = h & 1023
                if se:
                    sm += 1024
                else:
                    se = 1
                h = arena[mi + 2] | (arena[mi + 3] << 8)
                ze = (h >> 10) & 31
                zm = h & 1023
                if ze:
                    zm += 1024
                else:
                    ze = 1
                if h & 0x8000:
                    zm = -zm
                q = (arena[src + (i >> lg)] >> (bits * (i & msk))) & cmax
                ec = se if se < ze else ze
                top = se if se > ze else ze
                if ec < top - 14:  # keep both terms within 2**30; the smaller one loses low bits
                    ec = top - 14
                zs = ze - ec
                v = (zm << zs) if zs >= 0 else (zm >> -zs)
                v += (q * sm) << (se - ec) if se >= ec else (q * sm) >> (ec - se)
                conv[i] = v
                conv[D + i] = ec
                if ec < emin:
                    emin = ec
            # bring every channel to the row's largest exponent, then to codes
            emax = emin
            for i in range(D):
                if conv[D + i] > emax:
                    emax = conv[D + i]
            for i in range(D):
                sh = emax - conv[D + i]
                conv[i] = conv[i] >> sh if sh < 31 else (0 if conv[i] >= 0 else -1)
            co = (kv * T + j) * D
            _emit_row(conv, D, scratch, co, 2 * T * D + 2 * T * kv + 2 * j, emax)
            tile[ro + j] = co
            tile[ro + T + j] = 2 * T * D + 2 * T * kv + 2 * j
