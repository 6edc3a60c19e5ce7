# The integer forward pass of a llama2.c model with int8 weights: no float in the decode loop, no allocation
# once warm, the same bits with every kernel kind (kvedge.kernels: q_* kernels).
#
# Number formats (value = integer * 2**exponent; exponents are Python ints kept here, never in the kernels):
#   residual x        array('i'), exponent RES_EXP, |x| <= VMAX (saturating adds)
#   matvec inputs     codes in array('i') with a scale mantissa xm (< 2**15): value = c * xm * 2**xe,
#                     c = round(C * z / max|z|) through a reciprocal computed once per vector, C as large as
#                     the int32 dot product allows (code_max: 15 bits for dim 64): the int8 weights' kernels
#                     cost the same, and the activations lose almost nothing (int8 codes lost ~as much as
#                     the i8 cache and flipped llama2.c's greedy text on stories260K)
#   weights           int8 rows as the file holds them (each kernel kind reads them signed its own way): in RAM
#                     with the rows of wq|wk|wv and of w1|w3 fused, read in place from a mapped ROMFS file, or
#                     streamed a chunk at a time; per row one word
#                     (15-bit mantissa << 8 | shift to the group's largest exponent) from the file's f32 scale;
#                     int4 files: kvedge.model.pass_int4 (its Weights and Forward over this module's), the file's
#                     nibbles and f16 group scales as they lie (in RAM, read in place from ROMFS, or streamed)
#   RMSNorm           gain * sqrt(n) in 15-bit mantissas; 1 / sqrt(sum x^2 + n eps) from an integer square root,
#                     folded into the codes' scale (it multiplies every element alike)
#   RoPE              phases pos * f mod 1 turn in Q28 (exact in 14-bit pieces), sin/cos from a quarter-wave
#                     table (Q14); the rotation in int32 with floor multiplications
#   SwiGLU            sigmoid from a Q15 table over [-12, 12] in steps of 1/16, linear interpolation
#   q, k, v           int8 codes per head with power-of-two f16 scales: the integer attention path and the
#                     i8 cache's write_q8 take them as they are
#   logits            array('i') with an exponent; greedy decoding takes the argmax of the integers
#
# The scalar steps (a reciprocal, an integer square root) run here once per vector; the O(n) and O(n^2) loops
# run in the kernels. Tables are computed once at start-up (floats there are fine: nothing is hot).
import gc
import math
from array import array

from kvedge.compat import zeros, IS_MICROPYTHON, micropython
from kvedge.model.header import i8_layout, file_size, CheckpointError, alloc
from kvedge import kernels

from kvedge.kernels.words import bitlen, P_WO, P_ROWS, P_COLS, P_XM, P_OS, P_ADD, P_RO, P_HDR, S_WORDS

RES_EXP = -16  # residual stream in Q16: |x| < 8192 with steps of 1.5e-5
MAX_COLS = 32768  # sum(u * x) with u <= 255, |x| <= 127 stays within 2**30
SIG_STEPS = 16  # sigmoid table: 16 points per unit over [-12, 12]
EPS = 1e-5


if IS_MICROPYTHON:
    def _read(f, buf, n):
        try:
            return f.readinto(buf, n)  # the first n bytes: no memoryview slice (an allocation)
        except TypeError:  # a file whose readinto takes the buffer only (mpremote mount's remote files)
            return f.readinto(memoryview(buf)[:n])
else:
    def _read(f, buf, n):
        return f.readinto(memoryview(buf)[:n])


def _collect():
    """Collect between the weights' groups on a board, so each group's arrays fill the holes the last one's
    garbage left (CPython frees as it goes)."""
    if IS_MICROPYTHON:
        import gc
        gc.collect()


def place(wt, f, stream):
    """Where Weights `wt` reads its rows: in place from the mapped file when `stream` is "rom" and the file is
    mapped (ROMFS: wt._rom set to its bytes), else streamed (True) or read into RAM (False). Returns whether
    streamed."""
    if stream == "rom":
        from kvedge.model.romweights import map_file
        views = map_file(f)
        wt._rom = views[0] if views is not None else None
        return wt._rom is None
    return bool(stream)


def qkernels():
    """(module, kind) of the q_* kernels for the selected attention kernels' kind: kvedge.kernels.first's rule
    (asm's matrix product is kernels.q8_dsp_thumb's on a core with the DSP instructions)."""
    return kernels.first("q8_", kernels.kind())


def mantissa(x):
    """(m, e) with x ~ m * 2**e and 2**14 <= m < 2**15 (m = 0 for x = 0); x >= 0, at start-up only."""
    if x <= 0:
        return 0, 0
    f, e = math.frexp(x)
    m = int(f * 32768 + 0.5)
    if m >= 32768:
        m >>= 1
        e += 1
    return m, e - 15


TURN61 = 366986312910250153  # round(2**61 / (2 * pi)): turns per radian in Q61 (a long int, start-up only)


def rope_turns(hd):
    """q_angles' frequencies: [pairs, then per pair the turns per position in Q36 as (Q28 part, 8 more bits)]
    of llama2.c's f32 frequencies 10000**(-2i/hd). Integer arithmetic on the float's exact mantissa, so a
    board computing in float32 gets the same table as CPython (float32 arithmetic would lose 2 of the 28 bits)."""
    half = hd // 2
    fq = zeros("i", 1 + 2 * half)
    fq[0] = half
    for i in range(half):
        mant, e = f32_freq(i, hd)  # fr = mant * 2**(e - 24): the f32 frequency with its 24 significant bits
        q = (mant * TURN61 + (1 << (48 - e))) >> (49 - e)  # fr / (2 pi) * 2**36
        fq[1 + 2 * i] = q >> 8
        fq[2 + 2 * i] = q & 255
    return fq


LN10000_Q60 = 10618799479599967255  # round(ln(10000) * 2**60)


def f32_freq(i, hd):
    """(24-bit mantissa m, exponent e) of float32(10000**(-2i/hd)) = m * 2**(e - 24), rounded to nearest, in
    integers: math.pow on a float32 board and CPython's doubles round differently (head_dim 64 gave another
    table on the emulated Cortex-M3), an integer computation gives one table everywhere."""
    a = 2 * i * LN10000_Q60 // hd  # the exponent's magnitude in Q60
    v = Q60
    e1 = exp_neg_q60(1, 1)
    for _ in range(a >> 60):
        v = v * e1 >> 60
    v = v * exp_neg_q60(a & (Q60 - 1), Q60) >> 60  # exp(-a) in Q60
    sh = bitlen_long(v) - 24
    m = (v + (1 << (sh - 1))) >> sh
    if m >> 24:  # rounded up to the next power of two
        m >>= 1
        sh += 1
    return m, sh - 60 + 24


def bitlen_long(a):
    """bitlen for a long int (start-up only)."""
    n = 0
    while a >> (n + 16):
        n += 16
    while a >> n:
        n += 1
    return n


def sin_table():
    """sin over a quarter turn in Q14 at 256 steps, plus a repeated end point for interpolation."""
    t = zeros("H", 258)
    for i in range(257):
        t[i] = int(16384 * math.sin(i * math.pi / 512) + 0.5)
    t[257] = t[256]
    return t


Q60 = 1 << 60


def exp_neg_q60(num, den):
    """exp(-num/den) * 2**60 for 0 <= num/den <= 1, rounded down, in integers (a long int at start-up only): the
    same on every runtime, where math.exp of a float32 board and of CPython's doubles differ in the last bits."""
    s = Q60
    term = Q60
    n = 1
    while term:
        term = term * num // (den * n)
        s = s - term if n & 1 else s + term
        n += 1
    return s


def sigmoid_table():
    """sigmoid(x) in Q15 at x = -12 .. 12 in steps of 1/SIG_STEPS, from integer arithmetic only (bit-identical
    tables on a float32 board and on CPython: the integer pass's tokens are then the same everywhere)."""
    t = zeros("H", 12 * 2 * SIG_STEPS + 1)
    mid = 12 * SIG_STEPS
    e = exp_neg_q60(1, SIG_STEPS)  # exp(-1/16)
    p = Q60  # exp(-d/16) for d = |k - mid|, built up one step at a time
    for d in range(mid + 1):
        # sigmoid(x) = 1 / (1 + exp(-x)): at x = -d/16 it is p / (p + 1), at x = +d/16 it is 1 / (1 + p)
        for k, num in ((mid - d, p), (mid + d, Q60)):
            y = (2 * 32768 * num + (p + Q60)) // (2 * (p + Q60))
            t[k] = 32767 if y > 32767 else y
        p = p * e >> 60
    return t


def quantize(k, z, codes, n, A, ez, C, ip):
    """Codes of z[0:n] (max |z| = A, exponent ez) within +-C into codes: the kernels' q_scale (the scalar part,
    once a vector: the reciprocal and the codes' scale into ip[0:6]) then q_quant (the codes); the scale is
    ip[4] (mantissa xm) and ip[5] (exponent xe): z * 2**ez ~ code * xm * 2**xe."""
    k.q_scale(A, ez, C, ip)
    k.q_quant(z, codes, n, ip)


def code_max(cols):
    """Largest matvec input code for rows of `cols` int8 weights: sum(u * x) with u <= 255 stays below 2**30
    (offset-binary rows), at most 15 bits. Wider codes than int8 cost nothing in the kernels and remove the
    activations' quantization error almost entirely."""
    c = ((1 << 30) - 1) // (255 * cols)
    return c if c < 32767 else 32767


def check(wdtype, ccfg, attention, stream=False, policy=False):
    """Refuse, before anything is allocated, what the integer forward pass cannot run (it streams weights and
    runs eviction policies)."""
    if wdtype != "i8":
        raise ValueError("the integer forward pass needs int8 weights (kvedge convert)")
    if ccfg.dtype != "i8":
        raise ValueError("the integer forward pass needs an i8 cache, not %s" % ccfg.dtype)
    if attention is not None:
        raise ValueError("the integer forward pass runs kvedge.attention's integer path")


def scratch_bytes(cfg, stream=False):
    """Bytes of Forward's buffers and tables beside kvedge.budget.activation_bytes, plus what Weights keeps
    beyond the int8 weights' own account (a q_mv parameter header per fused matrix group)."""
    d, h, kvd, H, KV = cfg.dim, cfg.hidden_dim, cfg.kv_dim, cfg.n_heads, cfg.n_kv_heads
    nq = d + 2 * kvd
    n = 4 * d + 4 * max(2 * h, nq, d) + 4 * max(d, h) + 4 * cfg.vocab_size  # x, z, xq, logits
    n += nq + 2 * (H + 2 * KV) + 4 * d + 4 * H + 4 * 28  # codes, scales, attention output, parameters
    n += 4 * (1 + cfg.head_dim) + 2 * 258 + 2 * (24 * SIG_STEPS + 1) + 4 * cfg.head_dim  # tables, cos/sin
    groups = 4 * cfg.n_layers + (1 if cfg.shared_classifier else 2)
    if stream:  # every row's scale word stays in RAM (IntMatrix.p): the streamed account holds a chunk's only
        n += 4 * (cfg.vocab_size * (1 if cfg.shared_classifier else 2) + cfg.n_layers * (3 * d + 2 * kvd + 2 * h))
    return n + 4 * P_HDR * groups + 6 * 32  # + the memoryviews of q, k, v codes and scales


class IntMatrix:
    """Offset-binary int8 rows (in RAM, or streamed from the file a chunk at a time) and a q_mv parameter block
    whose row words cover every row of a fused group; `exp` is the group's output exponent before the input
    scale (value of q_mv's result = y * 2**(exp + xe + os))."""

    def __init__(self, rows, cols):
        self.rows, self.cols = rows, cols
        self.p = zeros("i", P_HDR + rows)
        self.p[P_ROWS] = rows
        self.p[P_COLS] = cols
        self.codes = None  # in RAM: bytearray rows*cols; in place: the mapped file (its parts' offsets)
        self.parts = []  # in place or streamed: (file offset of the codes, first row, rows)
        self.exp = 0

    q4 = False  # (pass_int4.Int4Matrix: True)

    def set_scales(self, scales):
        """Row words from the f32 row scales (array('f') of self.rows)."""
        # two passes over the scales rather than two arrays of rows ints: at start-up on a nearly full heap the
        # vocabulary's 512 rows took 4 KB more than the plan counts (the emulated rp2040 ran out there)
        E = None
        for r in range(self.rows):
            m, e = mantissa(scales[r])
            if m and (E is None or e > E):
                E = e
        if E is None:
            E = 0
        for r in range(self.rows):
            m, e = mantissa(scales[r])
            sh = E - e if m else 31
            self.p[P_HDR + r] = (m << 8) | (sh if sh < 31 else 31)
        self.exp = 30 + E


class Weights:
    """A kvedge int8 file read for the integer path: embedding (= classifier when shared), per layer wqkv, wo,
    w13, w2, and the norm gains. stream=True leaves the matrices in the file (chunk rows at a time); stream="rom"
    reads them in place where the file is mapped (ROMFS: no copy, no chunk buffer), else streams them. (int4
    files: kvedge.model.pass_int4.Weights.)"""

    def __init__(self, path, stream=False, chunk_bytes=0):
        from kvedge.model.header import read_config
        cfg, dtype = read_config(path)
        if dtype != "i8":
            raise CheckpointError("%s: the integer forward pass needs int8 weights (kvedge convert)" % path)
        if cfg.dim > MAX_COLS or cfg.hidden_dim > MAX_COLS:
            raise CheckpointError("dim/hidden_dim above %d would overflow the integer path" % MAX_COLS)
        lay = i8_layout(cfg)
        if file_size(path) < lay["size"]:
            raise CheckpointError("%s: %d bytes, the header needs %d" % (path, file_size(path), lay["size"]))
        d, h, kv, L = cfg.dim, cfg.hidden_dim, cfg.kv_dim, cfg.n_layers
        f = open(path, "rb")
        self._file = f
        self._rom = None
        stream = place(self, f, stream)
        self.cfg, self.stream = cfg, stream
        if stream:
            self.scratch = bytearray(chunk_bytes or 16 * (h if h > d else d))
        # one buffer for every group's f32 row scales and every norm's gains, made before anything kept: the
        # groups' arrays then sit side by side below the float garbage their scales leave (one scales array per
        # group left the emulated rp2040 with 30 KB free in holes of at most 2.2 KB, and the arena's neighbours
        # could not be allocated)
        self._sc = alloc("f", max(cfg.vocab_size, d + 2 * kv, 2 * h, d))
        try:
            self._load(f, lay)
        finally:
            self._sc = None
            if not stream and self._rom is None:
                f.close()
                self._file = None

    def _load(self, f, lay):
        """Every matrix group and norm of the file at the layout's offsets."""
        cfg = self.cfg
        d, h, kv, L = cfg.dim, cfg.hidden_dim, cfg.kv_dim, cfg.n_layers
        self.emb = self._group(f, [lay["embedding"]], [cfg.vocab_size], d)
        self.wcls = self.emb if lay["wcls"] is None else self._group(f, [lay["wcls"]], [cfg.vocab_size], d)
        self.wqkv, self.wo, self.w13, self.w2 = [], [], [], []
        for l in range(L):
            self.wqkv.append(self._group(f, [lay["wq"][l], lay["wk"][l], lay["wv"][l]], [d, kv, kv], d))
            self.wo.append(self._group(f, [lay["wo"][l]], [d], d))
            self.w13.append(self._group(f, [lay["w1"][l], lay["w3"][l]], [h, h], d))
            self.w2.append(self._group(f, [lay["w2"][l]], [d], h))
        self.g_att = [self._gain(f, o, d) for o in lay["rms_att"]]
        self.g_ffn = [self._gain(f, o, d) for o in lay["rms_ffn"]]
        self.g_final = self._gain(f, lay["rms_final"], d)

    def close(self):
        self._rom = None
        if self._file is not None:
            self._file.close()
            self._file = None

    def _group(self, f, offs, rows, cols):
        """A fused group of rows: what it keeps (the parameter block, the codes or the parts' offsets) is made
        first, then its scales are read into the shared buffer and folded into row words (float garbage)."""
        _collect()
        n = 0
        for r in rows:
            n += r
        m = IntMatrix(n, cols)
        at = 0
        if self.stream or self._rom is not None:
            for o, r in zip(offs, rows):
                m.parts.append((o + 4 * r, at, r))
                at += r
            m.codes = self._rom
        else:
            m.codes = bytearray(n * cols)
            mv = memoryview(m.codes)
            for o, r in zip(offs, rows):
                f.seek(o + 4 * r)
                f.readinto(mv[at * cols:(at + r) * cols])
                at += r
            mv = None
        scales = memoryview(self._sc)[:n]
        at = 0
        for o, r in zip(offs, rows):
            f.seek(o)
            f.readinto(scales[at:at + r])
            at += r
        m.set_scales(scales)
        return m

    def _gain(self, f, off, n):
        """RMSNorm weights times sqrt(n) as 15-bit mantissas with one exponent: (array('i'), exponent)."""
        out = zeros("i", n)  # kept: made before the floats below
        g = memoryview(self._sc)[:n]
        f.seek(off)
        f.readinto(g)
        root = math.sqrt(n)
        big = 0.0
        for i in range(n):
            a = abs(g[i]) * root
            if a > big:
                big = a
        m, e = mantissa(big)
        if m:
            sc = math.ldexp(root, -e)
            for i in range(n):
                v = int(g[i] * sc + (0.5 if g[i] >= 0 else -0.5))
                out[i] = 32767 if v > 32767 else (-32767 if v < -32767 else v)
        return out, e


class Forward:
    """Buffers, tables and the decode step of the integer forward pass over a model's cache and attention."""

    def __init__(self, model, w):
        cfg = model.cfg
        self.m = model
        self.w = w
        self.k = qkernels()[0]
        self.kq = self.k  # the matvec inputs' quantizer (int4 rows on a DSP core: pass_int4.Forward's own)
        d, h, kvd, hd = cfg.dim, cfg.hidden_dim, cfg.kv_dim, cfg.head_dim
        self.d, self.h, self.kvd, self.hd = d, h, kvd, hd
        self.nq = d + 2 * kvd
        widest = max(d, h, 4)  # xq: kernels.q8_dsp_thumb packs n codes in 8 + 2n bytes
        self.x = zeros("i", d)  # residual
        self.z = zeros("i", max(2 * h, self.nq, d))  # matvec outputs: qkv, h1|h3, attention output
        self.xq = zeros("i", widest)  # int8 codes of a matvec input
        self.logits = zeros("i", cfg.vocab_size)
        self.codes = zeros("b", self.nq)  # q, k, v codes per head
        self.scales = zeros("H", cfg.n_heads + 2 * cfg.n_kv_heads)
        mc = memoryview(self.codes)
        ms = memoryview(self.scales)
        H, KV = cfg.n_heads, cfg.n_kv_heads
        self.qc, self.kc, self.vc = mc[:d], mc[d:d + kvd], mc[d + kvd:]
        self.qs, self.ks, self.vs = ms[:H], ms[H:H + KV], ms[H + KV:]
        self.oq = zeros("i", d)
        self.oe = zeros("i", H)
        self.ip = zeros("i", 8)  # scalar parameters of q_quant / q_normgain / q_swiglu / q_align / q_embed
        self.hp = zeros("i", 4)
        self.hp[0] = H + 2 * KV
        self.hp[1] = hd
        # K and V codes and scales follow q's in codes and scales: the cache stores them from this block
        self.sp = zeros("i", S_WORDS)
        self.ap = zeros("i", 4)  # q_align: heads, head_dim, -> the common exponent
        self.ap[0] = H
        self.ap[1] = hd
        # RoPE: turns per position in Q28 (llama2.c's f32 frequencies), this position's cos/sin
        half = hd // 2
        self.fq = rope_turns(hd)
        self.sin = sin_table()
        self.sig = sigmoid_table()
        self.cs = zeros("i", hd)
        self.ln = bitlen(d)
        self.cd = code_max(d)  # matvec input codes: as wide as the dot products allow
        self.ch = code_max(h)
        m, e = mantissa(d * EPS)
        self.eps = array("i", [m, e])  # n * eps = eps[0] * 2**eps[1] (q_rnorm)
        self.exp_logits = 0
        self.clean = 0  # steps in a row that left nothing allocated (2: step() locks the heap)
        self.locked_steps = 0
        self.xm = 0
        self.xe = 0
        if w is not None:
            self.take(w)
        # the cache's step buffers are this object's own, so the cache checks them once here and its steps skip
        # the checks (they cost ~0.4 M instructions a token on a Cortex-M3)
        model.cache.bind_q8(self.sp, d, d + kvd, H, H + KV, self.codes, self.scales, self.k.q_store, self.qc,
                            self.qs, self.oq, self.oe)
        self.pre = None  # kvedge.model.prefill.attach(): prompt tokens a chunk at a time

    def take(self, w):
        """The weights this pass reads (Weights; made after the pass's buffers: kvedge.model.llama)."""
        self.w = w
        if w.stream:
            self.wbuf = w.scratch

    # ---- scalar steps ----

    def _quant(self, z, n, A, ez, C):
        kq = self.kq
        ip = self.ip
        kq.q_scale(A, ez, C, ip)  # quantize(), inlined: a Python call less a vector
        kq.q_quant(z, self.xq, n, ip)
        self.xm = ip[4]
        self.xe = ip[5]

    def _norm(self, x, A, g):
        """RMSNorm of the residual (max |x| = A) with gain g = (mantissas, exponent), quantized into xq: the
        kernels' elementwise half (q_normgain), the codes (q_scale, q_quant) and the rsqrt folded into their scale
        (q_rnorm). Kernel calls only: each Python call here costs a Cortex-M3 ~500 instructions and more."""
        k = self.k
        kq = self.kq
        ip = self.ip
        n = self.d
        ip[0] = n
        ip[1] = A
        ip[2] = self.ln
        Z = k.q_normgain(x, g[0], self.z, ip)
        s1 = ip[1]
        ss = ip[3]  # sum x^2 = ss * 2**(2 s1 + ln + 2 RES_EXP)
        kq.q_scale(Z, 15 + s1 + RES_EXP + g[1], self.cd, ip)
        kq.q_quant(self.z, self.xq, n, ip)
        k.q_rnorm(ss, 2 * s1 + self.ln + 2 * RES_EXP, self.eps, ip)
        self.xm = ip[4]
        self.xe = ip[5]

    def _mv(self, mat, out, os, add):
        """out (=|+=) mat . xq (scale xm, xe); returns max |out| written. Output exponent: mat.exp + xe + os."""
        p = mat.p
        p[P_XM] = self.xm
        p[P_OS] = os
        p[P_ADD] = add
        if mat.codes is None:
            return self._mv_stream(mat, out)
        parts = mat.parts
        if not parts:  # in RAM: the fused rows in one buffer
            p[P_WO] = 0
            p[P_RO] = 0
            p[P_ROWS] = mat.rows
            return self.k.q_mv(mat.codes, self.xq, out, p)
        big = 0
        for j in range(len(parts)):  # in place: each part where the mapped file holds it
            part = parts[j]
            p[P_WO] = part[0]
            p[P_RO] = part[1]
            p[P_ROWS] = part[2]
            b = self.k.q_mv(mat.codes, self.xq, out, p)
            if b > big:
                big = b
        return big

    def _mv_stream(self, mat, out):
        p = mat.p
        p[P_WO] = 0
        big = 0
        parts = mat.parts
        for j in range(len(parts)):
            part = parts[j]  # (file offset, first row, rows), kept since load
            r = 0
            while r < part[2]:
                n = self._rows(mat, part, r)
                b = self.k.q_mv(self.wbuf, self.xq, out, p)
                if b > big:
                    big = b
                r += n
        return big

    def _rows(self, mat, part, r):
        """The streamed rows of `part` from row r, as many as wbuf holds, read into wbuf as codes, and mat.p set
        to them (P_RO, P_ROWS); returns how many. (kvedge.model.prefill multiplies them into a chunk's inputs.)"""
        cols = mat.cols
        n = part[2] - r
        most = len(self.wbuf) // cols
        if n > most:
            n = most
        f = self.w._file
        f.seek(part[0] + r * cols)
        _read(f, self.wbuf, n * cols)
        p = mat.p
        p[P_RO] = part[1] + r
        p[P_ROWS] = n
        return n

    def _embed(self, token, x):
        """The token's embedding row into the residual's fixed point x; returns max |x|."""
        w = self.w
        k = self.k
        d = self.d
        ip = self.ip
        emb = w.emb
        sw = emb.p[P_HDR + token]
        ip[1] = sw >> 8
        ip[2] = RES_EXP - (emb.exp - 30 - (sw & 255))
        if emb.codes is not None:
            ip[0] = (emb.parts[0][0] if emb.parts else 0) + token * d
            return k.q_embed(emb.codes, x, d, ip)
        ip[0] = 0
        w._file.seek(emb.parts[0][0] + token * d)
        _read(w._file, self.wbuf, d)
        return k.q_embed(self.wbuf, x, d, ip)

    # ---- the decode step ----

    def step(self, token):
        """forward(token), with the heap locked once it has shown it allocates nothing. Why: MicroPython puts a
        Python function's frame of more than 11 words on the heap when it can (and frees it on return), so every
        call of the pass's helpers searches the heap for a free block; on a fragmented heap that search dominates
        (docs/benchmarks.md: the emulated rp2040 ran 12.1 M instructions a token unlocked, 5.4 M locked).
        Locked, frames go on the C stack. Earned: two steps in a row, unlocked, left the heap as they found it;
        never locked for a step the cache says may allocate or raise (its quiet(): an f32 prefix's position, a
        start_token() that would raise, whose exception must not become a MemoryError, or a tiered cache's block
        leaving the ring for flash, which writes files); such a step neither earns nor spoils the lock. The model's
        _lockable says whether to try."""
        quiet = self.m.cache.quiet()
        if self.clean >= 2 and quiet:
            micropython.heap_lock()
            try:
                out = self.forward(token)
            finally:
                micropython.heap_unlock()
            self.locked_steps += 1
            return out
        a = gc.mem_alloc()
        out = self.forward(token)
        # a collection within the step would lower the figure: only an unchanged heap counts as clean
        if quiet:
            self.clean = self.clean + 1 if gc.mem_alloc() == a else 0
        return out

    def forward(self, token):
        """One token at the cache's next position; returns the logits (array('i'), value logits[i] * 2**
        exp_logits)."""
        m = self.m
        k = self.k
        w = self.w
        cache = m.cache
        d = self.d
        x = self.x
        z = self.z
        ip = self.ip
        pos = cache.start_token()
        A = self._embed(token, x)
        k.q_angles(self.fq, self.sin, self.cs, pos)
        # what every layer reads, looked up once a token (locals, not bound methods: those allocate)
        hp = self.hp
        codes = self.codes
        scales = self.scales
        qc = self.qc
        qs = self.qs
        oq = self.oq
        oe = self.oe
        ap = self.ap
        cs = self.cs
        sig = self.sig
        h = self.h
        hd = self.hd
        nrot = d + self.kvd
        cd = self.cd
        ch = self.ch
        q_rope = k.q_rope
        q_heads = k.q_heads
        q_align = k.q_align
        q_swiglu = k.q_swiglu
        g_att = w.g_att
        g_ffn = w.g_ffn
        wqkv = w.wqkv
        wo = w.wo
        w13 = w.w13
        w2 = w.w2
        for l in range(m.cfg.n_layers):
            # attention block
            self._norm(x, A, g_att[l])
            mat = wqkv[l]
            self._mv(mat, z, 0, 0)
            q_rope(z, cs, nrot, hd)
            hp[2] = mat.exp + self.xe
            q_heads(z, codes, scales, hp)
            cache.store_q8(l, codes, scales)  # codes from q_heads are int8 by construction
            cache.attend_q8(l, qc, qs, oq, oe)
            B = q_align(oq, oe, d, ap)
            self._quant(oq, d, B, ap[2], cd)
            mat = wo[l]
            A = self._mv(mat, x, RES_EXP - mat.exp - self.xe, 1)
            # feed-forward block
            self._norm(x, A, g_ffn[l])
            mat = w13[l]
            B = self._mv(mat, z, 0, 0)
            e13 = mat.exp + self.xe
            ip[0] = B
            ip[1] = e13 + 12  # to Q8 sigmoid-table steps of 1/16 (q_swiglu adds its shift)
            B = q_swiglu(z, sig, h, ip)
            self._quant(z, h, B, 2 * (e13 + ip[0]), ch)
            mat = w2[l]
            A = self._mv(mat, x, RES_EXP - mat.exp - self.xe, 1)
        if m.policy is not None:
            m.policy.observe()
        self._norm(x, A, w.g_final)
        self._mv(w.wcls, self.logits, 0, 0)
        self.exp_logits = w.wcls.exp + self.xe
        return self.logits

    def float_logits(self, out):
        """The logits as floats into out (array('f')): for sampling with a temperature (allocates a float per
        value on MicroPython)."""
        e = self.exp_logits
        lg = self.logits
        for i in range(len(lg)):
            out[i] = math.ldexp(lg[i], e)
        return out
