# Helpers of the model tests: a plain-Python reference attention over cache.read() (a stand-in for
# kvedge.attention in tests only), an independent plain-Python forward pass, a temp-file location, and how far
# apart two logit vectors are.
import math
from array import array

from _support import tmp_path  # noqa: F401 (the model tests' temp files; it lives in _support)


class RefAttention:
    """Two-pass softmax attention reading every live row with cache.read(); GQA head h -> h // group."""

    def __init__(self, cache, tile=32):
        self.cache = cache
        c = cache.cfg
        self.hd = c.head_dim
        self.group = c.heads // c.kv_heads
        self.heads = c.heads
        self.pos = array("i", [0] * c.slots)
        self.row = array("f", [0.0] * c.head_dim)
        self.scores = array("f", [0.0] * c.slots)

    def step(self, layer, q, out):
        c, hd, row = self.cache, self.hd, self.row
        n = c.positions(self.pos)
        scale = 1.0 / math.sqrt(hd)
        for h in range(self.heads):
            kh = h // self.group
            mx = -1e30
            for j in range(n):
                c.read(layer, kh, self.pos[j], 0, row)
                s = 0.0
                for i in range(hd):
                    s += q[h * hd + i] * row[i]
                s *= scale
                self.scores[j] = s
                if s > mx:
                    mx = s
            tot = 0.0
            for j in range(n):
                e = math.exp(self.scores[j] - mx)
                self.scores[j] = e
                tot += e
            for i in range(hd):
                out[h * hd + i] = 0.0
            for j in range(n):
                c.read(layer, kh, self.pos[j], 1, row)
                p = self.scores[j] / tot
                for i in range(hd):
                    out[h * hd + i] += p * row[i]


class PlainForward:
    """Independent forward pass of a llama2.c f32 file: flat array('f') tensors indexed by hand, K/V kept in
    growing lists of per-token arrays, softmax over all scores at once (no tiles, no cache)."""

    def __init__(self, path):
        # tensors stay in the file (offsets only) and rows are read when used: small heaps hold the model
        # under test, not a second copy
        import struct
        f = open(path, "rb")
        self.f = f
        d, h, L, H, KV, V, S = struct.unpack("<7i", f.read(28))
        V = abs(V)
        self.d, self.h, self.L, self.H, self.KV, self.V = d, h, L, H, KV, V
        self.hd = d // H
        kv = KV * self.hd
        at = [28]

        def take(n):
            at[0] += 4 * n
            return at[0] - 4 * n
        self.emb = take(V * d)
        self.rms_att = take(L * d)
        self.wq = take(L * d * d)
        self.wk = take(L * kv * d)
        self.wv = take(L * kv * d)
        self.wo = take(L * d * d)
        self.rms_ffn = take(L * d)
        self.w1 = take(L * h * d)
        self.w2 = take(L * d * h)
        self.w3 = take(L * h * d)
        self.rms_final = take(d)
        self.buf = array("f", range(max(d, h)))
        self.K = [[] for _ in range(L)]
        self.Vs = [[] for _ in range(L)]
        self.pos = 0

    def _row(self, off, n):
        self.f.seek(off)
        b = self.f.read(4 * n)
        return array("f", b)

    def mv(self, w, layer, rows, cols, x):
        base = w + 4 * layer * rows * cols
        out = []
        for r in range(rows):
            row = self._row(base + 4 * r * cols, cols)
            out.append(sum(row[c] * x[c] for c in range(cols)))
        return out

    def norm(self, x, w, off):
        wt = self._row(w + 4 * off, len(x))
        ss = 1.0 / math.sqrt(sum(v * v for v in x) / len(x) + 1e-5)
        return [wt[i] * ss * x[i] for i in range(len(x))]

    def rope(self, v):
        hd = self.hd
        out = list(v)
        for i in range(0, len(v), 2):
            k = i % hd
            fr = array("f", [1.0 / 10000.0 ** (k / hd)])[0]
            a = self.pos * fr
            c, s = math.cos(a), math.sin(a)
            out[i] = v[i] * c - v[i + 1] * s
            out[i + 1] = v[i] * s + v[i + 1] * c
        return out

    def forward(self, tok):
        d, h, hd, g = self.d, self.h, self.hd, self.H // self.KV
        kv = self.KV * hd
        x = list(self._row(self.emb + 4 * tok * d, d))
        for l in range(self.L):
            xb = self.norm(x, self.rms_att, l * d)
            q = self.rope(self.mv(self.wq, l, d, d, xb))
            self.K[l].append(array("f", self.rope(self.mv(self.wk, l, kv, d, xb))))
            self.Vs[l].append(array("f", self.mv(self.wv, l, kv, d, xb)))
            att = []
            for hh in range(self.H):
                kh = (hh // g) * hd
                s = [sum(q[hh * hd + i] * k[kh + i] for i in range(hd)) / math.sqrt(hd) for k in self.K[l]]
                m = max(s)
                e = [math.exp(v - m) for v in s]
                t = sum(e)
                att += [sum(e[j] / t * self.Vs[l][j][kh + i] for j in range(len(e))) for i in range(hd)]
            x = [a + b for a, b in zip(x, self.mv(self.wo, l, d, d, att))]
            xb = self.norm(x, self.rms_ffn, l * d)
            a = self.mv(self.w1, l, h, d, xb)
            b = self.mv(self.w3, l, h, d, xb)
            hb = [a[i] / (1.0 + math.exp(-a[i])) * b[i] for i in range(h)]
            x = [u + v for u, v in zip(x, self.mv(self.w2, l, d, h, hb))]
        self.pos += 1
        return self.mv(self.emb, 0, self.V, d, self.norm(x, self.rms_final, 0))


def logit_gap(a, b, ea=0):
    """max |a * 2**ea - b| / (max b - min b): logits a (ints scaled by 2**ea, or floats) against float logits b."""
    lo = hi = b[0]
    worst = 0.0
    for i in range(len(b)):
        y = b[i]
        lo = y if y < lo else lo
        hi = y if y > hi else hi
        d = abs(a[i] * 2.0 ** ea - y)
        worst = d if d > worst else worst
    return worst / (hi - lo)


def argmax(v):
    """The first index of v's largest value."""
    best = 0
    for i in range(len(v)):
        if v[i] > v[best]:
            best = i
    return best


def skip(msg):
    """Skip the calling test visibly (like _support.need, for conditions need() does not name)."""
    import sys
    if "pytest" in sys.modules:
        import pytest
        pytest.skip(msg)
    from _support import Skip
    raise Skip(msg)


def from_source():
    """Whether this MicroPython runtime compiles kvedge from .py (the unix port, the emulated board's m3-py run),
    which leaves a 215 KB heap several KB less room than the .mpy a board runs."""
    import sys
    if sys.implementation.name != "micropython":
        return False
    import kvedge.cache
    return kvedge.cache.__file__.endswith(".py")


def or_skip_short_heap(fn, *args):
    """fn(*args); where the package is compiled from source and the heap runs out, a visible skip naming it (the
    same test runs on the .mpy runtimes, where a MemoryError fails it)."""
    try:
        return fn(*args)
    except MemoryError:
        if not from_source():
            raise
        import gc
        gc.collect()
        skip("out of heap with the package compiled from source at this heap (%d bytes free): runs as .mpy on "
             "the emulated boards" % gc.mem_free())


def tiny_checkpoints(paths, stem):
    """Write the device tests' small checkpoint (kvedge.model.tiny, seed 11, a 48-token vocabulary: GQA 4 heads on
    2 KV heads, small enough for a 215 KB heap) as STEM.bin and its int8 conversion STEM_i8.bin into `paths`
    (f32=, i8=)."""
    from kvedge.model import checkpoint, tiny
    p = tmp_path(stem + ".bin")
    tiny.write_checkpoint(p, seed=11, vocab_size=48)
    q = tmp_path(stem + "_i8.bin")
    checkpoint.convert_to_i8(p, q)
    paths.update(f32=p, i8=q)
    from _support import forget
    forget("kvedge.model.convert", "kvedge.model.tiny")  # written once: their code freed
    return paths
