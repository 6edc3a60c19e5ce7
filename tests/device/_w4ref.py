# An int4 weight file written and read back from its documented layout alone (kvedge.model.w4file's header
# comment), not with the package's code: the tests' independent reference. write_model() writes a random int4 model
# (codes and f16 group scales drawn directly: no converter runs on the device's heap); dequantize() writes the
# llama2.c f32 file whose weights are the int4 file's codes times their group scales, for the float pass to run as
# the reference.
import struct
from array import array


def _f16(h):
    e = (h >> 10) & 31
    f = h & 1023
    if e == 0:
        return f * 2.0 ** -24
    return (1024 + f) * 2.0 ** (e - 25)


def header(path):
    """(version, group, the seven llama2.c fields) of an int4 file."""
    with open(path, "rb") as f:
        b = f.read(40)
    assert b[:4] == b"KVW4", b[:4]
    ver, group = struct.unpack("<ii", b[4:12])
    return ver, group, struct.unpack("<7i", b[12:40])


def f16_bits(x):
    """f16 bits of a positive normal x (truncated mantissa: the value the file stores is what counts)."""
    e = 15
    while x < 1.0:
        x *= 2.0
        e -= 1
    while x >= 2.0:
        x /= 2.0
        e += 1
    return (e << 10) | int((x - 1.0) * 1024)


class _Rng:
    def __init__(self, seed):
        self.s = (seed * 2654435761 + 12345) % 0x7FFFFFFF or 1

    def bits(self):
        self.s = (self.s * 48271) % 0x7FFFFFFF
        return self.s


def write_model(path, seed=13, d=32, h=72, L=2, nh=4, nkv=2, V=48, seq=64, group=32):
    """A random int4 model: per group a scale near amp / 7.5 (amp: 1 for the embedding, 1.7 / sqrt(cols) for a
    matrix, as kvedge.model.tiny's f32 models), codes uniform in -8..7 (0 past a row's last column), norm gains
    1 +- 0.2. Returns the header's seven fields."""
    rng = _Rng(seed)
    hd = d // nh
    kv = nkv * hd
    hdr = (d, h, L, nh, nkv, V, seq)
    with open(path, "wb") as out:
        out.write(b"KVW4" + struct.pack("<ii", 1, group) + struct.pack("<7i", *hdr))

        def mat(rows, cols, emb=False):
            g = (cols + group - 1) // group
            amp = 1.0 if emb else 1.7 / cols ** 0.5
            sc = array("H", [0] * g)
            for r in range(rows):
                for j in range(g):
                    sc[j] = f16_bits(amp / 7.5 * (0.6 + 0.4 * (rng.bits() % 1000) / 1000.0))
                out.write(sc)
            out.write(bytes((4 - (2 * rows * g) % 4) % 4))
            row = bytearray(g * group // 2)
            for r in range(rows):
                for c in range(0, g * group, 2):
                    lo = (rng.bits() % 16) if c < cols else 8
                    hi = (rng.bits() % 16) if c + 1 < cols else 8
                    row[c >> 1] = ((lo - 8) & 15) | (((hi - 8) & 15) << 4)  # codes -8..7; padding code 0
                out.write(row)

        def vec(n):
            out.write(array("f", [1.0 + 0.2 * ((rng.bits() % 2001) / 1000.0 - 1.0) for _ in range(n)]))
        mat(V, d, True)
        for _ in range(L):
            vec(d)
        for rows, cols in ((d, d), (kv, d), (kv, d), (d, d)):
            for _ in range(L):
                mat(rows, cols)
        for _ in range(L):
            vec(d)
        for rows, cols in ((h, d), (d, h), (h, d)):
            for _ in range(L):
                mat(rows, cols)
        vec(d)
    return hdr


def dequantize(src, dst, padding=None):
    """The f32 llama2.c checkpoint of an int4 file's dequantized weights (row by row: a board's heap suffices).
    padding: a list to which the count of nonzero codes past the rows' last columns is appended."""
    _, group, hdr = header(src)
    d, h, L, nh, nkv, V, seq = hdr
    shared = V > 0
    V = abs(V)
    hd = d // nh
    kv = nkv * hd
    row = array("f", [0.0] * max(d, h))
    bad = [0]
    with open(src, "rb") as f, open(dst, "wb") as out:
        f.seek(40)
        out.write(struct.pack("<7i", *hdr))

        def mat(rows, cols):
            g = (cols + group - 1) // group
            sc = f.read(2 * rows * g)
            f.read((4 - (2 * rows * g) % 4) % 4)
            for r in range(rows):
                codes = f.read(g * group // 2)
                for c in range(cols, g * group):
                    bad[0] += ((codes[c >> 1] >> 4) if c & 1 else (codes[c >> 1] & 15)) != 0
                for c in range(cols):
                    b = codes[c >> 1]
                    n = (b >> 4) if c & 1 else (b & 15)
                    n = n - 16 if n >= 8 else n
                    i = 2 * (r * g + c // group)
                    row[c] = n * _f16(sc[i] | (sc[i + 1] << 8))
                out.write(memoryview(row)[:cols])

        def vec(n):
            out.write(f.read(4 * n))
        # the int4 file: embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, [wcls]; llama2.c's
        # order is the same, with two RoPE tables (seq_len * head_dim / 2 floats each) before wcls
        mat(V, d)
        for _ in range(L):
            vec(d)
        for rows, cols in ((d, d), (kv, d), (kv, d), (d, d)):
            for _ in range(L):
                mat(rows, cols)
        for _ in range(L):
            vec(d)
        for rows, cols in ((h, d), (d, h), (h, d)):
            for _ in range(L):
                mat(rows, cols)
        vec(d)
        out.write(bytes(4 * seq * hd))
        if not shared:
            mat(V, d)
    if padding is not None:
        padding.append(bad[0])
    return hdr
