# The llama2.c tokenizer (tok512.bin, tokenizer.bin): a vocabulary of byte strings with merge scores.
#
# File format: int32 max_token_length, then per token: f32 score, int32 length, the bytes.
# encode() follows llama2.c's run.c: optional BOS, a dummy-prefix space token when the text is not empty,
# one token per UTF-8 character (or <0xXX> byte tokens at id byte + 3 when the character is not in the
# vocabulary), then repeatedly merge the adjacent pair whose concatenation is in the vocabulary with the
# highest score (first such pair on ties), optional EOS.
import struct
from array import array

BOS = 1
EOS = 2
BYTE_OFFSET = 3  # <0x00> is token 3


class TokenizerError(ValueError):
    pass


class Tokenizer:
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
        self.order = self._sorted()

    def _sorted(self):
        """Ids sorted by (piece, id): Shell sort in place, no list, key table or tuples, so a small fragmented
        heap only ever needs room for two short slices at a time. Equal pieces keep the lowest id first."""
        n = self.vocab_size
        order = array("H" if n <= 65535 else "I", range(n))
        gap = 1
        while gap < n // 3:
            gap = 3 * gap + 1
        while gap:
            for i in range(gap, n):
                t = order[i]
                tp = self.piece_bytes(t)
                j = i
                while j >= gap:
                    u = order[j - gap]
                    up = self.piece_bytes(u)
                    if up < tp or (up == tp and u < t):
                        break
                    order[j] = u
                    j -= gap
                order[j] = t
            gap //= 3
        return order

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

    def id_of(self, piece):
        """Lowest id whose piece equals `piece` (bytes), or -1."""
        order, pb = self.order, self.piece_bytes
        lo, hi = 0, len(order)
        while lo < hi:
            mid = (lo + hi) >> 1
            if pb(order[mid]) < piece:
                lo = mid + 1
            else:
                hi = mid
        if lo < len(order):
            i = order[lo]
            if pb(i) == piece:
                return i
        return -1

    def encode(self, text, bos=True, eos=False):
        """Token ids of text (str or UTF-8 bytes), as llama2.c's encode()."""
        if isinstance(text, str):
            text = text.encode("utf-8")
        ids = []
        if bos:
            ids.append(BOS)
        if len(text):
            sp = self.id_of(b" ")
            if sp >= 0:
                ids.append(sp)
        i = 0
        n = len(text)
        while i < n:
            j = i + 1
            # a UTF-8 character: the lead byte and up to 3 continuation bytes (10xxxxxx)
            while j < n and j - i < 4 and (text[j] & 0xC0) == 0x80:
                j += 1
            t = self.id_of(text[i:j])
            if t >= 0:
                ids.append(t)
            else:
                for k in range(i, j):
                    ids.append(text[k] + BYTE_OFFSET)
            i = j
        self._merge(ids)
        if eos:
            ids.append(EOS)
        return ids

    def _merge(self, ids):
        score, pb = self.score, self.piece_bytes
        while True:
            best = -1e10
            at = -1
            best_id = -1
            for i in range(len(ids) - 1):
                t = self.id_of(pb(ids[i]) + pb(ids[i + 1]))
                if t >= 0 and score(t) > best:
                    best = score(t)
                    at = i
                    best_id = t
            if at < 0:
                return
            ids[at] = best_id
            del ids[at + 1]

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


class FileTokenizer(Tokenizer):
    """The same tokenizer with its pieces and scores left in the file (kept open): RAM holds one offset per
    token (2 bytes while the file is under 64 KB) and, once a text is encoded, the ids sorted by piece. Decoding
    reads one piece per token; encoding a prompt sorts the vocabulary once (file reads: slower, done once).
    For boards whose heap cannot spare the loaded tokenizer (stories260K's: 7.8 KB, this one 2.5 KB)."""

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
        self.order = None

    def close(self):
        self.f.close()

    def piece_bytes(self, i):
        self.f.seek(self.at[i])
        return self.f.read(self.at[i + 1] - 8 - self.at[i])

    def score(self, i):
        self.f.seek(self.at[i] - 8)
        self.f.readinto(self.sbuf)
        return self.sbuf[0]

    def id_of(self, piece):
        if self.order is None:
            self.order = self._sorted()
        return Tokenizer.id_of(self, piece)

    @staticmethod
    def nbytes(path, vocab_size, encode=True):
        """Heap it keeps: the offsets, the object, and once a text is encoded (encode=True) the sorted ids; the
        open file's buffer is the filesystem's (counted by the caller: kvedge footprint's file_bytes)."""
        import os
        wide = os.stat(path)[6] + 8 > 65535
        order = (2 if vocab_size <= 65535 else 4) * vocab_size if encode else 0
        return (4 if wide else 2) * (vocab_size + 1) + order + 512
