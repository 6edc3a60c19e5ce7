# The model's parts without a checkpoint: tokenizer, sampler, header checks, matvec kernels.
from array import array

from _support import need, raises, under_heap_lock, Rng
from kvedge import kernels
from kvedge.model import header, sampler, tiny
from kvedge.model.tokenizer import Tokenizer, BOS


def _tok():
    pieces, scores = tiny.tokenizer_pieces()
    t = Tokenizer.from_pieces(pieces, scores)
    t.pieces, t.plain_scores = pieces, scores  # for the reference below
    return t


def _ref_encode(tok, text):
    # independent reference: chars (or bytes + 3), then merge the best-scoring pair, leftmost on ties
    ids = [BOS, tok.pieces.index(b" ")]
    for ch in text:
        b = ch.encode("utf-8")
        if b in tok.pieces:
            ids.append(tok.pieces.index(b))
        else:
            ids += [x + 3 for x in b]
    while True:
        cands = []
        for i in range(len(ids) - 1):
            m = tok.pieces[ids[i]] + tok.pieces[ids[i + 1]]
            if m in tok.pieces:
                cands.append((tok.plain_scores[tok.pieces.index(m)], -i, tok.pieces.index(m)))
        if not cands:
            return ids
        best = max(cands)
        i = -best[1]
        ids[i:i + 2] = [best[2]]


def test_tokenizer_merges_like_the_reference():
    tok = _tok()
    for text in ("the cat and the hat", "then, another thing!", "in the end", "athe"):
        assert tok.encode(text) == _ref_encode(tok, text), text


def test_tokenizer_dummy_prefix_bos_eos_and_empty_text():
    tok = _tok()
    ids = tok.encode("a")
    assert ids[0] == BOS and tok.pieces[ids[1]] == b" a"
    assert tok.encode("") == [BOS]
    assert tok.encode("", bos=False) == []
    assert tok.encode("a", bos=False, eos=True)[-1] == 2


def test_tokenizer_byte_fallback_and_decode():
    tok = _tok()
    text = "the caf\u00e9 \u20ac"  # e-acute and the euro sign are not in the tiny vocabulary
    ids = tok.encode(text)
    assert 0xC3 + 3 in ids and 0xE2 + 3 in ids
    # decode after BOS strips the dummy-prefix space; byte pieces come back as raw bytes
    assert tok.decode(ids[1:], prev=BOS) == text.encode("utf-8")
    assert tok.piece(BOS, tok.id_of(b" the")) == b"the"
    assert tok.piece(5, tok.id_of(b" the")) == b" the"
    assert tok.piece(5, 10 + 3) == b"\n"
    raises(ValueError, tok.piece, 5, tok.vocab_size)
    for i in (0, 1, 3, 258, 259, tok.vocab_size - 1):
        assert tok.id_of(tok.pieces[i]) == i
    assert tok.id_of(b"not a piece") == -1


def test_tokenizer_byte_level_vocabulary_falls_back_to_byte_pieces():
    # a byte-level BPE vocabulary (kvedge convert of a tokenizer.json): every byte is a piece of its own, here
    # at ids 10..265 (not llama2.c's <0xXX> at byte + 3); a character it lacks encodes to its bytes' pieces
    pieces = [b"<unk>", b"\n<s>\n", b"\n</s>\n"] + [b"x%d" % i for i in range(7)]
    pieces += [bytes((b,)) for b in range(256)] + [b"caf", b"ca"]
    scores = [0.0] * 266 + [2.0, 3.0]
    tok = Tokenizer.from_pieces(pieces, scores)
    ids = tok.encode("caf\u20ac")  # the euro sign: bytes E2 82 AC, no piece of its own
    # by hand: BOS, the dummy-prefix space (byte 32 at id 42), "ca" then "caf" merged, the three bytes' pieces
    assert ids == [BOS, 42, 266, 10 + 0xE2, 10 + 0x82, 10 + 0xAC]
    assert tok.decode(ids[1:], prev=BOS) == "caf\u20ac".encode("utf-8")


def test_tokenizer_file_round_trip():
    need("fs")
    from _model_support import tmp_path
    p = tmp_path("kvedge_tok_rt.bin")
    n = tiny.write_tokenizer(p, 400)
    t = Tokenizer.load(p, n)
    ref = _tok()
    assert t.vocab_size == 400
    assert t.encode("the end, then") == ref.encode("the end, then")
    assert t.piece_bytes(399) == b"<unused399>"
    raises(ValueError, Tokenizer.load, p, 5000)


def test_file_tokenizer_reads_what_the_loaded_one_holds():
    # pieces and scores left in the file: the same encodings (merges by score), pieces and decodes as the
    # reference built from the piece lists, with only the offsets (and, once encoding, the order) in RAM
    need("fs")
    from _model_support import tmp_path
    from kvedge.model.tokenizer import FileTokenizer
    p = tmp_path("kvedge_tok_file.bin")
    n = tiny.write_tokenizer(p, 400)
    ref = _tok()
    t = FileTokenizer(p, n)
    assert t.order is None and len(t.at) == n + 1
    for i in (0, 1, 3, 258, 300, n - 1):
        assert t.piece_bytes(i) == (ref.pieces[i] if i < len(ref.pieces) else b"<unused%d>" % i)
    assert t.score(len(ref.pieces) - 1) == ref.plain_scores[-1]
    for text in ("the end, then", "", "and the ship", "zq\u00e9!"):
        assert t.encode(text) == _ref_encode(ref, text) if text else t.encode(text) == [BOS]
    ids = t.encode("the end, then")
    assert t.decode(ids, prev=BOS) == ref.decode(ids, prev=BOS)
    assert t.piece(BOS, ids[1]) == ref.piece(BOS, ids[1])
    t.close()
    raises(ValueError, FileTokenizer, p, 5000)


def test_rng_is_llama2c_xorshift():
    # values printed by llama2.c's random_u32 / random_f32 (run.c) compiled with gcc
    r = sampler.Rng(42)
    assert [r.u32() for _ in range(4)] == [1456360119, 3359763283, 3393612768, 4054632243]
    r = sampler.Rng(1234567)
    assert abs(r.f32() - 0.824366093) < 1e-8
    raises(ValueError, sampler.Rng, 0)


def test_greedy_and_seeded_sampling():
    logits = array("f", [0.5, 2.0, 2.0, -1.0])
    s = sampler.Sampler(4, 0.0)
    assert s.sample(logits) == 1  # first maximum, like llama2.c's argmax
    picks = []
    for seed in (7, 7, 8):
        s = sampler.Sampler(4, 1.0, seed)
        picks.append([s.sample(array("f", [0.5, 2.0, 2.0, -1.0])) for _ in range(20)])
    assert picks[0] == picks[1] and picks[0] != picks[2]
    assert 3 not in picks[0] or picks[0].count(3) < 4
    raises(ValueError, sampler.Sampler, 4, -1.0)


def test_header_validation():
    raises(header.CheckpointError, header.ModelConfig, 64, 172, 5, 7, 1, 512, 512)  # dim % heads
    raises(header.CheckpointError, header.ModelConfig, 64, 172, 5, 8, 3, 512, 512)  # heads % kv
    raises(header.CheckpointError, header.ModelConfig, 64, 172, 0, 8, 4, 512, 512)
    raises(header.CheckpointError, header.parse_header, b"\x00" * 10)
    c = header.ModelConfig(64, 172, 5, 8, 4, -512, 512)
    assert not c.shared_classifier and c.vocab_size == 512 and c.kv_dim == 32
    assert header.parse_header(c.header()).shared_classifier is False


def test_layouts_match_budget_formulas():
    from kvedge import budget
    from kvedge.model import f32file
    c = header.ModelConfig(64, 172, 5, 8, 4, 512, 512)
    p = c.params()
    # stories260K: 1,056,540 bytes = header + weights + the two legacy RoPE tables
    assert f32file.layout(c)["size"] == 1056540
    assert f32file.layout(c)["size"] == 28 + budget.weights_bytes(p, "f32") + 4 * 512 * 8
    # int8 file: header + budget's int8 weights (codes + one f32 scale per row), codes padded to 4 bytes
    lay = header.i8_layout(c)
    assert lay["size"] >= 36 + budget.weights_bytes(p, "i8")
    assert lay["size"] - 36 - budget.weights_bytes(p, "i8") < 4 * (1 + 7 * 5)


def test_weight_buffers_are_allocated_once_at_their_size():
    # a same-size temporary doubles the peak and leaves a hole per matrix: weights resident in RAM then do not
    # fit a heap they fit. With collection off, the heap grows by the buffer and a small header, not twice.
    need("mem_alloc")
    import gc
    for tc, n, size in (("b", 11008, 1), ("f", 2000, 4), ("H", 3000, 2)):
        gc.collect()
        gc.disable()
        try:
            a0 = gc.mem_alloc()
            a = header.alloc(tc, n)
            grown = gc.mem_alloc() - a0
        finally:
            gc.enable()
        assert len(a) == n
        assert n * size <= grown < n * size + 256, (tc, n, grown)


def _mv_cases():
    rng = Rng(3)
    rows, cols = 5, 37
    w = array("b", [rng.randint(-127, 127) for _ in range(rows * cols + 3)])
    x = array("b", [rng.randint(-127, 127) for _ in range(cols)])
    return rng, rows, cols, w, x


def test_mv_i8_every_kind_matches_reference():
    rng, rows, cols, w, x = _mv_cases()
    ref = [sum(w[3 + r * cols + c] * x[c] for c in range(cols)) for r in range(rows)]
    for kind in kernels.available():
        k = kernels.select(kind)
        acc = array("i", [0] * (rows + 2))
        k.mv_i8(w, 3, x, acc, 2, rows, cols)
        assert list(acc[2:]) == ref, kind
        # extremes: +-127 everywhere stays exact
        big = array("b", [-127] * cols)
        k.mv_i8(big, 0, big, acc, 0, 1, cols)
        assert acc[0] == 127 * 127 * cols
    kernels.select()


def test_mv_f32_scale_and_quant_every_kind():
    rng = Rng(5)
    rows, cols = 4, 9
    w = array("f", [rng.uniform(-1, 1) for _ in range(rows * cols)])
    x = array("f", [rng.uniform(-2, 2) for _ in range(cols)])
    ref = [sum(w[r * cols + c] * x[c] for c in range(cols)) for r in range(rows)]
    for kind in kernels.available():
        k = kernels.select(kind)
        out = array("f", [0.0] * (rows + 1))
        k.mv_f32(w, 0, x, out, 1, rows, cols)
        for r in range(rows):
            assert abs(out[1 + r] - ref[r]) < 1e-5
        q = array("b", [0] * cols)
        s = k.mv_quant(x, cols, q)
        amax = max(abs(v) for v in x)
        assert abs(s - amax / 127) < 1e-7 and max(abs(v) for v in q) == 127
        for c in range(cols):
            assert abs(q[c] * s - x[c]) <= s / 2 + 1e-6
        z = array("f", [0.0] * 3)
        assert k.mv_quant(z, 3, q) == 0.0 and q[0] == 0
        acc = array("i", [10, -20])
        sc = array("f", [0.5, 0.25])
        k.mv_scale(acc, sc, 0, 2.0, out, 0, 2)
        assert out[0] == 10.0 and out[1] == -10.0
    kernels.select()


def test_viper_mv_i8_allocates_nothing():
    need("viper", "heap_lock")
    k = kernels.select("viper")
    rng, rows, cols, w, x = _mv_cases()
    acc = array("i", [0] * rows)
    under_heap_lock(k.mv_i8, w, 0, x, acc, 0, rows, cols)
    ref = [sum(w[r * cols + c] * x[c] for c in range(cols)) for r in range(rows)]
    assert list(acc) == ref
    kernels.select()


def test_mv_rmsnorm_swiglu_add_every_kind():
    import math
    rng = Rng(9)
    n = 11
    x = array("f", [rng.uniform(-3, 3) for _ in range(n)])
    w = array("f", [rng.uniform(0.5, 1.5) for _ in range(n)])
    g = array("f", [rng.uniform(-1, 1) for _ in range(n)])
    ss = 1.0 / math.sqrt(sum(v * v for v in x) / n + 1e-5)
    norm = [w[i] * ss * x[i] for i in range(n)]
    glu = [x[i] / (1.0 + math.exp(-x[i])) * g[i] for i in range(n)]
    for kind in kernels.available():
        k = kernels.select(kind)
        out = array("f", [0.0] * n)
        k.mv_rmsnorm(out, x, w, n)
        assert max(abs(out[i] - norm[i]) for i in range(n)) < 1e-5, kind
        h = array("f", x)
        k.mv_swiglu(h, g, n)
        assert max(abs(h[i] - glu[i]) for i in range(n)) < 1e-5, kind
        k.mv_add(h, g, n)
        assert max(abs(h[i] - glu[i] - g[i]) for i in range(n)) < 1e-5, kind
    kernels.select()
