# llama2.c checkpoints (a header of seven int32, then float32 weights) and kvedge's compact int8 file
# (same header behind a magic, then per-row f32 scales and int8 codes), read into RAM or row by row from the
# filesystem when the weights do not fit the heap.
#
# Tensor order (both formats): token_embedding [vocab, dim], rms_att [L, dim], wq [L, dim, dim],
# wk [L, kv_dim, dim], wv [L, kv_dim, dim], wo [L, dim, dim], rms_ffn [L, dim], w1 [L, hidden, dim],
# w2 [L, dim, hidden], w3 [L, hidden, dim], rms_final [dim], (llama2.c only: two legacy RoPE tables of
# seq_len * head_dim / 2 floats, skipped), wcls [vocab, dim] only when the header's vocab_size is negative.
# Matrices are row-major [out, in]. In the int8 file each matrix is: rows f32 scales, rows*cols int8 codes,
# zero padding to a multiple of 4 bytes; w[r][c] ~ codes[r*cols + c] * scales[r].
# kvedge's int4 file ("KVW4"): its layout and sizes in kvedge.model.w4file.
import struct
from array import array

from kvedge.compat import empty

MAGIC_I8 = b"KVW8"
VERSION_I8 = 1
HEADER_BYTES = 28
I8_HEADER_BYTES = 4 + 4 + HEADER_BYTES
MAX_COLS = 65536  # int8 dot products stay within +-2**30: 127 * 127 * 65536 < 2**30
FIELDS = ("dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len")


class CheckpointError(ValueError):
    """A checkpoint file is malformed: wrong magic, impossible header, wrong length."""


# Largest value of each header field (kvedge.budget.LIMITS for the shape; 2**24 tokens of vocabulary and
# context, far past any llama2.c model). vocab_size is at least 3: <unk>, BOS (id 1, every run's first
# token) and EOS (id 2); negative when the classifier is not shared.
_MAX = (MAX_COLS, MAX_COLS, 4096, 16384, 16384, 1 << 24, 1 << 24)


class ModelConfig:
    """The seven header fields of a llama2.c checkpoint, validated, plus derived sizes."""

    def __init__(self, dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len):
        vals = (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len)
        for i in range(7):
            v = vals[i]
            lo = 1
            if i == 5:
                lo = 3
                if isinstance(v, int) and v < 0:
                    v = -v
            if not isinstance(v, int) or isinstance(v, bool) or v < lo or v > _MAX[i]:
                raise CheckpointError("header field %s is %r, expected %d..%d" % (FIELDS[i], vals[i], lo, _MAX[i]))
        if dim % n_heads:
            raise CheckpointError("dim %d is not a multiple of n_heads %d" % (dim, n_heads))
        if n_heads % n_kv_heads:
            raise CheckpointError("n_heads %d is not a multiple of n_kv_heads %d" % (n_heads, n_kv_heads))
        if (dim // n_heads) & 1:
            raise CheckpointError("head_dim %d must be even (RoPE rotates pairs)" % (dim // n_heads))
        self.dim = dim
        self.hidden_dim = hidden_dim
        self.n_layers = n_layers
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.shared_classifier = vocab_size > 0
        self.vocab_size = vocab_size if vocab_size > 0 else -vocab_size
        self.seq_len = seq_len
        self.head_dim = dim // n_heads
        self.kv_dim = n_kv_heads * self.head_dim

    def header(self):
        v = self.vocab_size if self.shared_classifier else -self.vocab_size
        return struct.pack("<7i", self.dim, self.hidden_dim, self.n_layers, self.n_heads, self.n_kv_heads, v,
                           self.seq_len)

    def matrices(self):
        """(name, rows, cols) of every matrix group, in file order; each layered group has n_layers entries."""
        d, h, kv = self.dim, self.hidden_dim, self.kv_dim
        return (("wq", d, d), ("wk", kv, d), ("wv", kv, d), ("wo", d, d), ("w1", h, d), ("w2", d, h),
                ("w3", h, d))

    def params(self):
        """Parameter groups as kvedge.budget.llama_params counts them."""
        from kvedge.sizes import llama_params
        return llama_params(self.dim, self.hidden_dim, self.n_layers, self.n_heads, self.n_kv_heads,
                            self.vocab_size, self.shared_classifier, self.head_dim)

    def __repr__(self):
        return "ModelConfig(dim=%d, hidden_dim=%d, n_layers=%d, n_heads=%d, n_kv_heads=%d, vocab_size=%d, " \
               "seq_len=%d, shared_classifier=%r)" % (self.dim, self.hidden_dim, self.n_layers, self.n_heads,
                                                      self.n_kv_heads, self.vocab_size, self.seq_len,
                                                      self.shared_classifier)


def parse_header(b):
    if len(b) < HEADER_BYTES:
        raise CheckpointError("truncated header: %d of %d bytes" % (len(b), HEADER_BYTES))
    return ModelConfig(*struct.unpack("<7i", b[:HEADER_BYTES]))


def _pad4(n):
    return (n + 3) & ~3


def f32_layout(cfg):
    """Byte offsets of every tensor in a llama2.c file (kvedge.model.f32file.layout)."""
    from kvedge.model.f32file import layout
    return layout(cfg)


def i8_matrix_bytes(rows, cols):
    return 4 * rows + _pad4(rows * cols)


def i8_layout(cfg, head=I8_HEADER_BYTES, matrix_bytes=i8_matrix_bytes):
    """Byte offsets in a kvedge int8 file; a matrix offset points at its scales (codes follow). (head and
    matrix_bytes of kvedge's int4 file: kvedge.model.w4file.layout, the same tensor order.)"""
    off = [head]
    L, d = cfg.n_layers, cfg.dim

    def mat(rows, cols):
        off[0] += matrix_bytes(rows, cols)
        return off[0] - matrix_bytes(rows, cols)

    def vec(n):
        off[0] += 4 * n
        return off[0] - 4 * n
    lay = {"embedding": mat(cfg.vocab_size, d), "rms_att": [vec(d) for _ in range(L)]}
    for name, rows, cols in cfg.matrices()[:4]:
        lay[name] = [mat(rows, cols) for _ in range(L)]
    lay["rms_ffn"] = [vec(d) for _ in range(L)]
    for name, rows, cols in cfg.matrices()[4:]:
        lay[name] = [mat(rows, cols) for _ in range(L)]
    lay["rms_final"] = vec(d)
    lay["wcls"] = None if cfg.shared_classifier else mat(cfg.vocab_size, d)
    lay["size"] = off[0]
    return lay


def file_bytes(cfg, dtype):
    """The exact length of a checkpoint with this header, in O(1) (no per-layer tables). dtype 'f32': a
    llama2.c file, 'i8': kvedge's int8 file (what convert_to_i8 writes).

    llama2.c's run.c (memory_map_weights) maps, after the 28-byte header: the embedding, per-layer norms and
    matrices, the final norm, two legacy RoPE tables of seq_len * head_dim / 2 floats each, and the classifier
    only when vocab_size is negative; its export.py writes exactly that and nothing after it. A longer file is
    not one this header describes (a changed header, or two files joined), so the length must match exactly."""
    d, h, kv, v = cfg.dim, cfg.hidden_dim, cfg.kv_dim, cfg.vocab_size
    if dtype == "f32":
        n = HEADER_BYTES + 4 * (v * d + cfg.n_layers * (2 * d + 2 * d * d + 2 * kv * d + 3 * h * d) + d
                                + cfg.seq_len * cfg.head_dim)
        return n if cfg.shared_classifier else n + 4 * v * d
    if dtype == "i4":
        from kvedge.model.w4file import file_bytes as w4_bytes
        return w4_bytes(cfg)
    m = i8_matrix_bytes
    n = I8_HEADER_BYTES + m(v, d) + cfg.n_layers * (8 * d + 2 * m(d, d) + 2 * m(kv, d) + 2 * m(h, d) + m(d, h)) + 4 * d
    return n if cfg.shared_classifier else n + m(v, d)


def alloc(typecode, n):
    """An array of n items with undefined contents (to be filled by readinto), allocated once at its final
    size (compat.empty: no temporary). A same-size temporary would double the peak and leave a hole per matrix:
    weights resident in RAM then did not fit a heap they fit."""
    return empty(typecode, n)


def zeros(typecode, n):
    """A zeroed array of n items."""
    a = alloc(typecode, n)
    if typecode in ("f", "i", "I", "d"):
        for i in range(n):
            a[i] = 0
    return a


def read_config(path):
    """(ModelConfig, weights dtype 'f32', 'i8' or 'i4') of a checkpoint file, after checking its header and
    that its length is exactly what the header implies (file_bytes). Every CheckpointError names the file."""
    with open(path, "rb") as f:
        head = f.read(I8_HEADER_BYTES)
    dtype = "f32"
    try:
        if head[:4] == MAGIC_I8:
            dtype = "i8"
            ver = struct.unpack("<i", head[4:8])[0] if len(head) >= 8 else VERSION_I8
            if ver != VERSION_I8:
                raise CheckpointError("kvedge int8 file version %d, expected %d" % (ver, VERSION_I8))
            head = head[8:]
        elif head[:4] == b"KVW4":
            from kvedge.model.w4file import header
            dtype, head = "i4", header(path)
        cfg = parse_header(head)
    except CheckpointError as e:
        raise CheckpointError("%s: %s" % (path, e.args[0]))
    size = file_size(path)
    need = file_bytes(cfg, dtype)
    if size != need:
        raise CheckpointError("%s: %d bytes, the header needs %d" % (path, size, need))
    return cfg, dtype


def file_size(path):
    import os
    return os.stat(path)[6]


# ---- matrices: all expose rows, cols and mv(k, x, xq, xs, acc, out) ----
# k is the kernel module (kvedge.kernels.get()); x the f32 input, xq/xs its int8 codes and scale (int8 weights
# only, prepared once per input by the model), acc an array('i') scratch of >= rows, out the f32 result.

class I8Matrix:
    def __init__(self, codes, scales, rows, cols):
        self.codes, self.scales, self.rows, self.cols = codes, scales, rows, cols

    def mv(self, k, x, xq, xs, acc, out):
        k.mv_i8(self.codes, 0, xq, acc, 0, self.rows, self.cols)
        k.mv_scale(acc, self.scales, 0, xs, out, 0, self.rows)

    def row(self, r, out):
        c0, n, s = r * self.cols, self.cols, self.scales[r]
        codes = self.codes
        for c in range(n):
            out[c] = codes[c0 + c] * s


class _FileMatrix:
    """Rows left in the file, read `chunk` rows at a time into the row buffer every matrix shares (io: the
    Weights holding the file, the buffer `scratch` and its memoryview `mscratch`)."""

    def __init__(self, io, off, rows, cols):
        self.io, self.off, self.rows, self.cols = io, off, rows, cols
        self.chunk = len(io.scratch) // cols
        if self.chunk < 1:
            raise CheckpointError("stream buffer of %d values is smaller than a row of %d" % (len(io.scratch), cols))


class FileI8Matrix(_FileMatrix):
    """int8 rows streamed from a kvedge int8 file; each chunk's per-row scales (stored before the rows) are read
    with it into the shared array('f') `scales`, so the matrix holds nothing in RAM."""

    def __init__(self, io, off, rows, cols):
        _FileMatrix.__init__(self, io, off + 4 * rows, rows, cols)
        self.soff = off
        if len(io.scales) < self.chunk:
            raise CheckpointError("stream scales of %d rows are fewer than a chunk of %d" % (len(io.scales), self.chunk))

    def mv(self, k, x, xq, xs, acc, out):
        io, cols = self.io, self.cols
        f, codes, mcodes, scales, mscales = io._file, io.scratch, io.mscratch, io.scales, io.mscales
        r = 0
        while r < self.rows:
            n = min(self.chunk, self.rows - r)
            f.seek(self.soff + 4 * r)
            f.readinto(mscales[:n])
            f.seek(self.off + r * cols)
            f.readinto(mcodes[:n * cols])
            k.mv_i8(codes, 0, xq, acc, 0, n, cols)
            k.mv_scale(acc, scales, 0, xs, out, r, n)
            r += n

    def row(self, r, out):
        io, n = self.io, self.cols
        f, codes = io._file, io.scratch
        f.seek(self.soff + 4 * r)
        f.readinto(io.mscales[:1])
        f.seek(self.off + r * n)
        f.readinto(io.mscratch[:n])
        s = io.scales[0]
        for c in range(n):
            out[c] = codes[c] * s


def weights_place(path, stream):
    """How Weights(path, stream) holds the matrices: False (in RAM), True (streamed from the file) or "rom"
    (int8 rows read in place from a mapped file). stream="rom" falls back to True where the file is not mapped
    or the weights are not int8."""
    if stream != "rom":
        return bool(stream)
    if read_config(path)[1] == "f32":
        return True
    with open(path, "rb") as f:
        from kvedge.model.romweights import map_file
        return "rom" if map_file(f) is not None else True


class Weights:
    """All tensors of one checkpoint. dtype 'f32' or 'i8'; stream=True leaves matrices in the file; stream="rom"
    reads int8 rows in place from a memory-mapped file (ROMFS), else streams them (weights_place).

    embedding, wcls (the embedding when shared), rms_att[l], rms_ffn[l], rms_final (array('f')), and per
    layer wq, wk, wv, wo, w1, w2, w3 (matrix objects)."""

    def __init__(self, path, stream=False, stream_bytes=0):
        self.cfg, self.dtype = read_config(path)
        cfg = self.cfg
        # llama2.c's f32 files: their layout and matrices in their own module (a board runs the int8 file)
        self._f32 = None
        if self.dtype == "f32":
            from kvedge.model import f32file
            self._f32 = f32file
        lay = self._f32.layout(cfg) if self._f32 else i8_layout(cfg)
        size = file_size(path)
        if size < lay["size"]:
            raise CheckpointError("%s: %d bytes, the header needs %d" % (path, size, lay["size"]))
        self.path = path
        f = open(path, "rb")
        self._file = f
        self._rom = None
        if stream == "rom":  # its own module: runs that do not read weights in place do not compile it
            from kvedge.model import romweights
            self._rom = romweights.map_file(f) if self.dtype == "i8" else None
            if self._rom is None:
                stream = True  # not mapped here: rows streamed from the file instead
            else:
                from kvedge import kernels
                self._raw = romweights.reads_raw_bytes(kernels.get())
                self._romcls = romweights.RomI8Matrix
        self.stream = stream
        if stream and self._rom is None:
            if stream_bytes <= 0:
                stream_bytes = stream_scratch_bytes(cfg, self.dtype)
            # one row buffer (and for int8 one buffer of per-row scales) shared by every matrix
            self.scratch = alloc("f", stream_bytes // 4) if self.dtype == "f32" else alloc("b", stream_bytes)
            self.mscratch = memoryview(self.scratch)
            if self.dtype == "i8":
                from kvedge.model.streambytes import stream_scale_slots
                self.scales = alloc("f", stream_scale_slots(cfg.dim, cfg.hidden_dim, "i8", stream_bytes))
                self.mscales = memoryview(self.scales)
        # streamed: the norms stay in the file too (their offsets here), each read into one vector when applied
        self.nbuf = alloc("f", cfg.dim) if stream and self._rom is None else None
        try:
            self.embedding = self._matrix(f, lay["embedding"], cfg.vocab_size, cfg.dim)
            self.rms_att = [self._norm(f, o, cfg.dim) for o in lay["rms_att"]]
            self.rms_ffn = [self._norm(f, o, cfg.dim) for o in lay["rms_ffn"]]
            self.rms_final = self._norm(f, lay["rms_final"], cfg.dim)
            for name, rows, cols in cfg.matrices():
                setattr(self, name, [self._matrix(f, o, rows, cols) for o in lay[name]])
            if lay["wcls"] is None:
                self.wcls = self.embedding
            else:
                self.wcls = self._matrix(f, lay["wcls"], cfg.vocab_size, cfg.dim)
        finally:
            if not stream:
                f.close()
                self._file = None

    def close(self):
        self._rom = None
        if self._file is not None:
            self._file.close()
            self._file = None

    def _norm(self, f, off, n):
        return off if self.nbuf is not None else self._vector(f, off, n)

    def norm(self, v):
        """A norm vector (rms_att[l], rms_ffn[l], rms_final): itself, or when streamed (an offset) read from the
        file into the shared vector, valid until the next call."""
        if self.nbuf is None:
            return v
        f = self._file
        f.seek(v)
        f.readinto(self.nbuf)
        return self.nbuf

    def _vector(self, f, off, n):
        a = alloc("f", n)
        f.seek(off)
        f.readinto(a)
        return a

    def _matrix(self, f, off, rows, cols):
        if self._rom is not None:
            return self._romcls(self._rom, self._raw, off, rows, cols)
        if self.stream:
            if self._f32:
                return self._f32.FileF32Matrix(self, off, rows, cols)
            return FileI8Matrix(self, off, rows, cols)
        if self._f32:
            return self._f32.F32Matrix(self._vector(f, off, rows * cols), 0, rows, cols)
        scales = self._vector(f, off, rows)
        codes = alloc("b", rows * cols)
        f.readinto(codes)
        return I8Matrix(codes, scales, rows, cols)


def stream_scratch_bytes(cfg, dtype):
    """Row buffer for streamed weights: kvedge.model.streambytes.STREAM_ROWS rows of the widest matrix."""
    from kvedge.model.streambytes import stream_buffer_bytes
    return stream_buffer_bytes(cfg.dim, cfg.hidden_dim, dtype)


def resident_bytes(cfg, dtype, stream=False, stream_bytes=0, norms=False):
    """Bytes of weights held in RAM: the whole model (kvedge.budget.weights_bytes: one f32 scale per row for
    int8), when streaming kvedge.model.streambytes.weights_stream_bytes (one norm vector, or with norms=True all of
    them, the row buffer, a chunk's scales), or
    (stream="rom": read in place from a mapped file) the norms alone."""
    from kvedge.sizes import weights_bytes
    from kvedge.model.streambytes import weights_stream_bytes
    p = cfg.params()
    if not stream:
        return weights_bytes(p, dtype)
    if stream == "rom":
        return 4 * p["norms"]
    return weights_stream_bytes(p, cfg.dim, cfg.hidden_dim, dtype, stream_bytes, norms=norms)


def convert_to_i8(src_path, dst_path):
    """Write kvedge's int8 file from a llama2.c f32 checkpoint (kvedge.model.convert, kept out of this module:
    every run imports this one, a board's heap should not hold code it never runs). Returns (ModelConfig,
    bytes written)."""
    from kvedge.model.convert import convert_to_i8 as convert
    return convert(src_path, dst_path)
