# Plain-Python kernels: the reference for the viper/native ones and the path CPython and CircuitPython take.
OK = True


def dot_i8(a, ia, b, ib, n):
    """Integer dot product of n int8 values: a[ia:ia+n] . b[ib:ib+n] (array('b') or signed buffers)."""
    s = 0
    for i in range(n):
        s += a[ia + i] * b[ib + i]
    return s


# ---- matrix-vector products of the model (mv_*) ----
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
