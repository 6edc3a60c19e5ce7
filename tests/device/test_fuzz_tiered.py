# Device-API fuzzer, family 5: a tiered cache (kvedge.tier.cache: sinks and a hot ring in RAM, re-quantized blocks
# on flash) with every ring and cold dtype (i2 included), KIVI rings, both cap policies, reopened after a
# "power cut". Valid calls are checked against TierModel (which positions are live, where: sinks, cold blocks,
# ring), the true rows within each storage type's step, a plain softmax over what read() returns, and the float
# step for step_q8; refused calls of every public method (and of a closed cache) must change nothing: the
# ring, staging block and attention state, the store's counters and all five of its files. See _fuzzkit.py.
import gc
import math

from kvedge.tier.cache import TieredCache  # the largest modules first, while the heap is compact
from kvedge import kernels
from kvedge.tier import store as coldstore
from kvedge.attention import quantize_query, dequantize_output
from kvedge.budget import CACHE_DTYPES, LOWBIT
from kvedge.compat import zeros
from kvedge.config import CacheConfig
from kvedge.errors import ColdStoreError
from _support import need
from _cacheref import row
from _fuzzkit import (Fuzz, SEED, _scale, BAD_TYPE, bad_index, bad_row, bad_codes, bad_scales, bad_out, q8_code,
                      q8_scale)

kernels.get()  # the kernel module compiles now too, not inside the first cache's constructor

PATH = "_kvedge_fuzz_tiered"
FILES = (".h0", ".h1", ".s", ".0", ".1")
LEVELS = {"i8": 127.0, "i4": 15.0, "i2": 3.0}
F32_MAX = 3.4028234663852886e38


def _remove(path=PATH):
    import os
    for x in FILES:
        try:
            os.remove(path + x)
        except OSError:
            pass


def _read_file(name):
    try:
        f = open(name, "rb")
    except OSError:
        return None
    try:
        return f.read()
    finally:
        f.close()


def _files(tc):
    """The store's files, the open segments read through their own handles (position kept: a block's tag
    is appended where its last record ended)."""
    out = []
    segs = tc.store.segs
    for j in range(len(FILES)):
        f = segs[j - 3] if j >= 3 else None
        if f is None:
            out.append(_read_file(PATH + FILES[j]))
            continue
        at = f.seek(0, 1)
        f.seek(0)
        out.append(f.read())
        f.seek(at)
    return out


class PowerCut(Exception):
    """The power went: raised by the cold store's next write once CUT[0] writes have landed."""


CUT = [-1]  # writes left before the cut (-1: none armed)
SEEN = {"cuts": 0, "damaged": 0}  # power cuts that fell inside a call, damaged stores refused


class _CutFile:
    """A file of the cold store whose writes stop at a power cut (every write before it landed)."""

    def __init__(self, f):
        self.f = f

    def write(self, b):
        if CUT[0] == 0:
            raise PowerCut()
        if CUT[0] > 0:
            CUT[0] -= 1
        return self.f.write(b)

    def read(self, *a):
        return self.f.read(*a)

    def readinto(self, b):
        return self.f.readinto(b)

    def seek(self, *a):
        return self.f.seek(*a)

    def flush(self):
        return self.f.flush()

    def close(self):
        return self.f.close()


def _cut_open(name, mode):
    return _CutFile(open(name, mode))


def _f16(bits):
    """An f16's value from its bits (normal positive numbers: the q8 scales used here)."""
    return math.ldexp(1.0 + (bits & 1023) / 1024.0, ((bits >> 10) & 31) - 15)


class TierModel:
    """Which positions a tiered cache holds: sinks 0..S-1, cold blocks k0..k0+count-1 (block k = positions
    S+k*B .. S+k*B+B-1), the ring hot_lo..n-1. A new position whose ring slot is taken moves the ring's oldest
    block to flash; at the cap the oldest cold block is dropped, or (reset) everything is forgotten."""

    def __init__(self, S, W, B, C, reset):
        self.S, self.W, self.B, self.C, self.at_reset = S, W, B, C, reset
        self.clear()

    def clear(self):
        self.n = 0
        self.hot_lo = self.S
        self.k0 = self.count = 0

    def start(self):
        pos = self.n
        if pos >= self.S and pos - self.W >= self.hot_lo:
            assert self.hot_lo == self.S + (self.k0 + self.count) * self.B
            if self.count == self.C:
                if self.at_reset:
                    self.clear()
                    self.n = 1
                    return 0
                self.k0 += 1
                self.count -= 1
            self.count += 1
            self.hot_lo += self.B
        self.n = pos + 1
        return pos

    def cold(self, p):
        return self.S + self.k0 * self.B <= p < self.hot_lo

    def live(self):
        out = list(range(min(self.n, self.S)))
        out += list(range(self.S + self.k0 * self.B, self.hot_lo))
        return out + list(range(self.hot_lo, self.n))

    def copy(self):
        m = TierModel(self.S, self.W, self.B, self.C, self.at_reset)
        m.n, m.hot_lo, m.k0, m.count = self.n, self.hot_lo, self.k0, self.count
        return m

    def reopen(self):
        """After a power cut: the ring's tokens are gone; the sinks and cold blocks come back."""
        if self.count or self.k0:
            self.n = self.hot_lo = self.S + (self.k0 + self.count) * self.B
        else:
            self.clear()


class TierState:
    def __init__(self, rng, seed):
        while True:
            ring = rng.pick(CACHE_DTYPES)
            cold = rng.pick(CACHE_DTYPES)
            kvh = 1 + rng.below(2)
            heads = kvh * (1 + rng.below(2))
            D = 2 * (1 + rng.below(2))
            L = 1 + rng.below(2)
            B = rng.pick((2, 4))
            W = B * (1 + rng.below(3))
            S = rng.below(3)
            # sinks at f32 (prefix S) or in the ring's dtype (prefix 0: their scales and zeros saved too)
            kw = dict(window=W, sinks=S, prefix=rng.pick((S, 0)), align=rng.pick((0, 0, 8)))
            if ring in LOWBIT:
                G = rng.pick((2, 4))
                kw.update(group=G, residual=rng.pick((0, 0, G)))
            try:
                cfg = CacheConfig(L, heads, kvh, D, S + W, ring, **kw)
                self.C = 1 + rng.below(3)
                self.at_cap = rng.pick(("drop", "reset"))
                self.align = rng.pick((0, 0, 8))
                self.tc = TieredCache(cfg, PATH, B, cold, self.C, self.at_cap, 1 + rng.below(4), self.align,
                                      fresh=True)
                break
            except ValueError:
                continue
        self.cfg, self.ring, self.cold, self.B, self.S, self.W = cfg, ring, cold, B, S, W
        self.model = TierModel(S, W, B, self.C, self.at_cap == "reset")
        self.seed = seed
        self.n = kvh * D
        self.hd = heads * D
        self.q8 = {}  # positions written with write_q8
        # the cold store's range (the ring's may be wider)
        self.lim = F32_MAX if cold == "f32" else (127.0 * 65504.0 if cold == "i8" else 65504.0)

    def close(self):
        self.tc.close()
        _remove()

    def rows(self, pos):
        cfg = self.cfg
        return ([row(self.seed, pos, layer, 0, self.n, cfg.head_dim) for layer in range(cfg.layers)],
                [row(self.seed, pos, layer, 1, self.n, cfg.head_dim) for layer in range(cfg.layers)])

    def true(self, pos, layer, kv, i):
        if pos in self.q8:
            return q8_code(pos, layer, kv, i) * _f16(q8_scale(pos, kv, i // self.cfg.head_dim))
        return row(self.seed, pos, layer, kv, self.n, self.cfg.head_dim)[i]


def _tol(dtype, kv, x, amp):
    """|stored - true| a dtype allows for x in a row or channel of amplitude amp (one full step: rounding and
    the f16 scale's own rounding)."""
    if dtype == "f32":
        return 1e-6 * abs(x) + 1e-30
    if dtype == "f16":
        return abs(x) * 2.0 ** -10 + 1e-7
    span = amp if dtype == "i8" else 2.0 * amp
    return span / LEVELS[dtype] * 1.05 + 1e-6


def _amp(kv):
    return 8.7 if kv == 0 else 1.1  # key channel 1 is an x8 outlier (_cacheref); q8 rows stay below 1.1


def _check_reads(fz, ts):
    tc, cfg, model = ts.tc, ts.cfg, ts.model
    live = model.live()
    out = zeros("i", max(len(live), 1))
    assert tc.positions(out) == len(live) and list(out[:len(live)]) == live, (list(out), live)
    st = tc.stats()
    assert st["tokens_cached"] == len(live) and st["cold_tokens"] == model.count * ts.B, (st, live)
    if not live:
        return
    D = cfg.head_dim
    buf = zeros("f", D)
    p = fz.rng.pick(live)
    for layer in range(cfg.layers):
        for kv in (0, 1):
            for h in range(cfg.kv_heads):
                tc.read(layer, h, p, kv, buf)
                for i in range(D):
                    x = ts.true(p, layer, kv, h * D + i)
                    if p < ts.S and ts.cfg.prefix:  # f32 sinks (else in the ring's dtype, as any ring row)
                        tol = 1e-6 * abs(x) + 1e-30
                    else:
                        a = _amp(kv)
                        tol = _tol(ts.ring, kv, x, a)
                        if model.cold(p):
                            tol += _tol(ts.cold, kv, x, a + tol)
                    assert abs(buf[i] - x) <= tol, (ts.ring, ts.cold, p, layer, kv, i, buf[i], x, tol)


def _check_step(fz, ts):
    tc, cfg, model = ts.tc, ts.cfg, ts.model
    live = model.live()
    if not live:
        return
    rng = fz.rng
    D, H = cfg.head_dim, cfg.heads
    group = H // cfg.kv_heads
    layer = rng.below(cfg.layers)
    q = [rng.real() for _ in range(ts.hd)]
    out = zeros("f", ts.hd)
    tc.step(layer, q, out)
    k = zeros("f", D)
    v = zeros("f", D)
    vmax = 0.0
    for h in range(H):  # a plain softmax over what read() returns (read is checked against the truth)
        s = []
        for p in live:
            tc.read(layer, h // group, p, 0, k)
            s.append(sum(q[h * D + i] * k[i] for i in range(D)) / math.sqrt(D))
        m = max(s)
        w = [math.exp(x - m) for x in s]
        tot = sum(w)
        want = [0.0] * D
        for j in range(len(live)):
            tc.read(layer, h // group, live[j], 1, v)
            for i in range(D):
                want[i] += w[j] * v[i] / tot
                vmax = max(vmax, abs(v[i]))
        scale = max(abs(x) for x in want) + 1e-3
        for i in range(D):
            assert abs(out[h * D + i] - want[i]) <= 2e-4 * scale, (ts.ring, ts.cold, h, i, out[h * D + i], want)
    if tc.int_ok:
        qc, qs = zeros("b", ts.hd), zeros("H", H)
        oq, oe = zeros("i", ts.hd), zeros("i", H)
        quantize_query(q, qc, qs, H)
        tc.step_q8(layer, qc, qs, oq, oe)
        g = zeros("f", ts.hd)
        dequantize_output(oq, oe, g, H)
        # int8 query, int8 rows: within a few percent of the values' amplitude (an average of many tokens
        # can be far smaller than the values it averages)
        scale = max(max(abs(x) for x in out), 0.25 * vmax) + 1e-3
        err = max(abs(g[i] - out[i]) for i in range(ts.hd))
        assert err <= 0.08 * scale, (ts.ring, ts.cold, err, scale)


def tier_valid(fz, ts):
    rng, tc, model, cfg = fz.rng, ts.tc, ts.model, ts.cfg
    op = rng.below(20)
    if op < 10:
        pos = model.start()
        ts.q8.pop(pos, None)
        if op < 5:
            ks, vs = ts.rows(pos)
            assert tc.append(ks, vs) == pos
        else:
            assert tc.start_token() == pos
            q8 = ts.ring == "i8" and pos >= ts.S and rng.below(2)
            if q8:
                ts.q8[pos] = 1
            for layer in range(cfg.layers):
                if q8:
                    H = cfg.kv_heads
                    tc.write_q8(layer, [q8_code(pos, layer, 0, i) for i in range(ts.n)],
                                [q8_scale(pos, 0, h) for h in range(H)],
                                [q8_code(pos, layer, 1, i) for i in range(ts.n)],
                                [q8_scale(pos, 1, h) for h in range(H)])
                else:
                    tc.write(layer, row(ts.seed, pos, layer, 0, ts.n, cfg.head_dim),
                             row(ts.seed, pos, layer, 1, ts.n, cfg.head_dim))
        if pos == 0:  # a cap reset (or the first token): positions before are gone
            for p in list(ts.q8):
                if p:
                    del ts.q8[p]
    elif op < 14:
        _check_reads(fz, ts)
    elif op < 18:
        _check_step(fz, ts)
    elif op < 19:
        tc.reset()
        model.clear()
        ts.q8 = {}
    else:  # a power cut (between any two writes, or after a clean close), damaged files; then reopen
        how = rng.below(4)
        if how >= 2 and model.count:
            tc.close()
            _damage(fz, ts)
        elif how:
            model = _power_cut(fz, ts)
        else:
            tc.close()
        ts.tc = tc = TieredCache(cfg, PATH, ts.B, ts.cold, ts.C, ts.at_cap, 1 + rng.below(4), ts.align)
        model.reopen()
        ts.model = model
        assert tc.resume_pos == model.n, (tc.resume_pos, model.n)
        fz.roots = [tc]
    fz.settle()


def _power_cut(fz, ts):
    """Append tokens until the power goes after a random number of the store's writes; the cut call's
    commit did not land, so the store reopens as the model was before that call. Returns that model."""
    rng, tc = fz.rng, ts.tc
    coldstore.open = _cut_open
    CUT[0] = rng.below(4 + 3 * ts.cfg.layers)
    model = ts.model
    try:
        for _ in range(2 * ts.W + 2 * ts.B + 2):
            before = model.copy()
            pos = model.start()
            ks, vs = ts.rows(pos)
            try:
                tc.append(ks, vs)
            except PowerCut:  # the cut came in start_token (a demotion or a cap reset), before any row was
                model = before  # written: the position keeps what it held (a cut cap reset gave pos 0 again,
                SEEN["cuts"] += 1  # whose write_q8 row is still in the committed block: seed 2029)
                break
            ts.q8.pop(pos, None)
    finally:
        CUT[0] = -1
        coldstore.open = open
    st = tc.store
    for i in (0, 1):  # the board is off: its open files are gone with it (what was written landed)
        f = st.segs[i]
        if f is not None:
            f.close()
            st.segs[i] = None
    return model


def _damage(fz, ts):
    """Damage a closed store's files (a byte of a committed block or of the sinks' record, a file removed, the
    segments swapped, both headers gone): reopening must refuse with ColdStoreError and leave every file as it
    was; then the files are put back."""
    import os
    rng, model, tc = fz.rng, ts.model, ts.tc
    st = tc.store
    if not model.count:
        return
    names = [PATH + x for x in FILES]
    saved = [_read_file(x) for x in names]
    kind = rng.below(5)
    k = model.k0 + rng.below(model.count)
    seg = 3 + ((k // ts.C) & 1)
    if kind == 0:  # one byte of block k: its records or its tag's block number, checksum or token count
        at = (k % ts.C) * st.stride + rng.below(st.stride)
        tag = at - ((k % ts.C) * st.stride + st.stride - 16)
        if 4 <= tag < 8:
            at -= 4  # the tag's sequence field is advisory (not checked): damage the block number instead
        b = bytearray(saved[seg])
        b[at] ^= 1 << rng.below(8)
        _write_file(names[seg], b)
    elif kind == 1 and ts.S:  # one byte of the sinks' record (its rows, or its tag but the sequence field)
        b = bytearray(saved[2])
        at = rng.below(len(b))
        if 4 <= at - (len(b) - 16) < 8:
            at -= 4
        b[at] ^= 1 << rng.below(8)
        _write_file(names[2], b)
    elif kind == 2:  # the segment holding block k is gone
        os.remove(names[seg])
    elif kind == 3 and saved[3] is not None and saved[4] is not None and saved[3] != saved[4]:
        _write_file(names[3], saved[4])  # the two segments swapped (renamed into each other)
        _write_file(names[4], saved[3])
    else:  # both headers gone, the data files left
        os.remove(names[0])
        os.remove(names[1])
    damaged = [_read_file(x) for x in names]
    try:
        TieredCache(ts.cfg, PATH, ts.B, ts.cold, ts.C, ts.at_cap, 1 + rng.below(4), ts.align)
    except ColdStoreError as e:
        assert PATH in str(e), str(e)
        SEEN["damaged"] += 1
    else:
        raise AssertionError("tiered: a damaged store (damage %d, block %d) was reopened" % (kind, k))
    assert [_read_file(x) for x in names] == damaged, "tiered: a refused reopen changed the files"
    for x, data in zip(names, saved):
        if data is None:
            try:
                os.remove(x)
            except OSError:
                pass
        else:
            _write_file(x, data)


def _write_file(name, data):
    f = open(name, "wb")
    try:
        f.write(data)
    finally:
        f.close()


def _huge(ts):
    """A row of real numbers within the ring's range but beyond the cold store's (None if there is none)."""
    if ts.cold == "f32" or ts.tc.ring.vlim <= ts.lim:
        return None
    r = [0.5] * ts.n
    r[ts.n - 1] = ts.lim * 1.5
    return r


def tier_refuse(fz, ts):
    rng, tc, cfg, model = fz.rng, ts.tc, ts.cfg, ts.model
    L, H, D, n, hd = cfg.layers, cfg.kv_heads, cfg.head_dim, ts.n, ts.hd
    ok = [0.5] * n
    lim = ts.tc.ring.vlim
    cur = tc.ring.cur_slot >= 0 and tc.ring.slot_pos[tc.ring.cur_slot] >= 0
    m = rng.below(10)
    if m == 0:
        args = [0, ok, ok]
        i = rng.below(4)
        if i == 3 and _huge(ts) and tc.ring.cur_slot >= ts.S and cur:
            args[1 + rng.below(2)] = _huge(ts)
        elif i == 0 or not cur:
            args[0] = bad_index(rng, L) if cur else 0
        else:
            args[1 + (i & 1)] = bad_row(rng, n, lim)
        fz.refuse(tc.write, args, "write")
    elif m == 1:
        ks, vs = [ok] * L, [ok] * L
        k = rng.below(5)
        if k == 0:
            ks = [ok] * (L + 1)
        elif k == 1:
            vs = rng.pick((None, 3, "ab"[:L + 1], {L + 3: ok}))
        elif k == 2 and _huge(ts) and model.n >= ts.S:
            vs = [ok] * L
            vs[rng.below(L)] = _huge(ts)
        else:
            vs = list(vs)
            vs[rng.below(L)] = bad_row(rng, n, lim)
        fz.refuse(tc.append, (ks, vs), "append")
    elif m == 2:
        args = [0, zeros("b", n), [0x2000] * H, zeros("b", n), [0x2000] * H]
        i = rng.below(6)
        if ts.ring != "i8" or not cur or tc.ring.cur_slot < tc.ring.P:
            pass  # refused whatever the arguments: not an i8 ring, no current token, or an f32 sink
        elif i == 0:
            args[0] = bad_index(rng, L)
        elif i in (1, 3):
            args[i] = bad_codes(rng, n, -128, 127)
        elif i in (2, 4):
            args[i] = bad_scales(rng, H)
        elif (ts.cold == "f16" or ts.cold in LOWBIT) and tc.ring.cur_slot >= ts.S:  # rows beyond the cold range
            args[2 + 2 * rng.below(2)] = [tc.q16 + 1 + rng.below(0x7BFF - tc.q16)] * H
        else:
            args[0] = L
        fz.refuse(tc.write_q8, args, "write_q8")
    elif m == 3:
        live = model.live()
        pos = live[-1] if live else 0
        args = [0, 0, pos, 0, zeros("f", D)]
        i = rng.below(6)
        if i == 5:
            dead = [p for p in range(model.n) if p not in live]
            args[2] = rng.pick(dead) if dead else model.n
        elif i == 2 or not live:
            args[2] = bad_index(rng, model.n) if live else rng.pick((0, 1, -1, 1.5))
        else:
            args[i] = (bad_index(rng, L), bad_index(rng, H), 0, bad_index(rng, 2), bad_out(rng, D, True))[i]
        fz.refuse(tc.read, args, "read")
    elif m == 4:
        k = len(model.live())
        if k:
            fz.refuse(tc.positions, (rng.pick((None, 5, zeros("i", k - 1), tuple([0] * k), zeros("f", k),
                                               zeros("b", k) if model.n > 127 else None)),), "positions")
        else:
            fz.refuse(tc.positions, (rng.pick((None, 5, 1.5)),), "positions")
    elif m == 5:
        args = [0, [0.25] * hd, zeros("f", hd)]
        i = rng.below(3)
        if not model.live():
            pass  # nothing to attend to
        elif i == 0:
            args[0] = bad_index(rng, L)
        elif i == 1:
            args[1] = bad_row(rng, hd, F32_MAX)
        else:
            args[2] = bad_out(rng, hd, True)
        fz.refuse(tc.step, args, "step")
    elif m == 6:
        heads = cfg.heads
        args = [0, zeros("b", hd), [0x3C00] * heads, zeros("i", hd), zeros("i", heads)]
        i = rng.below(5)
        if not tc.int_ok or not model.live():
            pass
        elif i == 0:
            args[0] = bad_index(rng, L)
        elif i == 1:
            args[1] = bad_codes(rng, hd, -128, 127)
        elif i == 2:
            args[2] = bad_scales(rng, heads)
        elif i == 3:
            args[3] = bad_out(rng, hd, False)
        else:  # exponents: any int buffer holds them (an array('h') too)
            args[4] = rng.pick((None, 3, zeros("i", heads - 1) if heads > 1 else [], tuple([0] * heads),
                                zeros("f", heads)))
        fz.refuse(tc.step_q8, args, "step_q8")
    elif m == 7:
        k = rng.below(9)
        args = [cfg, PATH + "x", ts.B, ts.cold, 2, "drop", 4, 0]
        if k == 0:
            args[0] = rng.pick((None, 5, {"layers": 1}))
        elif k == 1:
            args[1] = rng.pick((None, 5, b"x", ""))
        elif k == 2:
            args[2] = rng.pick((0, -1, 1.5, None, "4", ts.W + ts.B, 1 << 20))
        elif k == 3:
            args[3] = rng.pick(("q4_0", None, 8, "I4"))
        elif k == 4:
            args[4] = rng.pick((0, -1, 1.5, None, 1 << 20))
        elif k == 5:
            args[5] = rng.pick(("never", None, 0))
        elif k == 6:
            args[7] = rng.pick((-1, 1.5, None, 1 << 20))
        elif k == 7:
            args.append(rng.pick((-5, 1.5, "x", 10)))  # a budget: bad, or too small
        else:
            fz.refuse(TieredCache.from_plan, (rng.pick(([], None, {"kind": "paged"}, {"kind": "tiered"})),
                                              PATH + "x"), "from_plan")
            return
        fz.refuse(TieredCache, args, "TieredCache")
    elif m == 8:
        if not model.live():
            fz.refuse(rng.pick((tc.step, tc.step_q8 if tc.int_ok else tc.step)),
                      (0, zeros("f", hd), zeros("f", hd)) if not tc.int_ok else
                      (0, zeros("b", hd), [0x3C00] * cfg.heads, zeros("i", hd), zeros("i", cfg.heads)), "empty")
        else:
            fz.refuse(tc.write if cur else tc.write_q8, (L, ok, ok) if cur else (0, 1, 2, 3, 4), "write")
    else:
        if not cur:
            fz.refuse(tc.write, (0, ok, ok), "write without a current token")
        else:
            fz.refuse(tc.read, (0, 0, model.n, 0, zeros("f", D)), "read beyond the last position")


def _refuse_closed(fz, ts):
    """A closed cache refuses every call that would touch the store, and nothing moves."""
    tc, cfg = ts.tc, ts.cfg
    tc.close()
    fz.settle()
    fz.valid -= 1
    ok = [0.5] * ts.n
    hd = ts.hd
    for fn, args in ((tc.start_token, ()), (tc.append, ([ok] * cfg.layers, [ok] * cfg.layers)),
                     (tc.write, (0, ok, ok)), (tc.read, (0, 0, 0, 0, zeros("f", cfg.head_dim))),
                     (tc.step, (0, zeros("f", hd), zeros("f", hd))), (tc.reset, ()),
                     (tc.step_q8, (0, zeros("b", hd), [0x3C00] * cfg.heads, zeros("i", hd),
                                   zeros("i", cfg.heads)))):
        fz.refuse(fn, args, "closed " + fn.__name__)


def test_fuzz_tiered():
    need("fs")
    fz = Fuzz("tiered", SEED + 4)
    budget = _scale() // 2  # on top of the four families' floor
    rng = fz.rng
    try:
        while fz.refused + fz.valid < budget:
            ts = None
            gc.collect()
            _remove()
            ts = TierState(rng, rng.below(1000))
            fz.roots = [ts.tc]
            fz.extra = lambda: _files(ts.tc)
            fz.settle()
            try:
                for _ in range(60):
                    if rng.below(2):
                        tier_valid(fz, ts)
                    else:
                        tier_refuse(fz, ts)
                _check_reads(fz, ts)
                _refuse_closed(fz, ts)
            finally:
                ts.close()
    finally:
        _remove()
        _remove(PATH + "x")
    print("fuzz tiered: %d power cuts inside a call, %d damaged stores refused" % (SEEN["cuts"], SEEN["damaged"]))
    assert SEEN["cuts"] and SEEN["damaged"], SEEN
    fz.done(budget)
