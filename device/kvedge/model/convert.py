# Writing kvedge's int8 weight file from a llama2.c f32 checkpoint, one row at a time (little memory); int4 in
# kvedge.model.convert4 on this module's _convert. A module of its own: the runner imports kvedge.model.checkpoint
# on every board, and this code only runs on the host or once.
from array import array
import struct

from kvedge.model.f32file import layout as f32_layout
from kvedge.model.header import CheckpointError, MAGIC_I8, VERSION_I8, _pad4, alloc, i8_layout, read_config


def quantize_row(src, n, codes, co):
    """int8 codes of src[0:n] into codes[co:co+n] with a symmetric per-row scale; returns the scale
    (amax / 127 rounded to f32, the value the file stores, so codes are computed with it)."""
    amax = 0.0
    for i in range(n):
        v = src[i]
        if v < 0:
            v = -v
        if v > amax:
            amax = v
    sa = array("f", [amax / 127.0])
    s = sa[0]
    if s == 0:
        for i in range(n):
            codes[co + i] = 0
        return s
    inv = 1.0 / s
    for i in range(n):
        y = src[i] * inv
        c = int(y + 0.5) if y >= 0 else -int(0.5 - y)
        codes[co + i] = 127 if c > 127 else (-127 if c < -127 else c)
    return s


def _convert(src_path, dst_path, cfg, head, mat, row):
    """The tensors of a llama2.c file in kvedge's order into dst: mat(f, out, rows, cols) writes a matrix read
    at f's position, vectors are copied (through `row`)."""
    lay = f32_layout(cfg)
    widest = len(row)
    mrow = memoryview(row)
    with open(src_path, "rb") as f, open(dst_path, "wb") as out:
        out.write(head)
        out.write(cfg.header())

        def matrix(off, rows, cols):
            f.seek(off)
            mat(f, out, rows, cols)

        def vec(off, n):
            f.seek(off)
            left = n
            while left:
                m = min(left, widest)
                f.readinto(mrow[:m])
                out.write(mrow[:m])
                left -= m
        matrix(lay["embedding"], cfg.vocab_size, cfg.dim)
        for o in lay["rms_att"]:
            vec(o, cfg.dim)
        for name, rows, cols in cfg.matrices()[:4]:
            for o in lay[name]:
                matrix(o, rows, cols)
        for o in lay["rms_ffn"]:
            vec(o, cfg.dim)
        for name, rows, cols in cfg.matrices()[4:]:
            for o in lay[name]:
                matrix(o, rows, cols)
        vec(lay["rms_final"], cfg.dim)
        if lay["wcls"] is not None:
            matrix(lay["wcls"], cfg.vocab_size, cfg.dim)


def convert_to_i8(src_path, dst_path):
    """Write kvedge's int8 file from a llama2.c f32 checkpoint, one row at a time (little memory).
    Returns (ModelConfig, bytes written)."""
    cfg, dtype = read_config(src_path)
    if dtype != "f32":
        raise CheckpointError("%s is already a kvedge %s file" % (src_path, "int8" if dtype == "i8" else dtype))
    widest = max(cfg.dim, cfg.hidden_dim)
    row = alloc("f", widest)
    codes = alloc("b", widest)
    mrow = memoryview(row)
    mcodes = memoryview(codes)

    def mat(f, out, rows, cols):
        scales = alloc("f", rows)
        # pass 1: scales; pass 2: codes (rows are read twice rather than holding the matrix)
        at = f.tell()
        for r in range(rows):
            f.readinto(mrow[:cols])
            scales[r] = quantize_row(row, cols, codes, 0)
        out.write(scales)
        f.seek(at)
        for r in range(rows):
            f.readinto(mrow[:cols])
            quantize_row(row, cols, codes, 0)
            out.write(mcodes[:cols])
        pad = _pad4(rows * cols) - rows * cols
        if pad:
            out.write(bytes(pad))
    _convert(src_path, dst_path, cfg, MAGIC_I8 + struct.pack("<i", VERSION_I8), mat, row)
    return cfg, i8_layout(cfg)["size"]
