"""The device's weight files from a Source: llama2.c's f32 file (v0, what kvedge.model.checkpoint reads), and
from it kvedge's int8 or int4 file through the device's own converter (kvedge.model.convert: one rule for the
quantized rows, whoever writes them). One tensor is held at a time."""
import numpy as np

from .source import ROPE_THETA


def write_f32(src, out):
    """llama2.c's v0 file of src into out (a path); returns its length in bytes."""
    cfg = src.cfg
    with open(out, "wb") as f:
        f.write(cfg.header())
        for name, layer in src.names():
            if name == "wcls":  # after the two legacy RoPE tables
                _rope_tables(f, cfg)
            src.tensor(name, layer).astype("<f4").tofile(f)
            if name == "rms_final" and cfg.shared_classifier:
                _rope_tables(f, cfg)
        return f.tell()


def _rope_tables(f, cfg):
    """llama2.c's legacy freq_cis_real and freq_cis_imag (seq_len x head_dim/2 each): no reader uses them (run.c
    and the device skip them), written as llama2.c's export wrote them."""
    hd = cfg.head_dim
    freqs = 1.0 / (ROPE_THETA ** (np.arange(0, hd, 2)[: hd // 2].astype(np.float32) / hd))
    ang = np.outer(np.arange(cfg.seq_len, dtype=np.float32), freqs)
    np.cos(ang).astype("<f4").tofile(f)
    np.sin(ang).astype("<f4").tofile(f)


def write_quantized(src, out, tmp, dtype="i8"):
    """kvedge's int8 (dtype "i8") or int4 ("i4") file of src into out, through llama2.c's f32 file at tmp (removed
    by the caller)."""
    write_f32(src, tmp)
    return convert_f32(tmp, out, dtype)


def convert_f32(path, out, dtype):
    """kvedge's int8 or int4 file of the llama2.c f32 file at path into out; returns its bytes."""
    if dtype == "i4":
        return convert_i4_numpy(path, out)
    from kvedge.model.checkpoint import convert_to_i8
    return convert_to_i8(path, out)[1]



def convert_i4_numpy(path, out):
    """kvedge's int4 file of the llama2.c f32 file at path, byte for byte what the device's converter
    (kvedge.model.convert4, the rule: its i4_group_scale and i4_pack_group) writes, a matrix's groups searched at
    once with numpy (the device's loop takes minutes a million weights on CPython; a 15M-class model has 15
    million). Sums run in the device's order (cumsum, not numpy's pairwise sum) so that every float is the same.
    Returns the bytes written."""
    import struct
    from kvedge import w4sizes
    from kvedge.model import convert4, w4file
    from kvedge.model.header import CheckpointError, alloc, i4_layout, read_config
    from kvedge.model.convert import _convert
    from kvedge.quant import F16_MAX
    cfg, dtype = read_config(path)
    if dtype != "f32":
        raise CheckpointError("%s is a kvedge %s file, not a llama2.c f32 checkpoint" % (path, dtype))
    G = w4sizes.GROUP

    def mat(f, dst, rows, cols):
        g = w4sizes.groups(cols)
        w = np.fromfile(f, dtype="<f4", count=rows * cols)
        if w.size != rows * cols:
            raise CheckpointError("%s: truncated" % path)
        scales = np.empty((rows, g), dtype="<u2")
        codes = np.empty((rows, g * G // 2), dtype=np.uint8)
        step = max(1, (1 << 20) // (g * G))  # rows at a time: a few MB of float64 temporaries
        for r0 in range(0, rows, step):
            part = np.zeros((min(step, rows - r0), g * G))
            part[:, :cols] = w[r0 * cols:(r0 + part.shape[0]) * cols].reshape(-1, cols)
            part = part.reshape(part.shape[0], g, G)
            bits = _i4_scales(part, convert4, F16_MAX, CheckpointError)
            scales[r0:r0 + part.shape[0]] = bits
            c = _i4_codes(part, bits, convert4).reshape(part.shape[0], g * G)
            codes[r0:r0 + part.shape[0]] = ((c[:, 0::2] & 15) | ((c[:, 1::2] & 15) << 4)).astype(np.uint8)
        dst.write(scales.tobytes())
        dst.write(bytes(w4sizes.scale_bytes(rows, cols) - 2 * rows * g))
        dst.write(codes.tobytes())

    _convert(path, out, cfg, w4file.MAGIC + struct.pack("<ii", w4file.VERSION, G), mat,
             alloc("f", max(cfg.dim, cfg.hidden_dim)))
    return i4_layout(cfg)["size"]


def _code(y, lo, hi):
    # convert4._i4_code: round half away from zero, within lo..hi
    c = np.where(y >= 0, np.floor(y + 0.5), -np.floor(0.5 - y))
    return np.clip(c, lo, hi)


def _i4_scales(w, convert4, f16_max, error):
    """f16 bits of each group's scale (w: [rows, groups, GROUP] float64, zero past a row's end): the candidate
    whose least-squares refit rebuilds the group with the least squared error, the first of equals."""
    if not np.isfinite(w).all():
        raise error("weight %r is not finite" % float(w[~np.isfinite(w)][0]))
    amax = np.abs(w).max(axis=-1)
    if (amax / convert4.I4_HI > f16_max).any():
        raise error("weight %r too large for an int4 group (f16 scale limit)" % float(amax.max()))
    lo, hi = convert4.I4_LO, convert4.I4_HI
    best = np.full(amax.shape, -1.0)
    bits = np.zeros(amax.shape, dtype=np.uint16)
    live = amax != 0.0
    safe = np.where(live, amax, 1.0)
    with np.errstate(all="ignore"):
        for k in range(*convert4.SEARCH):
            inv = (7.0 + k / 10.0) / safe
            c = _code(w * inv[..., None], lo, hi)
            num = np.cumsum(c * w, axis=-1)[..., -1]
            den = np.cumsum(c * c, axis=-1)[..., -1]
            h = (num / np.where(den == 0, 1.0, den)).astype(np.float16)
            sc = h.astype(np.float64)
            ok = live & (den != 0) & (num > 0) & (sc != 0.0) & (sc <= f16_max)
            inv2 = 1.0 / np.where(ok, sc, 1.0)
            e = _code(w * inv2[..., None], lo, hi) * sc[..., None] - w
            err = np.cumsum(e * e, axis=-1)[..., -1]
            take = ok & ((best < 0) | (err < best))
            best = np.where(take, err, best)
            bits = np.where(take, h.view(np.uint16), bits)
    return bits


def _i4_codes(w, bits, convert4):
    """convert4.i4_pack_group's codes of each group at its scale (code 0 for a zero scale) as int64."""
    s = bits.astype(np.uint16).view(np.float16).astype(np.float64)
    with np.errstate(divide="ignore"):
        inv = np.where(s != 0.0, 1.0 / np.where(s != 0.0, s, 1.0), 0.0)
    return _code(w * inv[..., None], convert4.I4_LO, convert4.I4_HI).astype(np.int64)
