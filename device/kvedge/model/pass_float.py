# The float forward pass of a llama2.c model (run.c's, on the kvedge cache): f32 or int8 weights
# (kvedge.model.checkpoint: in RAM, streamed from flash, or in place from ROMFS), float32 activations.
#
# RMSNorm (eps 1e-5), RoPE on pairs (2i, 2i+1) with freq 10000^(-(i*2 % head_dim)/head_dim), grouped-query
# attention through the cache's decode interface (kvedge.caches: attend, or attend_q8 where the integer
# attention runs and the query is within its range), SwiGLU FFN w2(silu(w1 x) * w3 x), and a classifier that
# shares the embedding when the header's vocab_size is positive.
#
# Every activation lives in an array('f') allocated once here; forward() allocates no buffers (on MicroPython
# float arithmetic still boxes each intermediate float; int8 matvecs through viper box none).
import math

from kvedge.compat import zeros
from kvedge.model.sizes import acc_rows  # the buffers' formulas (the run's account reads them there)
from kvedge.model.checkpoint import Weights  # noqa: F401 (this pass's weights: kvedge.model.llama loads them)


class Forward:
    """The float pass of model m (kvedge.model.llama.Llama: its cfg, kernels, cache and policy) over weights held
    as `stream` says (kvedge.model.header.weights_place): its buffers, largest first, allocated here, before the
    weights (take(w) binds them, and the integer attention's query buffers once the cache's attention is
    attached)."""

    int_attention = False  # until take() binds the integer attention's query buffers

    def __init__(self, m, w, stream=False):
        cfg = m.cfg
        self.m = m  # its cfg, kernels, cache and policy are read there (not copied: fewer entries per instance)
        d, h, kvd, hd = cfg.dim, cfg.hidden_dim, cfg.kv_dim, cfg.head_dim
        if m.wdtype == "i8":
            self.acc = zeros("i", acc_rows(cfg, stream))
            self.xq = zeros("b", max(d, h))
        else:
            self.xq = None
            self.acc = None
        self.logits = zeros("f", cfg.vocab_size)
        self.hb = zeros("f", h)
        self.hb2 = zeros("f", h)
        self.x = zeros("f", d)
        self.xb = zeros("f", d)
        self.xb2 = zeros("f", d)
        self.q = zeros("f", d)
        self.kk = zeros("f", kvd)
        self.vv = zeros("f", kvd)
        half = hd // 2
        self.freq = zeros("f", half)  # f32 like llama2.c's freq, so angles round the same way
        for i in range(half):
            self.freq[i] = 1.0 / math.pow(10000.0, (2 * i) / hd)
        self.cos = zeros("f", half)
        self.sin = zeros("f", half)
        self.w = w
        if w is not None:
            self.take(w)

    def take(self, w):
        """Bind the weights, and the integer attention's query buffers where it runs (m.int_attention)."""
        self.w = w
        m = self.m
        if m.int_attention and not self.int_attention:
            from kvedge.attention import quantize_query, dequantize_output
            d, h = m.cfg.dim, m.cfg.n_heads
            self._qquery, self._dqout = quantize_query, dequantize_output
            self.qc = zeros("b", d)
            self.qs = zeros("H", h)
            self.oq = zeros("i", d)
            self.oe = zeros("i", h)
            m.cache.bind_query(self.qc, self.qs, self.oq, self.oe)
            self.int_attention = True

    # ---- RoPE's rotation (twice a layer) and the pass ----

    def _rope(self, v, n):
        # rotate pairs (2i, 2i+1) of every head in v[0:n]; pair i of a head uses freq[i]
        half = len(self.freq)
        cs, sn = self.cos, self.sin
        j = 0
        i = 0
        while j < n:
            c = cs[i]
            s = sn[i]
            v0 = v[j]
            v1 = v[j + 1]
            v[j] = v0 * c - v1 * s
            v[j + 1] = v0 * s + v1 * c
            j += 2
            i += 1
            if i == half:
                i = 0

    def forward(self, token):
        """Run one (checked) token at the cache's next position; returns the logits buffer (overwritten by the
        next call). Raises CacheFullError (nothing changed) when the cache has no room and no window."""
        m = self.m
        cfg = m.cfg
        w = self.w
        k = m.k
        cache = m.cache
        # int8 weights multiply int8 codes of the input (xq, its scale xs), quantized once for every matrix that
        # reads it (f32 weights: xq is None, and the matrices read x itself)
        xq, acc = self.xq, self.acc
        xs = None
        d, h, kvd = cfg.dim, cfg.hidden_dim, cfg.kv_dim
        nh = cfg.n_heads
        x, xb, xb2, q, hb, hb2, kk, vv = self.x, self.xb, self.xb2, self.q, self.hb, self.hb2, self.kk, self.vv
        pos = cache.start_token()
        w.embedding.row(token, x)
        fr, cs, sn = self.freq, self.cos, self.sin
        for i in range(len(fr)):  # this position's RoPE angles
            a = pos * fr[i]
            cs[i] = math.cos(a)
            sn[i] = math.sin(a)
        ia = self.int_attention
        for l in range(cfg.n_layers):
            k.mv_rmsnorm(xb, x, w.norm(w.rms_att[l]), d)  # eps 1e-5
            if xq is not None:
                xs = k.mv_quant(xb, d, xq)
            w.wq[l].mv(k, xb, xq, xs, acc, q)
            w.wk[l].mv(k, xb, xq, xs, acc, kk)
            w.wv[l].mv(k, xb, xq, xs, acc, vv)
            self._rope(q, d)
            self._rope(kk, kvd)
            cache.write(l, kk, vv)
            # the one seam between the model and the cache's attention (its decode interface: kvedge.caches); a
            # query beyond the integer step's range in this layer (q8_fits: kvedge.attention.Q8_RANGE) takes the
            # float step
            if ia:
                self._qquery(q, self.qc, self.qs, nh)
            if ia and cache.q8_fits(l, self.qs):
                cache.attend_q8(l, self.qc, self.qs, self.oq, self.oe)
                self._dqout(self.oq, self.oe, xb2, nh)
            else:
                cache.attend(l, q, xb2)
            if xq is not None:
                xs = k.mv_quant(xb2, d, xq)
            w.wo[l].mv(k, xb2, xq, xs, acc, xb)
            k.mv_add(x, xb, d)
            k.mv_rmsnorm(xb, x, w.norm(w.rms_ffn[l]), d)
            if xq is not None:
                xs = k.mv_quant(xb, d, xq)
            w.w1[l].mv(k, xb, xq, xs, acc, hb)
            w.w3[l].mv(k, xb, xq, xs, acc, hb2)
            k.mv_swiglu(hb, hb2, h)
            if xq is not None:
                xs = k.mv_quant(hb, h, xq)
            w.w2[l].mv(k, hb, xq, xs, acc, xb)
            k.mv_add(x, xb, d)
        if m.policy is not None:
            m.policy.observe()
        k.mv_rmsnorm(x, x, w.norm(w.rms_final), d)
        if xq is not None:
            xs = k.mv_quant(x, d, xq)
        w.wcls.mv(k, x, xq, xs, acc, self.logits)
        return self.logits
