"""Tokenizers into the device's format (llama2.c's tokenizer.bin: int32 max_token_length, then per token f32
score, int32 length, the piece's bytes; kvedge.model.tokenizer reads it).

Sources: sentencepiece's tokenizer.model (read with the sentencepiece package, as llama2.c's tokenizer.py
does: "\u2581" becomes a space, <0xXX> byte pieces kept, BOS/EOS written "\\n<s>\\n"/"\\n</s>\\n"); a
tokenizers tokenizer.json of model type BPE, either sentencepiece-style (byte_fallback, "\u2581") or byte-level
(GPT-2's byte-to-character map undone, so every piece is its raw bytes); a GGUF file's tokenizer.ggml.* arrays
("llama" or "gpt2"). BPE merges give scores: the token a merge of rank r makes scores -r (the first such merge),
so the device's encoder (merge the adjacent pair whose concatenation scores highest) replays them in order."""
import json
import struct

from ..models import ModelError

SP_SPACE = "\u2581"
UNMERGED = -1e6  # score of a token no merge makes (single characters, specials)


def byte_chars():
    """GPT-2's byte-level map: byte -> the printable character tokenizers store it as."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


def _unbyte(path):
    inv = {c: b for b, c in byte_chars().items()}

    def raw(piece):
        try:
            return bytes(inv[c] for c in piece)
        except KeyError:
            raise ModelError("%s: piece %r is not byte-level" % (path, piece[:40]))
    return raw


class Vocab:
    """pieces (bytes), scores (floats), bos/eos ids (or None), kind, notes."""

    def __init__(self, pieces, scores, bos, eos, kind, byte_level):
        self.pieces, self.scores, self.bos, self.eos = pieces, scores, bos, eos
        self.kind, self.byte_level, self.notes = kind, byte_level, []

    def fit(self, path, vocab_size):
        """Check against the model's vocabulary (padding with empty pieces when the model has more rows) and
        note what the device does differently from the source's tokenizer."""
        n = len(self.pieces)
        if n > vocab_size:
            raise ModelError("%s: %d tokens, the model's vocabulary has %d" % (path, n, vocab_size))
        if n < vocab_size:
            self.notes.append("tokenizer has %d tokens, the model %d: the rest written as empty pieces"
                              % (n, vocab_size))
            self.pieces += [b""] * (vocab_size - n)
            self.scores += [UNMERGED] * (vocab_size - n)
        if (self.bos, self.eos) != (1, 2):
            self.notes.append("BOS %s, EOS %s: the device's runner starts from token 1 and stops at 1 or 2 "
                              "(llama2.c's ids)" % (self.bos, self.eos))
        if self.byte_level:
            self.notes.append("byte-level BPE: the device encodes as llama2.c does (a leading space token, "
                              "merges by score with no pre-splitting), so prompt ids can differ from the "
                              "source's; decoding gives each token's bytes")
        elif not all(self.pieces[3 + b] == b"<0x%02X>" % b for b in range(256) if 3 + b < len(self.pieces)):
            self.notes.append("no <0xXX> byte pieces at ids 3..258: characters outside the vocabulary "
                              "encode to wrong ids on the device")
        return self


def _sp_piece(t):
    return t.replace(SP_SPACE, " ").encode("utf-8")


def from_sentencepiece(path):
    import sentencepiece as spm
    try:
        sp = spm.SentencePieceProcessor(model_file=path)
    except (RuntimeError, OSError) as e:
        raise ModelError("%s: not a sentencepiece model (%s)" % (path, (str(e).splitlines() or [""])[0][:120]))
    bos, eos = sp.bos_id(), sp.eos_id()
    pieces, scores = [], []
    for i in range(sp.get_piece_size()):
        t = sp.id_to_piece(i)
        pieces.append(b"\n<s>\n" if i == bos else b"\n</s>\n" if i == eos else _sp_piece(t))
        scores.append(float(sp.get_score(i)))
    return Vocab(pieces, scores, bos if bos >= 0 else None, eos if eos >= 0 else None, "sentencepiece model",
                 False)


def _has(node, kind):
    """A tokenizers component (pre_tokenizer, decoder) of this type, alone or inside a Sequence."""
    if not isinstance(node, dict):
        return False
    if node.get("type") == kind:
        return True
    for key in ("pretokenizers", "decoders"):
        if any(_has(n, kind) for n in node.get(key) or ()):
            return True
    return False


def _merge_scores(path, vocab, merges):
    """Score of every id from the merge ranks."""
    scores = [UNMERGED] * len(vocab)
    for r, m in enumerate(merges):
        if isinstance(m, str):
            parts = m.split(" ")
        elif isinstance(m, list):
            parts = m
        else:
            parts = None
        if not parts or len(parts) != 2 or not all(isinstance(p, str) for p in parts):
            raise ModelError("%s: merge %d is %r, expected two pieces" % (path, r, m))
        t = vocab.get(parts[0] + parts[1])
        if t is not None and scores[t] == UNMERGED:
            scores[t] = -float(r)
    return scores


def from_tokenizer_json(path):
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read().decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ModelError("%s: not JSON (%s)" % (path, str(e).splitlines()[0][:120]))
    model = doc.get("model") if isinstance(doc, dict) else None
    if not isinstance(model, dict) or model.get("type") not in ("BPE", None) or "merges" not in model:
        kind = model.get("type") if isinstance(model, dict) else None
        raise ModelError("%s: tokenizer model %s is not supported (BPE only)" % (path, kind))
    vocab = model.get("vocab")
    if not isinstance(vocab, dict) or not all(isinstance(v, int) for v in vocab.values()):
        raise ModelError("%s: model.vocab is not a map of pieces to ids" % path)
    added = [a for a in doc.get("added_tokens") or () if isinstance(a, dict)]
    ids = dict(vocab)
    for a in added:
        if isinstance(a.get("content"), str) and isinstance(a.get("id"), int):
            ids.setdefault(a["content"], a["id"])
    n = max(ids.values()) + 1 if ids else 0
    if sorted(ids.values()) != list(range(n)):
        raise ModelError("%s: token ids are not 0..%d without gaps" % (path, n - 1))
    byte_level = _has(doc.get("pre_tokenizer"), "ByteLevel") or _has(doc.get("decoder"), "ByteLevel")
    sp_style = model.get("byte_fallback") or _has(doc.get("decoder"), "Replace")
    if not byte_level and not sp_style:
        raise ModelError("%s: a BPE tokenizer that is neither byte-level nor sentencepiece-style" % path)
    raw = _unbyte(path) if byte_level else _sp_piece
    special = set(a["content"] for a in added if a.get("special"))
    pieces = [b""] * n
    for t, i in ids.items():
        pieces[i] = t.encode("utf-8") if t in special or t not in vocab else raw(t)
    scores = _merge_scores(path, ids, model["merges"])

    def special_id(*names):
        for a in added:
            if a.get("content") in names:
                return a.get("id")
        return None
    v = Vocab(pieces, scores, special_id("<s>", "<|begin_of_text|>", "<|endoftext|>", "<|im_start|>"),
              special_id("</s>", "<|end_of_text|>", "<|endoftext|>", "<|im_end|>"),
              "tokenizer.json (%s BPE)" % ("byte-level" if byte_level else "sentencepiece-style"), byte_level)
    return v


def from_gguf(path):
    from gguf import GGUFReader
    from ..models import _gguf_value
    r = GGUFReader(path, "r")

    def get(k, default=None):
        f = r.fields.get(k)
        return _gguf_value(f) if f is not None else default
    model = get("tokenizer.ggml.model")
    tokens = get("tokenizer.ggml.tokens")
    if model not in ("llama", "gpt2") or not isinstance(tokens, list):
        raise ModelError("%s: tokenizer.ggml.model %s is not supported (llama or gpt2)" % (path, model))
    types = get("tokenizer.ggml.token_type") or [1] * len(tokens)
    bos, eos = get("tokenizer.ggml.bos_token_id"), get("tokenizer.ggml.eos_token_id")
    if model == "llama":
        scores = get("tokenizer.ggml.scores") or [0.0] * len(tokens)
        if len(scores) != len(tokens):
            raise ModelError("%s: %d scores for %d tokens" % (path, len(scores), len(tokens)))
        pieces = [b"\n<s>\n" if i == bos else b"\n</s>\n" if i == eos else _sp_piece(t)
                  for i, t in enumerate(tokens)]
        return Vocab(pieces, [float(s) for s in scores], bos, eos, "GGUF llama (sentencepiece) vocabulary", False)
    raw = _unbyte(path)
    pieces = [t.encode("utf-8") if ty == 3 else raw(t) for t, ty in zip(tokens, types)]  # 3: control tokens
    scores = _merge_scores(path, {t: i for i, t in enumerate(tokens)}, get("tokenizer.ggml.merges") or [])
    return Vocab(pieces, scores, bos, eos, "GGUF gpt2 (byte-level BPE) vocabulary", True)


def read(path):
    """The Vocab of a tokenizer file (tokenizer.model, tokenizer.json, or a GGUF holding one)."""
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic == b"GGUF":
        return from_gguf(path)
    if path.endswith(".json"):
        return from_tokenizer_json(path)
    return from_sentencepiece(path)


def write_bin(path, vocab):
    """llama2.c's tokenizer.bin, written by the device package's own writer (kvedge.model.tiny.write_tokenizer)."""
    from kvedge.model import tiny

    def pieces():
        return zip(vocab.pieces, vocab.scores)
    return tiny.write_tokenizer(path, pieces=pieces)
