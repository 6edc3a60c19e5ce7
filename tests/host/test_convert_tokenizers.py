"""Tokenizers converted with the weights into llama2.c's tokenizer.bin, checked against the libraries that
define them: a sentencepiece BPE model (byte fallback) trained here on tests/corpus, the same vocabulary inside a
GGUF file, and a byte-level BPE tokenizer.json trained here with Hugging Face's `tokenizers`.

What the device does with each (kvedge.model.bpe, llama2.c's encode): a sentencepiece vocabulary encodes to
sentencepiece's own ids (every corpus line, and text outside the vocabulary through <0xXX> byte pieces); a
byte-level vocabulary decodes `tokenizers`' ids to the exact bytes, and encodes to ids of its own (llama2.c's
leading space, merges by score without GPT-2's pre-splitting) that decode back to the text."""
import glob
import os

import numpy as np
import pytest

import _hfmodels as hm
from kvedge_host.cli import main as cli
from kvedge_host.paths import ROOT
from kvedge.model.tokenizer import BOS, Tokenizer

TEXTS = [open(p).read() for p in sorted(glob.glob(os.path.join(ROOT, "tests", "corpus", "*.txt")))]
LINES = [ln for ln in "\n".join(TEXTS).splitlines() if ln.strip()] + ["caf\u00e9 \u2603 na\u00efve 123, Zq!"]
VOCAB = 400


@pytest.fixture(scope="module")
def spmodel(tmp_path_factory):
    import sentencepiece as spm
    d = tmp_path_factory.mktemp("sp")
    spm.SentencePieceTrainer.train(sentence_iterator=iter("\n".join(TEXTS).splitlines()),
                                   model_prefix=str(d / "sp"), model_type="bpe", vocab_size=VOCAB,
                                   byte_fallback=True, character_coverage=1.0, unk_id=0, bos_id=1, eos_id=2,
                                   pad_id=-1, normalization_rule_name="identity", minloglevel=2)
    return str(d / "sp.model"), spm.SentencePieceProcessor(model_file=str(d / "sp.model"))


def _hf_folder(path, vocab, tokfile=None, name=None):
    cfg = hm.config(vocab=vocab)
    hm.write_hf(path, hm.tensors(cfg, seed=5), cfg)
    if tokfile:
        with open(tokfile, "rb") as f, open(os.path.join(path, name), "wb") as g:
            g.write(f.read())
    return path


def test_sentencepiece_model_encodes_as_sentencepiece(spmodel, tmp_path, capsys):
    path, sp = spmodel
    folder = _hf_folder(str(tmp_path / "m"), VOCAB, path, "tokenizer.model")
    assert cli(["convert", folder, "-o", str(tmp_path / "m.i8.bin")]) == 0
    out = capsys.readouterr().out
    tok_bin = str(tmp_path / ("tok%d.bin" % VOCAB))
    assert "tokenizer: %s (sentencepiece model, %d tokens) -> %s" % (os.path.join(folder, "tokenizer.model"),
                                                                     VOCAB, tok_bin) in out
    tok = Tokenizer.load(tok_bin, VOCAB)
    for line in LINES:
        ids = tok.encode(line, bos=False)
        assert ids == sp.encode(line), line
        assert tok.decode(ids, prev=BOS) == line.encode("utf-8")
    assert tok.encode("caf\u00e9", bos=False) != tok.encode("cafe", bos=False)


def test_gguf_vocabulary_gives_the_same_tokenizer(spmodel, tmp_path, capsys):
    import gguf
    path, sp = spmodel
    T = gguf.TokenType
    kinds = [T.UNKNOWN if sp.is_unknown(i) else T.CONTROL if sp.is_control(i) else T.BYTE if sp.is_byte(i)
             else T.NORMAL for i in range(VOCAB)]

    def vocab(w):
        w.add_tokenizer_model("llama")
        w.add_token_list([sp.id_to_piece(i) for i in range(VOCAB)])
        w.add_token_scores([sp.get_score(i) for i in range(VOCAB)])
        w.add_token_types(kinds)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
    cfg = hm.config(vocab=VOCAB)
    src = hm.write_gguf(str(tmp_path / "v.gguf"), hm.tensors(cfg, seed=6), cfg, "Q8_0", vocab=vocab)
    assert cli(["convert", src, "-o", str(tmp_path / "g" / "v.i8.bin")]) == 2  # no such folder: refused first
    capsys.readouterr()
    _same_as_the_folders(tmp_path, capsys, src, "GGUF llama (sentencepiece) vocabulary", VOCAB, path,
                         "tokenizer.model")


def _same_as_the_folders(tmp_path, capsys, src, kind, n, tokfile, name):
    """The GGUF's vocabulary (kind) converts to the same tokenizer.bin as a Hugging Face folder's `name`."""
    os.makedirs(tmp_path / "g")
    assert cli(["convert", src, "-o", str(tmp_path / "g" / "v.i8.bin")]) == 0
    assert kind in capsys.readouterr().out
    folder = _hf_folder(str(tmp_path / "m"), n, tokfile, name)
    assert cli(["convert", folder, "-o", str(tmp_path / "m.i8.bin")]) == 0
    a = open(tmp_path / "g" / ("tok%d.bin" % n), "rb").read()
    assert a == open(tmp_path / ("tok%d.bin" % n), "rb").read()


@pytest.fixture(scope="module")
def bytelevel(tmp_path_factory):
    from tokenizers import Tokenizer as HT, decoders, models, pre_tokenizers, trainers
    t = HT(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    t.train_from_iterator(TEXTS, trainers.BpeTrainer(vocab_size=600, special_tokens=["<unk>", "<s>", "</s>"],
                                                     initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                     show_progress=False))
    p = str(tmp_path_factory.mktemp("bl") / "tokenizer.json")
    t.save(p)
    return p, t


def test_byte_level_tokenizer_json(bytelevel, tmp_path, capsys):
    path, t = bytelevel
    n = t.get_vocab_size()
    folder = _hf_folder(str(tmp_path / "m"), n + 4, path, "tokenizer.json")  # the model has 4 spare rows
    assert cli(["convert", folder, "-o", str(tmp_path / "m.f32.bin"), "--weights-dtype", "f32"]) == 0
    out = capsys.readouterr().out
    assert "tokenizer.json (byte-level BPE)" in out and "byte-level BPE: the device encodes" in out
    assert "tokenizer has %d tokens, the model %d" % (n, n + 4) in out
    tok = Tokenizer.load(str(tmp_path / ("tok%d.bin" % (n + 4))), n + 4)
    for line in LINES:
        # tokenizers' own ids decode on the device to the exact bytes (multi-byte characters split across tokens)
        assert tok.decode(t.encode(line).ids, prev=-1) == line.encode("utf-8"), line
        # the device's own encoding decodes back to the text behind llama2.c's leading space
        assert tok.decode(tok.encode(line, bos=False), prev=-1) == b" " + line.encode("utf-8"), line
    assert tok.encode("Lily and Tom", bos=False) == t.encode(" Lily and Tom").ids


def test_tokenizer_problems(bytelevel, spmodel, tmp_path, capsys):
    path, t = bytelevel
    folder = _hf_folder(str(tmp_path / "m"), 100, path, "tokenizer.json")  # fewer rows than tokens
    assert cli(["convert", folder, "-o", str(tmp_path / "o.bin")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tokenizer.json: %d tokens, the model's vocabulary has 100" % t.get_vocab_size() in err[0]
    assert not os.path.exists(tmp_path / "o.bin")
    bad = tmp_path / "tokenizer.model"
    bad.write_bytes(b"\x00garbage" * 10)
    assert cli(["convert", folder, "-o", str(tmp_path / "o.bin"), "--tokenizer", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a sentencepiece model" in err[0]
    wp = tmp_path / "wp.json"
    wp.write_text('{"model": {"type": "WordPiece", "vocab": {}}}')
    assert cli(["convert", folder, "-o", str(tmp_path / "o.bin"), "--tokenizer", str(wp)]) == 2
    assert "tokenizer model WordPiece is not supported" in capsys.readouterr().err


def test_sentencepiece_style_tokenizer_json_encodes_as_tokenizers(tmp_path, capsys):
    # a Llama-style tokenizer.json (BPE with byte fallback, Metaspace "\u2581", <0xXX> at ids 3..258) trained with
    # `tokenizers`: the device's ids are tokenizers' own, and decode to the text
    from tokenizers import Tokenizer as HT, decoders, models, pre_tokenizers, trainers
    t = HT(models.BPE(unk_token="<unk>", byte_fallback=True))
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    t.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                   decoders.Strip(" ", 1, 0)])
    special = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    t.train_from_iterator(TEXTS, trainers.BpeTrainer(vocab_size=700, special_tokens=special, show_progress=False))
    n = t.get_vocab_size()
    folder = _hf_folder(str(tmp_path / "m"), n, None)
    t.save(os.path.join(folder, "tokenizer.json"))
    assert cli(["convert", folder, "-o", str(tmp_path / "m.i8.bin")]) == 0
    assert "tokenizer.json (sentencepiece-style BPE)" in capsys.readouterr().out
    tok = Tokenizer.load(str(tmp_path / ("tok%d.bin" % n)), n)
    for line in LINES:
        ids = tok.encode(line, bos=False)
        assert ids == t.encode(line).ids, line
        assert tok.decode(ids, prev=BOS) == line.encode("utf-8"), line


def test_gguf_gpt2_vocabulary_gives_the_tokenizer_json_one(bytelevel, tmp_path, capsys):
    # the byte-level vocabulary as llama.cpp stores it (tokenizer.ggml.model "gpt2": tokens, merges, token types)
    import gguf
    path, t = bytelevel
    n = t.get_vocab_size()
    vocab = t.get_vocab()
    tokens = sorted(vocab, key=vocab.get)
    merges = [" ".join(m) if isinstance(m, list) else m for m in __import__("json").load(open(path))["model"]["merges"]]

    def add(w):
        w.add_tokenizer_model("gpt2")
        w.add_token_list(tokens)
        w.add_token_types([gguf.TokenType.CONTROL if tok in ("<unk>", "<s>", "</s>") else gguf.TokenType.NORMAL
                           for tok in tokens])
        w.add_token_merges(merges)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
    cfg = hm.config(vocab=n)
    src = hm.write_gguf(str(tmp_path / "b.gguf"), hm.tensors(cfg, seed=7), cfg, vocab=add)
    _same_as_the_folders(tmp_path, capsys, src, "GGUF gpt2 (byte-level BPE) vocabulary", n, path, "tokenizer.json")
