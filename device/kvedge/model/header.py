# A model file's header, its layouts and sizes: llama2.c checkpoints (a header of seven int32, then float32
# weights) and kvedge's compact int8 file (same header behind a magic, then per-row f32 scales and int8 codes).
# Every pass reads these; the float pass's weight loader is kvedge.model.checkpoint (the integer pass never
# loads it: its code stays out of the heap of a board that runs the integer pass).
#
# Tensor order (both formats): token_embedding [vocab, dim], rms_att [L, dim], wq [L, dim, dim],
# wk [L, kv_dim, dim], wv [L, kv_dim, dim], wo [L, dim, dim], rms_ffn [L, dim], w1 [L, hidden, dim],
# w2 [L, dim, hidden], w3 [L, hidden, dim], rms_final [dim], (llama2.c only: two legacy RoPE tables of
# seq_len * head_dim / 2 floats, skipped), wcls [vocab, dim] only when the header's vocab_size is negative.
# Matrices are row-major [out, in]. In the int8 file each matrix is: rows f32 scales, rows*cols int8 codes,
# zero padding to a multiple of 4 bytes; w[r][c] ~ codes[r*cols + c] * scales[r].
# kvedge's int4 file ("KVW4"): its header and sizes in kvedge.model.w4file (this module reads its magic, and
# imports it; it imports nothing of this one). llama2.c's f32 files: kvedge.model.f32file (which imports this
# module; this one never imports it).
import struct

from kvedge.compat import empty
from kvedge.errors import CheckpointError  # noqa: F401 (also kvedge.model.header.CheckpointError, as ever)

MAGIC_I8 = b"KVW8"
VERSION_I8 = 1
HEADER_BYTES = 28
I8_HEADER_BYTES = 4 + 4 + HEADER_BYTES
MAX_COLS = 65536  # int8 dot products stay within +-2**30: 127 * 127 * 65536 < 2**30
FIELDS = ("dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len")


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


def i8_matrix_bytes(rows, cols):
    return 4 * rows + _pad4(rows * cols)


def i8_layout(cfg, head=I8_HEADER_BYTES, matrix_bytes=i8_matrix_bytes):
    """Byte offsets in a kvedge int8 file; a matrix offset points at its scales (codes follow). (head and
    matrix_bytes of kvedge's int4 file: i4_layout, the same tensor order. llama2.c's f32 files:
    kvedge.model.f32file.layout.)"""
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


def i4_layout(cfg):
    """Byte offsets in a kvedge int4 file (kvedge.model.w4file); a matrix offset points at its f16 group scales
    (its codes follow, at the offset plus kvedge.w4sizes.scale_bytes(rows, cols))."""
    from kvedge.model.w4file import HEADER_BYTES as W4_HEADER_BYTES
    from kvedge.w4sizes import matrix_bytes
    return i8_layout(cfg, W4_HEADER_BYTES, matrix_bytes)


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


def stream_scratch_bytes(cfg, dtype):
    """Row buffer for streamed weights: kvedge.model.sizes.STREAM_ROWS rows of the widest matrix."""
    from kvedge.model.sizes import stream_buffer_bytes
    return stream_buffer_bytes(cfg.dim, cfg.hidden_dim, dtype)


def resident_bytes(cfg, dtype, stream=False, stream_bytes=0, norms=False):
    """Bytes of weights held in RAM: the whole model (kvedge.budget.weights_bytes: one f32 scale per row for
    int8), when streaming kvedge.model.sizes.weights_stream_bytes (one norm vector, or with norms=True all of
    them, the row buffer, a chunk's scales), or
    (stream="rom": read in place from a mapped file) the norms alone."""
    from kvedge.sizes import weights_bytes
    from kvedge.model.sizes import weights_stream_bytes
    p = cfg.params()
    if not stream:
        return weights_bytes(p, dtype)
    if stream == "rom":
        return 4 * p["norms"]
    return weights_stream_bytes(p, cfg.dim, cfg.hidden_dim, dtype, stream_bytes, norms=norms)
