# The chat tests' models (kvedge.chat, issue 45): a small checkpoint with the tiny tokenizer's vocabulary (f32, and
# its int8 conversion for the integer pass), a conversation of turns on one cache, and the independent reference:
# a fresh Llama fed the conversation's token ids one step at a time from scratch, greedy at every reply position.
import gc

from _support import forget, need, tmp_path

PATHS = {}
LINES = ("the cat sat", "and then it ran home")


def _exists(p):
    try:
        open(p, "rb").close()
        return True
    except OSError:
        return False


def files():
    need("fs")
    if not (PATHS and _exists(PATHS["i8"])):  # pytest gives each test file a folder of its own
        from kvedge.model import checkpoint, tiny
        f = tmp_path("kvedge_chat.bin")
        tiny.write_checkpoint(f, seed=21, dim=8, hidden_dim=16, n_heads=2, n_kv_heads=1,
                              vocab_size=tiny.DEFAULT["vocab_size"], seq_len=96)
        q = tmp_path("kvedge_chat_i8.bin")
        checkpoint.convert_to_i8(f, q)
        t = tmp_path("kvedge_chat_tok.bin")
        tiny.write_tokenizer(t, tiny.DEFAULT["vocab_size"])
        PATHS.update(f32=f, i8=q, tok=t, sess=tmp_path("kvedge_chat_sess"))
        forget("kvedge.model.convert", "kvedge.model.tiny")
    return PATHS


def model(kv, wdtype="f32", policy=None):
    from kvedge.model.llama import Llama
    gc.collect()
    return Llama(files()[wdtype], kv=kv, policy=policy, stream=True, tile=8,
                 forward="int" if wdtype == "i8" else "float")


def tokenizer():
    from kvedge.model.bpe import sort_ids
    from kvedge.model.pieces import FileTokenizer
    tok = FileTokenizer(files()["tok"], 352)
    tok.order = sort_ids(tok)
    return tok


def converse(kv, wdtype="f32", policy=None, max_new=(6, 7), chunk=1, lines=LINES, stats=None):
    """The turns on one cache, greedy: returns ([(the ids a turn fed before its reply, the tokens it sampled: its
    reply, then the token that ended it unless the limit did)], the cache's arena bytes). stats: each turn's cache
    stats appended."""
    from kvedge.chat import Chat
    from kvedge.model.sampler import Sampler
    m = model(kv, wdtype, policy)
    if chunk > 1:
        from kvedge.model import prefill
        prefill.attach(m, chunk)
    tok = tokenizer()
    c = Chat(m, tok, Sampler(m.cfg.vocab_size))
    turns = []
    for i in range(len(lines)):
        ids = c.ids(lines[i])  # what the turn feeds first (changes nothing)
        pieces = []
        r = c.turn(lines[i], max_new[i], pieces.append)
        assert b"".join(pieces) == tok.decode(r, ids[-1]), (pieces, r)
        assert len(r) <= max_new[i]
        sampled = r if len(r) == max_new[i] else r + [c.next]
        assert c.next == sampled[-1]
        turns.append((ids, sampled))
        if stats is not None:
            stats.append(m.cache.stats())
    arena = bytes(m.cache.arena)
    m.close()
    tok.close()
    return turns, arena


def reference(turns, kv, wdtype="f32", policy=None):
    """A fresh model fed the conversation's ids one step at a time from scratch: after each turn's line and each
    reply token the greedy token must be the one the turn sampled (the last one sampled is not fed: the next
    turn's first id). Returns the arena's bytes."""
    from kvedge.model.sampler import argmax
    m = model(kv, wdtype, policy)
    V = m.cfg.vocab_size
    for ids, sampled in turns:
        for t in ids:
            lg = m.forward(t)
        for j in range(len(sampled)):
            assert argmax(lg, V) == sampled[j], (ids, sampled, j)
            if j < len(sampled) - 1:
                lg = m.forward(sampled[j])
    arena = bytes(m.cache.arena)
    m.close()
    return arena


def same_as_one_stream(kv, wdtype="f32", policy=None, max_new=(6, 7), chunk=1, lines=LINES):
    """converse() against reference(): the same tokens and the same cache bytes; returns each turn's stats."""
    stats = []
    turns, arena = converse(kv, wdtype, policy, max_new, chunk, lines, stats)
    assert turns[1][0][0] == turns[0][1][-1]  # turn 2 starts with the token turn 1 kept
    assert reference(turns, kv, wdtype, policy) == arena
    return stats
