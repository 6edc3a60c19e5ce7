# Turns of a conversation on one cache (issue 45): each line typed is encoded and fed on top of what the cache
# already holds, so a turn costs its own tokens, not the whole history's. When the cache is full its plan's
# policy (window, sinks, H2O) evicts as it would for one long prompt. A board's code.py uses Chat directly;
# main() is what `kvedge chat` runs. Its own mip part (kvedge-chat): only a board that chats installs it.
#
# The token stream of a conversation is that of one long generation: turn 1 feeds BOS and its line, each later
# turn first feeds the token its predecessor sampled last (kept, not yet fed: as llama2.c's loop holds it), then
# its own line. So two turns leave exactly the cache and tokens of one model fed those ids one at a time.
from kvedge.cache import POS_LIMIT
from kvedge.compat import zeros
from kvedge.errors import CacheFullError
from kvedge.model.llama import check_token
from kvedge.model.pieces import BOS, EOS


class Chat:
    """A conversation over a kvedge.model.llama.Llama `model` (its cache and policy as built), a tokenizer
    (kvedge.model.pieces: encode, piece) and a kvedge.model.sampler.Sampler. A Prefill attached to the model's
    integer pass (kvedge.model.prefill.attach) takes each line's tokens a chunk at a time where it applies."""

    def __init__(self, model, tokenizer, sampler):
        self.m = model
        self.tok = tokenizer
        self.sampler = sampler
        self.next = -1  # the last token sampled, not yet fed: the next turn feeds it first (-1: none yet)
        self.closed = False
        self.pre = getattr(getattr(model, "intp", None), "pre", None)
        self.fl = None
        self._floats()

    def _floats(self):
        """The integer pass's logits are integers: sampling with a temperature needs them as floats (a buffer of
        the vocabulary's size, made once)."""
        if self.fl is None and getattr(self.m, "intp", None) is not None and self.sampler.temperature:
            self.fl = zeros("f", self.m.cfg.vocab_size)

    def room(self):
        """Positions the cache still takes: unbounded (to the position limit) where a window or a policy evicts,
        else its free slots."""
        c = self.m.cache
        if getattr(c, "policy", None) is not None or c.cfg.window:
            return POS_LIMIT - c.n_seen
        return c.N - c.n_seen

    def ids(self, text):
        """The token ids a turn of `text` feeds: the kept token (or BOS on the first turn), then the line's.
        Allocates a list; changes nothing."""
        if not isinstance(text, (str, bytes)):
            raise TypeError("text must be str or bytes, got %s" % type(text).__name__)
        first = self.next < 0 and self.m.cache.n_seen == 0
        ids = self.tok.encode(text, first)
        if not first:
            ids.insert(0, self.next)
        return ids

    def turn(self, text, max_new, on_piece=None):
        """Feed `text` (str or UTF-8 bytes) on top of the conversation, then sample up to `max_new` tokens of reply,
        until EOS or BOS, or a cache without a window is full; on_piece(bytes) gets each reply piece as sampled.
        Returns the reply's token ids. Refused before anything changes: TypeError / ValueError for bad
        arguments or a closed conversation, CacheFullError for a line the cache has no room for (no window, no
        policy)."""
        self._check(max_new, on_piece)
        return self.feed(self.ids(text), max_new, on_piece)

    def feed(self, ids, max_new, on_piece=None):
        """turn() of ids already encoded, as ids() gives them (the kept token, or BOS on the first turn, first)."""
        self._check(max_new, on_piece)
        if not isinstance(ids, (list, tuple)) or not ids:
            raise TypeError("ids must be a non-empty list of token ids")
        v = self.m.cfg.vocab_size
        for t in ids:
            check_token(t, v)
        if self.next >= 0 and ids[0] != self.next:
            raise ValueError("a turn starts with the token the last one kept (%d), got %d" % (self.next, ids[0]))
        n = len(ids)
        room = self.room()
        if n > room:
            raise CacheFullError("a turn of %d tokens, the cache has room for %d (no window, no policy): start a "
                                 "new conversation" % (n, room))
        self._prompt(ids, n - 1)
        return self._reply(ids[n - 1], max_new, on_piece)

    def _check(self, max_new, on_piece):
        if self.closed:
            raise ValueError("the conversation is closed")
        if not isinstance(max_new, int) or isinstance(max_new, bool):
            raise TypeError("max_new must be an int, got %s" % type(max_new).__name__)
        if max_new < 0:
            raise ValueError("max_new must be >= 0, got %d" % max_new)
        if on_piece is not None and not callable(on_piece):
            raise TypeError("on_piece must be callable or None")

    def _prompt(self, ids, end):
        """Feed ids[:end], a chunk at a time where the pass's Prefill takes them (no logits needed)."""
        pos = 0
        while pos < end:
            k = self.pre.take(ids, pos, end - pos) if self.pre is not None else 0
            if k == 0:
                self.m.forward(ids[pos])
                k = 1
            pos += k

    def _reply(self, token, max_new, on_piece):
        """Feed `token`, sample, and go on; the last token sampled is kept for the next turn."""
        m, s = self.m, self.sampler
        fl = self.fl if s.temperature else None
        out = []
        while len(out) < max_new and m.cache.has_room():
            logits = m.forward(token)
            nxt = s.sample(logits if fl is None else m.intp.float_logits(fl))
            if nxt == BOS or nxt == EOS:  # the reply ends; the next turn feeds this token first
                token = nxt
                break
            out.append(nxt)
            if on_piece is not None:
                on_piece(self.tok.piece(token, nxt))
            token = nxt
        self.next = token
        return out

    def save(self, path):
        """Save the conversation (cache, policy, sampler, the kept token: kvedge.session.save_run) to PATH."""
        if self.closed:
            raise ValueError("the conversation is closed")
        from kvedge import session
        return session.save_run(path, self.m, self.sampler, self.next)

    def load(self, path):
        """Go on from the conversation saved to PATH (kvedge.session.load_run: refused whole, SessionError, before
        anything changes) into this one, which must not have started."""
        if self.closed:
            raise ValueError("the conversation is closed")
        if self.next >= 0 or self.m.cache.n_seen:
            raise ValueError("the conversation has started: load a saved one into a fresh Chat")
        from kvedge import session
        self.next = session.load_run(path, self.m, self.sampler)
        self._floats()  # the saved temperature may sample where this one did not

    def close(self):
        """End the conversation (the model stays the caller's)."""
        self.closed = True


class _Text:
    """A text stream over a bytes writer: the stats lines go where the reply goes, in order."""

    def __init__(self, w):
        self.w = w

    def write(self, s):
        self.w(s.encode())


def _tokens(cache):
    return cache.stats()["tokens_seen"]


def main(model, tokenizer, lines, max_new=64, temperature=0.0, seed=1, kv=None, h2o=0, forward="auto",
         kernel="auto", stream=False, prefill=1, stats_ms=0, save=None, resume=None, emit=None, end=None):
    """`kvedge chat`'s runner: a Llama on `model` with cache `kv` (h2o=N: H2O eviction holding N), a turn per line
    of `lines` (any iterable of str), each reply written to stdout as it comes and ended by a newline, then one
    line "#KVCHAT {json}" per turn (tokens fed, reply tokens, positions held, evictions, ms). resume: a session
    (kvedge.session) to go on from; save: where to save the conversation after the last turn. emit(bytes): where
    the text and those lines go (default stdout). end: a line printed once everything is done (at a port: the line
    the host's watcher stops at)."""
    import sys
    from kvedge import kernels
    from kvedge.compat import ticks_diff, ticks_ms
    kernels.select(kernel)
    from kvedge.model.llama import Llama
    from kvedge.model.pieces import FileTokenizer
    from kvedge.model.sampler import Sampler
    from kvedge.model.bpe import sort_ids
    policy = None
    if h2o:
        from kvedge.evict import H2O

        def policy(cache):
            return H2O(cache, budget=h2o, recent=h2o // 2)
    m = Llama(model, kv=kv, policy=policy, forward=forward, stream=stream)
    if prefill != 1:
        from kvedge.model import prefill as chunks
        chunks.attach(m, prefill)
    tok = FileTokenizer(tokenizer, m.cfg.vocab_size)
    tok.order = sort_ids(tok)
    chat = Chat(m, tok, Sampler(m.cfg.vocab_size, temperature, seed))
    if resume is not None:
        chat.load(resume)
    out = getattr(sys.stdout, "buffer", None)
    if emit is not None:
        w = emit
    elif out is not None:
        def w(b):
            out.write(b)
    else:
        def w(b):
            sys.stdout.write(b.decode("utf-8"))
    tele = None
    if stats_ms > 0:
        from kvedge.telemetry import Telemetry
        raw = w
        tele = Telemetry(m.policy if m.policy is not None else m.cache, out=_Text(raw), interval_ms=stats_ms)
        tele.emit("start")

        def w(b):
            raw(b)
            tele.tick()
    for line in lines:
        line = line.rstrip("\r\n")
        seen = _tokens(m.cache)
        t0 = ticks_ms()
        reply = chat.turn(line, max_new, w)
        ms = ticks_diff(ticks_ms(), t0)
        st = m.cache.stats()
        w(('\n#KVCHAT {"fed":%d,"reply":%d,"seen":%d,"cached":%d,"evictions":%d,"ms":%d}\n' % (
            st["tokens_seen"] - seen, len(reply), st["tokens_seen"], st["tokens_cached"], st["evictions"],
            ms)).encode())
        if tele is not None:
            tele.emit("tick")
    if tele is not None:
        tele.emit("final")
    if save is not None:
        chat.save(save)
    chat.close()
    m.close()
    tok.close()
    if end is not None:
        print(end)
