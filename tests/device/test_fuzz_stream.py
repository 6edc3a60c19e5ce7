# Device-API fuzzer, family 4: streams (reset points, the hard cap) over a cache (any dtype, i2 and KIVI-residual
# caches included) and over a session of an i8
# pool written through the integer path, checked against an independent count and the float path; refused
# calls of streams, pools and the cache. See _fuzzkit.py.
import gc
from array import array

from kvedge.paged import PagedPool  # the largest modules first, while the heap is compact
from kvedge.attention import quantize_query, dequantize_output
from kvedge.compat import zeros
from kvedge.config import CacheConfig
from kvedge.quant import f16_value
from kvedge.stream import Stream
from _fuzzkit import (Fuzz, SEED, _scale, bad_index, bad_row, bad_codes, bad_scales, _random_cfg, q8_code,
                      q8_scale)
from _fuzzcache import CacheState, cache_refuse, _check_step_all

class StreamState:
    """A Stream over a small cache (any dtype) and one over a session of an i8 pool, with the positions and
    reset points they must give (an independent count)."""

    def __init__(self, rng):
        cfg = _random_cfg(rng)  # any dtype: i2 and KIVI-residual caches too
        self.cs = CacheState(rng, rng.below(1000), cfg)
        self.every = rng.pick((0, 0, 3, 5))
        self.force = rng.pick(("reset", "error"))
        self.st = Stream(self.cs.c, self.every, 0, self.force)
        self.cap = (1 << 30) - 1 if cfg.window else cfg.slots
        self.seg = 0
        kvh = 1 + rng.below(2)
        self.pcfg = pcfg = CacheConfig(1, kvh * (1 + rng.below(2)), kvh, 2 * (1 + rng.below(3)), 12, "i8", align=0)
        self.pool = PagedPool(pcfg, 2 + rng.below(2), sessions=2)
        self.sid = self.pool.open()
        self.pst = Stream(self.pool, rng.pick((0, 4)), self.sid)
        self.pseg = 0
        self.pn = pcfg.kv_heads * pcfg.head_dim
        self.phd = pcfg.heads * pcfg.head_dim


def stream_valid(fz, ss):
    rng = fz.rng
    op = rng.below(8)
    if op < 3:  # a cache stream token: a reset point first if one is due
        marker = rng.below(5) == 0
        if marker and ss.seg:
            ss.seg = 0
        if ss.every and ss.seg >= ss.every:
            ss.seg = 0
        if ss.seg >= ss.cap:
            if ss.force == "error":
                fz.refuse(ss.st.append, ss.cs.rows(ss.seg) + (marker,), "append at the hard cap")
                fz.valid -= 1
                return fz.settle()
            ss.seg = 0
        ks, vs = ss.cs.rows(ss.seg)
        assert ss.st.append(ks, vs, marker) == ss.seg
        ss.seg += 1
        assert ss.st.cached() <= ss.cap and ss.st.seg == ss.seg
    elif op < 5:  # a pool stream token through the integer writes
        marker = rng.below(5) == 0
        if (marker and ss.pseg) or (ss.pst.every and ss.pseg >= ss.pst.every) or ss.pseg >= ss.pst.cap:
            ss.pseg = 0
        assert ss.pst.start_token(marker) == ss.pseg
        pos = ss.pseg
        ss.pseg += 1
        for layer in range(ss.pcfg.layers):
            kc = array("b", [q8_code(pos, layer, 0, i) for i in range(ss.pn)])
            vc = array("b", [q8_code(pos, layer, 1, i) for i in range(ss.pn)])
            ks = array("H", [q8_scale(pos, 0, h) for h in range(ss.pcfg.kv_heads)])
            vs = array("H", [q8_scale(pos, 1, h) for h in range(ss.pcfg.kv_heads)])
            ss.pst.write_q8(layer, kc, ks, vc, vs)
        assert ss.pool.length(ss.sid) == ss.pseg
    elif op < 7 and ss.pseg:  # the pool session's integer attention against its float attention
        q = [rng.real() for _ in range(ss.phd)]
        heads = ss.pcfg.heads
        qc, qs, oq, oe = zeros("b", ss.phd), zeros("H", heads), zeros("i", ss.phd), zeros("i", heads)
        quantize_query(q, qc, qs, heads)
        ss.pool.attend_q8(ss.sid, 0, qc, qs, oq, oe)
        f, g = zeros("f", ss.phd), zeros("f", ss.phd)
        ss.pool.attend(ss.sid, 0, q, f)
        dequantize_output(oq, oe, g, heads)
        scale = max(abs(x) for x in f) + 1e-3
        assert max(abs(f[i] - g[i]) for i in range(ss.phd)) <= 0.08 * scale
        # every row reads back as code * scale, exactly
        D = ss.pcfg.head_dim
        buf = zeros("f", D)
        p = rng.below(ss.pseg)
        for kv in (0, 1):
            for h in range(ss.pcfg.kv_heads):
                ss.pool.read(ss.sid, 0, h, p, kv, buf)
                s = f16_value(q8_scale(p, kv, h))
                assert list(buf) == [q8_code(p, 0, kv, h * D + i) * s for i in range(D)], (p, kv, h)
    else:
        if rng.below(2):
            assert ss.st.mark() == (ss.seg > 0)
            ss.seg = 0
        else:
            assert ss.pst.mark() == (ss.pseg > 0)
            ss.pseg = 0
    fz.settle()


def stream_refuse(fz, ss):
    rng, st, pst, cfg = fz.rng, ss.st, ss.pst, ss.cs.cfg
    n, L = ss.cs.n, cfg.layers
    m = rng.below(9)
    if m == 0:
        fz.refuse(rng.pick((st.start_token, pst.start_token)), (rng.pick((None, 2, "x", 1.0, 0, 1)),),
                  "start_token(marker)")
    elif m == 1:
        args = [[[0.5] * n] * L, [[0.5] * n] * L, False]
        i = rng.below(3)
        if i == 2:
            args[2] = rng.pick((None, 2, "yes"))
        else:
            rows = list(args[i])
            rows[rng.below(L)] = bad_row(rng, n, ss.cs.c.vlim)
            args[i] = rows
        fz.refuse(st.append, args, "append")
    elif m == 2:  # writes with no current token (after a reset point), or bad rows
        if rng.below(2):
            st.mark()
            ss.seg = 0
            fz.settle()
            fz.refuse(st.write, (0, [0.5] * n, [0.5] * n), "write with no current token")
        else:
            fz.refuse(st.write, (bad_index(rng, L), [0.5] * n, [0.5] * n), "write")
    elif m == 3:
        pn, H = ss.pn, ss.pcfg.kv_heads
        if rng.below(2):
            pst.mark()
            ss.pseg = 0
            fz.settle()
            args = [0, zeros("b", pn), [0x3C00] * H, zeros("b", pn), [0x3C00] * H]
        else:
            args = [0, zeros("b", pn), [0x3C00] * H, zeros("b", pn), [0x3C00] * H]
            i = rng.below(5)
            args[i] = (bad_index(rng, 1), bad_codes(rng, pn, -128, 127), bad_scales(rng, H),
                       bad_codes(rng, pn, -128, 127), bad_scales(rng, H))[i]
        fz.refuse(pst.write_q8, args, "pool stream write_q8")
    elif m == 4:
        fz.refuse(pst.write, (0, [0.5] * ss.pn, [0.5] * ss.pn) if ss.pseg == 0 else
                  (0, bad_row(rng, ss.pn, 3.4e38), [0.5] * ss.pn), "pool stream write")
    elif m == 5:
        k = rng.below(8)
        fz.refuse(Stream, ((None,), (ss.cs.c, -1), (ss.cs.c, 1.5), (ss.cs.c, True), (ss.cs.c, 0, 3),
                           (ss.pool, 0), (ss.pool, 0, ss.sid + 99), (ss.cs.c, 0, 0, "drop"))[k], "Stream")
    elif m == 6:
        if ss.pseg:
            fz.refuse(ss.pool.attend_q8, (ss.sid, 0, zeros("b", ss.phd), array("H", [0x7C00] * ss.pcfg.heads),
                                          zeros("i", ss.phd), zeros("i", ss.pcfg.heads)), "attend_q8 inf scale")
    else:
        cache_refuse(fz, ss.cs)


def test_fuzz_streams_and_integer_pool():
    fz = Fuzz("stream+i8 pool", SEED + 3)
    budget = _scale()
    rng = fz.rng
    while fz.refused + fz.valid < budget:
        ss = None
        gc.collect()
        ss = StreamState(rng)
        ss.cs.check_all = _check_step_all(ss.cs.att)
        fz.roots = [ss.st, ss.cs.att, ss.pst]
        fz.tier = None
        fz.settle()
        for _ in range(60):
            if rng.below(2):
                stream_valid(fz, ss)
            else:
                stream_refuse(fz, ss)
    fz.done()
