# Encoding a text with a llama2.c tokenizer (any kvedge.model.pieces.Pieces), as llama2.c's run.c does: after
# the ids already there (Pieces.encode's optional BOS), a dummy-prefix space token when the text is not empty,
# one token per UTF-8 character (or, when the character is not in the vocabulary, per byte: the byte's own
# piece where the vocabulary has one, as byte-level BPE vocabularies do, else the <0xXX> byte token at id
# byte + BYTE_OFFSET), then repeatedly merge the adjacent pair
# whose concatenation is in the vocabulary with the highest score (first such pair on ties); Pieces.encode adds
# the optional EOS. Apart from decoding so that a run without a prompt does not load it; it imports nothing of
# kvedge.model.pieces (which imports it, lazily).
from array import array

BYTE_OFFSET = 3  # <0x00> is token 3: a byte the vocabulary lacks is encoded as id byte + BYTE_OFFSET


def sort_ids(tok):
    """Ids sorted by (piece, id): Shell sort in place, no list, key table or tuples, so a small fragmented heap
    only ever needs room for two short slices at a time. Equal pieces keep the lowest id first."""
    n = tok.vocab_size
    pb = tok.piece_bytes
    order = array("H" if n <= 65535 else "I", range(n))
    gap = 1
    while gap < n // 3:
        gap = 3 * gap + 1
    while gap:
        for i in range(gap, n):
            t = order[i]
            tp = pb(t)
            j = i
            while j >= gap:
                u = order[j - gap]
                up = pb(u)
                if up < tp or (up == tp and u < t):
                    break
                order[j] = u
                j -= gap
            order[j] = t
        gap //= 3
    return order


def id_of(tok, piece):
    """Lowest id whose piece equals `piece` (bytes), or -1; sorts the ids on first use (tok.order)."""
    if tok.order is None:
        tok.order = sort_ids(tok)
    order, pb = tok.order, tok.piece_bytes
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


def encode(tok, text, ids):
    """Append the token ids of text (str or UTF-8 bytes) to `ids` (which may hold BOS: the merges run over the
    whole list, as llama2.c's do) and return it."""
    if isinstance(text, str):
        text = text.encode("utf-8")
    if len(text):
        sp = id_of(tok, b" ")
        if sp >= 0:
            ids.append(sp)
    i = 0
    n = len(text)
    while i < n:
        j = i + 1
        # a UTF-8 character: the lead byte and up to 3 continuation bytes (10xxxxxx)
        while j < n and j - i < 4 and (text[j] & 0xC0) == 0x80:
            j += 1
        t = id_of(tok, text[i:j])
        if t >= 0:
            ids.append(t)
        else:
            for k in range(i, j):
                # a byte-level vocabulary (GPT-2 style) holds every byte as a piece of its own; sentencepiece's
                # pieces are whole UTF-8 characters, so a lone byte of a character it lacks is its <0xXX> token
                t = id_of(tok, text[k:k + 1])
                ids.append(t if t >= 0 else text[k] + BYTE_OFFSET)
        i = j
    _merge(tok, ids)
    return ids


def _merge(tok, ids):
    score, pb = tok.score, tok.piece_bytes
    while True:
        best = -1e10
        at = -1
        best_id = -1
        for i in range(len(ids) - 1):
            t = id_of(tok, pb(ids[i]) + pb(ids[i + 1]))
            if t >= 0 and score(t) > best:
                best = score(t)
                at = i
                best_id = t
        if at < 0:
            return
        ids[at] = best_id
        del ids[at + 1]
