"""The integer attention's range check (issue 46; kvedge.attention.Q8_RANGE says why): whether a query of f16
scale bits, against the largest K scale a layer has held since reset (KVCache.kbits), keeps every logit within
the range where step_q8 holds a cosine of 0.99 against softmax over the cache's rows. In a module of its own: the
checked step_q8 and the float pass's choice of step load it; the integer pass (whose steps are q8_step's) never
does. Ints only on the step's path: no float, no allocation."""
import math

from . import quant


def fits(att, layer, qs, limit):
    """Whether, for every query head, 128 * its scale x 128 * the layer's largest K scale x sqrt(head_dim), a
    bound on max|q_h| x max|k| x sqrt(head_dim), is within limit (Q8_RANGE)."""
    if att.rmant is None:
        _bound(att, limit)
    kb = att.cache.kbits[layer]
    for h in range(att.heads):
        if not in_range(att, qs[h], kb):
            return False
    return True


def _bound(att, limit):
    """Q8_RANGE as a bound on the product of the query's and the keys' f16 scales, 128 * sq * 128 * sk * sqrt(D)
    <= Q8_RANGE, held as rmant * 2**(rexp - 50) (rounded down): in_range compares the f16 mantissas' product
    against it with ints only."""
    m, e = math.frexp(limit / (128.0 * 128.0 * math.sqrt(att.D)))
    att.rmant = int(m * (1 << 21))
    att.rexp = e - 21 + 50


def error(att, layer, qs, limit):
    """The ValueError step_q8 raises for a query beyond the range (the first head beyond it named)."""
    kb = att.cache.kbits[layer]
    for h in range(att.heads):
        if not in_range(att, qs[h], kb):
            return ValueError("layer %d, query head %d: |q| x |k| x sqrt(head_dim) may reach %.4g, beyond the "
                              "integer step's range (%d), where an int8 step of q or k moves the softmax's "
                              "winner: use step() with the float query" % (
                                  layer, h, 128 * quant.f16_value(qs[h]) * 128 * quant.f16_value(kb)
                                  * math.sqrt(att.D), limit))


def in_range(att, qb, kb):
    """Whether 128 * sq * 128 * sk * sqrt(D) <= Q8_RANGE for f16 scale bits qb, kb (finite, >= 0): ints only."""
    eq = qb >> 10
    mq = qb & 1023
    if eq:
        mq += 1024
    else:
        eq = 1
    ek = kb >> 10
    mk = kb & 1023
    if ek:
        mk += 1024
    else:
        ek = 1
    p = mq * mk  # < 2**22; sq * sk = p * 2**(eq + ek - 50)
    if p == 0:
        return True
    s = att.rexp - eq - ek
    if s >= 2:  # rmant >= 2**20: the bound is >= 2**22 > p
        return True
    if s >= 0:
        return p <= att.rmant << s
    return p <= att.rmant >> -s
