# int4 rows on the integer forward pass (kvedge.model.pass_int): Weights and Forward over pass_int's, for kvedge's
# int4 file (kvedge.model.w4file:
# per matrix its f16 group scales, then two nibble codes a byte) read where it lies, in RAM, in place from ROMFS,
# or streamed a chunk at a time, and multiplied by the kernels' q_mv4. Kept out of pass_int: a board running int8
# weights does not compile it (pass_int's Weights imports it for an int4 file).
from kvedge import kernels
from kvedge.compat import zeros
from kvedge.kernels.words import VMAX, P_WO, P_ROWS, P_COLS, P_XM, P_OS, P_ADD, P_RO, P_HDR, P4_SO, P4_EG, P4_HDR
from kvedge.model.header import CheckpointError
from kvedge.model import pass_int
from kvedge.model.pass_int import _collect, _read, place
from kvedge.w4sizes import scale_bytes as i4_scale_bytes, matrix_bytes as i4_matrix_bytes


def kernels4():
    """The q_mv4 module (kvedge.kernels.q4_<kind>) of the q_* kernels' kind (kvedge.model.pass_int.qkernels), or
    the next kind's that loads here (kvedge.kernels.first): the same bits from every kind."""
    from kvedge.model.pass_int import qkernels
    return kernels.first("q4_", qkernels()[1])[0]


def layout(cfg):
    """Byte offsets of an int4 file's tensors (kvedge.model.header.i4_layout)."""
    from kvedge.model.header import i4_layout
    return i4_layout(cfg)


def chunk_bytes_of(cfg):
    """Bytes of the chunk buffer of streamed int4 rows (kvedge.model.sizes.stream_buffer_bytes)."""
    from kvedge.model.sizes import stream_buffer_bytes
    return stream_buffer_bytes(cfg.dim, cfg.hidden_dim, "i4")


def xq_codes(cfg):
    """Codes of Forward.xq for int4 rows: the widest input rounded up to whole groups of 32 (q_mv4 reads a row's
    padding too; its weights there are zero)."""
    return (max(cfg.dim, cfg.hidden_dim, 4) + 31) & ~31


def code_max4(cols):
    """pass_int.code_max for int4 rows (q_mv4): |code| <= 8 times the 8-bit scale mantissa, summed over the row's
    groups of 32, stays below 2**30."""
    c = ((1 << 30) - 1) // (255 * 256 * ((cols + 31) >> 5))
    return c if c < 32767 else 32767


def check(wdtype, ccfg, attention, stream=False, policy=False):
    """pass_int.check for int4 weights: what the integer pass refuses, it refuses for int4 rows too."""
    if wdtype != "i4":
        raise ValueError("kvedge.model.pass_int4 runs int4 weights, not %s" % wdtype)
    pass_int.check("i8", ccfg, attention, stream, policy)


def scratch_bytes(cfg, stream=False):
    """pass_int.scratch_bytes for int4 rows, in RAM, in place or streamed alike: the int8 rows' account in RAM
    with xq in whole groups (xq_codes), no row words, and per fused group q_mv4's block instead of q_mv's, the
    parts' tuples (4 ints) and lists (16 words)."""
    groups = 4 * cfg.n_layers + (1 if cfg.shared_classifier else 2)
    n = pass_int.scratch_bytes(cfg) - 4 * P_HDR * groups
    n += 4 * (xq_codes(cfg) - max(cfg.dim, cfg.hidden_dim))
    return n + 4 * (P4_HDR + 16 + 8) * groups


def prefill_mv4(f, mat, p, tv, T, n, res, os0, at, xqs, outs):
    """kvedge.model.prefill's chunk product over int4 rows: Forward f's, token by token (each token's input codes
    swapped into f.xq; streamed rows read per token)."""
    xq = f.xq
    for t in range(n):
        p[P_XM] = tv[T + t]
        p[P_OS] = os0 - tv[2 * T + t] if res else 0
        f.xq = xqs[t]
        tv[at + t] = mv4(f, mat, outs[t])
    f.xq = xq


class Int4Matrix:
    """int4 rows as kvedge's int4 file holds them (group scales, then nibble codes, per matrix of a fused group):
    `parts` lists (scales offset, codes offset, first row, rows) into `buf` (the rows in RAM, or the file mapped
    in place), or into the file when buf is None (streamed a chunk at a time); p is q_mv4's block, `exp` the
    group's output exponent before the input scale, as IntMatrix's."""

    q4 = True

    def __init__(self, rows, cols):
        self.rows = rows
        self.groups = (cols + 31) >> 5
        self.cols = self.groups << 5
        self.p = zeros("i", P4_HDR)
        self.p[P_COLS] = self.cols
        self.buf = None
        self.parts = []
        self.exp = 0
        self.codes = None  # (IntMatrix's in-RAM rows: kvedge.model.prefill asks)
        # streamed: rows a chunk, and where in the chunk buffer their scales go (a view made once)
        self.most = 0
        self.sat = 0
        self.sview = None

    def prefill(self, f, p, tv, T, n, res, os0, at, xqs, outs):
        """kvedge.model.prefill's chunk product over these rows (prefill_mv4)."""
        prefill_mv4(f, self, p, tv, T, n, res, os0, at, xqs, outs)


class Weights(pass_int.Weights):
    """kvedge's int4 file read for the integer path (pass_int.Weights' groups and gains): the matrices' bytes as
    the file holds them, in RAM, read in place where the file is mapped (stream "rom", ROMFS), else streamed."""

    def __init__(self, path, stream=False, chunk_bytes=0):
        from kvedge.model.header import read_config, file_size, alloc
        cfg, dtype = read_config(path)
        if dtype != "i4":
            raise CheckpointError("%s: %s weights, not int4 (kvedge convert --weights-dtype i4)" % (path, dtype))
        if cfg.dim > pass_int.MAX_COLS or cfg.hidden_dim > pass_int.MAX_COLS:
            raise CheckpointError("dim/hidden_dim above %d would overflow the integer path" % pass_int.MAX_COLS)
        lay = layout(cfg)
        if file_size(path) < lay["size"]:
            raise CheckpointError("%s: %d bytes, the header needs %d" % (path, file_size(path), lay["size"]))
        self.path = path
        self._rom = None
        f = open(path, "rb")
        self._file = f
        stream = place(self, f, stream)
        self.cfg, self.stream = cfg, stream
        if stream:
            self.scratch = bytearray(chunk_bytes or chunk_bytes_of(cfg))
        self._sc = alloc("f", cfg.dim)  # the norms' gains pass through it (pass_int.Weights._gain)
        try:
            self._load(f, lay)
        finally:
            self._sc = None
            if not stream and self._rom is None:
                f.close()
                self._file = None

    def close(self):
        self._rom = None
        pass_int.Weights.close(self)

    def _group(self, f, offs, rows, cols):
        return group4(self, f, offs, rows, cols)


class _Quantizer:
    """q_scale and q_quant in plain int32 codes (what q_mv4 reads), as attributes: Forward.kq on a DSP core."""

    def __init__(self, q_scale, q_quant):
        self.q_scale = q_scale
        self.q_quant = q_quant


def plain_codes():
    """The quantizer of int4 rows' inputs on a core whose asm q_quant packs codes for the DSP q_mv: viper's q_scale
    with the Thumb-2 q_quant of plain codes (kernels.q8_steps_v7m_thumb, ~7x fewer instructions than viper's on
    the Cortex-M7), or viper's where that module does not load. Same integers (tests/device/test_q8_steps_v7m.py)."""
    from kvedge.kernels import q8_viper
    try:
        from kvedge.kernels.q8_steps_v7m_thumb import q_quant
    except ImportError:
        return q8_viper
    return _Quantizer(q8_viper.q_scale, q_quant)


class Forward(pass_int.Forward):
    """pass_int.Forward over int4 rows: q_mv4 (fw.k4), matvec inputs in whole groups of 32 with int4's code
    bound, and the int4 embedding."""

    def __init__(self, model, w):
        import sys
        from kvedge.model.pass_int import qkernels
        pass_int.Forward.__init__(self, model, w)
        cfg = model.cfg
        self.xq = zeros("i", xq_codes(cfg))
        self.k4 = kernels4()
        # the matvec inputs' quantizer: the kernels', except where kernels.q8_dsp_thumb's packs them for its own q_mv
        self.kq = self.k
        if "kvedge.kernels.q8_dsp_thumb" in sys.modules and qkernels()[1] == "asm":
            self.kq = plain_codes()
        self.cd = code_max4(cfg.dim)
        self.ch = code_max4(cfg.hidden_dim)

    def _mv(self, mat, out, os, add):
        p = mat.p
        p[P_XM] = self.xm
        p[P_OS] = os
        p[P_ADD] = add
        return mv4(self, mat, out)

    def _embed(self, token, x):
        return embed4(self, self.w.emb, token, x)


def scale_exponents(path, mv, n, eg):
    """The largest exponent field (at least 1, a subnormal's) of n f16 group scales in mv (bytes), over eg;
    CheckpointError for a negative, infinite or NaN scale: a damaged file, refused rather than run."""
    for i in range(0, 2 * n, 2):
        h = mv[i + 1]
        if h & 0x80 or h >= 0x7C:
            raise CheckpointError("%s: an int4 group scale is %s (a damaged file)" % (
                path, "negative" if h & 0x80 else "infinite or NaN"))
        h >>= 2
        if h > eg:
            eg = h
    return eg


def group4(wt, f, offs, rows, cols):
    """A fused group of int4 matrices: its parts where they lie (the file mapped in place, or streamed) or read
    into one buffer, and the largest exponent of its scales (every scale checked)."""
    _collect()
    n = 0
    size = 0
    for r in rows:
        n += r
        size += i4_matrix_bytes(r, cols)
    m = Int4Matrix(n, cols)
    if not wt.stream and wt._rom is None:
        m.buf = bytearray(size)
    mv = memoryview(m.buf) if m.buf is not None else None
    at = 0
    first = 0
    eg = 1
    for o, r in zip(offs, rows):
        sb = i4_scale_bytes(r, cols)
        ns = r * m.groups
        if mv is not None:  # in RAM: the part's bytes as the file holds them
            f.seek(o)
            f.readinto(mv[at:at + i4_matrix_bytes(r, cols)])
            m.parts.append((at, at + sb, first, r))
            eg = scale_exponents(wt.path, mv[at:at + 2 * ns], ns, eg)
            at += i4_matrix_bytes(r, cols)
        else:
            m.parts.append((o, o + sb, first, r))
            if wt._rom is None and m.sview is None:  # streamed: where a chunk's scales go in scratch
                m.most = (len(wt.scratch) - 4) // (18 * m.groups)
                m.sat = 16 * m.most * m.groups
                m.sview = memoryview(wt.scratch)[m.sat:]
            if wt._rom is not None:
                eg = scale_exponents(wt.path, wt._rom[o:o + 2 * ns], ns, eg)
            else:  # the scales read through the chunk buffer
                buf = memoryview(wt.scratch)
                step = len(wt.scratch) & ~1
                for i in range(0, 2 * ns, step):
                    k = min(step, 2 * ns - i)
                    f.seek(o + i)
                    f.readinto(buf[:k])
                    eg = scale_exponents(wt.path, buf, k >> 1, eg)
                buf = None
        first += r
    mv = None
    if wt._rom is not None:
        m.buf = wt._rom
    m.p[P4_EG] = eg
    m.exp = eg - 7
    return m


def mv4(fw, mat, out):
    """_mv of an Int4Matrix: q_mv4 over each part where it lies, or over the chunks of its rows read from the
    file into wbuf."""
    p = mat.p
    big = 0
    parts = mat.parts
    buf = mat.buf
    for j in range(len(parts)):
        part = parts[j]  # (scales offset, codes offset, first row, rows), kept since load
        if buf is not None:
            p[P4_SO] = part[0]
            p[P_WO] = part[1]
            p[P_RO] = part[2]
            p[P_ROWS] = part[3]
            b = fw.k4.q_mv4(buf, fw.xq, out, p)
            if b > big:
                big = b
            continue
        r = 0
        while r < part[3]:
            n = rows4(fw, mat, part, r)
            b = fw.k4.q_mv4(fw.wbuf, fw.xq, out, p)
            if b > big:
                big = b
            r += n
    return big

def rows4(fw, mat, part, r):
    """_rows for int4 rows: as many rows of `part` from row r as wbuf holds (mat.most), their codes at wbuf's
    start and their scales at mat.sat (through mat.sview: no memoryview made per chunk); mat.p set to them.
    Returns how many."""
    g = mat.groups
    n = part[3] - r
    if n > mat.most:
        n = mat.most
    f = fw.w._file
    f.seek(part[1] + 16 * r * g)
    _read(f, fw.wbuf, 16 * n * g)
    f.seek(part[0] + 2 * r * g)
    _read(f, mat.sview, 2 * n * g)
    p = mat.p
    p[P4_SO] = mat.sat
    p[P_WO] = 0
    p[P_RO] = part[2] + r
    p[P_ROWS] = n
    return n


def embed4(fw, emb, token, x):
    """_embed of an int4 embedding: code * scale in Q16 (= code * m * 2**(e - 9) for the scale's mantissa m and
    exponent field e), saturating at +-VMAX. Once a token, d values: Python, not a kernel."""
    g = emb.groups
    part = emb.parts[0]
    buf = emb.buf
    so = part[0] + 2 * token * g
    co = part[1] + 16 * token * g
    if buf is None:  # streamed: the row's codes and scales into wbuf, as _rows4 reads a chunk
        f = fw.w._file
        f.seek(co)
        _read(f, fw.wbuf, 16 * g)
        f.seek(so)
        _read(f, emb.sview, 2 * g)
        buf = fw.wbuf
        so = emb.sat
        co = 0
    big = 0
    d = fw.d
    i = 0
    while i < d:
        h = buf[so] | (buf[so + 1] << 8)
        so += 2
        m = h & 1023
        e = h >> 10
        if e:
            m |= 1024
        else:
            e = 1
        k = 9 - e
        end = i + 32
        if end > d:
            end = d
        while i < end:
            c = buf[co + (i >> 1)]  # column i: byte i // 2 of the row, its high nibble when i is odd
            c = ((c >> 4) if i & 1 else c) & 15
            t = ((c ^ 8) - 8) * m
            if k >= 0:
                t >>= k
            else:  # saturated before the shift: no long int
                lim = VMAX >> -k
                t = VMAX if t > lim else (-VMAX if t < -lim else t << -k)
            x[i] = t
            if t < 0:
                t = -t
            if t > big:
                big = t
            i += 1
    return big
