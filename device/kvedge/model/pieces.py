# A llama2.c tokenizer's pieces, decoded one token at a time: all a generation from BOS needs. Encoding a text
# (merges by score) is kvedge.model.bpe, imported only when a text is encoded: its code is heap a small board
# cannot spare (a run without a prompt never loads it). kvedge.model.tokenizer holds the whole vocabulary in RAM.
#
# File format: int32 max_token_length, then per token: f32 score, int32 length, the bytes.
from array import array

BOS = 1
EOS = 2


class TokenizerError(ValueError):
    pass


class Pieces:
    """What every tokenizer shares: decoding, and encoding through kvedge.model.bpe. A subclass has vocab_size,
    piece_bytes(i), score(i) and order (ids sorted by piece, None until a text is encoded)."""
    order = None

    def id_of(self, piece):
        """Lowest id whose piece equals `piece` (bytes), or -1."""
        from kvedge.model import bpe
        return bpe.id_of(self, piece)

    def encode(self, text, bos=True, eos=False):
        """Token ids of text (str or UTF-8 bytes), as llama2.c's encode()."""
        from kvedge.model import bpe
        ids = bpe.encode(self, text, [BOS] if bos else [])
        if eos:
            ids.append(EOS)
        return ids

    def piece(self, prev, token):
        """Bytes that token stands for after prev: the leading space is dropped after BOS, and <0xXX> pieces
        are the raw byte."""
        if token < 0 or token >= self.vocab_size:
            raise TokenizerError("token %d outside the vocabulary of %d" % (token, self.vocab_size))
        p = self.piece_bytes(token)
        if prev == BOS and len(p) and p[0] == 32:
            p = p[1:]
        if len(p) == 6 and p[:3] == b"<0x" and p[5:] == b">":
            try:
                p = bytes((int(p[3:5], 16),))
            except ValueError:
                pass
        return p

    def decode(self, ids, prev=-1):
        """Bytes of a token sequence (the first token is decoded after `prev`)."""
        out = []
        for t in ids:
            out.append(self.piece(prev, t))
            prev = t
        return b"".join(out)


class FileTokenizer(Pieces):
    """The tokenizer with its pieces and scores left in the file (kept open): RAM holds one offset per token (2
    bytes while the file is under 64 KB) and, once a text is encoded, the ids sorted by piece. Decoding reads one
    piece per token; encoding a prompt sorts the vocabulary once (file reads: slower, done once). For boards
    whose heap cannot spare the loaded tokenizer (stories260K's: 7.8 KB, this one 2.5 KB)."""

    def __init__(self, path, vocab_size):
        import os
        size = os.stat(path)[6]
        if size < 4 + 8 * vocab_size:
            raise TokenizerError("%s: %d bytes is too short for %d tokens" % (path, size, vocab_size))
        f = open(path, "rb")
        try:
            # at[i] = where piece i's bytes start; piece i ends 8 bytes (the next header) before at[i + 1]
            at = array("H" if size + 8 <= 65535 else "I", range(vocab_size + 1))
            hdr = bytearray(8)
            pos = 4
            for i in range(vocab_size):
                f.seek(pos)
                if f.readinto(hdr) != 8:
                    raise TokenizerError("%s: ends at token %d of %d" % (path, i, vocab_size))
                n = hdr[4] | hdr[5] << 8 | hdr[6] << 16 | (hdr[7] & 0x7F) << 24
                if hdr[7] & 0x80 or pos + 8 + n > size:
                    raise TokenizerError("%s: token %d has a bad length" % (path, i))
                at[i] = pos + 8
                pos += 8 + n
            at[vocab_size] = pos + 8
        except Exception:
            f.close()
            raise
        self.f = f
        self.at = at
        self.sbuf = array("f", [0.0])
        self.vocab_size = vocab_size

    def close(self):
        self.f.close()

    def piece_bytes(self, i):
        self.f.seek(self.at[i])
        return self.f.read(self.at[i + 1] - 8 - self.at[i])

    def score(self, i):
        self.f.seek(self.at[i] - 8)
        self.f.readinto(self.sbuf)
        return self.sbuf[0]

    @staticmethod
    def nbytes(path, vocab_size, encode=True):
        """Heap it keeps: the offsets, the object, and once a text is encoded (encode=True) the sorted ids; the
        open file's buffer is the filesystem's (counted by the caller: kvedge footprint's file_bytes)."""
        import os
        wide = os.stat(path)[6] + 8 > 65535
        order = (2 if vocab_size <= 65535 else 4) * vocab_size if encode else 0
        return (4 if wide else 2) * (vocab_size + 1) + order + 512
