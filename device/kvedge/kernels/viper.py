# @micropython.viper kernels: raw-pointer loops on machine words. Same results as kernels.plain.
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
# The float kernels (mv_f32, mv_scale, mv_quant, mv_rmsnorm, mv_swiglu, mv_add; att_conv_f32 below) are the
# native ones of kvedge.kernels.f32_native (viper has no float pointers), loaded the first time one is called
# (the stubs at the end): the integer pass never calls them, and on the rp2040 their ~6 KB of code is the cache's.
# The int8 one is viper.


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


# ---- attention tiles over the i8 cache: same arithmetic as kernels.plain.att_* (see there) ----
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
    sat = (1 << 29) - 1  # kernels.plain.SAT
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


# f32 rows (the prefix, i4's residual) are few: the native conversion (att_conv_f32, loaded on first use) serves.


@micropython.viper
def att_conv_i4(arena, tile, scratch, conv) -> int:
    """kernels.plain.att_conv_i4 (see there) on raw pointers: i4/i2 rows -> int8 codes and power-of-two scales."""
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


# The fused kernels of the integer attention (a head's every tile, a layer's every head) and their drivers are a
# module of their own (kernels.viper_head): their code costs heap a board running the float path does not spare, so
# it is loaded on request only. Llama(forward="int") asks at start-up; until then kvedge.attention finds no
# att_step_i8 / att_rows_i8 in the kernel module and runs its own tile loop (the same integers, more Python).
def att_preload(mod):
    """Load kernels.viper_head and give kernel module `mod` (this one, or the asm one) its drivers."""
    import kvedge.kernels.viper_head as vh
    mod.att_step_i8 = vh.att_step_i8
    mod.att_rows_i8 = vh.att_rows_i8
    return vh


# ---- the float kernels: stubs that load kvedge.kernels.f32_native and put its kernels in their place ----
FLOAT = ("mv_f32", "mv_scale", "mv_quant", "mv_rmsnorm", "mv_swiglu", "mv_add", "att_conv_f32")


def load_floats():
    """kvedge.kernels.f32_native, its float kernels put in place of the stubs below, in this module and in the asm
    kind's (the first call of a stub: the float pass's first token, the integer attention's first f32 row),
    bound to the tile's indexes when kvedge.kernels.words is loaded (a float-only run never loads it)."""
    import sys
    fk = __import__("kvedge.kernels.f32_native").kernels.f32_native
    if "kvedge.kernels.words" in sys.modules:
        fk.att_bind()
    for name in ("kvedge.kernels.viper", "kvedge.kernels.asm_thumb"):
        m = sys.modules.get(name)
        if m is not None:
            for n in FLOAT:
                setattr(m, n, getattr(fk, n))
    return fk


def att_bind():
    """(kvedge.kernels.bind_att) the float kernels' tile indexes, if they are loaded (load_floats binds them when
    they load later)."""
    import sys
    fk = sys.modules.get("kvedge.kernels.f32_native")
    if fk is not None:
        fk.att_bind()


def mv_f32(w, wo, x, out, oo, rows, cols):
    return load_floats().mv_f32(w, wo, x, out, oo, rows, cols)


def mv_scale(acc, scales, so, xs, out, oo, rows):
    return load_floats().mv_scale(acc, scales, so, xs, out, oo, rows)


def mv_quant(x, n, q):
    return load_floats().mv_quant(x, n, q)


def mv_rmsnorm(out, x, w, n):
    return load_floats().mv_rmsnorm(out, x, w, n)


def mv_swiglu(h, g, n):
    return load_floats().mv_swiglu(h, g, n)


def mv_add(x, y, n):
    return load_floats().mv_add(x, y, n)


def att_conv_f32(arena, tile, scratch, conv):
    return load_floats().att_conv_f32(arena, tile, scratch, conv)
