# The llama2.c tokenizer (tok512.bin, tokenizer.bin) held in RAM: a vocabulary of byte strings with merge scores.
# Decoding is kvedge.model.pieces (with FileTokenizer, the pieces left in the file: what a board's run uses),
# encoding kvedge.model.bpe (llama2.c's run.c encode()).
#
# File format: int32 max_token_length, then per token: f32 score, int32 length, the bytes.
import struct
from array import array

from kvedge.model.pieces import BOS, EOS, TokenizerError, Pieces, FileTokenizer  # noqa: F401


class Tokenizer(Pieces):
    """The vocabulary is held compactly for small heaps: all pieces in one bytes blob with an array of
    offsets, scores in an array('f'), and ids sorted by piece for binary-search lookup (as run.c does)."""

    @classmethod
    def from_pieces(cls, pieces, scores):
        """pieces: list of bytes, scores: list of floats, same length."""
        if len(pieces) != len(scores):
            raise TokenizerError("%d pieces but %d scores" % (len(pieces), len(scores)))
        total = 0
        for p in pieces:
            total += len(p)
        blob = bytearray(total)
        off = array("I", range(len(pieces) + 1))
        at = 0
        for i in range(len(pieces)):
            off[i] = at
            n = len(pieces[i])
            blob[at:at + n] = pieces[i]
            at += n
        off[len(pieces)] = at
        return cls(bytes(blob), off, array("f", scores))

    def __init__(self, blob, off, scores):
        """blob: all pieces concatenated, off: array of vocab_size + 1 offsets, scores: array('f')."""
        self.blob = blob
        self.off = off
        self.scores = scores
        self.vocab_size = len(scores)
        from kvedge.model import bpe  # here, not at the top: a board without the encoder reads nbytes()
        self.order = bpe.sort_ids(self)

    def piece_bytes(self, i):
        return self.blob[self.off[i]:self.off[i + 1]]

    def score(self, i):
        return self.scores[i]

    @staticmethod
    def nbytes(path, vocab_size):
        """Heap a loaded tokenizer keeps: the pieces blob, offsets, scores, sorted ids, the object itself."""
        import os
        blob = os.stat(path)[6] - 4 - 8 * vocab_size
        return blob + 4 * (vocab_size + 1) + 4 * vocab_size + (2 if vocab_size <= 65535 else 4) * vocab_size \
            + 512

    @classmethod
    def load(cls, path, vocab_size):
        import os
        size = os.stat(path)[6]
        blob_len = size - 4 - 8 * vocab_size
        if blob_len < 0:
            raise TokenizerError("%s: %d bytes is too short for %d tokens" % (path, size, vocab_size))
        blob = bytearray(blob_len)
        mv = memoryview(blob)
        off = array("I", range(vocab_size + 1))
        scores = array("f", range(vocab_size))
        at = 0
        with open(path, "rb") as f:
            head = f.read(4)
            if len(head) < 4:
                raise TokenizerError("%s: truncated tokenizer header" % path)
            for i in range(vocab_size):
                b = f.read(8)
                if len(b) < 8:
                    raise TokenizerError("%s: ends at token %d of %d" % (path, i, vocab_size))
                score, n = struct.unpack("<fi", b)
                if n < 0 or at + n > blob_len:
                    raise TokenizerError("%s: token %d has length %d" % (path, i, n))
                if f.readinto(mv[at:at + n]) != n:
                    raise TokenizerError("%s: token %d is truncated" % (path, i))
                off[i] = at
                scores[i] = score
                at += n
        off[vocab_size] = at
        import gc
        gc.collect()  # the loop's small garbage lies below the copy about to be made: free it first, not a hole
        return cls(bytes(blob[:at]) if at < blob_len else bytes(blob), off, scores)
