"""`kvedge eval` on a user's own model and text folder (issue 24 item 5): a Hugging Face Llama the test writes
itself, converted with `kvedge convert --weights-dtype f32`, evaluated on a folder of the user's stories with a
tokenizer of its vocabulary. The f32 row's perplexity is the independent numpy forward pass's of the Hugging Face
layout (tests/host/_hfmodels.py, no code shared with the converter or the device) on the same token ids; every
other strategy has a row; the table records the model's shape."""
import json
import math
import os

import numpy as np

import _hfmodels as hm
from _boardkit import kvedge

STORIES = ("Tom had a little dog. The dog liked to run in the park.\n",
           "Anna saw a big red ball. She kicked it high and laughed.\n")


def _log_softmax(x):
    m = x.max()
    return x - m - math.log(np.exp(x - m).sum())


def test_eval_measures_every_strategy_on_a_converted_model_and_a_folder_of_stories(tmp_path):
    from kvedge.model import tiny
    from kvedge_host.ref import quality
    cfg = hm.config(vocab=352, seq=128)
    t = hm.tensors(cfg, seed=5)
    folder = hm.write_hf(str(tmp_path / "my-llama"), t, cfg)
    model = hm.convert(folder, str(tmp_path / "my-llama.f32.bin"), "f32")
    tok = str(tmp_path / "tok352.bin")
    tiny.write_tokenizer(tok, 352)
    corpus = tmp_path / "stories"
    corpus.mkdir()
    for i, s in enumerate(STORIES):
        (corpus / ("%d.txt" % i)).write_text(s)
    e = kvedge("eval", "--model", model, "--tokenizer", tok, "--corpus", str(corpus), "--texts", "written", "--json",
               "--window", "16")
    assert e.returncode == 0, e.stderr[-2000:]
    doc = json.loads(e.stdout)
    assert doc["model"] == "my-llama.f32.bin" and doc["shape"] == [2, 4, 2, 8, 352, 32, 64], doc["shape"]
    rows = {r["name"]: r for r in doc["texts"]["written"]["rows"]}
    names = " | ".join(rows)
    for kind in ("f16", "i8", "i4", "window", "sinks"):
        assert kind in names, (kind, names)
    nll = []
    for _, ids in quality.written_texts(tok, str(corpus), 352, 128):
        lg = hm.reference_logits(t, cfg, ids)
        nll += [-_log_softmax(lg[i])[ids[i + 1]] for i in range(len(ids) - 1)]
    want = math.exp(sum(nll) / len(nll))
    got = rows["f32"]["ppl"]
    assert abs(got - want) <= 1e-4 * want, (got, want)
    assert rows["f32"]["kl"] == 0.0 and rows["f32"]["top1"] == 1.0
    assert os.path.getsize(model) > 0
