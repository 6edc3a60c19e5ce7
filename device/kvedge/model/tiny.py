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


def _min_vocab():
    return 3 + 256 + len(_CHARS) + len(_MERGES)


def iter_pieces(vocab_size=None):
    """(piece, score) of the tiny tokenizer one at a time (nothing held: fits a small heap), padded with
    unused pieces up to vocab_size."""
    n = _min_vocab()
    if vocab_size is None:
        vocab_size = n
    if vocab_size < n:
        raise ValueError("vocab_size must be >= %d for the tiny tokenizer" % n)
    yield b"<unk>", 0.0
    yield b"\n<s>\n", 0.0
    yield b"\n</s>\n", 0.0
    for i in range(256):
        yield ("<0x%02X>" % i).encode(), 0.0
    for i in range(len(_CHARS)):
        yield _CHARS[i:i + 1], -1000.0 - i
    for i in range(len(_MERGES)):
        yield _MERGES[i], -1.0 - i
    for i in range(n, vocab_size):
        yield ("<unused%d>" % i).encode(), -1e9


def tokenizer_pieces(vocab_size=None):
    """(pieces, scores) lists of the tiny tokenizer."""
    pieces = []
    scores = []
    for p, s in iter_pieces(vocab_size):
        pieces.append(p)
        scores.append(s)
    return pieces, scores


def write_tokenizer(path, vocab_size=None, pieces=None):
    """Write the tiny tokenizer in llama2.c's format; returns its vocabulary size. pieces: a function returning
    an iterator of other (bytes, score) pairs to write instead (called twice; the host's sentencepiece
    conversions, kvedge_host.readers.vocab, write with it)."""
    if pieces is None:
        def pieces():
            return iter_pieces(vocab_size)
    n = 0
    longest = 0
    for p, s in pieces():
        if len(p) > longest:
            longest = len(p)
    with open(path, "wb") as f:
        f.write(struct.pack("<i", longest))
        for p, s in pieces():
            f.write(struct.pack("<fi", s, len(p)))
            f.write(p)
            n += 1
    return n


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
