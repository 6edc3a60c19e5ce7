# The float forward pass's weights (kvedge.model.llama): a checkpoint's matrices read into RAM, streamed row by
# row from the filesystem when they do not fit the heap, or read in place from ROMFS. The file formats, their
# layouts and sizes are kvedge.model.header's (the integer pass reads them there and never loads this module).
from kvedge.model.header import CheckpointError, alloc, file_size, i8_layout, read_config, stream_scratch_bytes


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


class FileI8Matrix:
    """int8 rows streamed from a kvedge int8 file, read `chunk` rows at a time into the row buffer every matrix
    shares (io: the Weights holding the file, the buffer `scratch` and its memoryview `mscratch`); each chunk's
    per-row scales (stored before the rows) are read with it into the shared array('f') `scales`, so the matrix
    holds nothing in RAM."""

    def __init__(self, io, off, rows, cols):
        self.io, self.off, self.rows, self.cols = io, off + 4 * rows, rows, cols
        self.chunk = io.rows_per_read(cols)
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
                from kvedge.model.sizes import stream_scale_slots
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

    def rows_per_read(self, cols):
        """Rows of `cols` values the shared row buffer holds (a streamed matrix's chunk: FileI8Matrix and
        kvedge.model.f32file.FileF32Matrix); CheckpointError when it holds not one."""
        n = len(self.scratch) // cols
        if n < 1:
            raise CheckpointError("stream buffer of %d values is smaller than a row of %d" % (len(self.scratch), cols))
        return n

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


def convert_to_i8(src_path, dst_path):
    """Write kvedge's int8 file from a llama2.c f32 checkpoint (kvedge.model.convert, kept out of this module:
    every run imports this one, a board's heap should not hold code it never runs). Returns (ModelConfig,
    bytes written)."""
    from kvedge.model.convert import convert_to_i8 as convert
    return convert(src_path, dst_path)
