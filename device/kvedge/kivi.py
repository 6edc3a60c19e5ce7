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
    mn = mx = x[src]
    for i in range(1, D):
        e = x[src + i]
        if e < mn:
            mn = e
        if e > mx:
            mx = e
    bits = c.bits
    top = (1 << bits) - 1
    sb, zb = quant.asym_params(mn, mx, top)
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
            byte |= quant.asym_code(x[src + i], z, inv, top) << (bits * t)
            i += 1
        a[off + j] = byte


def read_row(c, layer, head, b, kv, off, out):
    """DATA row b (at off) decoded: zero + code * scale; KIVI keys take the scale and zero of their channel in
    the slot's group, values and residual-0 keys those of the row."""
    a = c.arena
    D = c.D
    bits = c.bits
    per = 8 // bits
    top = (1 << bits) - 1
    step = 0
    if kv == V:
        m = c.VMETA + ((layer * c.H + head) * c.B + b) * 4
    elif c.kivi:
        m = c.META + ((layer * c.H + head) * c.NG + b // c.G) * D * 4
        step = 4
    else:
        m = c.META + ((layer * c.H + head) * c.B + b) * 4
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
        c._put_f32(c.RES + c._rowidx(layer, K, h, R, r) * c.frow, k, h * D)
        c._put_f32(c.RES + c._rowidx(layer, V, h, R, r) * c.frow, v, h * D)


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
    G, D, R, B, H = c.G, c.D, c.R, c.B, c.H
    b0 = c._natural_slot(c.P + lo) - c.P  # the group's first DATA row (groups tile the slots)
    rowf = c._scratch
    a = c.arena
    frow = c.frow
    prow = c.prow
    bits = c.bits
    top = (1 << bits) - 1
    per = 8 // bits
    unpack = struct.unpack_from
    for h in range(H):
        for r in range(G):  # values: each row on its own
            c._get_f32(c.RES + c._rowidx(layer, V, h, R, (lo + r) % R) * frow, rowf)
            b = b0 + r
            put_row(c, c.DATA + c._rowidx(layer, V, h, B, b) * prow, c.VMETA + ((layer * H + h) * B + b) * 4, rowf, 0)
        kres = c.RES + c._rowidx(layer, K, h, R, 0) * frow
        kdata = c.DATA + c._rowidx(layer, K, h, B, b0) * prow
        kmeta = c.META + ((layer * H + h) * c.NG + b0 // G) * D * 4
        for ch in range(D):  # keys: one scale and zero per channel over the group's G tokens
            mn = mx = unpack("<f", a, kres + (lo % R) * frow + 4 * ch)[0]
            for r in range(1, G):
                e = unpack("<f", a, kres + ((lo + r) % R) * frow + 4 * ch)[0]
                if e < mn:
                    mn = e
                if e > mx:
                    mx = e
            sb, zb = quant.asym_params(mn, mx, top)
            put_meta(a, kmeta + 4 * ch, sb, zb)
            s = quant.f16_value(sb)
            z = quant.f16_value(zb)
            inv = 1.0 / s if s else 0.0
            shift = bits * (ch % per)
            keep = 0xFF ^ (top << shift)
            for r in range(G):
                e = unpack("<f", a, kres + ((lo + r) % R) * frow + 4 * ch)[0]
                o = kdata + r * prow + ch // per
                a[o] = (a[o] & keep) | (quant.asym_code(e, z, inv, top) << shift)
