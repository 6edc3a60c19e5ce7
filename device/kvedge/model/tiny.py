# A small llama2.c-format checkpoint and tokenizer written from a seed, for tests and for demos that run
# without a real model. Pure Python (struct, array): the same bytes on every runtime.
import struct
from array import array

# 3 special pieces, 256 byte pieces, then single characters and a few merges (scores: later = lower)
_CHARS = b" abcdefghijklmnopqrstuvwxyz.,'!?\nABCDEFGHIJKLMNOPQRSTUVWXYZ"
_MERGES = (b"th", b"he", b" t", b" a", b"in", b"the", b" the", b"an", b"er", b"nd", b" s", b"on", b"ed",
           b" w", b"at", b"ou", b"it", b"is", b" b", b"en", b"re", b"ing", b" h", b"and", b" and")


class _Rng:
    # Park-Miller; kept below 2**31 so it is exact everywhere
    def __init__(self, seed):
        self.s = (seed * 2654435761 + 12345) % 0x7FFFFFFF or 1

    def uniform(self):
        self.s = (self.s * 48271) % 0x7FFFFFFF
        return self.s / 1073741823.5 - 1.0  # (-1, 1)


def tokenizer_pieces(vocab_size=None):
    """(pieces, scores) of the tiny tokenizer; padded with unused pieces up to vocab_size."""
    pieces = [b"<unk>", b"\n<s>\n", b"\n</s>\n"]
    pieces += [("<0x%02X>" % i).encode() for i in range(256)]
    scores = [0.0] * len(pieces)
    for i, c in enumerate(_CHARS):
        pieces.append(bytes((c,)))
        scores.append(-1000.0 - i)
    for i, m in enumerate(_MERGES):
        pieces.append(m)
        scores.append(-1.0 - i)
    if vocab_size is not None:
        if vocab_size < len(pieces):
            raise ValueError("vocab_size must be >= %d for the tiny tokenizer" % len(pieces))
        while len(pieces) < vocab_size:
            pieces.append(("<unused%d>" % len(pieces)).encode())
            scores.append(-1e9)
    return pieces, scores


def write_tokenizer(path, vocab_size=None):
    pieces, scores = tokenizer_pieces(vocab_size)
    with open(path, "wb") as f:
        f.write(struct.pack("<i", max(len(p) for p in pieces)))
        for p, s in zip(pieces, scores):
            f.write(struct.pack("<fi", s, len(p)))
            f.write(p)
    return len(pieces)


DEFAULT = {"dim": 16, "hidden_dim": 40, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "vocab_size": 352,
           "seq_len": 64}


def write_checkpoint(path, seed=1, shared=True, **shape):
    """A random llama2.c .bin (f32) with the DEFAULT shape overridden by `shape`. Matrices are scaled by
    1/sqrt(cols) so activations stay near unit size; norms are near 1. Returns the shape dict."""
    s = dict(DEFAULT)
    for k in shape:
        if k not in s:
            raise ValueError("unknown shape field %r" % k)
        s[k] = shape[k]
    d, h, L = s["dim"], s["hidden_dim"], s["n_layers"]
    hd = d // s["n_heads"]
    kv = s["n_kv_heads"] * hd
    V = s["vocab_size"]
    rng = _Rng(seed)
    buf = array("f", range(256))

    def put(f, n, scale, base=0.0):
        left = n
        while left:
            m = min(left, 256)
            for i in range(m):
                buf[i] = base + scale * rng.uniform()
            f.write(memoryview(buf)[:m])
            left -= m
    with open(path, "wb") as f:
        f.write(struct.pack("<7i", d, h, L, s["n_heads"], s["n_kv_heads"], V if shared else -V, s["seq_len"]))
        put(f, V * d, 1.0)                      # embedding
        put(f, L * d, 0.2, 1.0)                 # rms_att
        for rows, cols in ((d, d), (kv, d), (kv, d), (d, d)):
            put(f, L * rows * cols, 1.7 / cols ** 0.5)
        put(f, L * d, 0.2, 1.0)                 # rms_ffn
        for rows, cols in ((h, d), (d, h), (h, d)):
            put(f, L * rows * cols, 1.7 / cols ** 0.5)
        put(f, d, 0.2, 1.0)                     # rms_final
        put(f, s["seq_len"] * hd, 0.0)          # legacy RoPE tables (unused)
        if not shared:
            put(f, V * d, 1.0)
    return s
