#!/usr/bin/env python3
"""Which half of a quantized KV cache costs the quality: keys or values?

Teacher-forces the written corpus (tests/corpus) through stories260K twice per text: once attending quantized
keys with exact (f32) values, once exact keys with quantized values, and prints perplexity vs f32, mean KL to
the f32 cache and top-1 agreement for each, pooled over the stories (as `kvedge eval` pools them).

  tools/eval_kv_split.py [--dtype i4] [--residual 32] [--group 32]"""
import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "host"), os.path.join(ROOT, "device")]

from kvedge.sizes import INT_CODES  # noqa: E402
from kvedge_host.ref import quality  # noqa: E402
from kvedge_host.paths import SHARED_MODELS  # noqa: E402


class Split(quality.CachedRef):
    """Attention over quantized K (or V) from this cache and exact V (or K) from an f32 twin."""

    def __init__(self, path, kv, tokens, quantized):
        quality.CachedRef.__init__(self, path, kv, tokens)
        self.exact = quality.CachedRef(path, {"dtype": "f32", "align": 0}, tokens)
        self.quantized = quantized

    def attend(self, layer, q, k, v, pos):
        quality.CachedRef.attend(self, layer, q, k, v, pos)
        e = self.exact
        quality.CachedRef.attend(e, layer, q, k, v, pos)
        live = np.frombuffer(self.live, dtype=np.int32, count=self.n_live)
        K = (self if self.quantized == "keys" else e).mk[layer, live]
        V = (self if self.quantized == "values" else e).mv[layer, live]
        return self.attention(q, K, V)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(SHARED_MODELS, "stories260K.bin"))
    ap.add_argument("--tokenizer", default=os.path.join(SHARED_MODELS, "tok512.bin"))
    ap.add_argument("--dtype", default="i4", choices=INT_CODES)
    ap.add_argument("--group", type=int, default=32)
    ap.add_argument("--residual", type=int, default=32)
    a = ap.parse_args(argv)
    if not (os.path.exists(a.model) and os.path.exists(a.tokenizer)):
        print("needs %s and %s" % (a.model, a.tokenizer), file=sys.stderr)
        return 2
    kv = {"dtype": a.dtype, "align": 0}
    if a.dtype != "i8":
        kv.update(group=a.group, residual=a.residual)
    texts = [ids for _, ids in quality.written_texts(a.tokenizer, quality.CORPUS, 512, 512)]
    for half in ("keys", "values"):
        parts = []
        for ids in texts:
            m = Split(a.model, kv, len(ids), half)
            out = np.array([m.forward(t) for t in ids[:-1]])
            b = quality.CachedRef(a.model, {"dtype": "f32", "align": 0}, len(ids))
            base = np.array([b.forward(t) for t in ids[:-1]])
            parts.append((quality.score(ids, out, base), quality.score(ids, base, base)[0]))
        nll = np.concatenate([p[0][0] for p in parts])
        kl = np.concatenate([p[0][1] for p in parts])
        agree = np.concatenate([p[0][2] for p in parts])
        nll0 = np.concatenate([p[1] for p in parts])
        print("%s %s quantized, the other exact: perplexity %+.3f %%, mean KL %.5f, top-1 %.2f %%" % (
            " ".join("%s=%s" % kv_ for kv_ in sorted(kv.items()) if kv_[0] != "align"), half,
            100 * (np.exp(nll.mean() - nll0.mean()) - 1), kl.mean(), 100 * agree.mean()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
