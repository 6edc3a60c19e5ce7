# A float forward pass through ulab, for firmware that has ulab and no viper (CircuitPython boards): every
# matrix-vector product, every elementwise step and the attention over the i8 cache run as ulab array
# operations (C loops) instead of Python loops. Llama(forward="ulab").
#
# Numbers: float32 (ulab's float on these boards). A matvec is np.dot of the int8 codes (an int8 ndarray over
# the weights' bytes: the file's codes, no copy) with the float input, then the rows' f32 scales: the int8 x
# float32 products and their float32 sums are an ordinary float computation, not an exact integer one (ulab
# returns floats even for int8 x int8, exact only below 2**24: this pass never multiplies int8 by int8). The
# attention reads kvedge's i8 cache in place: per KV head its K and V codes as an (slots, row) int8 array and
# its f16 scales as uint16, decoded with array operations.
#
# What it does not do: streamed weights (ulab needs the codes in RAM), an f32 prefix or i4 rows in the cache,
# eviction policies (they leave holes in the slots: attention here reads the filled slots 0..n-1). ulab builds
# a new array for most operations: a token allocates (measured by tools/bench_model.py); CircuitPython has no
# heap_lock anyway.
import math

try:
    from ulab import numpy as np
except ImportError:  # a host planning a ulab run: the formulas below still import; check() refuses a run
    np = None

from kvedge.model.header import i8_layout, read_config, file_size, CheckpointError
from kvedge.quant import i8_scale_bits, f16_value

LN2 = 0.6931471805599453


def check(wdtype, ccfg, attention, stream=False, policy=False):
    """Refuse, before anything is allocated, what the ulab forward pass cannot run."""
    if np is None:
        raise ValueError("the ulab forward pass needs ulab (CircuitPython's builds have it)")
    if wdtype != "i8":
        raise ValueError("the ulab forward pass reads int8 weights (kvedge convert)")
    if ccfg.dtype != "i8" or ccfg.prefix:
        raise ValueError("the ulab forward pass reads an i8 cache without an f32 prefix")
    if attention is not None:
        raise ValueError("the ulab forward pass does its own attention over the i8 cache")
    if stream:
        raise ValueError("the ulab forward pass needs the weights in RAM (no stream=True)")
    if policy:
        raise ValueError("the ulab forward pass reads slots 0..n-1: no eviction policy")


def scratch_bytes(cfg, stream=False):
    """Arrays the pass keeps (cos/sin tables, the views over the cache and the weights); the per-token arrays
    ulab builds are garbage, counted as activations by kvedge.budget.activation_bytes."""
    n = 4 * (cfg.dim + cfg.kv_dim) + 4 * cfg.dim  # frequencies, cos/sin
    return n + 96 * (4 * cfg.n_layers * cfg.n_kv_heads + 7 * cfg.n_layers + 2)  # array objects


class Weights:
    """The int8 file in RAM as ulab arrays: codes (rows, cols) int8 over the file's bytes, f32 row scales."""

    def __init__(self, path, stream=False):
        if stream:
            raise ValueError("the ulab forward pass needs the weights in RAM (no stream=True)")
        cfg, dtype = read_config(path)
        lay = i8_layout(cfg)
        if file_size(path) < lay["size"]:
            raise CheckpointError("%s: %d bytes, the header needs %d" % (path, file_size(path), lay["size"]))
        self.cfg = cfg
        self.stream = False
        d, h, kv = cfg.dim, cfg.hidden_dim, cfg.kv_dim
        with open(path, "rb") as f:
            self.emb = self._mat(f, lay["embedding"], cfg.vocab_size, d)
            self.wcls = self.emb if lay["wcls"] is None else self._mat(f, lay["wcls"], cfg.vocab_size, d)
            self.wq = [self._mat(f, o, d, d) for o in lay["wq"]]
            self.wk = [self._mat(f, o, kv, d) for o in lay["wk"]]
            self.wv = [self._mat(f, o, kv, d) for o in lay["wv"]]
            self.wo = [self._mat(f, o, d, d) for o in lay["wo"]]
            self.w1 = [self._mat(f, o, h, d) for o in lay["w1"]]
            self.w2 = [self._mat(f, o, d, h) for o in lay["w2"]]
            self.w3 = [self._mat(f, o, h, d) for o in lay["w3"]]
            self.g_att = [self._vec(f, o, d) for o in lay["rms_att"]]
            self.g_ffn = [self._vec(f, o, d) for o in lay["rms_ffn"]]
            self.g_final = self._vec(f, lay["rms_final"], d)

    def close(self):
        pass

    def _vec(self, f, off, n):
        from array import array
        a = array("f", bytes(4 * n))
        f.seek(off)
        f.readinto(a)
        return np.array(a)  # ulab's float, whatever its width

    def _mat(self, f, off, rows, cols):
        scales = self._vec(f, off, rows)
        codes = bytearray(rows * cols)
        f.readinto(codes)
        return (np.frombuffer(codes, dtype=np.int8).reshape((rows, cols)), scales)


class Forward:
    """The decode step over the model's cache (kvedge.cache.KVCache, i8). forward() returns float logits."""

    def __init__(self, model, w):
        if model.policy is not None:
            raise ValueError("the ulab forward pass reads slots 0..n-1: no eviction policy")
        cfg = model.cfg
        self.m = model
        self.w = w
        c = model.cache
        self.cache = c
        self.d, self.hd = cfg.dim, cfg.head_dim
        self.group = cfg.n_heads // cfg.n_kv_heads
        # RoPE: llama2.c's f32 frequencies for every pair of q (and the first kv_dim/2 of them for k)
        half = cfg.head_dim // 2
        fr = []
        for h in range(cfg.n_heads):
            for i in range(half):
                fr.append(1.0 / math.pow(10000.0, (2 * i) / cfg.head_dim))
        self.freq = np.array(fr)
        self.kvpairs = cfg.kv_dim // 2
        # the cache read in place: per layer and KV head, K/V codes (slots, row) int8 and their f16 scale bits
        N = c.B
        self.kc, self.vc, self.ks, self.vs = [], [], [], []
        for l in range(cfg.n_layers):
            for kvh in range(cfg.n_kv_heads):
                for kv, codes, bits in ((0, self.kc, self.ks), (1, self.vc, self.vs)):
                    pitch = c.row_pitch()
                    codes.append(np.frombuffer(c.arena, dtype=np.int8, count=N * pitch,
                                               offset=c.base(l, kv, kvh)).reshape((N, pitch)))
                    bits.append(np.frombuffer(c.arena, dtype=np.uint16, count=N, offset=c.scale_at(l, kv, kvh, 0)))
        self.scale = 1.0 / math.sqrt(cfg.head_dim)
        self.logits = np.zeros(cfg.vocab_size)

    @staticmethod
    def _mv(mat, x):
        return np.dot(mat[0], x) * mat[1]

    @staticmethod
    def _f16(bits):
        """f16 bits (uint16 array, non-negative values) as floats: (1024 + m) * 2**(e - 25), subnormals m * 2**-24."""
        e = np.bitwise_and(np.right_shift(bits, 10), 31) * 1.0
        m = np.bitwise_and(bits, 1023) * 1.0
        return np.where(e > 0.0, (m + 1024.0) * np.exp((e - 25.0) * LN2), m * 5.960464477539063e-08)

    def _norm(self, x, g):
        ss = np.dot(x, x)
        return x * g * (1.0 / math.sqrt(ss / len(x) + 1e-5))

    @staticmethod
    def _rope(v, c, s):
        e = v[0::2]
        o = v[1::2]
        ne = e * c - o * s
        v[1::2] = e * s + o * c
        v[0::2] = ne

    def _write(self, l, k, v):
        """This token's K and V rows of layer l into the cache, as KVCache.write stores i8 rows (f16 scale: the
        smallest half >= amax / 127; codes rounded half away from zero), through the cache's own arrays."""
        c = self.cache
        slot = c.cur_slot  # start_token() placed the token
        hd = self.hd
        H = c.H
        for kvh in range(H):
            i = l * H + kvh
            for x, codes, bits in ((k, self.kc, self.ks), (v, self.vc, self.vs)):
                seg = x[kvh * hd:(kvh + 1) * hd]
                amax = np.max(seg)
                lo = -np.min(seg)
                sb = i8_scale_bits(amax if amax > lo else lo)
                s = f16_value(sb)
                codes[i][slot, :hd] = np.clip(np.around(seg * (1.0 / s if s else 0.0)), -127, 127)
                bits[i][slot] = sb

    def _attend(self, l, q, out):
        c = self.cache
        n = c.n_cached  # slots 0..n-1: a plain or ring cache fills them in order
        hd = self.hd
        H = c.H
        for kvh in range(H):
            i = l * H + kvh
            K = self.kc[i][:n, :hd]
            V = self.vc[i][:n, :hd]
            ks = self._f16(self.ks[i][:n]) * self.scale
            vs = self._f16(self.vs[i][:n])
            for h in range(kvh * self.group, (kvh + 1) * self.group):
                s = np.dot(K, q[h * hd:(h + 1) * hd]) * ks
                e = np.exp(s - np.max(s))
                out[h * hd:(h + 1) * hd] = np.dot(e * vs, V) / np.sum(e)

    def forward(self, token):
        m = self.m
        w = self.w
        cfg = m.cfg
        c = self.cache
        pos = c.start_token()
        x = w.emb[0][token] * w.emb[1][token]
        ang = self.freq * pos
        cs = np.cos(ang)
        sn = np.sin(ang)
        kc = cs[:self.kvpairs]
        ks = sn[:self.kvpairs]
        att = np.zeros(self.d)
        for l in range(cfg.n_layers):
            xb = self._norm(x, w.g_att[l])
            q = self._mv(w.wq[l], xb)
            k = self._mv(w.wk[l], xb)
            v = self._mv(w.wv[l], xb)
            self._rope(q, cs, sn)
            self._rope(k, kc, ks)
            self._write(l, k, v)
            self._attend(l, q, att)
            x += self._mv(w.wo[l], att)
            xb = self._norm(x, w.g_ffn[l])
            a = self._mv(w.w1[l], xb)
            x += self._mv(w.w2[l], a / (1.0 + np.exp(-a)) * self._mv(w.w3[l], xb))
        self.logits = self._mv(w.wcls, self._norm(x, w.g_final))
        m.logits = self.logits
        return self.logits

    def float_logits(self, out):
        """The logits into out (array('f')), as kvedge.model.llama.generate samples them."""
        lg = self.logits
        for i in range(len(lg)):
            out[i] = lg[i]
        return out
