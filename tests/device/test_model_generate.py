# Generation on a small checkpoint + tokenizer the test writes itself: greedy, seeded sampling, the hard cap.
from _support import need
from _model_support import RefAttention, tmp_path
from kvedge.model import tiny
from kvedge.model.llama import Llama, generate
from kvedge.model.sampler import Sampler
from kvedge.model.tokenizer import Tokenizer

VOCAB = tiny.DEFAULT["vocab_size"]
_PATHS = {}


def _files():
    need("fs")
    if not _PATHS:
        # narrow (dim 8) so the tiny tokenizer's vocabulary fits a 215 KB heap beside the tokenizer
        g = tmp_path("kvedge_tiny_gen.bin")
        tiny.write_checkpoint(g, seed=12, dim=8, hidden_dim=16, n_heads=2, n_kv_heads=1, vocab_size=VOCAB)
        t = tmp_path("kvedge_tiny_tok.bin")
        tiny.write_tokenizer(t, VOCAB)
        _PATHS.update(gen=g, tok=t)
    return _PATHS


def _model(max_tokens):
    # weights streamed from the file (as on a board where they do not fit): after compiling the test
    # modules a 215 KB heap has no 11 KB contiguous block left for the embedding
    return Llama(_files()["gen"], kv={"align": 0, "max_tokens": max_tokens}, attention=RefAttention,
                 stream=True)


def test_generate_greedy_and_seeded_are_deterministic():
    tok = Tokenizer.load(_files()["tok"], VOCAB)
    runs = []
    for temp, seed in ((0.0, 1), (1.0, 5), (1.0, 5)):
        m = _model(12)
        pieces = []
        ids = generate(m, tok, Sampler(tok.vocab_size, temp, seed), tok.encode("the"), 12, pieces.append)
        runs.append(ids)
        assert len(pieces) <= 12 and len(ids) <= 11
        m.close()
    assert runs[1] == runs[2]
    # greedy equals argmax of the forward pass, token by token
    m = _model(12)
    prompt = tok.encode("the")
    for t in prompt:
        lg = m.forward(t)
    best = 0
    for i in range(tok.vocab_size):
        if lg[i] > lg[best]:
            best = i
    assert runs[0][:1] == ([best] if best != 1 else [])
    m.close()


def test_generation_stops_at_the_caches_hard_cap():
    tok = Tokenizer.load(_files()["tok"], VOCAB)
    m = _model(5)
    ids = generate(m, tok, Sampler(tok.vocab_size), [1], 50)
    assert len(ids) <= 5  # stops at the cache's hard cap instead of raising
    m.close()


def test_generate_can_count_instead_of_keeping_ids():
    # an endless stream keeps nothing per token: keep=False returns how many tokens a keep=True run returns
    tok = Tokenizer.load(_files()["tok"], VOCAB)
    counts = []
    for keep in (True, False):
        m = _model(12)
        pieces = []
        out = generate(m, tok, Sampler(tok.vocab_size, 1.0, 7), tok.encode("the"), 12, pieces.append, keep=keep)
        counts.append((len(out) if keep else out, len(pieces)))
        m.close()
    assert counts[0] == counts[1] and counts[0][0] > 0
