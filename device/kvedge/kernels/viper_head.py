# The integer attention's hot path, loaded on request (kernels.viper.att_preload): viper kernels for one query
# head's every tile (att_head_i8) and a layer's every head (att_layer_i8), and the Python drivers kvedge.attention
# calls through its kernel module (att_step_i8, att_rows_i8). The asm kind brings its own att_head_i8.
import micropython

from kvedge.kernels.words import T_KIVI, G_P, G_N, G_LISTED, G_M, G_END, LG_HEADS, LG_GROUP, LG_KROW, LG_LAM


@micropython.viper
def att_head_i8(arena: ptr8, q: ptr32, tile, aux) -> int:  # noqa: F821
    """One query head over every i8 row in one call (geo, aux: see kvedge.attention): the same integers as the tile loop of
    kvedge.attention around att_fill_i8, att_scores_i8, att_rescale, att_weights_i8 and att_wsum_i8, computed
    in up to three passes per tile instead of four kernels: (1) gather and score each live row, (2) each row's
    weight, with the weighted sum of V's first eight dimensions, (3) the other dimensions, eight at a time in
    local accumulators over the tile's rows. Keys and values are read offset-binary ((b ^ 128) = value + 128) and
    the 128 * sum corrections are taken off once (per row for scores, per tile for the sum): the same integers
    as the reference. Rows and the query are read through pointers moved eight bytes at a time, so the
    inner loops use constant offsets (viper keeps few locals in registers: index arithmetic is expensive).
    The two pointer parameters are the only locals a .mpy's viper code keeps in registers (measured on the
    emulated Cortex-M3): after the set-up they are the inner loops' moving pointers (arena: a K or V row, q: the
    query's ints or eight accumulators)."""
    a = ptr8(int(arena))  # noqa: F821
    tl = ptr32(tile)  # noqa: F821
    sp = ptr32(aux[0])  # noqa: F821
    ex = ptr16(aux[1])  # noqa: F821
    acc = ptr32(aux[2])  # noqa: F821
    gg = ptr32(aux[3])  # noqa: F821
    qq = ptr8(int(q))  # noqa: F821
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
    sat = (1 << 29) - 1  # kernels.plain.SAT
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
            arena = ptr8(ka)  # noqa: F821
            q = ptr32(qa)  # noqa: F821
            while c < D8:
                s += ((arena[0] ^ 128) * q[0] + (arena[1] ^ 128) * q[1] + (arena[2] ^ 128) * q[2]
                      + (arena[3] ^ 128) * q[3] + (arena[4] ^ 128) * q[4] + (arena[5] ^ 128) * q[5]
                      + (arena[6] ^ 128) * q[6] + (arena[7] ^ 128) * q[7])
                arena = ptr8(int(arena) + 8)  # noqa: F821
                q = ptr32(int(q) + 32)  # noqa: F821
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
                    arena = ptr8(vbase + b * prow)  # noqa: F821
                    a0 += w * (arena[0] ^ 128)
                    a1 += w * (arena[1] ^ 128)
                    a2 += w * (arena[2] ^ 128)
                    a3 += w * (arena[3] ^ 128)
                    a4 += w * (arena[4] ^ 128)
                    a5 += w * (arena[5] ^ 128)
                    a6 += w * (arena[6] ^ 128)
                    a7 += w * (arena[7] ^ 128)
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
            q = ptr32(int(acc) + 4 * c)  # noqa: F821
            a0 = int(q[0])
            a1 = int(q[1])
            a2 = int(q[2])
            a3 = int(q[3])
            a4 = int(q[4])
            a5 = int(q[5])
            a6 = int(q[6])
            a7 = int(q[7])
            jj = 0
            while jj < nt:
                w = int(tl[w0 + jj])
                if w != 0:
                    arena = ptr8(vbase + int(tl[b0 + jj]) * prow + c)  # noqa: F821
                    a0 += w * (arena[0] ^ 128)
                    a1 += w * (arena[1] ^ 128)
                    a2 += w * (arena[2] ^ 128)
                    a3 += w * (arena[3] ^ 128)
                    a4 += w * (arena[4] ^ 128)
                    a5 += w * (arena[5] ^ 128)
                    a6 += w * (arena[6] ^ 128)
                    a7 += w * (arena[7] ^ 128)
                jj += 1
            q[0] = a0
            q[1] = a1
            q[2] = a2
            q[3] = a3
            q[4] = a4
            q[5] = a5
            q[6] = a6
            q[7] = a7
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
    """Every query head of one layer (kernels.viper.att_step_i8 sets it up): per head its KV head's geometry, its
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
# att_head_i8 runs: att.k). geo: kvedge.kernels.words's G_* words; the running state crosses at G_M. ----

def att_rows_i8(att, arena, qc, slots):
    """attention.q8_rows' i8 case: every tile in one att_head_i8 call; the running state crosses through geo.
    Returns True (done)."""
    geo = att.geo
    aux = att.aux
    aux[0] = slots
    aux[2] = att.iacc  # kvedge.tier.cache lends each head its own accumulator
    att.q8_save(geo, G_M)
    (getattr(att.k, "att_head_i8", None) or att_head_i8)(arena, qc, att.tile, aux)
    aux[0] = None
    att.q8_load(geo, G_M)
    return True


def att_step_i8(att, c, layer, qc, qs, out_q, out_exp, slots, nslots, nmax):
    """attention.step_q8's hot case (i8 rows only, no scores): every head of the layer in one call of
    att_layer_i8 (per head one att_head_i8 and one att_div_q10 of the kind in use); the same
    integers as the general loop (q8_rows). nmax: the slots scanned (nslots < 0) or listed. Returns True
    (done)."""
    tile = att.tile
    geo = att.geo
    aux = att.aux
    k = att.k
    aux[0] = slots
    aux[2] = att.iacc
    aux[4] = qs
    aux[5] = out_q
    aux[6] = out_exp
    aux[7] = getattr(k, "att_head_i8", None) or att_head_i8  # the asm kind has its own
    aux[8] = k.att_div_q10
    tile[T_KIVI] = 0
    att.head_geo(c, layer, 0)  # the row pitch (att_layer_i8 sets each KV head's bases from the layer's below)
    geo[G_P] = c.P
    geo[G_N] = nmax
    geo[G_LISTED] = 0 if nslots < 0 else 1
    L = G_END + att.D  # the layer's bases, after the kernels' scratch and query
    geo[L + LG_HEADS] = att.heads
    geo[L + LG_GROUP] = att.group
    c.i8_bases(geo, L + LG_KROW, layer, 0, True)  # LG_KROW..LG_VSC, then LG_HSTEP, LG_SSTEP
    geo[L + LG_LAM] = att.lam
    r = att_layer_i8(c.arena, qc, tile, aux)
    aux[0] = aux[4] = aux[5] = aux[6] = None
    if r < 0:
        raise ValueError("no cached tokens to attend to in layer %d" % layer)
    att.q8_load(geo, G_M)  # the last head's state, as the general loop leaves it
    att.first = False
    return True
