# llama2.c's own checkpoints (float32 weights): their layout and matrices. kvedge.model.checkpoint loads this
# module only for such a file: a board runs kvedge's int8 file, and its heap should not hold code for the other.
# It imports kvedge.model.header (llama2.c's header) and nothing of kvedge.model.checkpoint, which imports it.
from kvedge.model.header import HEADER_BYTES


def layout(cfg):
    """Byte offsets of every tensor in a llama2.c file: dict name -> offset (layered groups: a list per
    layer), and 'size' = the file length the header implies."""
    off = [HEADER_BYTES]
    L, d = cfg.n_layers, cfg.dim

    def take(n):
        off[0] += 4 * n
        return off[0] - 4 * n
    lay = {"embedding": take(cfg.vocab_size * d), "rms_att": [take(d) for _ in range(L)]}
    for name, rows, cols in cfg.matrices()[:4]:
        lay[name] = [take(rows * cols) for _ in range(L)]
    lay["rms_ffn"] = [take(d) for _ in range(L)]
    for name, rows, cols in cfg.matrices()[4:]:
        lay[name] = [take(rows * cols) for _ in range(L)]
    lay["rms_final"] = take(d)
    take(cfg.seq_len * cfg.head_dim)  # two legacy RoPE tables of seq_len * head_dim / 2 floats each
    lay["wcls"] = None if cfg.shared_classifier else take(cfg.vocab_size * d)
    lay["size"] = off[0]
    return lay


class F32Matrix:
    def __init__(self, data, off, rows, cols):
        self.data, self.off, self.rows, self.cols = data, off, rows, cols

    def mv(self, k, x, xq, xs, acc, out):
        k.mv_f32(self.data, self.off, x, out, 0, self.rows, self.cols)

    def row(self, r, out):
        d, o, n = self.data, self.off + r * self.cols, self.cols
        for c in range(n):
            out[c] = d[o + c]


class FileF32Matrix:
    """f32 rows read from the checkpoint file a chunk at a time into the shared array('f') (io: the Weights
    holding the file and the buffer, kvedge.model.checkpoint's; its rows_per_read sets the chunk)."""

    def __init__(self, io, off, rows, cols):
        self.io, self.off, self.rows, self.cols = io, off, rows, cols
        self.chunk = io.rows_per_read(cols)

    def mv(self, k, x, xq, xs, acc, out):
        io, cols = self.io, self.cols
        f, mbuf = io._file, io.mscratch
        r = 0
        while r < self.rows:
            n = min(self.chunk, self.rows - r)
            f.seek(self.off + 4 * r * cols)
            f.readinto(mbuf[:n * cols])
            k.mv_f32(io.scratch, 0, x, out, r, n, cols)
            r += n

    def row(self, r, out):
        f = self.io._file
        f.seek(self.off + 4 * r * self.cols)
        f.readinto(out)
