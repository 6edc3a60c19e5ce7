# The device-API fuzzer's KVCache and Attention part (see _fuzzkit.py), shared by the families that own a cache.
import math
from array import array

from kvedge import quant
from kvedge.attention import Attention, quantize_query, dequantize_output
from kvedge.cache import KVCache
from kvedge.compat import zeros
from _cacheref import RefCache, row, tolerance
from _fuzzkit import (bad_index, bad_row, bad_codes, bad_scales, bad_out, _random_cfg, q8_code, q8_scale,
                      _live)

class CacheState:
    def __init__(self, rng, seed, cfg=None):
        self.cfg = cfg = cfg or _random_cfg(rng)
        self.c = KVCache(cfg)
        self.att = Attention(self.c, 1 + rng.below(4))
        self.ref = RefCache(cfg.max_tokens, cfg.window, cfg.sinks)
        self.seed = seed
        self.q8 = {}  # positions written with write_q8 (their rows are codes, not _cacheref values)
        self.n = cfg.kv_heads * cfg.head_dim
        self.hd = cfg.heads * cfg.head_dim

    def reset(self):
        self.c.reset()
        self.ref.reset()
        self.q8 = {}

    def rows(self, pos):
        cfg = self.cfg
        return ([row(self.seed, pos, layer, 0, self.n, cfg.head_dim) for layer in range(cfg.layers)],
                [row(self.seed, pos, layer, 1, self.n, cfg.head_dim) for layer in range(cfg.layers)])


def _q8_rows(st, pos, layer):
    cfg = st.cfg
    H = cfg.kv_heads
    out = []
    for kv in (0, 1):
        out.append(array("b", [q8_code(pos, layer, kv, i) for i in range(st.n)]))
        out.append(array("H", [q8_scale(pos, kv, h) for h in range(H)]))
    return out


def cache_valid(fz, st):
    """One valid call, checked against the models; then the new state is the reference."""
    rng, c, cfg = fz.rng, st.c, st.cfg
    op = rng.below(10)
    if op == 0:
        st.reset()
    elif op < 6 or st.ref.n == 0:
        pos = st.ref.n
        if not st.ref.can_append():  # a capacity refusal: counted in alloc_failures, nothing else moves
            fz.refuse(c.start_token, (), "start_token on a full cache", counted=(c, "alloc_failures"))
            fz.valid -= 1
        elif cfg.dtype == "i8" and pos >= cfg.prefix and rng.below(3) == 0:
            assert c.start_token() == pos
            for layer in range(cfg.layers):
                kc, ks, vc, vs = _q8_rows(st, pos, layer)
                c.write_q8(layer, kc, ks, vc, vs)
            st.ref.append()
            st.q8[pos] = 1
        else:
            ks, vs = st.rows(pos)
            assert c.append(ks, vs) == pos
            st.ref.append()
            st.q8.pop(pos, None)
    elif op < 8:
        _check_reads(st, rng)
    else:
        _check_step(st, rng)
    fz.settle()


def _check_reads(st, rng):
    c, cfg = st.c, st.cfg
    live = st.ref.live()
    out = zeros("i", cfg.slots)
    n = c.positions(out)
    assert list(out[:n]) == live, (list(out[:n]), live)
    if not live:
        return
    D = cfg.head_dim
    buf = zeros("f", D)
    codes = zeros("b", D)
    p = rng.pick(live)
    slot = c.slot_of(p)
    for layer in range(cfg.layers):
        for kv in (0, 1):
            for h in range(cfg.kv_heads):
                c.read(layer, h, p, kv, buf)
                if p in st.q8:
                    sb = c.read_codes(layer, h, p, kv, codes)
                    assert sb == q8_scale(p, kv, h)
                    assert list(codes) == [q8_code(p, layer, kv, h * D + i) for i in range(D)]
                    continue
                x = row(st.seed, p, layer, kv, st.n, D)
                for i in range(D):
                    tol = tolerance(cfg, st.seed, p, layer, kv, h, i, slot)
                    assert abs(buf[i] - x[h * D + i]) <= tol + 1e-6 * abs(x[h * D + i]), (cfg, p, layer, kv)


def _softmax_ref(st, layer, q):
    """Plain softmax attention over the live positions, on the rows the cache returns (read is checked
    against the true values separately)."""
    c, cfg = st.c, st.cfg
    D, H = cfg.head_dim, cfg.heads
    group = H // cfg.kv_heads
    live = st.ref.live()
    out = [0.0] * (H * D)
    k = zeros("f", D)
    v = zeros("f", D)
    for h in range(H):
        kvh = h // group
        s = []
        for p in live:
            c.read(layer, kvh, p, 0, k)
            s.append(sum(q[h * D + i] * k[i] for i in range(D)) / math.sqrt(D))
        m = max(s)
        w = [math.exp(x - m) for x in s]
        tot = sum(w)
        for j, p in enumerate(live):
            c.read(layer, kvh, p, 1, v)
            for i in range(D):
                out[h * D + i] += w[j] * v[i] / tot
    return out


def _check_step(st, rng):
    c, cfg = st.c, st.cfg
    if not st.ref.live():
        return
    layer = rng.below(cfg.layers)
    q = [rng.real() for _ in range(st.hd)]
    out = zeros("f", st.hd)
    st.att.step(layer, q, out)
    want = _softmax_ref(st, layer, q)
    scale = max(abs(x) for x in want) + 1e-3
    for i in range(st.hd):
        assert abs(out[i] - want[i]) <= 2e-4 * scale, (cfg, i, out[i], want[i])
    if st.att.int_ok:
        qc, qs = zeros("b", st.hd), zeros("H", cfg.heads)
        oq, oe = zeros("i", st.hd), zeros("i", cfg.heads)
        quantize_query(q, qc, qs, cfg.heads)
        if not st.att.q8_fits(layer, qs):  # beyond step_q8's range: refused (_refuse_step_q8), the float step holds
            return
        st.att.step_q8(layer, qc, qs, oq, oe)
        g = zeros("f", st.hd)
        dequantize_output(oq, oe, g, cfg.heads)
        for h in range(cfg.heads):
            tol = q8_tolerance(st, layer, h, q, qc, qs, 2e-4 * scale)
            for i in range(h * cfg.head_dim, (h + 1) * cfg.head_dim):
                assert abs(g[i] - out[i]) <= tol, (cfg, h, i, g[i], out[i], tol)


def q8_tolerance(st, layer, h, q, qc, qs, float_err):
    """Largest |step_q8 - step| for query head h's outputs, from what the integer path rounds (a bound, not a
    fit: 0.08 * max|output| failed on seeds 2026, 2030, 2031, 2044, 2048, whose outputs are averages far
    smaller than the values averaged, while step_q8 matched exact softmax on its rounded inputs to < 1e-3).
      inputs   the query's codes: e_q[i] = |q[i] - qc[i] * scale|, exact. Rows step_q8 reads verbatim (i8, past
               the prefix): none. Rows it converts to int8 with a power-of-two step (f32 prefix and KIVI
               residual rows, i4/i2 rows: kernels att_conv_*): step <= amax / 64 and |error| <= amax / 127
               (half a step, or under a step where the largest code saturates at 127), + 2**-12 amax for the
               low bits the conversion drops.
      scores   delta_j <= (sum_i e_q[i] (|k_i| + e_k) + |q_i| e_k) / sqrt(D), + the score arithmetic: lam's and
               B's rounding (1.5 / lam) and Q16 (2**-12) relative, one unit of the product a (q scale * k step),
               2**-14 absolute.
      weights  softmax(s + delta) / softmax(s) per token lies in [e**-r, e**r], r = 2 max|delta_j|: the weights
               move by at most e**r - 1 in total, and as they sum to 1 the output moves by that times half the
               values' spread per channel; converted V rows add their own error (a weighted mean of them).
      integer  each token's Q14 weight (table interpolation and shift) and its scaled weight W_j are truncated by
               <= 1 unit each against a running sum >= 2**13 (so <= 2**-12 of the largest value each), the
               online rescales as much again, the Q10 division one output unit (<= 2**-10 of it).
    float_err: what step() itself may be off by (its own check against the plain softmax)."""
    c, cfg = st.c, st.cfg
    D = cfg.head_dim
    kvh = h // (cfg.heads // cfg.kv_heads)
    o = h * D
    sq = quant.f16_value(qs[h])
    rt = math.sqrt(D)
    k = zeros("f", D)
    v = zeros("f", D)
    lo = [0.0] * D
    hi = [0.0] * D
    dmax = ev = vabs = 0.0
    live = st.ref.live()
    for j, p in enumerate(live):
        c.read(layer, kvh, p, 0, k)
        c.read(layer, kvh, p, 1, v)
        conv = cfg.dtype != "i8" or c.slot_of(p) < cfg.prefix
        ak = max(abs(x) for x in k)
        ek = ak * (1 / 127.0 + 2.0 ** -12) if conv else 0.0
        d = s = 0.0
        for i in range(D):
            d += abs(q[o + i] - qc[o + i] * sq) * (abs(k[i]) + ek) + abs(q[o + i]) * ek
            s += q[o + i] * k[i]
        d = (d + abs(s) * (1.5 / st.att.lam + 2.0 ** -12) + sq * ak / 64.0) / rt + 2.0 ** -14
        dmax = max(dmax, d)
        av = max(abs(x) for x in v)
        vabs = max(vabs, av)
        if conv:
            ev = max(ev, av * (1 / 127.0 + 2.0 ** -12))
        for i in range(D):
            lo[i] = v[i] if j == 0 else min(lo[i], v[i])
            hi[i] = v[i] if j == 0 else max(hi[i], v[i])
    spread = max(hi[i] - lo[i] for i in range(D)) / 2
    return ((math.exp(2 * dmax) - 1) * spread + ev + (3 * len(live) * 2.0 ** -12 + 2.0 ** -10) * vabs
            + float_err)


def cache_refuse(fz, st):
    """One invalid call of a KVCache / Attention method, or of a constructor."""
    rng, c, att, cfg = fz.rng, st.c, st.att, st.cfg
    L, H, D, N = cfg.layers, cfg.kv_heads, cfg.head_dim, cfg.slots
    n, hd, lim = st.n, st.hd, c.vlim
    ok_row = [0.5] * n
    live = _live(c)
    pos = live[-1] if live else 0
    slot = c.slot_of(pos) if live else 0
    m = rng.below(15)
    if m == 0:
        args = [0, ok_row, ok_row]
        if c.cur_slot >= 0 and rng.below(4):
            i = rng.below(3)
            args[i] = bad_index(rng, L) if i == 0 else bad_row(rng, n, lim)
        elif c.cur_slot >= 0:  # the wrong state: no current token, with valid arguments
            st.reset()
            fz.settle()
        fz.refuse(c.write, args, "write")
    elif m == 1:
        ks = [ok_row] * L
        vs = [ok_row] * L
        k = rng.below(4)
        if k == 0:
            ks = [ok_row] * (L + 1)
        elif k == 1:
            vs = rng.pick((None, 3, "ab"[:L + 1]))
        else:
            vs = list(vs)
            vs[rng.below(L)] = bad_row(rng, n, lim)
        fz.refuse(c.append, (ks, vs), "append")
    elif m == 2:
        kc, ks, vc, vs = zeros("b", n), [0x3C00] * H, zeros("b", n), [0x3C00] * H
        args = [0, kc, ks, vc, vs]
        i = rng.below(5)
        if i == 0:
            args[0] = bad_index(rng, L)
        elif i in (1, 3):
            args[i] = bad_codes(rng, n, -128, 127)
        else:
            args[i] = bad_scales(rng, H)
        fz.refuse(c.write_q8, args, "write_q8")
    elif m == 3:
        args = [0, 0, pos, 0, zeros("f", D)]
        i = rng.below(5)
        args[i] = (bad_index(rng, L), bad_index(rng, H), bad_index(rng, c.n_seen), bad_index(rng, 2),
                   bad_out(rng, D, True))[i]
        fz.refuse(c.read, args, "read")
    elif m == 4:
        args = [0, 0, slot, 0, zeros("f", D)]
        i = rng.below(5)
        empty = [s for s in range(N) if c.slot_pos[s] < 0]
        args[i] = (bad_index(rng, L), bad_index(rng, H), rng.pick(empty) if empty and rng.below(2)
                   else bad_index(rng, N), bad_index(rng, 2), bad_out(rng, D, True))[i]
        fz.refuse(c.read_slot, args, "read_slot")
    elif m == 5:
        args = [0, 0, pos, 0, zeros("b", D)]
        i = rng.below(5)
        args[i] = (bad_index(rng, L), bad_index(rng, H), bad_index(rng, c.n_seen), bad_index(rng, 2),
                   rng.pick((None, tuple(range(D)), array("B", [0] * D), bytearray(D), zeros("b", D - 1))))[i]
        fz.refuse(c.read_codes, args, "read_codes")
    elif m == 6:
        fz.refuse(c.slot_of, (bad_index(rng, c.n_seen),), "slot_of")
    elif m == 7:
        short = zeros("i", len(live) - 1) if live else None
        fz.refuse(c.positions, (rng.pick((None, 5, short, tuple([0] * N)) if live else (None, 5)),),
                  "positions")
    elif m == 8:
        empty = [s for s in range(N) if c.slot_pos[s] < 0]
        k = rng.below(4)
        if k == 0:
            fz.refuse(c.release_slot, (rng.pick(empty) if empty else bad_index(rng, N),), "release_slot")
        elif k == 1:
            fz.refuse(c.evict_slot, (bad_index(rng, N),), "evict_slot")
        elif k == 2:
            fz.refuse(c.occupy_slot, (slot if live else bad_index(rng, N), 0), "occupy_slot")
        else:
            fz.refuse(c.occupy_slot, (rng.pick(empty) if empty else 0, rng.pick((-1, 1 << 30, 1.5, None))),
                      "occupy_slot")
    elif m == 9:
        args = [slot, 0, ok_row, ok_row]
        i = rng.below(4)
        args[i] = bad_index(rng, N) if i == 0 else (bad_index(rng, L) if i == 1 else bad_row(rng, n, lim))
        fz.refuse(c.write_slot, args, "write_slot")
    elif m < 12:
        _refuse_step(fz, st)
    elif m == 12:
        _refuse_step_q8(fz, st)
    elif m == 13:
        k = rng.below(4)
        if k == 0:
            fz.refuse(KVCache, (rng.pick((None, {}, cfg.to_dict())),), "KVCache")
        elif k == 1:
            fz.refuse(KVCache, (cfg, rng.pick(("1", 1.5, cfg.nbytes() - 1))), "KVCache")
        elif k == 2:
            fz.refuse(Attention, (rng.pick((None, cfg, c)), rng.pick((0, 65, 1.5, None))) if rng.below(2)
                      else (None,), "Attention")
        else:
            fz.refuse(att.kv_head, (bad_index(rng, cfg.heads),), "kv_head")
    else:
        _refuse_module_funcs(fz, st)


def _scores(st, rng):
    """The policy's scores (valid: a refused step must not add to them, D4), or none."""
    pol = getattr(st, "pol", None)
    return pol.scores if pol is not None and rng.below(2) else None


def _refuse_step(fz, st):
    rng, c, att, cfg = fz.rng, st.c, st.att, st.cfg
    hd, N = st.hd, cfg.slots
    live = [s for s in range(N) if c.slot_pos[s] >= 0]
    args = [0, [0.25] * hd, zeros("f", hd), _scores(st, rng), None, -1]
    i = rng.below(6)
    if i == 0:
        args[0] = bad_index(rng, cfg.layers)
    elif i == 1:
        args[1] = bad_row(rng, hd, 3.4028234663852886e38)
    elif i == 2:
        args[2] = bad_out(rng, hd, True)
    elif i == 3:
        args[3] = rng.pick((tuple([0] * N), [0] * (N - 1), [0.5] * N, [-1] * N, array("h", [0] * N), b"\x00" * N,
                            array("i", [(1 << 30) - 1] * N), 7))
    else:
        k = rng.below(4)
        if k == 0:
            args[4], args[5] = None, rng.pick((0, 3, 1.5))
        elif k == 1:
            args[4], args[5] = list(live) or [0], len(live) or 1
        elif k == 2:
            empty = [s for s in range(N) if c.slot_pos[s] < 0]
            sl = array("i", [rng.pick(empty) if empty else N + 3])
            args[4], args[5] = sl, 1
        else:
            sl = array("i", live or [0])
            args[4], args[5] = sl, rng.pick((0, -2, len(sl) + 1, None))
    if not live and rng.below(2):  # the wrong state: nothing to attend to, with otherwise valid arguments
        args = [0, [0.25] * hd, zeros("f", hd), None, None, -1]
    fz.refuse(att.step if rng.below(4) else st.check_all, args, "step")


def _refuse_step_q8(fz, st):
    rng, c, att, cfg = fz.rng, st.c, st.att, st.cfg
    hd, heads, N = st.hd, cfg.heads, cfg.slots
    args = [0, zeros("b", hd), array("H", [0x3C00] * heads), zeros("i", hd), zeros("i", heads), _scores(st, rng),
            None, -1]
    if att.int_ok and c.n_cached:
        i = rng.below(6)
        if i == 0:
            args[0] = bad_index(rng, cfg.layers)
        elif i == 1:
            args[1] = rng.pick(([0] * hd, array("h", [0] * hd), bytearray([200] * hd), zeros("b", hd - 1), None,
                                bad_codes(rng, hd, -128, 127)))
        elif i == 2:
            args[2] = bad_scales(rng, heads)
        elif i == 3:
            args[3] = bad_out(rng, hd, False)
        elif i == 4:
            args[4] = rng.pick((tuple([0] * heads), bytearray(heads), None, zeros("i", heads + 1)))
        else:
            args[5] = rng.pick((tuple([0] * N), [0] * (N - 1), array("h", [0] * N),
                                array("i", [(1 << 30) - 1] * N)))
    fz.refuse(att.step_q8, args, "step_q8")


def _refuse_module_funcs(fz, st):
    rng, cfg = fz.rng, st.cfg
    hd, heads = st.hd, cfg.heads
    if rng.below(2):
        args = [[0.5] * hd, zeros("b", hd), zeros("H", heads), heads]
        i = rng.below(4)
        args[i] = (bad_row(rng, hd, 8319008.0),
                   rng.pick((None, 3, zeros("b", hd - 1), tuple([0] * hd), array("f", [0.0] * hd), array("B", [0] * hd),
                             bytearray(hd))),
                   rng.pick((None, zeros("b", heads), tuple([0] * heads))), rng.pick((0, -1, 1.5, None, hd + 1)))[i]
        fz.refuse(quantize_query, args, "quantize_query")
    else:
        args = [zeros("i", hd), zeros("i", heads), zeros("f", hd), heads]
        i = rng.below(4)
        args[i] = (bad_codes(rng, hd, -(1 << 30), (1 << 30) - 1), rng.pick(([5000] * heads, [0.5] * heads, None)),
                   bad_out(rng, hd, True), rng.pick((0, -1, 1.5, None, hd + 1)))[i]
        fz.refuse(dequantize_output, args, "dequantize_output")


def _check_step_all(att):
    def f(layer, q, out, scores, slots, nslots):
        att.check_step(layer, q, out, scores)
        att._check_slots(slots, nslots)
    return f
