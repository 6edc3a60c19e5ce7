# A tiered cache's integer attention a layer at a time: every query head over each cold i8 block, then over the
# ring, in one call each (kvedge.tier.cache loads it where the integer pass's fused drivers are loaded; elsewhere, and
# on CPython and CircuitPython, it folds a head at a time: the same integers). A module of its own, so that a run
# without a tier holds none of its code. The head kernel it calls is the kind's own (kernels.asm_thumb.att_head_i8, or
# kernels.viper_head's).
import micropython

from kvedge.kernels.viper_head import att_head_i8 as _vhead_head  # loaded with the fused drivers (att_preload)
from kvedge.kernels.words import T_KIVI, G_P, G_N, G_LISTED, G_END, LG_HEADS, LG_GROUP, LG_KROW, LG_LAM, LG_MODE


FRESH = 1  # att_heads_i8's modes (geo at LG_MODE): start every head afresh (state and accumulator zero) ...
FINISH = 2  # ... and finish every head: its output into out_q / out_exp (the accumulator is cleared)


@micropython.viper
def att_heads_i8(arena, q, tile, aux) -> int:
    """Every query head over one layer's i8 rows (a tiered cache's staging block, or its ring), each with a running
    state of its own: per head h its KV head's geometry (the bases at geo[24 + D:], as att_layer_i8), its query's
    scale, its state from aux[9][5h:5h + 5] (M, lsum, ws, evmax, first: the order of Attention.q8_save) and its
    accumulator aux[10][h], or (mode FRESH) a fresh state and a zeroed accumulator, one att_head_i8 (aux[7]: the
    kind's own), then its state back, or (mode FINISH) its output: one att_div_q10 (aux[8]) into out_q (aux[5])
    and out_exp (aux[6]). The same integers as a head at a time through att_rows_i8 and Attention.q8_finish.
    Returns 0, or -1 - h when finishing head h that has no row."""
    tl = ptr32(tile)  # noqa: F821
    gg = ptr32(aux[3])  # noqa: F821
    qs = ptr16(aux[4])  # noqa: F821
    oe = ptr32(aux[6])  # noqa: F821
    st = ptr32(aux[9])  # noqa: F821
    out_q = aux[5]
    accs = aux[10]
    head = aux[7]
    div = aux[8]
    D = int(tl[1])
    L = 24 + D
    heads = int(gg[L])
    group = int(gg[L + 1])
    mode = int(gg[L + 9])
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
        o = 5 * h
        gg[6] = 0
        acc = accs[h]
        aux[2] = acc
        if mode & 1:
            gg[9] = 0
            gg[10] = 0
            gg[11] = 0
            gg[12] = 0
            gg[13] = 1
            a = ptr32(acc)  # noqa: F821
            i = 0
            while i < D:
                a[i] = 0
                i += 1
        else:
            gg[9] = st[o]
            gg[10] = st[o + 1]
            gg[11] = st[o + 2]
            gg[12] = st[o + 3]
            gg[13] = st[o + 4]
        head(arena, q, tile, aux)
        if mode & 2:
            lsum = int(gg[10])
            if lsum <= 0:
                return -1 - h
            tl[12] = lsum  # T_LSUM
            div(acc, out_q, tile)
            oe[h] = int(gg[12]) - 25
        else:
            st[o] = gg[9]
            st[o + 1] = gg[10]
            st[o + 2] = gg[11]
            st[o + 3] = gg[12]
            f = int(gg[13])
            if f != 0:
                f = 1
            st[o + 4] = f
        h += 1
    return 0


def att_fold_i8(att, head, c, layer, qc, qs, state, accs, mode, out_q, out_exp):
    """Layer `layer` of cache c (i8 rows, no f32 prefix; a tiered cache's staging block is layer 0 of its own)
    folded into every query head's running state (state: 5 words a head, Attention.q8_save's; accs: one accumulator
    a head) in one call of att_heads_i8 (head: the kind's att_head_i8), mode FRESH and/or FINISH (out_q, out_exp:
    the step's outputs, as Attention.step_q8's): the same integers as att_rows_i8 a head at a time and
    Attention.q8_finish. Allocates nothing. Returns att_heads_i8's result."""
    _setup(att, head, c, layer, qs, state, accs, mode, out_q, out_exp)
    r = att_heads_i8(c.arena, qc, att.tile, att.aux)
    _done(att)
    return r


def _setup(att, head, c, layer, qs, state, accs, mode, out_q, out_exp):
    """geo and aux for att_heads_i8 over `layer` of cache c."""
    geo = att.geo
    aux = att.aux
    att.tile[T_KIVI] = 0
    att.head_geo(c, layer, 0)  # the row pitch; each head's bases from the layer's below
    geo[G_P] = 0
    geo[G_N] = c.N
    geo[G_LISTED] = 0
    L = G_END + att.D
    geo[L + LG_HEADS] = att.heads
    geo[L + LG_GROUP] = att.group
    c.i8_bases(geo, L + LG_KROW, layer, 0, True)
    geo[L + LG_LAM] = att.lam
    geo[L + LG_MODE] = mode
    aux[0] = c.slot_pos
    aux[4] = qs
    aux[5] = out_q
    aux[6] = out_exp
    aux[7] = head
    aux[8] = att.k.att_div_q10
    aux[9] = state
    aux[10] = accs


def _done(att):
    aux = att.aux
    aux[0] = aux[4] = aux[5] = aux[6] = aux[9] = aux[10] = None
    aux[2] = att.iacc


def att_tier_i8(tc, layer, qc, qs, out_q, out_exp):
    """kvedge.tier.cache.TieredCache.step_q8 where both tiers hold plain i8 rows: each cold block read from flash into
    the staging block and folded into every query head (the first afresh: the staging block's geometry is set up
    once, each block is one kernel call), then the ring, which finishes every head into out_q and out_exp, with the
    kind's head kernel (kernels.asm_thumb's own, or kernels.viper_head's). Allocates nothing."""
    att = tc.att
    head = getattr(att.k, "att_head_i8", None) or _vhead_head
    cs = tc.store
    mode = FRESH
    n = cs.count
    if n:
        stg = tc.stg
        _setup(att, head, stg, 0, qs, tc.ist, tc.iaccs, FRESH, out_q, out_exp)
        geo = att.geo
        at = G_END + att.D + LG_MODE
        tile = att.tile
        aux = att.aux
        arena = stg.arena
        k = cs.k0
        for i in range(n):
            cs.load(k + i, layer)
            att_heads_i8(arena, qc, tile, aux)
            geo[at] = 0
        mode = 0
    r = att_fold_i8(att, head, tc.ring, layer, qc, qs, tc.ist, tc.iaccs, mode | FINISH, out_q, out_exp)
    if r < 0:
        raise ValueError("no cached tokens to attend to in layer %d" % layer)


@micropython.viper
def adler(buf, n: int, ab) -> int:
    """kvedge.tier.store.adler in viper (the same sums, reduced every 2,048 bytes: within 2**30), for the cold
    blocks a tiered cache writes (and verifies) on the integer pass: ~30x fewer instructions than the Python loop."""
    p = ptr8(buf)  # noqa: F821
    s = ptr32(ab)  # noqa: F821
    a = int(s[0])
    b = int(s[1])
    i = 0
    while i < n:
        e = i + 2048
        if e > n:
            e = n
        while i < e:
            a += p[i]
            b += a
            i += 1
        a -= (a // 65521) * 65521
        b -= (b // 65521) * 65521
    s[0] = a
    s[1] = b
    return 0

