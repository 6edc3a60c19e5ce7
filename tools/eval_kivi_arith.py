#!/usr/bin/env python3
"""How much of KIVI's error is the storage arithmetic (f16 zero and scale, rounding of the codes)?

Teacher-forces the written corpus (tests/corpus) and the sampled texts (as `kvedge eval`: 512 tokens, seeds
42, 43, 44) through stories260K with the i4/i2 KIVI cache (keys per channel over groups, values per token, the
newest R..R+G-1 tokens at f32), once through kvedge's own KVCache and once per arithmetic through the numpy
reference kvedge_host.ref.kiviref, and prints perplexity vs f32, mean KL to the f32 cache and top-1 agreement,
pooled per kind of text. An arithmetic is ZERO/SCALE/ROUND (see kiviref): "ideal" is exact/exact/even.

  tools/eval_kivi_arith.py [--dtype i4 --dtype i2] [--residual 32] [--group 32] [--samples 3] [--arith Z/S/R[/lsqN] ...]"""
import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "host"), os.path.join(ROOT, "device")]

from kvedge_host.ref import kiviref, quality  # noqa: E402
from kvedge_host.paths import SHARED_MODELS  # noqa: E402

# min-max: ideal, each cause of kvedge's former storage alone (zero down, scale up, ties up), that storage,
# it with each cause undone, KIVI's own (f16 nearest); then min-max refined by least squares, ideal and as
# kvedge.quant stores it now (kiviref.DEVICE, which the "kvedge cache" row must equal)
DEFAULT = ["exact/exact/even", "down/exact/even", "exact/up/even", "exact/exact/up", "near/near/even",
           "down/up/up", "near/up/up", "down/near/up", "down/up/even", "exact/exact/even/lsq4", "near/near/up/lsq4"]


def row(texts, bases, kv):
    parts = []
    for ids, base in zip(texts, bases):
        out, _ = quality.teacher_force(MODEL, ids, kv)
        parts.append(quality.score(ids, out, base))
    nll, kl, agree = [np.concatenate([p[j] for p in parts]) for j in range(3)]
    return nll, kl, agree


def main(argv=None):
    global MODEL
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(SHARED_MODELS, "stories260K.bin"))
    ap.add_argument("--tokenizer", default=os.path.join(SHARED_MODELS, "tok512.bin"))
    ap.add_argument("--dtype", action="append", choices=("i4", "i2"))
    ap.add_argument("--group", type=int, default=32)
    ap.add_argument("--residual", type=int, default=32)
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--arith", action="append", help="ZERO/SCALE/ROUND (default: the decomposition)")
    a = ap.parse_args(argv)
    MODEL = a.model
    if not (os.path.exists(a.model) and os.path.exists(a.tokenizer)):
        print("needs %s and %s" % (a.model, a.tokenizer), file=sys.stderr)
        return 2
    ariths = [tuple(s.split("/")) for s in (a.arith or DEFAULT)]
    for ar in ariths:
        if (len(ar) not in (3, 4) or ar[0] not in kiviref.ZEROS or ar[1] not in kiviref.SCALES
                or ar[2] not in kiviref.ROUNDS or (len(ar) == 4 and not (ar[3][:3] == "lsq" and ar[3][3:].isdigit()))):
            ap.error("bad arithmetic %s (ZERO/SCALE/ROUND[/lsqN])" % "/".join(ar))
    kinds = [("written", [ids for _, ids in quality.written_texts(a.tokenizer, quality.CORPUS, 512, 512)]),
             ("sampled", [quality.sample_text(a.model, 512, a.seed + i) for i in range(a.samples)])]
    for kind, texts in kinds:
        bases = [quality.teacher_force(a.model, ids, {"dtype": "f32", "align": 0})[0] for ids in texts]
        nll0 = np.concatenate([quality.score(ids, b, b)[0] for ids, b in zip(texts, bases)])
        print("%s: %d texts, %d tokens" % (kind, len(texts), sum(len(t) for t in texts)))
        for dt in a.dtype or ("i4", "i2"):
            kv = {"dtype": dt, "group": a.group, "residual": a.residual, "align": 0}
            todo = [("kvedge cache", kv)] + [("numpy " + "/".join(ar), dict(kv, numpy=ar)) for ar in ariths]
            for name, k in todo:
                nll, kl, agree = row(texts, bases, k)
                print("  %s g%d R%d %-22s perplexity %+.3f %%  mean KL %.5f  top-1 %.2f %%" % (
                    dt, a.group, a.residual, name, 100 * (np.exp(nll.mean() - nll0.mean()) - 1), kl.mean(),
                    100 * agree.mean()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
