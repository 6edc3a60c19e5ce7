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
from kvedge.kernels_native import mv_f32, mv_scale, mv_quant, mv_rmsnorm, mv_swiglu, mv_add  # noqa: E402,F401


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
    sat = (1 << 29) - 1  # kernels_plain.SAT
    tmax = 0 - sat
    evt = 0
    # sext(x) = (x ^ 128) - 128: sum (X-128)(Y-128) = sum XY - 128 sum X - 128 sum Y + 2**14 D with X, Y the
    # offset-binary bytes, so the inner loop only xors, multiplies and adds (no per-element subtraction)
    sy = 0
    i = 0
    while i < D:
        sy += int(qq[qo + i]) ^ 128
        i += 1
    corr = (D << 14) - (sy << 7)
    j = 0
    while j < nt:
        ko = int(tl[16 + j])
        s = 0
        sx = 0
        i = 0
        while i < D:
            x = int(a[ko + i]) ^ 128
            s += x * (int(qq[qo + i]) ^ 128)
            sx += x
            i += 1
        s = s - (sx << 7) + corr
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
        elif r >= 0:
            if x < (1 << (18 + r)):
                u = (x << (11 - r)) + (y >> r)
            else:
                u = sat
        elif r >= -18 and x < (1 << (18 + r)) and y < (1 << (29 + r)):
            u = (x << (11 - r)) + (y << (0 - r))
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
def att_wsum_i8(arena, tile, acc) -> int:
    a = ptr8(arena)  # noqa: F821
    tl = ptr32(tile)  # noqa: F821
    o = ptr32(acc)  # noqa: F821
    sbit = 1
    sbit <<= 31
    hi = 0 - sbit
    nt = int(tl[0])
    D = int(tl[1])
    T = int(tl[3])
    # sum_j W_j sext(v) = sum_j W_j (v ^ 128) - 128 sum_j W_j: no subtraction in the inner loop
    wt = 0
    j = 0
    while j < nt:
        wt += int(tl[16 + 5 * T + j])
        j += 1
    wt <<= 7
    wb = 16 + 5 * T  # weights and V row offsets: bases hoisted out of the loops
    vb = 16 + 3 * T
    big = 0
    i = 0
    while i < D:
        s = int(o[i])
        if s & sbit:
            s |= hi
        s -= wt
        j = 0
        while j < nt:
            s += int(tl[wb + j]) * (int(a[int(tl[vb + j]) + i]) ^ 128)
            j += 1
        o[i] = s
        if s < 0:
            s = 0 - s
        if s > big:
            big = s
        i += 1
    return big


@micropython.viper
def att_rescale(acc, tile) -> int:
    o = ptr32(acc)  # noqa: F821
    tl = ptr32(tile)  # noqa: F821
    sbit = 1
    sbit <<= 31
    hi = 0 - sbit
    D = int(tl[1])
    sh = int(tl[13])
    c = int(tl[14])
    i = 0
    while i < D:
        x = int(o[i])
        if x & sbit:
            x |= hi
        x = x >> sh
        neg = 0
        if x < 0:
            neg = 1
            x = 0 - x
        x = (x >> 14) * c + (((x & 16383) * c) >> 14)
        if neg:
            x = 0 - x
        o[i] = x
        i += 1
    return 0


@micropython.viper
def att_div_q10(acc, out, tile) -> int:
    o = ptr32(acc)  # noqa: F821
    dst = ptr32(out)  # noqa: F821
    tl = ptr32(tile)  # noqa: F821
    sbit = 1
    sbit <<= 31
    hi = 0 - sbit
    D = int(tl[1])
    qo = int(tl[2])
    ls = int(tl[12])
    i = 0
    while i < D:
        a = int(o[i])
        if a & sbit:
            a |= hi
        o[i] = 0
        neg = 0
        if a < 0:
            neg = 1
            a = 0 - a
        # a // ls (a runtime call), then the 10 fraction bits one at a time: r stays below 2 * ls <= 2**29
        q = a // ls
        r = a - q * ls
        k = 0
        while k < 10:
            r <<= 1
            q <<= 1
            if r >= ls:
                r -= ls
                q |= 1
            k += 1
        if neg:
            q = 0 - q
        dst[qo + i] = q
        i += 1
    return 0


@micropython.viper
def att_fill_i8(slots, tile, geo) -> int:
    sp = ptr32(slots)  # noqa: F821
    tl = ptr32(tile)  # noqa: F821
    g = ptr32(geo)  # noqa: F821
    sbit = 1
    sbit <<= 31
    T = int(tl[3])
    kb = int(g[0])
    vb = int(g[1])
    km = int(g[2])
    vm = int(g[3])
    prow = int(g[4])
    P = int(g[5])
    j = int(g[6])
    n = int(g[7])
    explicit = int(g[8])
    nt = 0
    while j < n and nt < T:
        v = int(sp[j])
        s = j
        if explicit:
            s = v
        if v & sbit:  # -1: an empty slot
            s = -1
        j += 1
        if s < P:
            continue
        b = s - P
        tl[16 + nt] = kb + b * prow
        tl[16 + T + nt] = km + 2 * b
        tl[16 + 3 * T + nt] = vb + b * prow
        tl[16 + 4 * T + nt] = vm + 2 * b
        tl[16 + 6 * T + nt] = s
        nt += 1
    g[6] = j
    tl[0] = nt
    return nt


# f32 rows (the prefix, i4's residual) are few: the native conversion serves here.
from kvedge.kernels_native import att_conv_f32  # noqa: E402,F401


@micropython.viper
def att_conv_i4(arena, tile, scratch, conv) -> int:
    """kernels_plain.att_conv_i4 (see there) on raw pointers: i4/i2 rows -> int8 codes and power-of-two scales."""
    a = ptr8(arena)  # noqa: F821
    tl = ptr32(tile)  # noqa: F821
    sc = ptr8(scratch)  # noqa: F821
    cv = ptr32(conv)  # noqa: F821
    sbit = 1
    sbit <<= 31
    hi = 0 - sbit
    nt = int(tl[0])
    D = int(tl[1])
    T = int(tl[3])
    kivi = int(tl[11])
    bits = int(tl[15])
    lg = 2
    if bits == 4:
        lg = 1
    msk = (1 << lg) - 1
    cmax = (1 << bits) - 1  # the largest code
    kv = 0
    while kv < 2:
        ro = 16 + 3 * T * kv
        j = 0
        while j < nt:
            src = int(tl[ro + j])
            mo = int(tl[ro + T + j])
            emax = 0
            i = 0
            while i < D:
                mi = mo
                if kv == 0 and kivi:
                    mi = mo + 4 * i
                h = int(a[mi]) | (int(a[mi + 1]) << 8)
                se = (h >> 10) & 31
                sm = h & 1023
                if se != 0:
                    sm += 1024
                else:
                    se = 1
                h = int(a[mi + 2]) | (int(a[mi + 3]) << 8)
                ze = (h >> 10) & 31
                zm = h & 1023
                if ze != 0:
                    zm += 1024
                else:
                    ze = 1
                if h & 0x8000:
                    zm = 0 - zm
                q = (int(a[src + (i >> lg)]) >> (bits * (i & msk))) & cmax
                ec = se
                top = ze
                if ze < se:
                    ec = ze
                    top = se
                if ec < top - 14:
                    ec = top - 14
                zs = ze - ec
                v = 0
                if zs >= 0:
                    v = zm << zs
                else:
                    v = zm >> (0 - zs)
                if se >= ec:
                    v += (q * sm) << (se - ec)
                else:
                    v += (q * sm) >> (ec - se)
                cv[i] = v
                cv[D + i] = ec
                if ec > emax:
                    emax = ec
                i += 1
            big = 0
            i = 0
            while i < D:  # every channel to the row's largest exponent
                v = int(cv[i])
                if v & sbit:
                    v |= hi
                sh = emax - int(cv[D + i])
                if sh < 31:
                    v = v >> sh
                elif v >= 0:
                    v = 0
                else:
                    v = 0 - 1
                cv[i] = v
                if v < 0:
                    v = 0 - v
                if v > big:
                    big = v
                i += 1
            sh = 0
            while (big >> sh) > 127:
                sh += 1
            half = (1 << sh) >> 1
            co = (kv * T + j) * D
            i = 0
            while i < D:
                v = int(cv[i])
                if v & sbit:
                    v |= hi
                c = 0
                if v < 0:
                    c = 0 - ((half - v) >> sh)
                else:
                    c = (v + half) >> sh
                if c > 127:
                    c = 127
                elif c < -127:
                    c = -127
                sc[co + i] = c & 255
                i += 1
            b = 0
            if big != 0:
                k = emax - 25 + sh
                if k > 15:
                    k = 15
                if k >= -14:
                    b = (k + 15) << 10
                elif k >= -24:
                    b = 1 << (k + 24)
            mo2 = 2 * T * D + 2 * T * kv + 2 * j
            sc[mo2] = b & 255
            sc[mo2 + 1] = b >> 8
            tl[ro + j] = co
            tl[ro + T + j] = mo2
            j += 1
        kv += 1
    return 0


@micropython.viper
def att_head_i8(arena, q, tile, aux) -> int:
    """One query head over every i8 row in one call (geo, aux: see kvedge.attention): the same integers as the tile loop of
    kvedge.attention around att_fill_i8, att_scores_i8, att_rescale, att_weights_i8 and att_wsum_i8, computed
    in up to three passes per tile instead of four kernels: (1) gather and score each live row, (2) each row's
    weight, with the weighted sum of V's first eight dimensions, (3) the other dimensions, eight at a time in
    local accumulators over the tile's rows. Keys and values are read offset-binary ((b ^ 128) = value + 128) and
    the 128 * sum corrections are taken off once (per row for scores, per tile for the sum): the same integers
    as the reference. Rows and the query are read through pointers moved eight bytes at a time, so the
    inner loops use constant offsets (viper keeps few locals in registers: index arithmetic is expensive)."""
    a = ptr8(arena)  # noqa: F821
    tl = ptr32(tile)  # noqa: F821
    sp = ptr32(aux[0])  # noqa: F821
    ex = ptr16(aux[1])  # noqa: F821
    acc = ptr32(aux[2])  # noqa: F821
    gg = ptr32(aux[3])  # noqa: F821
    qq = ptr8(q)  # noqa: F821
    sbit = 1
    sbit <<= 31
    hi = 0 - sbit
    m32 = sbit + sbit - 1
    T = int(tl[3])
    D = int(tl[1])
    D8 = D & (0 - 8)
    qo = int(tl[2])
    B = int(tl[4])
    eq = int(tl[5])
    sat = (1 << 29) - 1  # kernels_plain.SAT
    base = int(a)
    kbase = int(gg[0]) + base
    vbase = int(gg[1]) + base
    kmeta = int(gg[2])
    vmeta = int(gg[3])
    prow = int(gg[4])
    P = int(gg[5])
    n = int(gg[7])
    explicit = int(gg[8])
    u0 = 16 + 2 * T  # the tile's scores, weights and rows (slot - P)
    w0 = 16 + 5 * T
    b0 = 16 + 6 * T
    qa = int(gg) + 96  # the query as signed ints at geo[24:24+D], and 128 * its sum
    sq = 0
    i = 0
    while i < D:
        v = (int(qq[qo + i]) ^ 128) - 128
        gg[24 + i] = v
        sq += v
        i += 1
    sq <<= 7
    rows = 0
    j = int(gg[6])
    while True:
        # pass 1: gather and score up to T live rows
        tmax = 0 - sat
        evt = 0
        nt = 0
        while j < n and nt < T:
            v = int(sp[j])
            s = j
            if explicit:
                s = v
            if v & sbit:
                s = -1
            j += 1
            if s < P:
                continue
            b = s - P
            ka = kbase + b * prow
            s = 0
            c = 0
            while c < D8:
                k = ptr8(ka + c)  # noqa: F821
                g = ptr32(qa + 4 * c)  # noqa: F821
                s += ((k[0] ^ 128) * g[0] + (k[1] ^ 128) * g[1] + (k[2] ^ 128) * g[2] + (k[3] ^ 128) * g[3]
                      + (k[4] ^ 128) * g[4] + (k[5] ^ 128) * g[5] + (k[6] ^ 128) * g[6] + (k[7] ^ 128) * g[7])
                c += 8
            while c < D:
                s += (int(a[ka - base + c]) ^ 128) * int(gg[24 + c])
                c += 1
            s = (((s - sq) & m32) ^ sbit) - sbit  # exact modulo 2**32 (64-bit ports read q zero-extended)
            km = kmeta + 2 * b
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
            elif r >= 0:
                if x < (1 << (18 + r)):
                    u = (x << (11 - r)) + (y >> r)
                else:
                    u = sat
            elif r >= -18 and x < (1 << (18 + r)) and y < (1 << (29 + r)):
                u = (x << (11 - r)) + (y << (0 - r))
            elif aa != 0:
                u = sat
            if u > sat:
                u = sat
            if neg:
                u = 0 - u
            tl[u0 + nt] = u
            tl[b0 + nt] = b
            if u > tmax:
                tmax = u
            ev = (int(a[vmeta + 2 * b + 1]) >> 2) & 31
            if ev == 0:
                ev = 1
            if ev > evt:
                evt = ev
            nt += 1
        if nt == 0:
            break
        rows += nt
        # the running maximum and V scale
        M = int(gg[9])
        if M & sbit:
            M |= hi
        lsum = int(gg[10])
        ws = int(gg[11])
        evmax = int(gg[12])
        sh = 0
        corr = 16384
        if evt > evmax:
            sh = evt - evmax
            evmax = evt
        if int(gg[13]):
            M = tmax
            gg[13] = 0
        elif tmax > M:
            d = tmax - M
            if (d >> 16) >= 15:
                corr = 0
            else:
                i = (d & 0xFFFF) >> 8
                t0 = int(ex[i])
                corr = (t0 - (((t0 - int(ex[i + 1])) * (d & 255)) >> 8)) >> (d >> 16)
            lsum = (lsum >> 14) * corr + (((lsum & 16383) * corr) >> 14)
            M = tmax
        if sh != 0 or corr != 16384:
            i = 0
            while i < D:
                x = int(acc[i])
                if x & sbit:
                    x |= hi
                x = x >> sh
                neg = 0
                if x < 0:
                    neg = 1
                    x = 0 - x
                x = (x >> 14) * corr + (((x & 16383) * corr) >> 14)
                if neg:
                    x = 0 - x
                acc[i] = x
                i += 1
        # pass 2: the rows' weights, and with them the weighted sum of the first eight dimensions
        wt = 0
        a0 = 0
        a1 = 0
        a2 = 0
        a3 = 0
        a4 = 0
        a5 = 0
        a6 = 0
        a7 = 0
        if D8:
            a0 = int(acc[0])
            a1 = int(acc[1])
            a2 = int(acc[2])
            a3 = int(acc[3])
            a4 = int(acc[4])
            a5 = int(acc[5])
            a6 = int(acc[6])
            a7 = int(acc[7])
        jj = 0
        while jj < nt:
            u = int(tl[u0 + jj])
            if u & sbit:
                u |= hi
            d = M - u
            k2 = d >> 16
            w = 0
            if k2 < 15:
                i = (d & 0xFFFF) >> 8
                t0 = int(ex[i])
                w = (t0 - (((t0 - int(ex[i + 1])) * (d & 255)) >> 8)) >> (k2 + ws)
                lsum += w
                b = int(tl[b0 + jj])
                vm = vmeta + 2 * b
                h = int(a[vm]) | (int(a[vm + 1]) << 8)
                e = (h >> 10) & 31
                m = h & 1023
                if e != 0:
                    m += 1024
                else:
                    e = 1
                w = (w * m) >> (10 + evmax - e)
                if w != 0 and D8:
                    wt += w
                    k = ptr8(vbase + b * prow)  # noqa: F821
                    a0 += w * (k[0] ^ 128)
                    a1 += w * (k[1] ^ 128)
                    a2 += w * (k[2] ^ 128)
                    a3 += w * (k[3] ^ 128)
                    a4 += w * (k[4] ^ 128)
                    a5 += w * (k[5] ^ 128)
                    a6 += w * (k[6] ^ 128)
                    a7 += w * (k[7] ^ 128)
                else:
                    wt += w
            tl[w0 + jj] = w
            jj += 1
        if D8:
            acc[0] = a0
            acc[1] = a1
            acc[2] = a2
            acc[3] = a3
            acc[4] = a4
            acc[5] = a5
            acc[6] = a6
            acc[7] = a7
        # pass 3: the other dimensions, eight at a time over the stored weights
        c = 8 if D8 else 0
        while c < D8:
            o = ptr32(int(acc) + 4 * c)  # noqa: F821
            a0 = int(o[0])
            a1 = int(o[1])
            a2 = int(o[2])
            a3 = int(o[3])
            a4 = int(o[4])
            a5 = int(o[5])
            a6 = int(o[6])
            a7 = int(o[7])
            jj = 0
            while jj < nt:
                w = int(tl[w0 + jj])
                if w != 0:
                    k = ptr8(vbase + int(tl[b0 + jj]) * prow + c)  # noqa: F821
                    a0 += w * (k[0] ^ 128)
                    a1 += w * (k[1] ^ 128)
                    a2 += w * (k[2] ^ 128)
                    a3 += w * (k[3] ^ 128)
                    a4 += w * (k[4] ^ 128)
                    a5 += w * (k[5] ^ 128)
                    a6 += w * (k[6] ^ 128)
                    a7 += w * (k[7] ^ 128)
                jj += 1
            o[0] = a0
            o[1] = a1
            o[2] = a2
            o[3] = a3
            o[4] = a4
            o[5] = a5
            o[6] = a6
            o[7] = a7
            c += 8
        while c < D:
            a0 = int(acc[c])
            jj = 0
            while jj < nt:
                a0 += int(tl[w0 + jj]) * (int(a[vbase - base + int(tl[b0 + jj]) * prow + c]) ^ 128)
                jj += 1
            acc[c] = a0
            c += 1
        wt <<= 7
        big = 0
        i = 0
        while i < D:
            s = (((int(acc[i]) - wt) & m32) ^ sbit) - sbit
            acc[i] = s
            if s < 0:
                s = 0 - s
            if s > big:
                big = s
            i += 1
        if lsum > big:
            big = lsum
        while big > (1 << 28):
            i = 0
            while i < D:
                x = int(acc[i])
                if x & sbit:
                    x |= hi
                acc[i] = x >> 1
                i += 1
            lsum >>= 1
            big >>= 1
            ws += 1
        gg[9] = M
        gg[10] = lsum
        gg[11] = ws
        gg[12] = evmax
    gg[6] = j
    return rows


@micropython.viper
def att_layer_i8(arena, q, tile, aux) -> int:
    """Every query head of one layer (kernels_viper.att_step_i8 sets it up): per head its KV head's geometry, its
    query's scale (f16 bits qs[h] as mantissa and exponent), a fresh running state, one att_head_i8 (aux[7]: the
    kind's own) and one att_div_q10 (aux[8]) into out_q, and out_exp[h]. The layer's bases are in geo from 24 + D
    (heads, group, K/V row bases, K/V scale bases, per-KV-head strides, lam). Returns 0, or -1 - h when head h
    has no live row."""
    tl = ptr32(tile)  # noqa: F821
    gg = ptr32(aux[3])  # noqa: F821
    qs = ptr16(aux[4])  # noqa: F821
    oe = ptr32(aux[6])  # noqa: F821
    head = aux[7]
    div = aux[8]
    acc = aux[2]
    out_q = aux[5]
    D = int(tl[1])
    L = 24 + D
    heads = int(gg[L])
    group = int(gg[L + 1])
    h = 0
    while h < heads:
        kvh = h // group
        gg[0] = int(gg[L + 2]) + kvh * int(gg[L + 6])
        gg[1] = int(gg[L + 3]) + kvh * int(gg[L + 6])
        gg[2] = int(gg[L + 4]) + kvh * int(gg[L + 7])
        gg[3] = int(gg[L + 5]) + kvh * int(gg[L + 7])
        qb = int(qs[h])
        eq = (qb >> 10) & 31
        mq = qb & 1023
        if eq != 0:
            mq += 1024
        else:
            eq = 1
        tl[4] = (mq * int(gg[L + 8])) >> 10  # T_B
        tl[5] = eq  # T_EQ
        tl[2] = h * D  # T_QOFF
        gg[6] = 0
        gg[9] = 0
        gg[10] = 0
        gg[11] = 0
        gg[12] = 0
        gg[13] = 1
        head(arena, q, tile, aux)
        lsum = int(gg[10])
        if lsum <= 0:
            return -1 - h
        tl[12] = lsum  # T_LSUM
        div(acc, out_q, tile)
        oe[h] = int(gg[12]) - 25
        h += 1
    return 0


# ---- the Python drivers of att_head_i8 (kvedge.attention calls them through its kernel module, so the kind's own
# att_head_i8 runs: att.k). geo words: 0-8 geometry, 9 M, 10 lsum, 11 ws, 12 evmax, 13 first. ----

def att_rows_i8(att, arena, qc, slots):
    """attention.q8_rows' i8 case: every tile in one att_head_i8 call; the running state crosses through geo."""
    geo = att.geo
    aux = att.aux
    aux[0] = slots
    aux[2] = att.iacc  # kvedge.tiered lends each head its own accumulator
    geo[9] = att.M
    geo[10] = att.lsum
    geo[11] = att.ws
    geo[12] = att.evmax
    geo[13] = 1 if att.first else 0
    att.k.att_head_i8(arena, qc, att.tile, aux)
    aux[0] = None
    att.M = geo[9]
    att.lsum = geo[10]
    att.ws = geo[11]
    att.evmax = geo[12]
    att.first = geo[13] != 0


def att_step_i8(att, c, layer, qc, qs, out_q, out_exp, slots, nslots):
    """attention.step_q8's hot case (i8 rows only, no scores): every head of the layer in one call of
    att_layer_i8 (per head one att_head_i8 and one att_div_q10 of the kind in use); the same
    integers as the general loop (q8_rows)."""
    tile = att.tile
    geo = att.geo
    aux = att.aux
    k = att.k
    H = c.H
    B = c.B
    prow = c.prow
    aux[0] = slots
    aux[2] = att.iacc
    aux[4] = qs
    aux[5] = out_q
    aux[6] = out_exp
    aux[7] = k.att_head_i8
    aux[8] = k.att_div_q10
    tile[11] = 0  # T_KIVI
    geo[4] = prow
    geo[5] = c.P
    geo[7] = c.N if nslots < 0 else nslots
    geo[8] = 0 if nslots < 0 else 1
    L = 24 + att.D  # the layer's bases, after the kernels' scratch and query
    geo[L] = att.heads
    geo[L + 1] = att.group
    geo[L + 2] = c.DATA + layer * 2 * H * B * prow  # K rows of the layer; V rows follow, then the scales
    geo[L + 3] = geo[L + 2] + H * B * prow
    geo[L + 4] = c.META + layer * 4 * H * B
    geo[L + 5] = geo[L + 4] + 2 * H * B
    geo[L + 6] = B * prow
    geo[L + 7] = 2 * B
    geo[L + 8] = att.lam
    r = att_layer_i8(c.arena, qc, tile, aux)
    aux[0] = aux[4] = aux[5] = aux[6] = None
    if r < 0:
        raise ValueError("no cached tokens to attend to in layer %d" % layer)
    att.M = geo[9]  # the last head's state, as the general loop leaves it
    att.lsum = geo[10]
    att.ws = geo[11]
    att.evmax = geo[12]
    att.first = False
