# A random kvedge int8 model written from the int8 file's documented layout alone (kvedge.model.checkpoint's header
# comment), not with the package's converter: a test that needs a small int8 model and no f32 one gets it without
# compiling the converter on the device's heap (on the unix port's 215 KB heap, the converter compiled between a
# test's live objects found no block in one piece).
import struct
from array import array


class _Rng:
    def __init__(self, seed):
        self.s = (seed * 2654435761 + 12345) % 0x7FFFFFFF or 1

    def bits(self):
        self.s = (self.s * 48271) % 0x7FFFFFFF
        return self.s


def write_model(path, seed=11, d=16, h=40, L=2, nh=4, nkv=2, V=48, seq=64):
    """kvedge's int8 file ("KVW8", version 1, llama2.c's header; per matrix rows f32 scales, then rows * cols codes,
    zero-padded to 4 bytes; norms f32) of a random model: codes uniform in -127..127, a row's scale amp / 127 times
    0.6..1.0 (amp: 1 for the embedding, 1.7 / sqrt(cols) for a matrix, as kvedge.model.tiny's f32 models), norm
    gains 1 +- 0.2. Returns the header's seven fields."""
    rng = _Rng(seed)
    kv = nkv * (d // nh)
    hdr = (d, h, L, nh, nkv, V, seq)
    with open(path, "wb") as out:
        out.write(b"KVW8" + struct.pack("<i", 1) + struct.pack("<7i", *hdr))

        def mat(rows, cols, emb=False):
            amp = 1.0 if emb else 1.7 / cols ** 0.5
            out.write(array("f", [amp / 127.0 * (0.6 + 0.4 * (rng.bits() % 1000) / 1000.0) for _ in range(rows)]))
            row = bytearray(cols)
            for _ in range(rows):
                for c in range(cols):
                    row[c] = (rng.bits() % 255 - 127) & 255
                out.write(row)
            out.write(bytes((4 - (rows * cols) % 4) % 4))

        def vec(n):
            out.write(array("f", [1.0 + 0.2 * ((rng.bits() % 2001) / 1000.0 - 1.0) for _ in range(n)]))
        # llama2.c's order: embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final (the classifier shared)
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
