"""KIVI's quantization in numpy, from the paper's description, independent of kvedge.kivi.

KIVI (Liu et al. 2024): asymmetric min-max codes, keys per channel over a group of G tokens, values per token;
the newest R..R+G-1 tokens stay in full precision and a whole group is quantized when it leaves that residual.

The arithmetic of one group is a tuple of choices, so the gap between the ideal and a device's storage can be
measured one cause at a time:

  zero   "exact" (float64 min) | "near" (f16 nearest to it) | "down" (largest f16 <= it)
  scale  "exact" (float64 (max - zero) / top) | "near" (f16 nearest) | "up" (smallest f16 >= it)
  round  "even" (nearest, ties to even: numpy's rint) | "up" (floor(y + 0.5), ties up)

A fourth, optional element "lsqN" refits zero and scale N times by least squares to the codes of the previous
fit (the uniform quantizer's Lloyd step: codes fixed, the line zero + code * scale through the group's values)
before they are stored (then zero and scale are the fitted ones, not min and span / top).

Codes are computed against the zero and scale actually stored and clamped to 0..top; the value read back is
zero + code * scale. IDEAL is float64 throughout; DEVICE is what kvedge.quant stores."""
import numpy as np

F16_MAX = 65504.0
IDEAL = ("exact", "exact", "even")
KIVI_F16 = ("near", "near", "even")  # KIVI's own code keeps scale and zero in the f16 tensors it works in
MINMAX_F16 = ("down", "up", "up")  # kvedge until the refinement: min-max, no value clips, ties up
DEVICE = ("near", "near", "up", "lsq4")  # kvedge.quant: min-max refined 4 times by least squares, nearest f16
ZEROS = ("exact", "near", "down")
SCALES = ("exact", "near", "up")
ROUNDS = ("even", "up")


def f16_near(x):
    return np.asarray(x, dtype=np.float64).astype(np.float16).astype(np.float64)


def f16_down(x):
    """Largest f16 <= x (x within the f16 range)."""
    h = np.asarray(x, dtype=np.float64).astype(np.float16)
    h = np.where(h.astype(np.float64) > x, np.nextafter(h, np.float16(-np.inf)), h)
    return h.astype(np.float64)


def f16_up(x):
    """Smallest f16 >= x (x within the f16 range)."""
    h = np.asarray(x, dtype=np.float64).astype(np.float16)
    h = np.where(h.astype(np.float64) < x, np.nextafter(h, np.float16(np.inf)), h)
    return h.astype(np.float64)


_STORE = {"exact": lambda x: np.asarray(x, dtype=np.float64), "near": f16_near, "down": f16_down, "up": f16_up}


def fake_quant(x, axis, bits, arith=IDEAL):
    """x (float64 array) after asymmetric min-max quantization with `bits`-bit codes; elements along `axis` share
    one zero and scale. Returns the values read back."""
    zero_rule, scale_rule, round_rule = arith[:3]
    fits = int(arith[3][3:]) if len(arith) > 3 else 0
    top = (1 << bits) - 1
    x = np.asarray(x, dtype=np.float64)
    mn = x.min(axis=axis, keepdims=True)
    mx = x.max(axis=axis, keepdims=True)
    z = mn
    s = (mx - mn) / top
    for _ in range(fits):
        q = _codes(x, z, s, top, round_rule)
        z2, s2 = _lsq(x, q, axis, z, s)
        if zero_rule != "exact":  # stored as f16: a fit beyond its range is not taken (as kvedge.kivi does)
            ok = (np.abs(z2) <= F16_MAX) & (s2 <= F16_MAX)
            z2, s2 = np.where(ok, z2, z), np.where(ok, s2, s)
        z, s = z2, s2
    z = _STORE[zero_rule](z)
    s = _STORE[scale_rule]((mx - z) / top if not fits else s)
    return z + _codes(x, z, s, top, round_rule) * s


def _codes(x, z, s, top, round_rule):
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.where(s > 0, (x - z) * (1.0 / s), 0.0)  # the reciprocal, as a device without division would
    q = np.rint(y) if round_rule == "even" else np.floor(y + 0.5)
    return np.clip(q, 0, top)


def _lsq(x, q, axis, z, s):
    """Zero and scale minimizing sum (x - z - q * s)**2 for fixed codes q; (z, s) unchanged where the codes
    are all equal."""
    n = x.shape[axis]
    sq = q.sum(axis=axis, keepdims=True)
    sqq = (q * q).sum(axis=axis, keepdims=True)
    sx = x.sum(axis=axis, keepdims=True)
    sqx = (q * x).sum(axis=axis, keepdims=True)
    det = n * sqq - sq * sq
    ok = det > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        s2 = np.where(ok, (n * sqx - sq * sx) / det, s)
        z2 = np.where(ok, (sx - s2 * sq) / n, z)
    bad = s2 <= 0
    return np.where(bad, z, z2), np.where(bad, s, s2)


def quant_keys(group_keys, bits, arith=IDEAL, outliers=0):
    """Keys of one group [G, ..., D]: per channel over the group's tokens. outliers=n: in each channel the n
    values farthest from the channel's median (ties: the earlier token) are kept apart as f16 and the others
    quantized without them (KVQuant's dense-and-sparse split; not KIVI, and not a kvedge format)."""
    if not outliers:
        return fake_quant(group_keys, 0, bits, arith)
    x = np.asarray(group_keys, dtype=np.float64)
    flat = x.reshape(x.shape[0], -1)
    out = np.empty_like(flat)
    for c in range(flat.shape[1]):
        col = flat[:, c]
        far = np.argsort(-np.abs(col - np.median(col)), kind="stable")[:outliers]
        rest = np.ones(len(col), dtype=bool)
        rest[far] = False
        out[:, c] = f16_near(col)
        out[rest, c] = fake_quant(col[rest], 0, bits, arith)
    return out.reshape(x.shape)


def quant_values(rows, bits, arith=IDEAL):
    """Value rows [..., D]: per token."""
    return fake_quant(rows, -1, bits, arith)


def residual_lo(n, group, residual):
    """Tokens quantized after n tokens: whole groups, leaving the newest R..R+G-1 exact (all of them while
    fewer than R + G tokens were seen)."""
    return group * max(0, (n - residual) // group)
