# Writing kvedge's int4 weight file (kvedge.model.w4file) from a llama2.c f32 checkpoint, one row at a time: the
# group scales by a least-squares search, then the nibble codes. A module of its own: converting to int8 does not
# compile it (a converter's module stays imported after a conversion on a board).
from array import array
import struct

from kvedge.model.header import CheckpointError, alloc, i4_layout, read_config
from kvedge.model.convert import _convert
from kvedge.model import w4file
from kvedge.w4sizes import GROUP as W4_GROUP, groups as i4_groups, scale_bytes as i4_scale_bytes

I4_LO, I4_HI = -8, 7  # the nibble's codes (two's complement)
SEARCH = (-15, 16)  # a group's candidate scales: amax / (7 + k / 10) for k in range(*SEARCH), each refitted


def _i4_code(y):
    """round(y) (ties away from zero) within the nibble's -8..7."""
    c = int(y + 0.5) if y >= 0 else -int(0.5 - y)
    return I4_HI if c > I4_HI else (I4_LO if c < I4_LO else c)


def i4_group_scale(src, o, n):
    """f16 bits of the scale of one group of int4 weights src[o:o+n]: of the scales amax / (7 + k / 10), k in
    -15..15, each refitted by least squares to the codes it gives (-8..7), the one whose codes rebuild the group
    with the least squared error (measured on stories260K: +12.2 % perplexity over f32 where amax / 7 alone, the
    codes within +-7, gave +16.3 %; docs/model.md); CheckpointError past the f16 range or for a value that is not
    finite."""
    from kvedge.quant import F16_MAX, f16_bits, f16_value
    amax = 0.0
    for i in range(o, o + n):
        v = src[i]
        if not (v - v == 0):
            raise CheckpointError("weight %r is not finite" % v)
        if v < 0:
            v = -v
        if v > amax:
            amax = v
    if amax / I4_HI > F16_MAX:
        raise CheckpointError("weight %r too large for an int4 group (f16 scale limit)" % amax)
    if amax == 0.0:
        return 0
    best, bits = -1.0, 0
    for k in range(*SEARCH):
        inv = (7.0 + k / 10.0) / amax
        num = den = 0.0
        for i in range(o, o + n):
            c = _i4_code(src[i] * inv)
            num += c * src[i]
            den += c * c
        if den == 0 or num <= 0:
            continue
        h = f16_bits(num / den)
        sc = f16_value(h)
        if sc == 0.0 or sc > F16_MAX:
            continue
        inv2 = 1.0 / sc
        err = 0.0
        for i in range(o, o + n):
            e = _i4_code(src[i] * inv2) * sc - src[i]
            err += e * e
        if best < 0 or err < best:
            best, bits = err, h
    return bits


def i4_pack_group(src, o, n, bits, packed, po):
    """The codes of src[o:o+n] (n <= 32) at scale bits into packed[po:po+16]: round(v / scale) (ties away from
    zero) within -8..7, two's complement nibbles, value 2i low and 2i+1 high in byte i; missing values code 0."""
    from kvedge.quant import f16_value
    s = f16_value(bits)
    inv = 1.0 / s if s else 0.0
    for i in range(W4_GROUP // 2):
        b = 0
        for h in range(2):
            j = 2 * i + h
            c = _i4_code(src[o + j] * inv) if j < n else 0
            b |= (c & 15) << (4 * h)
        packed[po + i] = b


def convert_to_i4(src_path, dst_path):
    """Write kvedge's int4 file (kvedge.model.w4file's, laid out by kvedge.model.header.i4_layout) from a llama2.c f32 checkpoint, one row at a
    time. Returns (ModelConfig, bytes written)."""
    cfg, dtype = read_config(src_path)
    if dtype != "f32":
        raise CheckpointError("%s is a kvedge %s file, not a llama2.c f32 checkpoint" % (src_path, dtype))
    widest = max(cfg.dim, cfg.hidden_dim)
    row = alloc("f", widest)
    mrow = memoryview(row)
    packed = bytearray(i4_groups(widest) * (W4_GROUP // 2))
    mpacked = memoryview(packed)

    def mat(f, out, rows, cols):
        g = i4_groups(cols)
        at = f.tell()
        sc = array("H", [0] * g)
        for r in range(rows):  # pass 1: the scales
            f.readinto(mrow[:cols])
            for j in range(g):
                o = j * W4_GROUP
                sc[j] = i4_group_scale(row, o, min(W4_GROUP, cols - o))
            out.write(sc)
        pad = i4_scale_bytes(rows, cols) - 2 * rows * g
        if pad:
            out.write(bytes(pad))
        f.seek(at)
        for r in range(rows):  # pass 2: the codes, at the scales pass 1 wrote
            f.readinto(mrow[:cols])
            for j in range(g):
                o = j * W4_GROUP
                n = min(W4_GROUP, cols - o)
                i4_pack_group(row, o, n, i4_group_scale(row, o, n), packed, j * (W4_GROUP // 2))
            out.write(mpacked[:g * (W4_GROUP // 2)])
    _convert(src_path, dst_path, cfg, w4file.MAGIC + struct.pack("<ii", w4file.VERSION, W4_GROUP), mat, row)
    return cfg, i4_layout(cfg)["size"]
