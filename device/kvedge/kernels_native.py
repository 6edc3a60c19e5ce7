# @micropython.native kernels: bytecode compiled to machine code, same semantics as kernels_plain.
import micropython

OK = True


@micropython.native
def dot_i8(a, ia, b, ib, n):
    s = 0
    for i in range(n):
        s += a[ia + i] * b[ib + i]
    return s


# ---- matrix-vector products of the model (mv_*): same code as kernels_plain, compiled native ----

@micropython.native
def mv_f32(w, wo, x, out, oo, rows, cols):
    b = wo
    for r in range(rows):
        s = 0.0
        for c in range(cols):
            s += w[b + c] * x[c]
        out[oo + r] = s
        b += cols


@micropython.native
def mv_i8(w, wo, x, acc, ao, rows, cols):
    b = wo
    for r in range(rows):
        s = 0
        for c in range(cols):
            s += w[b + c] * x[c]
        acc[ao + r] = s
        b += cols


@micropython.native
def mv_scale(acc, scales, so, xs, out, oo, rows):
    for r in range(rows):
        out[oo + r] = acc[r] * scales[so + r] * xs


@micropython.native
def mv_quant(x, n, q):
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
