# Low-bit rows of a KVCache (i4, i2) after KIVI: asymmetric codes with an f16 scale and zero, packed low bits
# first; keys per channel over groups of G tokens, values per token; the sliding f32 residual of the newest
# R..R+G-1 tokens, from which a whole group is quantized as it leaves (layout and rule: see cache.py).
# Functions of the cache they work on, in their own module: only i4/i2 caches load this code.
import struct

from . import quant

K = 0
V = 1


def put_meta(a, moff, sb, zb):
    a[moff] = sb & 0xFF
    a[moff + 1] = sb >> 8
    a[moff + 2] = zb & 0xFF
    a[moff + 3] = zb >> 8


def put_row(c, off, moff, x, src):
    """One row x[src:src+D] as asymmetric codes with the row's own scale and zero (f16 bits at moff)."""
    D = c.D
    bits = c.bits
    top = (1 << bits) - 1
    sb, zb = asym_params(x, src, D, top)
    a = c.arena
    put_meta(a, moff, sb, zb)
    s = quant.f16_value(sb)
    z = quant.f16_value(zb)
    inv = 1.0 / s if s else 0.0
    per = 8 // bits
    i = 0
    for j in range(D // per):
        byte = 0
        for t in range(per):
            byte |= asym_code(x[src + i], z, inv, top) << (bits * t)
            i += 1
        a[off + j] = byte


def read_row(c, layer, head, b, kv, off, out):
    """DATA row b (at off) decoded: zero + code * scale; KIVI keys take the scale and zero of their channel in
    the slot's group, values and residual-0 keys those of the row."""
    decode_row(c.arena, c.scale_at(layer, kv, head, b), off, c.D, c.bits, 4 if kv == K and c.kivi else 0, out)


def decode_row(a, m, off, D, bits, step, out):
    """D asymmetric codes of `bits` bits at off into out: zero + code * scale, the f16 scale and zero at m (step 0),
    or each channel's at m + step * i (keys per channel). A split cache's rows too (kvedge.kvsplit)."""
    per = 8 // bits
    top = (1 << bits) - 1
    sc = quant.f16_value(a[m] | (a[m + 1] << 8))
    z = quant.f16_value(a[m + 2] | (a[m + 3] << 8))
    for i in range(D):
        if step:
            mi = m + step * i
            sc = quant.f16_value(a[mi] | (a[mi + 1] << 8))
            z = quant.f16_value(a[mi + 2] | (a[mi + 3] << 8))
        out[i] = z + ((a[off + i // per] >> (bits * (i % per))) & top) * sc


def write_residual(c, layer, s, k, v):
    """Token s (= pos - P) into the f32 residual ring; first quantize the group that leaves the residual."""
    R = c.R
    lo = c.res_lo
    if s >= c.res_hi[layer]:
        while s - lo[layer] >= R:
            close_group(c, layer, lo[layer])
            lo[layer] += c.G
        c.res_hi[layer] = s + 1
    r = s % R
    D = c.D
    for h in range(c.H):
        c._put_f32(c.residual_at(layer, K, h, r), k, h * D)
        c._put_f32(c.residual_at(layer, V, h, r), v, h * D)


def quantize_residual(c):
    """Every whole group waiting in the residual, in every layer, quantized; returns how many."""
    n = 0
    for layer in range(c.L):
        while c.res_hi[layer] - c.res_lo[layer] >= c.G:
            close_group(c, layer, c.res_lo[layer])
            c.res_lo[layer] += c.G
            n += 1
    return n


def close_group(c, layer, lo):
    """Residual tokens lo..lo+G-1 into their DATA slots: keys per channel over the group, values per token."""
    G, R = c.G, c.R
    b0 = c._natural_slot(c.P + lo) - c.P  # the group's first DATA row (groups tile the slots)
    rowf = c._scratch  # a value row, then (after them) one key channel of the group
    frow = c.f32_pitch()
    prow = c.row_pitch()
    for h in range(c.H):
        for r in range(G):  # values: each row on its own
            c._get_f32(c.residual_at(layer, V, h, (lo + r) % R), rowf)
            b = b0 + r
            put_row(c, c.row_at(layer, V, h, b), c.scale_at(layer, V, h, b), rowf, 0)
        close_keys(c, layer, h, lo, b0, rowf, frow, prow, c.bits)


def close_keys(c, layer, h, lo, b0, col, frow, prow, bits):
    """KV head h's residual keys lo..lo+G-1 into DATA rows b0..b0+G-1 (rows prow bytes apart, codes of `bits` bits):
    one asymmetric scale and zero per channel over the group's G tokens (col: G floats of scratch). A split cache's
    keys per channel too (kvedge.kvsplit)."""
    G, D, R = c.G, c.D, c.R
    a = c.arena
    top = (1 << bits) - 1
    per = 8 // bits
    unpack = struct.unpack_from
    kres = c.residual_at(layer, K, h, 0)
    kdata = c.row_at(layer, K, h, b0)
    kmeta = c.scale_at(layer, K, h, b0)
    for ch in range(D):
        for r in range(G):
            col[r] = unpack("<f", a, kres + ((lo + r) % R) * frow + 4 * ch)[0]
        sb, zb = asym_params(col, 0, G, top)
        put_meta(a, kmeta + 4 * ch, sb, zb)
        s = quant.f16_value(sb)
        z = quant.f16_value(zb)
        inv = 1.0 / s if s else 0.0
        shift = bits * (ch % per)
        keep = 0xFF ^ (top << shift)
        for r in range(G):
            o = kdata + r * prow + ch // per
            a[o] = (a[o] & keep) | (asym_code(col[r], z, inv, top) << shift)


# ---- int4 / int2, asymmetric: x ~ zero + code * scale, code in 0..top (15 for int4, 3 for int2) ----
#
# Zero and scale start at the group's min-max line and are refined by least squares (the uniform quantizer's
# Lloyd step: codes fixed, the line zero + code * scale nearest the values; then the codes again), then stored
# as the nearest halves; codes are clamped to 0..top, so the outermost values may clip. Each step lowers the
# squared error (never above min-max's); at 4 levels min-max spends half its codes on the two extremes and the
# refinement matters most: on stories260K it cuts i2's KL to the f32 cache to about a third (docs/quality.md,
# tools/eval_kivi_arith.py). FITS: Gaussian and Laplace data are within 2 % of the fixed point's squared error
# after 4 refinements (a corpus-free choice).

FITS = 4


def asym_params(x, src, n, top):
    """(scale bits, zero bits) for x[src:src+n] with top + 1 levels: least-squares zero and scale, nearest f16."""
    mn = mx = x[src]
    for i in range(src + 1, src + n):
        e = x[i]
        if e < mn:
            mn = e
        if e > mx:
            mx = e
    s = (mx - mn) / top
    if s > quant.F16_MAX:
        raise ValueError("range [%r, %r] too wide for a %d-level group (f16 scale limit)" % (mn, mx, top + 1))
    sd = 0.0  # sums over d = x - mn: no cancellation when the values sit far from 0 (single-precision floats)
    for i in range(src, src + n):
        sd += x[i] - mn
    z = 0.0  # zero - mn
    for _ in range(FITS):
        if not s:
            break
        inv = 1.0 / s
        sq = sqq = 0
        sqd = 0.0
        for i in range(src, src + n):
            d = x[i] - mn
            q = asym_code(d, z, inv, top)
            sq += q
            sqq += q * q
            sqd += q * d
        det = n * sqq - sq * sq
        if det <= 0:
            break
        s2 = (n * sqd - sq * sd) / det
        if not (s2 > 0):
            break
        z2 = (sd - s2 * sq) / n
        if s2 == s and z2 == z:
            break
        if s2 > quant.F16_MAX or not (-quant.F16_MAX <= z2 + mn <= quant.F16_MAX):
            break  # a fit f16 cannot store: clamping it would shift every value of the group; keep the last one
        s, z = s2, z2
    z += mn
    z = quant.F16_MAX if z > quant.F16_MAX else (-quant.F16_MAX if z < -quant.F16_MAX else z)
    return quant.f16_bits(s), quant.f16_bits(z)


def asym_code(x, zero, inv, top):
    """Nearest code (ties up), clamped to 0..top before the int: a fitted scale may clip far outliers, and an
    int of a huge float would need a long int (none on small ports)."""
    y = (x - zero) * inv + 0.5
    if y >= top:
        return top
    return int(y) if y >= 1 else 0
